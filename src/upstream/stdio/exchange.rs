//! One request in flight on a stdio process, as the runner and forwarders see it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use serde_json::Value;

use super::link::{Events, Link};
use super::pool::Lease;
use crate::upstream::{Exchange, UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::ErrorObject;

pub struct StdioExchange {
    link: Arc<Link>,
    id: u64,
    id_value: Value,
    events: Events,
    answered: bool,
    cancelled: AtomicBool,
    /// Holds the call's place on its process until the exchange is dropped.
    _lease: Lease,
}

impl StdioExchange {
    pub(super) fn new(lease: Lease, id: u64, events: Events) -> Self {
        Self {
            link: lease.link.clone(),
            id,
            id_value: Value::from(id),
            events,
            answered: false,
            cancelled: AtomicBool::new(false),
            _lease: lease,
        }
    }
}

#[async_trait]
impl Exchange for StdioExchange {
    async fn next(&mut self) -> Option<Result<UpstreamEvent, UpstreamError>> {
        if self.answered {
            return None;
        }
        let event = self.events.recv().await?;
        if matches!(event, Ok(UpstreamEvent::Response { .. }) | Err(_)) {
            self.answered = true;
        }
        Some(event)
    }

    async fn reply(
        &self,
        id: Value,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), UpstreamError> {
        self.link.answer(&id, outcome)
    }

    async fn cancel(&self, reason: &str) -> Result<(), UpstreamError> {
        if self.answered || self.cancelled.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        self.link.cancel(self.id, reason)
    }

    fn request_id(&self) -> &Value {
        &self.id_value
    }
}

impl Drop for StdioExchange {
    /// A caller that stops listening before the answer (timeout, client gone) cancels
    /// the call upstream, so the server stops working for nobody.
    fn drop(&mut self) {
        if !self.answered && !self.cancelled.swap(true, Ordering::Relaxed) {
            let _ = self
                .link
                .cancel(self.id, "the gateway's caller stopped waiting");
        }
    }
}
