//! The admin API's webhooks: each subscription's outbox (pending events, attempts, last
//! error, next try), its dead letters, and redelivering them.

use std::sync::Arc;

use super::wire::{EventView, RedeliverReply, SubscriptionDetail, SubscriptionView, WebhookList};
use crate::webhooks::Subscription;
use mtg_protocol::wire::rfc3339_millis;
use mtg_store::{Outbox, OutboxEntry, StoreError, now_ms};

/// Most events of each kind a subscription's detail shows.
const SHOWN: usize = 100;

/// A world's subscriptions and their outboxes.
#[derive(Clone)]
pub(crate) struct AdminWebhooks {
    pub(crate) outbox: Arc<dyn Outbox>,
    pub(crate) subscriptions: Arc<Vec<Subscription>>,
}

impl AdminWebhooks {
    fn find(&self, id: &str) -> Option<&Subscription> {
        self.subscriptions.iter().find(|s| s.id == id)
    }

    async fn view(&self, subscription: &Subscription) -> Result<SubscriptionView, StoreError> {
        let stats = self.outbox.stats(&subscription.id).await?;
        Ok(SubscriptionView {
            id: subscription.id.clone(),
            url: subscription.url.to_string(),
            events: subscription
                .events
                .iter()
                .map(|e| e.as_str().to_owned())
                .collect(),
            pending: stats.pending,
            dead_letters: stats.dead,
            oldest_pending_age_ms: stats.oldest_at_ms.map(|at| now_ms().saturating_sub(at)),
        })
    }
}

fn event_view(entry: OutboxEntry) -> EventView {
    let now = now_ms() as i64;
    EventView {
        event_id: entry.event.id.clone(),
        task_id: entry.event.task.clone(),
        kind: entry.event.kind.clone(),
        at: rfc3339_millis(entry.event.at_ms()),
        attempts: entry.attempts.attempts,
        last_error: entry.attempts.error,
        next_try_in_ms: entry.attempts.next.map(|next| next as i64 - now),
        claimed_by: entry.attempts.claimer,
        dead_at: entry.attempts.dead_at.map(rfc3339_millis),
    }
}

impl AdminWebhooks {
    pub(super) async fn list(&self) -> Result<WebhookList, StoreError> {
        let mut subscriptions = Vec::new();
        for subscription in self.subscriptions.iter() {
            subscriptions.push(self.view(subscription).await?);
        }
        Ok(WebhookList { subscriptions })
    }

    /// `None`: no such subscription.
    pub(super) async fn detail(&self, id: &str) -> Result<Option<SubscriptionDetail>, StoreError> {
        let Some(subscription) = self.find(id) else {
            return Ok(None);
        };
        let pending = self.outbox.pending(id, SHOWN).await?;
        let dead = self.outbox.dead_letters(id, SHOWN).await?;
        Ok(Some(SubscriptionDetail {
            subscription: self.view(subscription).await?,
            pending: pending.into_iter().map(event_view).collect(),
            dead_letters: dead.into_iter().map(event_view).collect(),
        }))
    }

    /// Puts one dead letter (`event`) or all of a subscription's back in its outbox;
    /// `None`: no such subscription.
    pub(super) async fn redeliver(
        &self,
        id: &str,
        event: Option<&str>,
    ) -> Result<Option<RedeliverReply>, StoreError> {
        if self.find(id).is_none() {
            return Ok(None);
        }
        let redelivered = self.outbox.redeliver(id, event).await?;
        tracing::info!(
            subscription = id,
            event,
            redelivered,
            "dead letters redelivered by an operator"
        );
        Ok(Some(RedeliverReply {
            subscription: id.to_owned(),
            redelivered,
        }))
    }
}
