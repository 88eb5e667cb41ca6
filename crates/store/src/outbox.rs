//! The outbox contract: task events written in the same step as the transition that
//! causes them, kept until a delivery acknowledges them or gives up on them.
//!
//! Words: a *subscription* is one webhook destination (its id is opaque here); an
//! *event* is one transition of one task as one subscription hears of it; the *outbox*
//! holds a subscription's pending events; a *dead letter* is an event given up on.
//!
//! Rules, both stores (`contract_tests/outbox.rs`):
//! - The gateway says once, before any transition, which subscriptions want which event
//!   types ([`OutboxPlan`], [`Outbox::route`]). A transition that happens appends one
//!   event per subscription that wants its type, atomically with the transition (the
//!   same Lua script on Redis, the same lock in memory); one that does not happen (a
//!   finish after a cancel) appends none.
//! - Per (subscription, task) events form a queue and only its head is deliverable, so
//!   a task's events are delivered in order. A claim makes a head invisible to other
//!   claims until its visibility deadline; a claimer that died leaves a claim that
//!   expires, and another instance claims the event again.
//! - Ack, retry and give-up act only on the current head with that event id (a late
//!   answer to an expired claim changes nothing once another claimer acked it).
//! - A dead letter keeps the event, its attempts and last error; redelivering it puts
//!   it at the end of its task's queue with attempts reset.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::StoreError;

/// A task event type, as the webhook body's `type` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    Created,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
    TakenOver,
}

impl EventType {
    pub const ALL: [EventType; 6] = [
        EventType::Created,
        EventType::InputRequired,
        EventType::Completed,
        EventType::Failed,
        EventType::Cancelled,
        EventType::TakenOver,
    ];

    /// The name on the wire (`task.completed`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Created => "task.created",
            EventType::InputRequired => "task.input_required",
            EventType::Completed => "task.completed",
            EventType::Failed => "task.failed",
            EventType::Cancelled => "task.cancelled",
            EventType::TakenOver => "task.taken_over",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The event a task ending in `status` makes.
    pub(crate) fn of_terminal(status: mtg_protocol::wire::TaskStatus) -> Option<Self> {
        use mtg_protocol::wire::TaskStatus;
        match status {
            TaskStatus::Completed => Some(EventType::Completed),
            TaskStatus::Failed => Some(EventType::Failed),
            TaskStatus::Cancelled => Some(EventType::Cancelled),
            _ => None,
        }
    }
}

/// One subscription as the store sees it: which events it wants, and whether its events
/// carry the task's request and result.
#[derive(Debug, Clone)]
pub struct Route {
    pub subscription: String,
    pub events: Vec<EventType>,
    pub include_result: bool,
}

/// Every subscription of one store (one world), set once at start.
#[derive(Debug, Clone, Default)]
pub struct OutboxPlan {
    pub routes: Vec<Route>,
}

impl OutboxPlan {
    /// The routes that want any of `kinds`.
    pub(crate) fn matching(&self, kinds: &[EventType]) -> impl Iterator<Item = &Route> {
        self.routes
            .iter()
            .filter(move |r| r.events.iter().any(|e| kinds.contains(e)))
    }
}

/// A fresh event id (`msg_` and 32 hex digits): the `webhook-id`, fixed at enqueue.
pub(crate) fn new_event_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // Unique per process by the counter, across processes by time, pid and a hash.
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{nanos}.{n}.{}", std::process::id()).as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("msg_{hex}")
}

/// An event as the outbox keeps it: the task's fields at the transition, as text (the
/// Redis script writes it with `cjson`; raw JSON fields are kept as strings, unparsed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredEvent {
    /// The `webhook-id`.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// When the transition happened (Unix ms, as text).
    pub at: String,
    pub task: String,
    pub principal: String,
    pub status: String,
    pub created: String,
    pub updated: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg: Option<String>,
    /// The JSON-RPC error, as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Outstanding input requests, each as JSON text, in key order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ir: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The result (JSON text), for a subscription with `include_result` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The `tools/call` params (JSON text), for a subscription with `include_result` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

impl StoredEvent {
    pub fn at_ms(&self) -> u64 {
        self.at.parse().unwrap_or(0)
    }
}

/// A head claimed for delivery.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub event: StoredEvent,
    /// Delivery attempts so far, this one included.
    pub attempts: u32,
}

/// Where a pending event stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempts {
    pub attempts: u32,
    #[serde(default)]
    pub error: Option<String>,
    /// When it may be tried next (Unix ms); only a head has one.
    #[serde(default)]
    pub next: Option<u64>,
    /// The instance that claimed it last (kept after a retry is scheduled).
    #[serde(default)]
    pub claimer: Option<String>,
    /// When it was given up on (Unix ms), for a dead letter.
    #[serde(default)]
    pub dead_at: Option<u64>,
}

/// An event in the outbox or among the dead letters, for operators.
#[derive(Debug, Clone)]
pub struct OutboxEntry {
    pub event: StoredEvent,
    pub attempts: Attempts,
}

/// A subscription's outbox in numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxStats {
    pub pending: u64,
    /// When the oldest pending event happened (Unix ms).
    pub oldest_at_ms: Option<u64>,
    pub dead: u64,
}

/// The outbox of each subscription.
#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// Which subscriptions want which events; set once, before any transition (later
    /// calls are ignored). Without it no event is written.
    fn route(&self, plan: OutboxPlan);

    /// Ticks after each transition of this process that may have written events, so a
    /// delivery worker here starts at once instead of at its next poll.
    fn enqueued(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Up to `limit` heads of `subscription` due by `now_ms`, each claimed by `claimer`
    /// until `now_ms + visibility_ms`.
    async fn claim(
        &self,
        subscription: &str,
        claimer: &str,
        now_ms: u64,
        visibility_ms: u64,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError>;

    /// Delivered: the head goes and the task's next event becomes deliverable. `false`
    /// when `event_id` was not the head (acked already).
    async fn ack(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
    ) -> Result<bool, StoreError>;

    /// Not delivered this time: the head is tried again at `next_ms`.
    async fn retry(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
        next_ms: u64,
        error: &str,
    ) -> Result<bool, StoreError>;

    /// Given up: the head becomes a dead letter and the task's next event deliverable.
    async fn give_up(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
        error: &str,
    ) -> Result<bool, StoreError>;

    async fn stats(&self, subscription: &str) -> Result<OutboxStats, StoreError>;

    /// The oldest pending events, at most `limit`.
    async fn pending(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError>;

    /// The dead letters, oldest first, at most `limit`.
    async fn dead_letters(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError>;

    /// Puts a dead letter (or all of them, with `None`) back in the outbox, due now.
    /// How many went back.
    async fn redeliver(
        &self,
        subscription: &str,
        event_id: Option<&str>,
    ) -> Result<usize, StoreError>;
}
