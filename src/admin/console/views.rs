//! The console's JSON, as its script reads it. Every string here is shown as text.

use serde::Serialize;

/// The overview page: instances, upstreams, and what waits for a person.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Overview {
    /// The instance that answered.
    pub instance: String,
    pub generated_at: String,
    pub instances: Vec<InstanceRow>,
    pub upstreams: Vec<UpstreamView>,
    /// `input_required` tasks of every upstream, longest waiting first.
    pub waiting: Vec<TaskRow>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InstanceRow {
    pub instance: String,
    #[serde(rename = "self")]
    pub this: bool,
    pub lease_live: bool,
    /// Time since the lease was last renewed, reckoned with this instance's lease
    /// timeout; `None` once it lapsed.
    pub lease_age_ms: Option<u64>,
    pub lease_expires_in_ms: Option<u64>,
    /// Unfinished tasks it runs, over every upstream.
    pub tasks_owned: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UpstreamView {
    /// `""` for the one at `/mcp`.
    pub name: String,
    pub path: String,
    pub ready: bool,
    /// Why it is not ready (the store's or the upstream's failure).
    pub not_ready: Option<String>,
    /// Unfinished tasks on every instance (the owners' indexes).
    pub running_tasks: u64,
    /// Held MRTR calls on every instance (hidden tasks of `held:` principals, from the
    /// owners' indexes; a bound applies as to `counts`).
    pub held_calls: u64,
    /// This instance's runners, held MRTR calls and deferred calls (which of its tasks
    /// were deferred only the instance that answered the call knows).
    pub runners_here: usize,
    pub held_calls_here: usize,
    pub deferred_calls_here: usize,
    pub counts: StatusCounts,
}

/// Tasks by status. The unfinished ones are counted from the owners' indexes (exact up
/// to a bound); the ended ones among the newest tasks only, since counting every task
/// of a large store on each refresh would read all of it.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatusCounts {
    pub working: u64,
    pub input_required: u64,
    /// False when the unfinished tasks were too many to read each refresh: the two
    /// counts above are then of the first ones read.
    pub unfinished_exact: bool,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// How many of the newest tasks the three ended counts are of.
    pub newest_examined: u64,
}

/// A task in a table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TaskRow {
    pub task_id: String,
    /// The upstream's name (`""`: `/mcp`).
    pub upstream: String,
    pub status: String,
    pub tool: Option<String>,
    pub principal: String,
    pub owner: String,
    pub created_at: String,
    pub age_ms: u64,
    pub status_message: Option<String>,
    pub pending_input: usize,
    /// What the first pending input request asks, when it says it in words.
    pub asks: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TaskTable {
    pub tasks: Vec<TaskRow>,
    /// More may follow; a page may be short while this is set (each request examines a
    /// bounded number of tasks).
    pub next_cursor: Option<String>,
}

/// One input request the upstream asked and the client has not answered.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InputView {
    pub key: String,
    pub method: String,
    /// What the server asked (`params.message`), when it said it in words.
    pub message: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ErrorView {
    pub code: i64,
    pub message: String,
}

/// A task's page.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TaskView {
    #[serde(flatten)]
    pub row: TaskRow,
    pub path: String,
    pub owner_lease: crate::admin::wire::OwnerLease,
    pub takeovers: u32,
    pub updated_at: String,
    pub expires_at: String,
    pub inputs: Vec<InputView>,
    pub answers_waiting: usize,
    pub ended: bool,
    pub error: Option<ErrorView>,
    /// Bytes of the stored result of a completed task.
    pub result_bytes: Option<usize>,
    /// Whether this gateway shows arguments and results (`--admin-show-results`).
    pub show_results: bool,
    /// The call's arguments and result as JSON text, each cut at the cap, only with
    /// `--admin-show-results`.
    pub arguments: Option<Shown>,
    pub result: Option<Shown>,
}

/// A value shown only on request, at most [`super::SHOWN_CAP`] bytes of it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Shown {
    pub text: String,
    pub bytes: usize,
    pub truncated: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CancelView {
    pub task_id: String,
    pub result: crate::admin::wire::CancelResult,
}

#[derive(Debug, Serialize)]
pub(super) struct ErrorReply {
    pub error: String,
}
