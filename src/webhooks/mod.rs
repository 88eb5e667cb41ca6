//! Webhooks: task events leave the gateway as signed HTTP POSTs (Standard Webhooks).
//!
//! A *subscription* is one destination URL with its secret(s), the event types it hears
//! and its time limit. Each world routes its store's transitions to its subscriptions
//! once at start (`mtg_store::Outbox::route`): the store then writes each *event* into
//! the subscription's *outbox* in the same step as the transition. A *delivery* is one
//! signed POST by whichever instance claimed the event (`worker.rs`); an event given up
//! on is a *dead letter*, which an operator may redeliver (`admin/`).
//!
//! `sign.rs` signs, `wire.rs` makes the body, `guard.rs` refuses private addresses,
//! `deliver.rs` sends one attempt, `schedule.rs` says when to retry.

mod deliver;
mod guard;
mod schedule;
mod sign;
mod wire;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use mtg_store::{EventType, OutboxPlan, Route, Store};

pub(crate) use sign::Secret;

/// One destination as configured.
#[derive(Debug, Clone)]
pub(crate) struct Subscription {
    /// `wh-` and 12 hex digits of the URL's SHA-256: stable across restarts and
    /// instances, so every instance works on the same outbox.
    pub(crate) id: String,
    pub(crate) url: http::Uri,
    pub(crate) events: Vec<EventType>,
    pub(crate) secrets: Vec<Secret>,
    pub(crate) timeout: Duration,
    pub(crate) include_result: bool,
}

impl Subscription {
    pub(crate) fn id_of(url: &http::Uri) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(url.to_string().as_bytes());
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("wh-{hex}")
    }
}

/// A world's webhooks, as `settings::webhooks` builds them.
#[derive(Debug, Clone)]
pub(crate) struct WebhookSettings {
    pub(crate) subscriptions: Vec<Subscription>,
    pub(crate) max_result_bytes: u64,
    pub(crate) retry_first: Duration,
    pub(crate) retry_max: Duration,
    pub(crate) retry_window: Duration,
    pub(crate) allow_private: bool,
    pub(crate) ca: Option<Vec<u8>>,
}

/// Why the webhooks cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WebhookError {
    #[error("webhook {url}: {source}")]
    Refused {
        url: String,
        #[source]
        source: guard::Refused,
    },
    #[error("webhook client: {0}")]
    Client(#[from] reqwest::Error),
}

/// The subscriptions' view of one world, for operators.
#[derive(Clone)]
pub(crate) struct Webhooks {
    pub(crate) subscriptions: Arc<Vec<Subscription>>,
}

impl Webhooks {
    /// Checks every URL (a private address refuses the start, naming the URL), routes
    /// the store's events, and starts a delivery worker per subscription.
    pub(crate) async fn start(
        settings: WebhookSettings,
        store: &Store,
        upstream: Option<String>,
        instance: String,
        meter: crate::telemetry::Meter,
        closing: CancellationToken,
    ) -> Result<Self, WebhookError> {
        if settings.subscriptions.is_empty() {
            // Not routed: transitions write no event and pay nothing for webhooks.
            return Ok(Self {
                subscriptions: Arc::new(Vec::new()),
            });
        }
        for subscription in &settings.subscriptions {
            check_at_start(subscription, settings.allow_private).await?;
        }
        store.outbox.route(OutboxPlan {
            routes: settings
                .subscriptions
                .iter()
                .map(|s| Route {
                    subscription: s.id.clone(),
                    events: s.events.clone(),
                    include_result: s.include_result,
                })
                .collect(),
        });
        let shared = Arc::new(worker::Shared {
            outbox: store.outbox.clone(),
            sender: deliver::Sender::new(settings.allow_private, settings.ca.as_deref())?,
            schedule: schedule::Schedule {
                first: settings.retry_first,
                max: settings.retry_max,
                window: settings.retry_window,
            },
            max_result_bytes: settings.max_result_bytes,
            upstream,
            instance,
            meter,
        });
        for subscription in &settings.subscriptions {
            tracing::info!(url = %subscription.url, id = %subscription.id, events = ?subscription.events.iter().map(|e| e.as_str()).collect::<Vec<_>>(), "delivering task events");
            tokio::spawn(worker::run(
                shared.clone(),
                Arc::new(subscription.clone()),
                closing.clone(),
            ));
        }
        Ok(Self {
            subscriptions: Arc::new(settings.subscriptions),
        })
    }
}

/// A URL whose host resolves to a refused address stops the start; one that does not
/// resolve yet only warns (it is checked again at each delivery).
async fn check_at_start(
    subscription: &Subscription,
    allow_private: bool,
) -> Result<(), WebhookError> {
    let host = subscription.url.host().unwrap_or_default();
    match guard::resolve(host, allow_private).await {
        Ok(_) => Ok(()),
        Err(source @ guard::Refused::Address { .. }) => Err(WebhookError::Refused {
            url: subscription.url.to_string(),
            source,
        }),
        Err(e) => {
            tracing::warn!(url = %subscription.url, error = %e, "webhook URL does not resolve yet");
            Ok(())
        }
    }
}
