//! The admin API's JSON, in one place: the gateway writes it, the CLI reads it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A task as a listing shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    pub task_id: String,
    pub status: String,
    /// The tool called (`params.name` of the `tools/call`).
    pub tool: Option<String>,
    /// The instance that runs (or ran) the upstream call.
    pub owner: String,
    /// The caller's identity as the gateway keys it (a hash, never the credential).
    pub principal: String,
    pub created_at: String,
    pub age_ms: u64,
    pub ttl_ms: u64,
    pub status_message: Option<String>,
    /// Input requests waiting for the client's answer.
    pub pending_input: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskList {
    /// Newest first within the page.
    pub tasks: Vec<TaskSummary>,
    /// More to look at: pass it back as `cursor`. A page may be short (even empty) while
    /// this is set, since one call examines a bounded number of entries.
    pub next_cursor: Option<String>,
}

/// Whether a task's owner still holds its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OwnerLease {
    /// The owner renews its lease: it is running.
    Live,
    /// The lease lapsed: the owner is gone or cut off from the store; the next sweep
    /// takes its unfinished tasks over or fails them.
    Lapsed,
    /// The store knows no such instance (any more).
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDetail {
    #[serde(flatten)]
    pub summary: TaskSummary,
    pub owner_lease: OwnerLease,
    pub pending_input_keys: Vec<String>,
    /// The methods the pending input requests ask (`elicitation/create`, ...), by key.
    pub pending_input_methods: Vec<String>,
    pub updated_at: String,
    pub expires_at: String,
    /// The JSON-RPC error a failed task ended with.
    pub error: Option<Value>,
    /// Answers accepted but not yet forwarded upstream.
    pub answers_waiting: usize,
    /// Times another instance took the task over after its owner was lost.
    #[serde(default)]
    pub takeovers: u32,
    /// Whether another instance could run the call again if its owner were lost (the
    /// record carries what it needs; the tool must also be safe to run again).
    #[serde(default)]
    pub resumable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CancelResult {
    Cancelled,
    AlreadyTerminal,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelReply {
    pub task_id: String,
    pub result: CancelResult,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    pub instance: String,
    pub advertise_url: Option<String>,
    pub lease_live: bool,
    pub lease_expires_in_ms: Option<u64>,
    pub running_tasks: u64,
    /// The instance that answered.
    #[serde(rename = "self")]
    pub this: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instances {
    /// The namespace of the shared store these instances are in (`""`: the unprefixed
    /// layout); absent with the in-memory store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_namespace: Option<String>,
    pub instances: Vec<InstanceView>,
}

/// Every refusal and failure: `{"error": "..."}` with the HTTP status that fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: String,
}

/// A webhook subscription and its outbox in numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionView {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub pending: u64,
    pub dead_letters: u64,
    /// How long ago the oldest pending event happened.
    #[serde(default)]
    pub oldest_pending_age_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookList {
    pub subscriptions: Vec<SubscriptionView>,
}

/// An event in an outbox or among the dead letters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub event_id: String,
    pub task_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// When the transition happened (RFC 3339).
    pub at: String,
    pub attempts: u32,
    #[serde(default)]
    pub last_error: Option<String>,
    /// In how long it is tried next (negative: overdue); only a task's oldest pending
    /// event has one.
    #[serde(default)]
    pub next_try_in_ms: Option<i64>,
    /// The instance that claimed it last.
    #[serde(default)]
    pub claimed_by: Option<String>,
    #[serde(default)]
    pub dead_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionDetail {
    pub subscription: SubscriptionView,
    /// The oldest pending events (at most 100).
    pub pending: Vec<EventView>,
    /// The oldest dead letters (at most 100).
    pub dead_letters: Vec<EventView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RedeliverReply {
    pub subscription: String,
    pub redelivered: usize,
}
