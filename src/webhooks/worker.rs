//! The delivery worker: one per subscription and world on every instance. It claims
//! due heads from the outbox (a claim hides an event from other instances until its
//! visibility deadline, so an instance killed mid-delivery leaves an event another one
//! delivers), sends each on a task of its own (at most [`CONCURRENCY`] at once), and
//! settles it: ack, retry at the schedule's time, or dead letter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use mtg_store::{Claimed, Outbox};

use super::deliver::{Sender, Verdict};
use super::schedule::Schedule;
use super::{Subscription, wire};
use crate::telemetry::Meter;

/// Deliveries in flight per subscription and instance.
const CONCURRENCY: usize = 64;
/// How often the outbox is looked at without a wake-up (events another instance
/// wrote, retries coming due).
const POLL: Duration = Duration::from_millis(500);
/// How often the outbox's depth is measured.
const MEASURE: Duration = Duration::from_secs(5);
/// A claim lasts twice the request's time limit and this much: the request ends within
/// its limit (reqwest's timeout covers the whole exchange), the settling takes a round
/// trip. A claimer killed mid-delivery holds its events no longer than this.
const CLAIM_SLACK: Duration = Duration::from_secs(1);

/// What every worker of a world shares.
pub(crate) struct Shared {
    pub(crate) outbox: Arc<dyn Outbox>,
    pub(crate) sender: Sender,
    pub(crate) schedule: Schedule,
    pub(crate) max_result_bytes: u64,
    pub(crate) upstream: Option<String>,
    pub(crate) instance: String,
    pub(crate) meter: Meter,
}

/// Runs `subscription`'s worker until `closing`.
pub(crate) async fn run(
    shared: Arc<Shared>,
    subscription: Arc<Subscription>,
    closing: CancellationToken,
) {
    let mut enqueued = shared.outbox.enqueued();
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let done = Arc::new(tokio::sync::Notify::new());
    let mut measured = Instant::now() - MEASURE;
    loop {
        if measured.elapsed() >= MEASURE {
            measured = Instant::now();
            measure(&shared, &subscription).await;
        }
        let free = permits.available_permits();
        let mut full = false;
        if free > 0 {
            let visibility = subscription.timeout * 2 + CLAIM_SLACK;
            let claimed = shared
                .outbox
                .claim(
                    &subscription.id,
                    &shared.instance,
                    mtg_store::now_ms(),
                    visibility.as_millis() as u64,
                    free,
                )
                .await;
            match claimed {
                Ok(claimed) => {
                    full = claimed.len() == free;
                    for claim in claimed {
                        let Ok(permit) = permits.clone().acquire_owned().await else {
                            return;
                        };
                        let (shared, subscription, done) =
                            (shared.clone(), subscription.clone(), done.clone());
                        let span = tracing::info_span!("webhook", subscription = %subscription.id, event = %claim.event.id, task = %claim.event.task);
                        tokio::spawn(
                            async move {
                                deliver(&shared, &subscription, claim).await;
                                drop(permit);
                                done.notify_one();
                            }
                            .instrument(span),
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(subscription = %subscription.id, error = %e, "could not read the webhook outbox");
                }
            }
        }
        if full {
            continue;
        }
        tokio::select! {
            () = closing.cancelled() => return,
            _ = enqueued.changed() => {}
            () = done.notified(), if free == 0 => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Sends one claimed event and settles it.
async fn deliver(shared: &Shared, subscription: &Subscription, claim: Claimed) {
    let event = &claim.event;
    let body = wire::body(event, shared.upstream.as_deref(), shared.max_result_bytes);
    let started = Instant::now();
    let verdict = shared.sender.send(subscription, &event.id, body).await;
    let seconds = started.elapsed().as_secs_f64();
    let outbox = &shared.outbox;
    let (sub, task, id) = (
        subscription.id.as_str(),
        event.task.as_str(),
        event.id.as_str(),
    );
    let settled = match verdict {
        Verdict::Delivered => {
            tracing::debug!(attempts = claim.attempts, "webhook delivered");
            shared.meter.webhooks().delivered(sub, "delivered", seconds);
            outbox.ack(sub, task, id).await
        }
        Verdict::Retry { error, after } => {
            let delay = shared.schedule.delay(claim.attempts, after);
            let next = mtg_store::now_ms().saturating_add(delay.as_millis() as u64);
            let window_ends = event
                .at_ms()
                .saturating_add(shared.schedule.window.as_millis() as u64);
            if next > window_ends {
                let error = format!("gave up after {} attempts: {error}", claim.attempts);
                tracing::warn!(url = %subscription.url, %error, "webhook event is now a dead letter");
                shared
                    .meter
                    .webhooks()
                    .delivered(sub, "dead_letter", seconds);
                outbox.give_up(sub, task, id, &error).await
            } else {
                tracing::info!(url = %subscription.url, %error, attempts = claim.attempts, retry_in_ms = delay.as_millis() as u64, "webhook delivery failed; will retry");
                shared.meter.webhooks().delivered(sub, "retry", seconds);
                outbox.retry(sub, task, id, next, &error).await
            }
        }
        Verdict::GiveUp(error) => {
            tracing::warn!(url = %subscription.url, %error, "webhook delivery refused; the event is now a dead letter");
            shared
                .meter
                .webhooks()
                .delivered(sub, "dead_letter", seconds);
            outbox.give_up(sub, task, id, &error).await
        }
    };
    if let Err(e) = settled {
        // The claim ends by itself and the event is delivered again: at least once.
        tracing::warn!(error = %e, "could not record the webhook delivery");
    }
}

async fn measure(shared: &Shared, subscription: &Subscription) {
    match shared.outbox.stats(&subscription.id).await {
        Ok(stats) => {
            let age = stats
                .oldest_at_ms
                .map(|at| mtg_store::now_ms().saturating_sub(at) as f64 / 1000.0)
                .unwrap_or(0.0);
            shared
                .meter
                .webhooks()
                .outbox(&subscription.id, stats.pending, stats.dead, age);
        }
        Err(e) => tracing::debug!(error = %e, "could not measure the webhook outbox"),
    }
}
