//! The embedded store: one process, state in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::{
    CancelOutcome, Lease, MembershipStore, Outcome, StoreError, TaskRecord, TaskStore,
    UpdateOutcome, WAKE_ALL, WakeReceiver, WakeUps, metrics, now_ms,
};
use crate::protocol::wire::InputRequest;

/// How often expired tasks are purged. Reads check expiry themselves, so this only
/// bounds memory, not correctness.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct MemoryStore {
    tasks: Mutex<HashMap<String, Arc<TaskRecord>>>,
    wakers: Mutex<HashMap<String, mpsc::UnboundedSender<String>>>,
}

impl MemoryStore {
    /// A store with a background sweep of expired tasks; the sweep ends with the store.
    pub fn start() -> Arc<Self> {
        let store = Arc::new(Self::default());
        let weak: Weak<Self> = Arc::downgrade(&store);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            loop {
                tick.tick().await;
                let Some(store) = weak.upgrade() else { return };
                store.sweep_expired(now_ms());
            }
        });
        store
    }

    fn sweep_expired(&self, now: u64) {
        self.lock().retain(|_, task| task.expires_at_ms() > now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TaskRecord>>> {
        // A panic while holding the lock cannot leave a record half-written: every
        // mutation is applied to a clone and swapped in, so the poison is ignored.
        self.tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `apply` on a live (not expired) task and stores the change.
    fn update<T>(&self, task_id: &str, apply: impl FnOnce(&mut TaskRecord, u64) -> T) -> Option<T> {
        let now = now_ms();
        let mut tasks = self.lock();
        let slot = tasks.get_mut(task_id)?;
        if slot.expires_at_ms() <= now {
            tasks.remove(task_id);
            return None;
        }
        Some(apply(Arc::make_mut(slot), now))
    }
}

#[async_trait]
impl TaskStore for MemoryStore {
    async fn create(&self, task: TaskRecord) -> Result<(), StoreError> {
        let mut tasks = self.lock();
        if tasks.contains_key(&task.task_id) {
            return Err(StoreError::Duplicate(task.task_id));
        }
        metrics::task_reached(task.status);
        tasks.insert(task.task_id.clone(), Arc::new(task));
        Ok(())
    }

    async fn get(
        &self,
        task_id: &str,
        principal: &str,
    ) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        let tasks = self.lock();
        Ok(tasks
            .get(task_id)
            .filter(|t| t.principal == principal && t.expires_at_ms() > now_ms())
            .cloned())
    }

    async fn delete(&self, task_id: &str) -> Result<(), StoreError> {
        self.lock().remove(task_id);
        Ok(())
    }

    async fn set_status_message(&self, task_id: &str, message: &str) -> Result<(), StoreError> {
        self.update(task_id, |task, now| task.set_status_message(message, now));
        Ok(())
    }

    async fn add_input_requests(
        &self,
        task_id: &str,
        requests: Vec<InputRequest>,
    ) -> Result<Option<Vec<String>>, StoreError> {
        Ok(self
            .update(task_id, |task, now| {
                (!task.status.is_terminal()).then(|| {
                    requests
                        .into_iter()
                        .map(|request| task.push_input_request(request, now))
                        .collect()
                })
            })
            .flatten())
    }

    async fn withdraw_input_request(&self, task_id: &str, key: &str) -> Result<(), StoreError> {
        self.update(task_id, |task, now| task.withdraw_input_request(key, now));
        Ok(())
    }

    async fn set_upstream_state(
        &self,
        task_id: &str,
        state: Option<Value>,
    ) -> Result<(), StoreError> {
        self.update(task_id, |task, _| task.upstream_state = state);
        Ok(())
    }

    async fn accept_input_responses(
        &self,
        task_id: &str,
        principal: &str,
        responses: Map<String, Value>,
    ) -> Result<UpdateOutcome, StoreError> {
        let outcome = self.update(task_id, |task, now| {
            if task.principal != principal {
                return UpdateOutcome::NotFound;
            }
            UpdateOutcome::Accepted {
                keys: task.accept_responses(responses, now),
                owner: task.owner.clone(),
            }
        });
        Ok(outcome.unwrap_or(UpdateOutcome::NotFound))
    }

    async fn take_answers(&self, task_id: &str) -> Result<Vec<(String, Value)>, StoreError> {
        Ok(self
            .update(task_id, |task, _| {
                std::mem::take(&mut task.answers).into_iter().collect()
            })
            .unwrap_or_default())
    }

    async fn finish(&self, task_id: &str, outcome: Outcome) -> Result<bool, StoreError> {
        Ok(self
            .update(task_id, |task, now| task.finish(outcome, now))
            .unwrap_or(false))
    }

    async fn cancel(&self, task_id: &str, principal: &str) -> Result<CancelOutcome, StoreError> {
        let outcome = self.update(task_id, |task, now| {
            if task.principal != principal {
                CancelOutcome::NotFound
            } else if task.finish(
                Outcome::Cancelled {
                    message: "cancelled by the client".into(),
                },
                now,
            ) {
                CancelOutcome::Cancelled {
                    owner: task.owner.clone(),
                }
            } else {
                CancelOutcome::AlreadyTerminal
            }
        });
        Ok(outcome.unwrap_or(CancelOutcome::NotFound))
    }

    // Always reachable: it is this process.
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl WakeUps for MemoryStore {
    async fn wake(&self, owner: &str, task_id: &str) -> Result<(), StoreError> {
        let wakers = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = wakers.get(owner) {
            // A closed receiver means the owner is shutting down; nothing to wake.
            let _ = tx.send(task_id.to_owned());
        }
        Ok(())
    }

    fn wakeups(&self, owner: &str) -> WakeReceiver {
        let (tx, rx) = mpsc::unbounded_channel();
        // Listening from now on: nothing sent later is missed.
        let _ = tx.send(WAKE_ALL.to_owned());
        self.wakers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(owner.to_owned(), tx);
        rx
    }
}

/// One process holds every task: its lease never lapses, and there is no other instance
/// whose tasks could need failing. At a graceful stop `TaskService::drain` fails what is
/// still running.
#[async_trait]
impl MembershipStore for MemoryStore {
    async fn renew_lease(&self, _lease: &Lease<'_>) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn fail_tasks_of(&self, _instance: &str, _message: &str) -> Result<usize, StoreError> {
        Ok(0)
    }

    async fn release_lease(&self, _instance: &str) -> Result<usize, StoreError> {
        Ok(0)
    }

    async fn fail_tasks_of_lost_owners(&self, _me: &str) -> Result<usize, StoreError> {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::{self, Subject};
    use crate::store::{Store, TaskStore};

    /// The memory store serves one instance, so every instance's view is the same store.
    struct OneProcess(Arc<MemoryStore>);

    impl Subject for OneProcess {
        fn instance(&self, _id: &str) -> Store {
            Store::new(self.0.clone())
        }
    }

    contract::suite!(OneProcess(MemoryStore::start()));

    #[tokio::test]
    async fn the_sweep_frees_expired_tasks() {
        let store = MemoryStore::start();
        let mut task = contract::record("gw-1");
        task.ttl_ms = 0;
        store.create(task).await.unwrap();
        store.sweep_expired(now_ms());
        assert!(store.lock().is_empty());
    }
}
