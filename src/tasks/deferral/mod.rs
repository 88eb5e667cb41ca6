//! Calls of clients that cannot take a task, run as tasks of their callers and answered
//! on the call itself:
//! - with `--defer-after-ms`, any such call: past the budget it gets a deferred result,
//!   and a model fetches or stops it with two tools the gateway adds
//!   (`mtg_protocol::wire::deferred`);
//! - a call of a tool the upstream runs only as its own task (`upstream_tasks`), which
//!   could not be forwarded as it came: it is answered when it ends (deferred past the
//!   budget when deferral is on).
//!
//! Everything of deferral but its wire shapes (`mtg_protocol::wire::deferred`) is here,
//! and the server paths call it; they keep only their transport (a session's SSE or a
//! 2026-07-28 JSON answer, their headers):
//! - `mod.rs`: the policy ([`Deferrals`]: which calls, for how long), waiting for one, and
//!   its "still running" answer (a deferred result);
//! - `tools.rs`: the gateway's two tools, `get_task_result` and `cancel_task`: the names
//!   they go by, listing them, telling a call of one apart, cancelling, and a finished
//!   task's answer in words.

mod tools;

pub use tools::{GatewayTool, Listing, failure_of, not_completed, tool_of};

use std::sync::Arc;
use std::time::Duration;

use super::TaskService;
use super::halt::sleep_until;
use crate::upstream::Caller;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::TaskStatus;
use mtg_protocol::wire::deferred::{self, Deferred, ToolNames, Waits, next_attempt};
use mtg_store::TaskRecord;
use serde_json::Value;

/// A budget that does not pass: the call is answered when it ends (the upstream timeout
/// and the task's TTL still stop it).
pub const UNTIL_IT_ENDS: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// One upstream's deferred calls: which calls, for how long, waiting for one, its "still
/// running" answer, and the gateway's two tools (`tools.rs`).
#[derive(Clone)]
pub struct Deferrals {
    tasks: Arc<TaskService>,
}

impl Deferrals {
    /// How long a plain `tools/call` of `tool`, from a client that will not take a task,
    /// runs as the caller's task before it is answered on the call: `--defer-after-ms`
    /// when deferral is on; [`UNTIL_IT_ENDS`] for a tool the upstream runs only as its own
    /// task; `None` otherwise (the call is forwarded as it came).
    pub async fn answer_within(&self, caller: &Caller<'_>, tool: &str) -> Option<Duration> {
        if let Some(after) = self.after() {
            return Some(after);
        }
        self.runs_only_as_task(caller, tool)
            .await
            .then_some(UNTIL_IT_ENDS)
    }

    /// Whether the upstream runs `tool` only as its own task.
    pub async fn runs_only_as_task(&self, caller: &Caller<'_>, tool: &str) -> bool {
        let upstream = self.tasks.upstream.as_ref();
        self.tasks
            .tool_traits
            .own_task_only(upstream, caller, tool)
            .await
    }

    /// Whether a client's plain `tools/call` may need the gateway even with deferral
    /// off: `false` once the upstream's listing showed no tool it runs only as a task.
    /// Read without a lock, for paths that otherwise parse nothing.
    pub fn may_run_task_only_tools(&self) -> bool {
        self.tasks.tool_traits.may_have_own_task_only()
    }

    pub fn new(tasks: Arc<TaskService>) -> Self {
        Self { tasks }
    }

    /// `--defer-after-ms`, if deferral is on.
    pub fn after(&self) -> Option<Duration> {
        self.tasks.settings.defer_after
    }

    /// How long `get_task_result` waits, if deferral is on: the budget, and at most
    /// `--deferred-max-wait-ms` when the caller asks for longer.
    pub fn waits(&self) -> Option<Waits> {
        let settings = &self.tasks.settings;
        settings
            .defer_after
            .map(|after| Waits::new(after, settings.deferred_max_wait))
    }

    /// The answer to a call that outlived its budget (a deferred result; counted): its
    /// task `task` still runs.
    pub async fn defer(&self, caller: &Caller<'_>, task: &TaskRecord, tool: &str) -> Value {
        self.tasks.call_deferred(&task.task_id);
        self.still_running(caller, task, Asked::Call(tool)).await
    }

    /// The answer that says `task` still runs, to the request `asked`: in words a model
    /// follows, naming the exact next call, with `structuredContent` only where the
    /// called tool's clients require it (`mtg_protocol::wire::deferred`).
    pub async fn still_running(
        &self,
        caller: &Caller<'_>,
        task: &TaskRecord,
        asked: Asked<'_>,
    ) -> Value {
        let names = self.tool_names(caller).await;
        let (tool, attempt, structured) = match Answered::to(asked, &names) {
            Answered::Call(tool) => {
                let structured = self
                    .tasks
                    .tool_traits
                    .declares_output_schema(self.tasks.upstream.as_ref(), caller, tool)
                    .await;
                (tool.to_owned(), next_attempt(None), structured)
            }
            // The gateway's fetch tool lists no `outputSchema`.
            Answered::Fetch { attempt } => (tool_of(task), next_attempt(attempt), false),
        };
        let waits = self
            .waits()
            .unwrap_or_else(|| Waits::new(Duration::ZERO, Duration::ZERO));
        deferred::deferred_result(&Deferred {
            tool: &tool,
            task_id: &task.task_id,
            status: task.status.as_str(),
            status_message: task.status_message.as_deref(),
            names: &names,
            waits,
            attempt,
            structured,
        })
    }

    /// The task once it ended or asks for input, or as it is when `limit` passed.
    pub async fn wait(
        &self,
        task_id: &str,
        principal: &str,
        limit: Duration,
    ) -> Result<Arc<TaskRecord>, ErrorObject> {
        let deadline = tokio::time::Instant::now() + limit;
        let waiter = self.tasks.waiters.wait_on(task_id);
        loop {
            // Registered before the read, so a change in between is not missed.
            let changed = waiter.changed();
            let task = self.tasks.get(task_id, principal).await?;
            if task.status.is_terminal() || task.status == TaskStatus::InputRequired {
                return Ok(task);
            }
            tokio::select! {
                () = changed => {}
                () = sleep_until(Some(deadline)) => return self.tasks.get(task_id, principal).await,
            }
        }
    }
}

/// The request a "still running" answer goes to.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// The deferred `tools/call` itself, of this tool.
    Call(&'a str),
    /// A `get_task_result` call, with the `attempt` it carried.
    Fetch { attempt: Option<u64> },
    /// A held call's retry, with its `tools/call` params: either of the two, told by the
    /// tool it names (the gateway's fetch tool may go by another name).
    Retry(Option<&'a Value>),
}

/// What an [`Asked`] answers for, once a retry is told apart by the gateway's tool names.
enum Answered<'a> {
    Call(&'a str),
    Fetch { attempt: Option<u64> },
}

impl<'a> Answered<'a> {
    fn to(asked: Asked<'a>, names: &ToolNames) -> Self {
        match asked {
            Asked::Call(tool) => Self::Call(tool),
            Asked::Fetch { attempt } => Self::Fetch { attempt },
            Asked::Retry(params) => {
                let tool = params
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("tool");
                if tool != names.get_result {
                    return Self::Call(tool);
                }
                let arguments = params.and_then(|p| p.get("arguments"));
                let attempt = deferred::attempt_argument(arguments).ok().flatten();
                Self::Fetch { attempt }
            }
        }
    }
}
