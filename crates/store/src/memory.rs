//! The embedded store: one process, state in memory.

mod outbox;

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::inspect::{
    BadCursor, InspectError, InstanceInfo, Newest, ScanPage, Scanned, Scope, TaskInspection,
};
use super::{
    Adoption, CancelOutcome, GoneInstance, Lease, ListCursor, MembershipStore, Outcome, StoreError,
    Takeover, TaskRecord, TaskStore, UpdateOutcome, WAKE_ALL, WakeReceiver, WakeUps, metrics,
    now_ms,
};
use crate::outbox::{Claimed, EventType, Outbox, OutboxEntry, OutboxPlan, OutboxStats};
use mtg_protocol::wire::{InputRequest, TaskStatus};

/// How often expired tasks are purged. Reads check expiry themselves, so this only
/// bounds memory, not correctness.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct MemoryStore {
    /// Task changes announced in this process (`tasks/result` waiters, session streams).
    changes: super::LocalChanges,
    tasks: Mutex<Tasks>,
    wakers: Mutex<HashMap<String, mpsc::UnboundedSender<String>>>,
    /// The leases taken here (one process: this instance's), for operators to see.
    leases: Mutex<HashMap<String, OwnedLease>>,
    /// Which subscriptions hear of which transitions (`Outbox::route`).
    plan: OnceLock<OutboxPlan>,
    /// Ticks after a transition that may have written events (`Outbox::enqueued`).
    enqueued: tokio::sync::watch::Sender<u64>,
}

struct OwnedLease {
    advertise_url: Option<String>,
    expires_at_ms: u64,
}

/// The tasks, and each principal's in newest-first order, so a page of `list` costs the
/// page, not every task. One lock keeps the two in step.
#[derive(Default)]
struct Tasks {
    by_id: HashMap<String, Arc<TaskRecord>>,
    by_principal: HashMap<String, BTreeSet<(u64, String)>>,
    /// Every task by (createdAt, id), for operators' newest-first listing.
    by_created: BTreeSet<(u64, String)>,
    /// By expiry (a task's `createdAt + ttlMs` never changes), so the sweep touches only
    /// what expired: scanning every task each second kept the lock for milliseconds
    /// once tens of thousands were kept (docs/benchmarks.md, run 8).
    by_expiry: BTreeSet<(u64, String)>,
    /// Every subscription's outbox, under the same lock as the tasks, so an event is
    /// appended in the same step as its transition.
    outbox: outbox::Outboxes,
}

impl Tasks {
    fn insert(&mut self, task: TaskRecord) {
        self.by_principal
            .entry(task.principal.clone())
            .or_default()
            .insert((task.created_at_ms, task.task_id.clone()));
        self.by_expiry
            .insert((task.expires_at_ms(), task.task_id.clone()));
        self.by_created
            .insert((task.created_at_ms, task.task_id.clone()));
        self.by_id.insert(task.task_id.clone(), Arc::new(task));
    }

    fn remove(&mut self, task_id: &str) {
        let Some(task) = self.by_id.remove(task_id) else {
            return;
        };
        self.by_expiry
            .remove(&(task.expires_at_ms(), task.task_id.clone()));
        self.by_created
            .remove(&(task.created_at_ms, task.task_id.clone()));
        if let Some(listed) = self.by_principal.get_mut(&task.principal) {
            listed.remove(&(task.created_at_ms, task.task_id.clone()));
            if listed.is_empty() {
                self.by_principal.remove(&task.principal);
            }
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.by_id.is_empty()
            && self.by_principal.is_empty()
            && self.by_expiry.is_empty()
            && self.by_created.is_empty()
    }
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
        let mut tasks = self.lock();
        while tasks
            .by_expiry
            .first()
            .is_some_and(|(expires_at, _)| *expires_at <= now)
        {
            if let Some((_, task_id)) = tasks.by_expiry.pop_first() {
                tasks.remove(&task_id);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tasks> {
        // A panic while holding the lock cannot leave a record half-written: every
        // mutation is applied to a clone and swapped in, so the poison is ignored.
        self.tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_leases(&self) -> std::sync::MutexGuard<'_, HashMap<String, OwnedLease>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `apply` on a live (not expired) task and stores the change.
    fn update<T>(&self, task_id: &str, apply: impl FnOnce(&mut TaskRecord, u64) -> T) -> Option<T> {
        self.update_and_emit(task_id, |task, now| (apply(task, now), None))
    }

    /// As `update`; the event `apply` names, if any, is appended to the outbox of each
    /// subscription that wants it, under the same lock.
    fn update_and_emit<T>(
        &self,
        task_id: &str,
        apply: impl FnOnce(&mut TaskRecord, u64) -> (T, Option<EventType>),
    ) -> Option<T> {
        let now = now_ms();
        let mut guard = self.lock();
        let tasks = &mut *guard;
        let slot = tasks.by_id.get_mut(task_id)?;
        if slot.expires_at_ms() <= now {
            tasks.remove(task_id);
            return None;
        }
        let was_terminal = slot.status.is_terminal();
        let (out, event) = apply(Arc::make_mut(slot), now);
        let emitted = match (event, self.plan.get()) {
            (Some(kind), Some(plan)) => {
                tasks.outbox.emit(plan, kind, slot, now);
                true
            }
            _ => false,
        };
        // After the event, which may carry the arguments (`include-result`).
        if !was_terminal && slot.status.is_terminal() {
            Arc::make_mut(slot).shed_after_end();
        }
        drop(guard);
        if emitted {
            self.enqueued.send_modify(|n| *n += 1);
        }
        Some(out)
    }

    fn lock_outbox(&self) -> std::sync::MutexGuard<'_, Tasks> {
        self.lock()
    }
}

#[async_trait]
impl TaskStore for MemoryStore {
    async fn create(&self, task: TaskRecord) -> Result<(), StoreError> {
        let mut tasks = self.lock();
        if tasks.by_id.contains_key(&task.task_id) {
            return Err(StoreError::Duplicate(task.task_id));
        }
        metrics::task_reached(task.status);
        let emitted = self.plan.get().map(|plan| {
            tasks
                .outbox
                .emit(plan, EventType::Created, &task, task.created_at_ms);
        });
        tasks.insert(task);
        drop(tasks);
        if emitted.is_some() {
            self.enqueued.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    async fn get(
        &self,
        task_id: &str,
        principal: &str,
    ) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        let tasks = self.lock();
        Ok(tasks
            .by_id
            .get(task_id)
            .filter(|t| t.principal == principal && t.expires_at_ms() > now_ms())
            .cloned())
    }

    async fn list(
        &self,
        principal: &str,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<Arc<TaskRecord>>, StoreError> {
        let now = now_ms();
        let tasks = self.lock();
        let Some(listed) = tasks.by_principal.get(principal) else {
            return Ok(Vec::new());
        };
        let page = match after {
            // Tuples order as (created, id), so "before the cursor" is strictly after it
            // in newest-first order.
            Some(cursor) => listed.range(..(cursor.created_at_ms, cursor.task_id.clone())),
            None => listed.range::<(u64, String), _>(..),
        };
        Ok(page
            .rev()
            .filter_map(|(_, task_id)| tasks.by_id.get(task_id))
            // Expired ones wait for the sweep; they are gone for readers already.
            .filter(|task| task.expires_at_ms() > now)
            .take(limit)
            .cloned()
            .collect())
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
            .update_and_emit(task_id, |task, now| {
                if task.status.is_terminal() {
                    return (None, None);
                }
                let entered = task.status != TaskStatus::InputRequired && !requests.is_empty();
                let keys = requests
                    .into_iter()
                    .map(|request| task.push_input_request(request, now))
                    .collect();
                (Some(keys), entered.then_some(EventType::InputRequired))
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
        self.update(task_id, |task, _| {
            // An ended task's state went with its end (`shed_after_end`).
            if !task.status.is_terminal() {
                task.upstream_state = state;
            }
        });
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
            .update_and_emit(task_id, |task, now| {
                let moved = task.finish(outcome, now);
                (
                    moved,
                    moved.then(|| EventType::of_terminal(task.status)).flatten(),
                )
            })
            .unwrap_or(false))
    }

    async fn cancel(
        &self,
        task_id: &str,
        principal: &str,
        message: &str,
    ) -> Result<CancelOutcome, StoreError> {
        let outcome = self.update_and_emit(task_id, |task, now| {
            if task.principal != principal {
                (CancelOutcome::NotFound, None)
            } else if task.finish(
                Outcome::Cancelled {
                    message: message.to_owned(),
                },
                now,
            ) {
                let owner = task.owner.clone();
                (
                    CancelOutcome::Cancelled { owner },
                    Some(EventType::Cancelled),
                )
            } else {
                (CancelOutcome::AlreadyTerminal, None)
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
impl super::Changes for MemoryStore {
    async fn announce(&self, change: &super::TaskChange) -> Result<(), StoreError> {
        self.changes.announce(change).await
    }

    fn changes(&self) -> super::ChangeReceiver {
        self.changes.changes()
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
    async fn renew_lease(&self, lease: &Lease<'_>) -> Result<bool, StoreError> {
        let owned = OwnedLease {
            advertise_url: lease.advertise_url.map(str::to_owned),
            expires_at_ms: now_ms().saturating_add(lease.ttl.as_millis() as u64),
        };
        self.lock_leases().insert(lease.instance.to_owned(), owned);
        Ok(true)
    }

    /// One process: at shutdown the drain has already ended what ran here.
    async fn release_lease(&self, instance: &str, _hand_over: bool) -> Result<usize, StoreError> {
        self.lock_leases().remove(instance);
        Ok(0)
    }

    // The rest matters only when several instances share the store; here it follows
    // the same rules (`TaskRecord::take_over`) so the contract tests hold both to them.

    async fn gone_instances(&self, me: &str) -> Result<Vec<GoneInstance>, StoreError> {
        let now = now_ms();
        let mut owners: BTreeSet<String> = BTreeSet::new();
        for task in self.lock().by_id.values() {
            if !task.status.is_terminal() && task.owner != me {
                owners.insert(task.owner.clone());
            }
        }
        let leases = self.lock_leases();
        Ok(owners
            .into_iter()
            .filter(|owner| leases.get(owner).is_none_or(|l| l.expires_at_ms <= now))
            .map(|instance| GoneInstance {
                instance,
                handed_over: false,
            })
            .collect())
    }

    async fn orphans(&self, instance: &str) -> Result<Vec<TaskRecord>, StoreError> {
        let now = now_ms();
        Ok(self
            .lock()
            .by_id
            .values()
            .filter(|t| t.owner == instance && !t.status.is_terminal() && t.expires_at_ms() > now)
            .map(|t| TaskRecord::clone(t))
            .collect())
    }

    async fn take_over(
        &self,
        task_ids: &[String],
        takeover: &Takeover<'_>,
    ) -> Result<Vec<Adoption>, StoreError> {
        Ok(task_ids
            .iter()
            .map(|task_id| {
                self.update_and_emit(task_id, |task, now| {
                    let adoption = task.take_over(takeover, now);
                    let event = match adoption {
                        Adoption::Adopted(_) => Some(EventType::TakenOver),
                        Adoption::Exhausted => Some(EventType::Failed),
                        Adoption::NotOwned => None,
                    };
                    (adoption, event)
                })
                .unwrap_or(Adoption::NotOwned)
            })
            .collect())
    }

    async fn fail_orphans(
        &self,
        instance: &str,
        task_ids: &[String],
        message: &str,
    ) -> Result<usize, StoreError> {
        let failed = task_ids
            .iter()
            .filter(|task_id| {
                self.update_and_emit(task_id, |task, now| {
                    let failed = task.owner == instance
                        && task.finish(Outcome::gateway_failure(message), now);
                    (failed, failed.then_some(EventType::Failed))
                })
                .unwrap_or(false)
            })
            .count();
        Ok(failed)
    }

    async fn forget_if_gone(&self, _instance: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Walks the in-memory indexes: every task by expiry (cursor `expiresAt.taskId`), a
/// principal's newest first (cursor `createdAt.taskId`).
#[async_trait]
impl TaskInspection for MemoryStore {
    async fn inspect(&self, task_id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        let tasks = self.lock();
        Ok(tasks
            .by_id
            .get(task_id)
            .filter(|t| t.expires_at_ms() > now_ms())
            .cloned())
    }

    async fn scan(
        &self,
        scope: Scope<'_>,
        cursor: Option<&str>,
        budget: usize,
    ) -> Result<ScanPage, InspectError> {
        let after = cursor.map(parse_position).transpose()?;
        let now = now_ms();
        let tasks = self.lock();
        let budget = budget.max(1);
        let (examined, more): (Vec<(u64, String)>, bool) = match scope {
            Scope::Principal(principal) => {
                let Some(listed) = tasks.by_principal.get(principal) else {
                    return Ok(ScanPage::default());
                };
                let mut walk: Box<dyn Iterator<Item = &(u64, String)>> = match &after {
                    Some(after) => Box::new(listed.range(..after.clone()).rev()),
                    None => Box::new(listed.iter().rev()),
                };
                take_page(&mut walk, budget)
            }
            Scope::All | Scope::Unfinished { .. } => {
                let mut walk: Box<dyn Iterator<Item = &(u64, String)>> = match &after {
                    Some(after) => Box::new(tasks.by_expiry.range((
                        std::ops::Bound::Excluded(after.clone()),
                        std::ops::Bound::Unbounded,
                    ))),
                    None => Box::new(tasks.by_expiry.iter()),
                };
                take_page(&mut walk, budget)
            }
        };
        let position = |(at, id): &(u64, String)| format!("{at}.{id}");
        let next = more.then(|| examined.last().map(position)).flatten();
        // An index entry is its own position: a walk can stop after any task.
        let found = examined
            .iter()
            .filter_map(|entry| Some((tasks.by_id.get(&entry.1)?, entry)))
            .filter(|(task, _)| task.expires_at_ms() > now && in_scope(task, scope))
            .map(|(task, entry)| Scanned {
                task: task.clone(),
                after: position(entry),
            })
            .collect();
        Ok(ScanPage { tasks: found, next })
    }

    async fn newest(
        &self,
        which: Newest<'_>,
        cursor: Option<&str>,
        budget: usize,
    ) -> Result<ScanPage, InspectError> {
        let after = cursor.map(parse_position).transpose()?;
        let now = now_ms();
        let tasks = self.lock();
        let index = match which.principal {
            None => &tasks.by_created,
            Some(principal) => match tasks.by_principal.get(principal) {
                Some(listed) => listed,
                None => return Ok(ScanPage::default()),
            },
        };
        // Below the cursor and the window's top; (t, "") sorts before every id of time t.
        let mut below = after;
        if let Some(top) = which.created_at_most.and_then(|most| most.checked_add(1)) {
            let top = (top, String::new());
            if below.as_ref().is_none_or(|below| *below > top) {
                below = Some(top);
            }
        }
        let floor = (which.created_at_least.unwrap_or(0), String::new());
        if below.as_ref().is_some_and(|below| *below <= floor) {
            return Ok(ScanPage::default());
        }
        let upper = match below {
            Some(below) => Bound::Excluded(below),
            None => Bound::Unbounded,
        };
        let mut walk = index.range((Bound::Included(floor), upper)).rev();
        let (examined, more) = take_page(&mut walk, budget.max(1));
        let position = |(at, id): &(u64, String)| format!("{at}.{id}");
        let next = more.then(|| examined.last().map(position)).flatten();
        let found = examined
            .iter()
            .filter_map(|entry| Some((tasks.by_id.get(&entry.1)?, entry)))
            .filter(|(task, _)| task.expires_at_ms() > now)
            .map(|(task, entry)| Scanned {
                task: task.clone(),
                after: position(entry),
            })
            .collect();
        Ok(ScanPage { tasks: found, next })
    }

    async fn instances(&self) -> Result<Vec<InstanceInfo>, StoreError> {
        let now = now_ms();
        let leases = self.lock_leases();
        let tasks = self.lock();
        let mut instances: Vec<InstanceInfo> = leases
            .iter()
            .map(|(instance, lease)| InstanceInfo {
                instance: instance.clone(),
                advertise_url: lease.advertise_url.clone(),
                lease_expires_in_ms: lease
                    .expires_at_ms
                    .checked_sub(now)
                    .filter(|left| *left > 0),
                running_tasks: tasks
                    .by_id
                    .values()
                    .filter(|t| &t.owner == instance && !t.status.is_terminal())
                    .count() as u64,
            })
            .collect();
        instances.sort_by(|a, b| a.instance.cmp(&b.instance));
        Ok(instances)
    }
}

/// Up to `budget` index entries, and whether any is left after them.
fn take_page(
    walk: &mut dyn Iterator<Item = &(u64, String)>,
    budget: usize,
) -> (Vec<(u64, String)>, bool) {
    let page: Vec<(u64, String)> = (&mut *walk).take(budget).cloned().collect();
    let more = page.len() == budget && walk.next().is_some();
    (page, more)
}

fn in_scope(task: &TaskRecord, scope: Scope<'_>) -> bool {
    match scope {
        Scope::All | Scope::Principal(_) => true,
        Scope::Unfinished { owner } => {
            !task.status.is_terminal() && owner.is_none_or(|owner| owner == task.owner)
        }
    }
}

/// A position in an index, as `<ms>.<taskId>`.
fn parse_position(text: &str) -> Result<(u64, String), BadCursor> {
    let bad = || BadCursor(text.to_owned());
    let (at, task_id) = text.split_once('.').ok_or_else(bad)?;
    let at = at.parse().map_err(|_| bad())?;
    Ok((at, task_id.to_owned()))
}

#[async_trait]
impl Outbox for MemoryStore {
    fn route(&self, plan: OutboxPlan) {
        let _ = self.plan.set(plan);
    }

    fn enqueued(&self) -> tokio::sync::watch::Receiver<u64> {
        self.enqueued.subscribe()
    }

    async fn claim(
        &self,
        subscription: &str,
        claimer: &str,
        now_ms: u64,
        visibility_ms: u64,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        let mut tasks = self.lock_outbox();
        Ok(tasks
            .outbox
            .claim(subscription, claimer, now_ms, visibility_ms, limit))
    }

    async fn ack(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
    ) -> Result<bool, StoreError> {
        Ok(self
            .lock_outbox()
            .outbox
            .ack(subscription, task_id, event_id))
    }

    async fn retry(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
        next_ms: u64,
        error: &str,
    ) -> Result<bool, StoreError> {
        let mut tasks = self.lock_outbox();
        Ok(tasks
            .outbox
            .retry(subscription, task_id, event_id, next_ms, error))
    }

    async fn give_up(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
        error: &str,
    ) -> Result<bool, StoreError> {
        let mut tasks = self.lock_outbox();
        Ok(tasks.outbox.give_up(subscription, task_id, event_id, error))
    }

    async fn stats(&self, subscription: &str) -> Result<OutboxStats, StoreError> {
        Ok(self.lock_outbox().outbox.stats(subscription))
    }

    async fn pending(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        Ok(self.lock_outbox().outbox.pending(subscription, limit))
    }

    async fn dead_letters(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        Ok(self.lock_outbox().outbox.dead_letters(subscription, limit))
    }

    async fn redeliver(
        &self,
        subscription: &str,
        event_id: Option<&str>,
    ) -> Result<usize, StoreError> {
        Ok(self.lock_outbox().outbox.redeliver(subscription, event_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract_tests::{self, Subject};
    use crate::{Store, TaskStore};

    /// The memory store serves one instance, so every instance's view is the same store.
    struct OneProcess(Arc<MemoryStore>);

    impl Subject for OneProcess {
        fn instance(&self, _id: &str) -> Store {
            Store::new(self.0.clone())
        }
    }

    contract_tests::suite!(OneProcess(MemoryStore::start()));

    #[tokio::test]
    async fn the_sweep_frees_expired_tasks() {
        let store = MemoryStore::start();
        let mut task = contract_tests::record("gw-1");
        task.ttl_ms = 0;
        store.create(task).await.unwrap();
        let live = contract_tests::record("gw-1");
        let live_id = live.task_id.clone();
        store.create(live).await.unwrap();
        store.sweep_expired(now_ms());
        assert_eq!(store.lock().by_id.len(), 1, "only the expired task goes");
        store.delete(&live_id).await.unwrap();
        assert!(
            store.lock().is_empty(),
            "the principal's index is freed too"
        );
    }
}
