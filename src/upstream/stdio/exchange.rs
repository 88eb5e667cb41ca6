//! One request in flight on a stdio process, as the runner and forwarders see it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::link::{Events, Link};
use super::pool::Lease;
use crate::upstream::{Exchange, StopReason, UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::ErrorObject;

pub(super) struct StdioExchange {
    link: Arc<Link>,
    id: u64,
    id_value: Value,
    events: Events,
    answered: bool,
    /// Stopped: `notifications/cancelled` was written.
    stopped: bool,
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
            stopped: false,
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

    /// Writes `notifications/cancelled` to the process (`upstream::stop`).
    async fn stop(&mut self, reason: StopReason) -> Result<(), UpstreamError> {
        if self.answered || std::mem::replace(&mut self.stopped, true) {
            return Ok(());
        }
        self.link.cancel(self.id, reason.words())
    }

    fn request_id(&self) -> &Value {
        &self.id_value
    }
}

impl Drop for StdioExchange {
    /// The safety net (`upstream::stop`): an exchange dropped unanswered and not stopped
    /// (its future dropped from outside) still stops the call, so the server does not
    /// work for nobody.
    fn drop(&mut self) {
        if !self.answered && !self.stopped {
            let _ = self.link.cancel(self.id, StopReason::Abandoned.words());
        }
    }
}
