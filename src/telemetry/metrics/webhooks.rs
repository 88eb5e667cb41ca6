//! Webhook deliveries, per subscription: their outcomes and latency, and the outbox's
//! depth and oldest pending event.

use metrics::{Label, counter, gauge, histogram};

use super::Labels;

/// [`super::Meter::webhooks`].
pub struct WebhookMetrics<'a>(pub(super) &'a Labels);

impl WebhookMetrics<'_> {
    fn labels(
        &self,
        subscription: &str,
        extra: Option<(&'static str, &'static str)>,
    ) -> Vec<Label> {
        let mut labels = self.0.with(&[]);
        labels.push(Label::new("subscription", subscription.to_owned()));
        if let Some((key, value)) = extra {
            labels.push(Label::new(key, value));
        }
        labels
    }

    /// One delivery attempt ended (`outcome`: `delivered`, `retry`, `dead_letter`).
    pub fn delivered(&self, subscription: &str, outcome: &'static str, seconds: f64) {
        counter!(
            "mtg_webhook_deliveries_total",
            self.labels(subscription, Some(("outcome", outcome)))
        )
        .increment(1);
        histogram!(
            "mtg_webhook_delivery_duration_seconds",
            self.labels(subscription, None)
        )
        .record(seconds);
    }

    /// The subscription's outbox: pending events, dead letters, and the age of the
    /// oldest pending event (0 when none).
    pub fn outbox(&self, subscription: &str, pending: u64, dead: u64, oldest_age_seconds: f64) {
        gauge!("mtg_webhook_outbox_depth", self.labels(subscription, None)).set(pending as f64);
        gauge!("mtg_webhook_dead_letters", self.labels(subscription, None)).set(dead as f64);
        gauge!(
            "mtg_webhook_oldest_pending_age_seconds",
            self.labels(subscription, None)
        )
        .set(oldest_age_seconds);
    }
}
