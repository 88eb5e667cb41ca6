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
