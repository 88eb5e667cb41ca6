//! Deferred results (`--defer-after-ms`): a call of a client that cannot take a task runs
//! as a task of its caller, and a model fetches or stops it with two tools the gateway
//! adds (`mtg_protocol::wire::deferred`). Waiting for a deferred call, and which names
//! those tools go by.

use std::sync::Arc;
use std::time::Duration;

use super::TaskService;
use super::halt::sleep_until;
use crate::store::TaskRecord;
use crate::upstream::Caller;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::TaskStatus;
use mtg_protocol::wire::deferred::{self, CANCEL_TASK, GET_TASK_RESULT, ToolNames};
use serde_json::Value;

/// Deferred calls: waiting for one, and the gateway's tool names.
#[derive(Clone)]
pub struct Deferrals {
    tasks: Arc<TaskService>,
}

impl Deferrals {
    /// The metrics of the upstream whose calls these are.
    pub fn meter(&self) -> &crate::telemetry::Meter {
        self.tasks.meter()
    }

    pub fn new(tasks: Arc<TaskService>) -> Self {
        Self { tasks }
    }

    /// `--defer-after-ms`, if deferral is on.
    pub fn after(&self) -> Option<Duration> {
        self.tasks.settings.defer_after
    }

    /// The names of the gateway's tools for this upstream: `gateway_`-prefixed where the
    /// upstream has a tool of the name, which is then the upstream's to answer.
    pub async fn tool_names(&self, caller: &Caller<'_>) -> ToolNames {
        let upstream = self.tasks.upstream.as_ref();
        let [get, cancel] = self
            .tasks
            .tool_traits
            .has(upstream, caller, [GET_TASK_RESULT, CANCEL_TASK])
            .await;
        ToolNames::choose(|name| {
            (name == GET_TASK_RESULT && get) || (name == CANCEL_TASK && cancel)
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
        let watch = self.tasks.watchers.watch_task(task_id);
        loop {
            // Registered before the read, so a change in between is not missed.
            let changed = watch.changed();
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

/// The deferred result of a task still running.
pub fn deferred_of(task: &TaskRecord, tool: &str, names: &ToolNames, after: Duration) -> Value {
    deferred::deferred_result(
        tool,
        &task.task_id,
        task.status.as_str(),
        task.status_message.as_deref(),
        names,
        after.as_secs().max(1),
    )
}

/// The tool a task's call is of, from its stored params.
pub fn tool_of(task: &TaskRecord) -> String {
    serde_json::from_str::<Value>(task.request.get())
        .ok()
        .and_then(|params| params.get("name")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "tool".to_owned())
}

/// Why a failed task failed, in words.
pub fn failure_of(task: &TaskRecord) -> String {
    task.error
        .as_ref()
        .map(|error| error.message.clone())
        .or_else(|| task.status_message.clone())
        .unwrap_or_else(|| "no reason given".to_owned())
}
