//! SEP-2663 tasks: creating them from `tools/call`, running them against the upstream,
//! and the `tasks/get`, `tasks/update` and `tasks/cancel` handlers. [`TaskService`]'s
//! verbs are in `service/`, one group a file.

mod change_feed;
mod credential;
pub mod deferral;
pub mod dialect_2025;
pub mod follow;
mod halt;
pub mod limits;
pub mod mrtr_bridge;
pub mod policy;
pub mod render;
mod runner;
mod runners;
mod service;
mod start;
pub mod takeover;
mod tool_traits;
pub mod upstream_mrtr;
mod upstream_tasks;
pub mod waiters;

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::upstream::Upstream;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_store::{Changes, MembershipStore, TaskRecord, TaskStore, WakeUps};

use service::ToStore;
pub use service::{InFlight, Readiness, Reservation};

/// Settings of the task machinery, taken from the config at start.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    pub instance_id: String,
    pub ttl_ms: u64,
    /// The longest TTL a client may ask for (`--max-ttl-ms`).
    pub max_ttl_ms: u64,
    /// The shortest: a client needs time to read what it asked for.
    pub min_ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub upstream_timeout: Option<Duration>,
    pub promote_after: Duration,
    /// `--defer-after-ms`: how long a call of a client that cannot take a task runs
    /// before it is answered with a deferred result instead; `None` is off.
    pub defer_after: Option<Duration>,
    /// `--deferred-max-wait-ms`: the longest a `get_task_result` waits when its caller
    /// asks for longer than `defer_after` (below it, `defer_after` holds).
    pub deferred_max_wait: Duration,
    /// Tasks one principal may have running on this instance; 0 = no limit.
    pub max_running_per_principal: u32,
    /// Where the running tasks are counted: one for every upstream of the gateway.
    pub running_counts: limits::RunningCounts,
    /// How long a held call waits for its client's answers (`--input-wait-timeout-ms`).
    pub input_wait: Duration,
    /// What held calls' `requestState`s are sealed with.
    pub state_keys: mrtr_bridge::StateKeys,
    pub takeover: TakeoverSettings,
    /// Whether an ended task keeps its call's arguments (`--admin-show-results`, which
    /// shows them); otherwise only the tool's name.
    pub keep_arguments: bool,
    /// This upstream's metrics.
    pub meter: crate::telemetry::Meter,
}

/// When a live instance runs the call of a gone instance's task again.
#[derive(Debug, Clone, Default)]
pub struct TakeoverSettings {
    /// Tools the operator declares safe to run again (`--retry-on-owner-loss`), whatever
    /// the upstream's annotations say.
    pub retry_tools: std::collections::HashSet<String>,
    /// Takeovers after a lost owner a task may have; one more and it fails.
    pub max_takeovers: u32,
}

/// A `tools/call` to run as a task.
pub struct ToolCall {
    /// The call's params as the upstream should see them, as raw JSON: a running task
    /// holds them for its whole life, and as a `Value` tree even a small call's params
    /// take ~2 KB (a B-tree node per object).
    pub params: Box<RawValue>,
    /// Session capabilities the upstream must see (elicitation, sampling, roots).
    pub capabilities: Map<String, Value>,
    pub auth: Option<HeaderValue>,
    pub principal: String,
    /// For a 2025-xx session client's task: where the call runs and whom its changes
    /// concern.
    pub session: Option<dialect_2025::SessionLink>,
    /// The TTL the client asked for, already capped; the default otherwise.
    pub ttl_ms: Option<u64>,
    /// Where the runner also sends the upstream's notifications of the call, while its
    /// caller streams them (a deferrable call within its budget).
    pub relay: Option<NotificationRelay>,
}

/// The upstream's notifications of one call (method, params), for a caller that streams
/// them; a send that finds the channel full or closed is dropped.
pub type NotificationRelay = tokio::sync::mpsc::Sender<(String, Option<Value>)>;

impl ToolCall {
    /// The params as a tree, to change them for one upstream request.
    pub fn params_value(&self) -> Value {
        // They were serialised from a `Value` by the gateway, so they parse.
        serde_json::from_str(self.params.get()).unwrap_or_default()
    }
}

/// What the client gets for a task-eligible `tools/call`.
pub enum Started {
    /// The task exists; reply with `CreateTaskResult`.
    Task(Arc<TaskRecord>),
    /// The upstream answered within the promotion budget; no task was kept.
    Inline(Result<Box<RawValue>, ErrorObject>),
}

/// One upstream's tasks: where they are stored, who runs and watches them here, and the
/// settings they are made with.
pub struct TaskService {
    store: Arc<dyn TaskStore>,
    /// Gone instances' tasks, to take over (`takeover`).
    membership: Arc<dyn MembershipStore>,
    wakeups: Arc<dyn WakeUps>,
    changes: Arc<dyn Changes>,
    /// Who here waits for a task to change (`tasks/result`, session GET streams).
    waiters: waiters::Waiters,
    upstream: Arc<dyn Upstream>,
    settings: TaskSettings,
    /// The runners on this instance.
    runners: runners::Runners,
    running_limit: limits::RunningLimit,
    /// What the upstream's tools/list says about its tools.
    tool_traits: tool_traits::ToolTraits,
}

pub(crate) fn not_found(task_id: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!(
        "Failed to retrieve task: no task {task_id:?} (unknown, expired, or not yours)"
    ))
}
