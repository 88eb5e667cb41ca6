//! The memory store's outbox: kept under the tasks' lock, so an event is appended in the
//! same step as its transition.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::outbox::{
    Attempts, Claimed, EventType, OutboxEntry, OutboxPlan, OutboxStats, StoredEvent, new_event_id,
};
use crate::{TaskRecord, now_ms};

/// Every subscription's outbox.
#[derive(Default)]
pub(super) struct Outboxes {
    by_subscription: HashMap<String, SubscriptionBox>,
}

#[derive(Default)]
struct SubscriptionBox {
    /// Each task's pending event ids, oldest first; only the head is deliverable.
    queues: HashMap<String, VecDeque<String>>,
    /// Heads by next try: (due ms, task id).
    due: BTreeSet<(u64, String)>,
    due_of: HashMap<String, u64>,
    events: HashMap<String, StoredEvent>,
    attempts: HashMap<String, Attempts>,
    /// Pending events by when they happened: (at ms, event id).
    age: BTreeSet<(u64, String)>,
    /// Dead letters by when they were given up on: (dead ms, event id).
    dead: BTreeSet<(u64, String)>,
}

/// The event `kind` of `task` as the outbox keeps it.
pub(super) fn snapshot(task: &TaskRecord, kind: EventType, now: u64, with: bool) -> StoredEvent {
    let request: Option<serde_json::Value> = serde_json::from_str(task.request.get()).ok();
    let tool = request
        .as_ref()
        .and_then(|r| r.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_owned);
    StoredEvent {
        id: new_event_id(),
        kind: kind.as_str().to_owned(),
        at: now.to_string(),
        task: task.task_id.clone(),
        principal: task.principal.clone(),
        status: task.status.as_str().to_owned(),
        created: task.created_at_ms.to_string(),
        updated: task.last_updated_at_ms.to_string(),
        msg: task.status_message.clone(),
        error: task
            .error
            .as_ref()
            .and_then(|e| serde_json::to_string(e).ok()),
        ir: task
            .input_requests
            .values()
            .filter_map(|r| serde_json::to_string(r).ok())
            .collect(),
        tool,
        result: with
            .then(|| task.result.as_ref().map(|r| r.get().to_owned()))
            .flatten(),
        request: with.then(|| task.request.get().to_owned()),
    }
}

impl SubscriptionBox {
    fn head(&self, task_id: &str) -> Option<&String> {
        self.queues.get(task_id).and_then(|q| q.front())
    }

    fn set_due(&mut self, task_id: &str, at: u64) {
        if let Some(old) = self.due_of.insert(task_id.to_owned(), at) {
            self.due.remove(&(old, task_id.to_owned()));
        }
        self.due.insert((at, task_id.to_owned()));
    }

    fn unset_due(&mut self, task_id: &str) {
        if let Some(old) = self.due_of.remove(task_id) {
            self.due.remove(&(old, task_id.to_owned()));
        }
    }

    fn push(&mut self, event: StoredEvent, now: u64) {
        let queue = self.queues.entry(event.task.clone()).or_default();
        queue.push_back(event.id.clone());
        let first = queue.len() == 1;
        self.age.insert((event.at_ms(), event.id.clone()));
        self.attempts.entry(event.id.clone()).or_default();
        if first {
            self.set_due(&event.task, now);
        }
        self.events.insert(event.id.clone(), event);
    }

    /// Removes the head `event_id` of `task_id`'s queue; the next one is due now.
    fn pop(&mut self, task_id: &str, event_id: &str) -> bool {
        if self.head(task_id).map(String::as_str) != Some(event_id) {
            return false;
        }
        let queue = self.queues.get_mut(task_id).map(|q| {
            q.pop_front();
            q.is_empty()
        });
        if queue == Some(true) {
            self.queues.remove(task_id);
            self.unset_due(task_id);
        } else {
            self.set_due(task_id, now_ms());
        }
        if let Some(event) = self.events.get(event_id) {
            self.age.remove(&(event.at_ms(), event_id.to_owned()));
        }
        true
    }
}

impl Outboxes {
    /// Appends `kind` of `task` for each subscription of `plan` that wants it.
    pub(super) fn emit(&mut self, plan: &OutboxPlan, kind: EventType, task: &TaskRecord, now: u64) {
        for route in plan.matching(&[kind]) {
            let event = snapshot(task, kind, now, route.include_result);
            self.by_subscription
                .entry(route.subscription.clone())
                .or_default()
                .push(event, now);
        }
    }

    fn of(&mut self, subscription: &str) -> &mut SubscriptionBox {
        self.by_subscription
            .entry(subscription.to_owned())
            .or_default()
    }

    pub(super) fn claim(
        &mut self,
        subscription: &str,
        claimer: &str,
        now: u64,
        visibility_ms: u64,
        limit: usize,
    ) -> Vec<Claimed> {
        let sub = self.of(subscription);
        let due: Vec<String> = sub
            .due
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(limit)
            .map(|(_, task)| task.clone())
            .collect();
        let mut claimed = Vec::new();
        for task_id in due {
            let Some(head) = sub.head(&task_id).cloned() else {
                sub.unset_due(&task_id);
                continue;
            };
            let until = now.saturating_add(visibility_ms);
            sub.set_due(&task_id, until);
            let attempts = sub.attempts.entry(head.clone()).or_default();
            attempts.attempts += 1;
            attempts.next = Some(until);
            attempts.claimer = Some(claimer.to_owned());
            let attempts = attempts.attempts;
            if let Some(event) = sub.events.get(&head) {
                claimed.push(Claimed {
                    event: event.clone(),
                    attempts,
                });
            }
        }
        claimed
    }

    pub(super) fn ack(&mut self, subscription: &str, task_id: &str, event_id: &str) -> bool {
        let sub = self.of(subscription);
        if !sub.pop(task_id, event_id) {
            return false;
        }
        sub.events.remove(event_id);
        sub.attempts.remove(event_id);
        true
    }

    pub(super) fn retry(
        &mut self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
        next_ms: u64,
        error: &str,
    ) -> bool {
        let sub = self.of(subscription);
        if sub.head(task_id).map(String::as_str) != Some(event_id) {
            return false;
        }
        sub.set_due(task_id, next_ms);
        if let Some(attempts) = sub.attempts.get_mut(event_id) {
            attempts.error = Some(error.to_owned());
            attempts.next = Some(next_ms);
        }
        true
    }

    pub(super) fn give_up(
        &mut self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
        error: &str,
    ) -> bool {
        let sub = self.of(subscription);
        if !sub.pop(task_id, event_id) {
            return false;
        }
        let now = now_ms();
        if let Some(attempts) = sub.attempts.get_mut(event_id) {
            attempts.error = Some(error.to_owned());
            attempts.next = None;
            attempts.claimer = None;
            attempts.dead_at = Some(now);
        }
        sub.dead.insert((now, event_id.to_owned()));
        true
    }

    pub(super) fn stats(&mut self, subscription: &str) -> OutboxStats {
        let sub = self.of(subscription);
        OutboxStats {
            pending: sub.age.len() as u64,
            oldest_at_ms: sub.age.first().map(|(at, _)| *at),
            dead: sub.dead.len() as u64,
        }
    }

    pub(super) fn pending(&mut self, subscription: &str, limit: usize) -> Vec<OutboxEntry> {
        let sub = self.of(subscription);
        let ids = sub.age.iter().take(limit).map(|(_, id)| id);
        entries(sub, ids)
    }

    pub(super) fn dead_letters(&mut self, subscription: &str, limit: usize) -> Vec<OutboxEntry> {
        let sub = self.of(subscription);
        let ids = sub.dead.iter().take(limit).map(|(_, id)| id);
        entries(sub, ids)
    }

    pub(super) fn redeliver(&mut self, subscription: &str, event_id: Option<&str>) -> usize {
        let sub = self.of(subscription);
        let chosen: Vec<(u64, String)> = sub
            .dead
            .iter()
            .filter(|(_, id)| event_id.is_none_or(|wanted| wanted == id))
            .cloned()
            .collect();
        let now = now_ms();
        for dead in &chosen {
            sub.dead.remove(dead);
            let Some(event) = sub.events.remove(&dead.1) else {
                continue;
            };
            sub.attempts.remove(&dead.1);
            sub.push(event, now);
        }
        chosen.len()
    }
}

fn entries<'a>(sub: &SubscriptionBox, ids: impl Iterator<Item = &'a String>) -> Vec<OutboxEntry> {
    ids.filter_map(|id| {
        Some(OutboxEntry {
            event: sub.events.get(id)?.clone(),
            attempts: sub.attempts.get(id).cloned().unwrap_or(Attempts::default()),
        })
    })
    .collect()
}
