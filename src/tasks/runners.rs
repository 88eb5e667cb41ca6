//! The runners on this instance: how each is reached while it runs (wake it, stop it),
//! whose call it runs, and the callers still waiting within the promotion budget for a
//! task's first question.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use mtg_store::WAKE_ALL;

/// How long stopping runners waits for them to end.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// How a runner is reached while it runs.
pub(super) struct RunnerHandle {
    pub wake: Arc<Notify>,
    pub stop: CancellationToken,
    pub principal: String,
}

#[derive(Default)]
pub(super) struct Runners {
    running: Mutex<HashMap<String, RunnerHandle>>,
    /// Signalled whenever a runner ends, for draining at shutdown.
    pub ended: Notify,
    /// Signalled when a runner here asked for input or ended: a retry waiting on this
    /// instance for a held call's next round looks again at once instead of at its next
    /// poll.
    pub moved_on: Notify,
    /// Tasks whose creator still waits within the promotion budget: input the upstream
    /// asks for goes to that caller as the call's answer, and no task is kept.
    early_input: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// Runners here whose caller got a deferred result (`in_flight`).
    deferred: Mutex<HashSet<String>>,
}

impl Runners {
    pub(super) fn insert(&self, task_id: &str, handle: RunnerHandle) {
        self.lock().insert(task_id.to_owned(), handle);
    }

    /// The runner of `task_id` ended.
    pub(super) fn remove(&self, task_id: &str) {
        self.lock().remove(task_id);
        self.lock_deferred().remove(task_id);
        self.ended.notify_waiters();
    }

    pub(super) fn count(&self) -> usize {
        self.lock().len()
    }

    /// Whether a runner for `task_id` is here (from before its task is stored).
    pub(super) fn contains(&self, task_id: &str) -> bool {
        self.lock().contains_key(task_id)
    }

    /// The caller of `task_id`'s call, still running here, got a deferred result.
    pub(super) fn mark_deferred(&self, task_id: &str) {
        if self.lock().contains_key(task_id) {
            self.lock_deferred().insert(task_id.to_owned());
        }
    }

    /// The runners here: all, those of principals `held` says are held calls', and
    /// those of deferred calls.
    pub(super) fn counts(&self, held: impl Fn(&str) -> bool) -> (usize, usize, usize) {
        let running = self.lock();
        let held = running.values().filter(|r| held(&r.principal)).count();
        let total = running.len();
        drop(running);
        (total, held, self.lock_deferred().len())
    }

    /// The task ids and principals of the runners here.
    pub(super) fn tasks(&self) -> Vec<(String, String)> {
        self.lock()
            .iter()
            .map(|(id, runner)| (id.clone(), runner.principal.clone()))
            .collect()
    }

    /// Wakes the runner of `task_id` (every runner for `WAKE_ALL`) to look at its task.
    pub(super) fn wake(&self, task_id: &str) {
        let running = self.lock();
        if task_id == WAKE_ALL {
            running.values().for_each(|runner| runner.wake.notify_one());
        } else if let Some(runner) = running.get(task_id) {
            runner.wake.notify_one();
        }
    }

    /// Stops the runners `which` picks, without recording anything, and waits (briefly)
    /// for them to end: their tasks are, or are about to be, another instance's.
    pub(super) async fn stop(&self, which: impl Fn(&str) -> bool) {
        let stopped: Vec<String> = self
            .lock()
            .iter()
            .filter(|(task_id, _)| which(task_id))
            .map(|(task_id, runner)| {
                runner.stop.cancel();
                task_id.clone()
            })
            .collect();
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        loop {
            let ended = self.ended.notified();
            let running = {
                let running = self.lock();
                stopped
                    .iter()
                    .filter(|id| running.contains_key(*id))
                    .count()
            };
            if running == 0 || tokio::time::timeout_at(deadline, ended).await.is_err() {
                return;
            }
        }
    }

    /// Registers a caller waiting within the promotion budget for `task_id`'s first
    /// question; set up before the runner starts, so that its first question finds it.
    pub(super) fn expect_early_input(&self, task_id: &str) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.lock_early_input().insert(task_id.to_owned(), tx);
        rx
    }

    /// The waiting caller gave up (or got its answer); `true` if it was still there.
    pub(super) fn withdraw_early_input(&self, task_id: &str) -> bool {
        self.lock_early_input().remove(task_id).is_some()
    }

    /// Gives an `InputRequiredResult` to the caller still waiting within the promotion
    /// budget; `false` when nobody waits any more (the task was promoted).
    pub(super) fn hand_over_early_input(&self, task_id: &str, result: &Value) -> bool {
        self.lock_early_input()
            .remove(task_id)
            .is_some_and(|waiting| waiting.send(result.clone()).is_ok())
    }

    /// Whether the task's creator still waits within the promotion budget.
    pub(super) fn early_input_waiting(&self, task_id: &str) -> bool {
        self.lock_early_input().contains_key(task_id)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, RunnerHandle>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_deferred(&self) -> MutexGuard<'_, HashSet<String>> {
        self.deferred.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_early_input(&self) -> MutexGuard<'_, HashMap<String, oneshot::Sender<Value>>> {
        self.early_input.lock().unwrap_or_else(|p| p.into_inner())
    }
}
