//! Feeds the store's announced changes to this instance's waiters, listening only while
//! there are any. Every task's end is announced; an instance that listened all the time
//! was woken for each of its own tasks' ends with nobody to tell (on Redis, a pub/sub
//! message per task; docs/benchmarks.md, run 33).
//!
//! A waiter that comes while the feed is idle makes it listen again; the store's first
//! message is then [`WAKE_ALL`], so every task waiter reads its task again and nothing
//! announced in between is missed. Session feeds are not told by `WAKE_ALL`: they wait
//! for [`Waiters::heard`] before their task starts or their stream opens.

use std::sync::{Arc, Weak};
use std::time::Duration;

use mtg_store::{Changes, WAKE_ALL};

use super::TaskService;
use super::waiters::Listening;

/// How often a listening feed checks whether anyone still waits: the longest it keeps
/// listening for nobody, and so the shortest time between two subscriptions.
const IDLE_CHECK: Duration = Duration::from_secs(2);

/// How long a feed whose listening the store ended waits before listening again.
const RELISTEN_AFTER: Duration = Duration::from_millis(100);

/// Starts the feed of `service`'s waiters; it ends with the service.
pub(super) fn spawn(service: &Arc<TaskService>, changes: Arc<dyn Changes>) {
    let listening = service.waiters.listening.clone();
    let service = Arc::downgrade(service);
    tokio::spawn(async move {
        while wanted(&service, &listening).await {
            listen(&service, &listening, changes.as_ref()).await;
        }
    });
}

/// Waits until someone waits for a change; `false` once the service is gone.
async fn wanted(service: &Weak<TaskService>, listening: &Listening) -> bool {
    loop {
        let mut wanted = std::pin::pin!(listening.wanted.notified());
        wanted.as_mut().enable();
        match service.upgrade() {
            None => return false,
            Some(service) if !service.waiters.idle() => return true,
            Some(_) => {}
        }
        // Bounded, so a dropped service is noticed.
        let _ = tokio::time::timeout(IDLE_CHECK, wanted).await;
    }
}

/// Listens until nobody waits any more or the service is gone.
async fn listen(service: &Weak<TaskService>, listening: &Listening, changes: &dyn Changes) {
    let mut received = changes.changes();
    let mut check = tokio::time::interval(IDLE_CHECK);
    check.tick().await;
    loop {
        tokio::select! {
            change = received.recv() => {
                let Some(change) = change else {
                    // The store stopped this listening; a new one is started, not at once.
                    tokio::time::sleep(RELISTEN_AFTER).await;
                    break;
                };
                let Some(service) = service.upgrade() else { break };
                if change.task_id == WAKE_ALL {
                    listening.heard.send_replace(true);
                }
                service.waiters.dispatch(&change);
            }
            _ = check.tick() => {
                let Some(service) = service.upgrade() else { break };
                // Cleared first: a session feed that comes after the check then waits
                // for the next subscription's WAKE_ALL rather than for this one.
                let was_heard = listening.heard.send_replace(false);
                if service.waiters.idle() {
                    break;
                }
                listening.heard.send_replace(was_heard);
            }
        }
    }
    listening.heard.send_replace(false);
}
