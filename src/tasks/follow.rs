//! Following tasks for a `subscriptions/listen` stream: each change a client would see
//! (status, input requests, the outcome) as the record at that moment, from whichever
//! instance made it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select_all;
use tokio::sync::mpsc;

use super::TaskService;
use mtg_protocol::wire::TaskStatus;
use mtg_store::TaskRecord;

/// How long a follower trusts the announcements before it reads the records anyway: a
/// lost `PUBLISH` (its instance lost Redis at that moment) is caught this late at worst.
/// A resubscription after an outage wakes every follower at once.
const LOOK_ANYWAY: Duration = Duration::from_secs(30);

/// After a failed read (the store unavailable).
const STORE_RETRY: Duration = Duration::from_secs(1);

/// What `tasks/get` shows that a listener must hear about when it changes.
#[derive(PartialEq, Eq)]
struct Seen {
    status: TaskStatus,
    input_keys: BTreeSet<String>,
}

impl Seen {
    fn of(task: &TaskRecord) -> Self {
        Self {
            status: task.status,
            input_keys: task.input_requests.keys().cloned().collect(),
        }
    }
}

/// Follows tasks for `subscriptions/listen` streams.
#[derive(Clone)]
pub struct Followers {
    tasks: Arc<TaskService>,
}

impl Followers {
    pub fn new(tasks: Arc<TaskService>) -> Self {
        Self { tasks }
    }
    /// Sends `principal`'s tasks `task_ids` into `sink` as they are now, then again at
    /// each change, until every one has ended (its final record sent) or expired, or the
    /// sink closed. A change of one task re-reads all that are still open.
    pub async fn follow(
        &self,
        task_ids: &[String],
        principal: &str,
        sink: &mpsc::Sender<Arc<TaskRecord>>,
    ) {
        let waiters: Vec<_> = task_ids
            .iter()
            .map(|id| (id.as_str(), self.tasks.waiters.wait_on(id)))
            .collect();
        let mut open: Vec<usize> = (0..waiters.len()).collect();
        let mut seen: HashMap<usize, Seen> = HashMap::new();
        loop {
            // Register before reading, so a change in between is not missed.
            let changes: Vec<_> = open.iter().map(|&i| waiters[i].1.changed()).collect();
            let mut still_open = Vec::with_capacity(open.len());
            let mut look_again = LOOK_ANYWAY;
            for &i in &open {
                let task = match self.tasks.store.get(waiters[i].0, principal).await {
                    Ok(Some(task)) => task,
                    // Expired: nothing more will be said of it.
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(task_id = waiters[i].0, error = %e, "a follower could not read a task; will look again");
                        look_again = STORE_RETRY;
                        still_open.push(i);
                        continue;
                    }
                };
                let now = Seen::of(&task);
                if seen.get(&i) != Some(&now) {
                    seen.insert(i, now);
                    if sink.send(task.clone()).await.is_err() {
                        return;
                    }
                }
                if !task.status.is_terminal() {
                    still_open.push(i);
                }
            }
            open = still_open;
            if open.is_empty() {
                return;
            }
            tokio::select! {
                _ = select_all(changes) => {}
                () = tokio::time::sleep(look_again) => {}
                () = sink.closed() => return,
            }
        }
    }
}
