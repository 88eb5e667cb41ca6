//! The gateway's two tools for deferred calls, `get_task_result` and `cancel_task`: the
//! names they go by for an upstream, listing them, telling a call of one apart (its
//! arguments checked), cancelling, and a finished task's answer in words. Their shapes
//! are `mtg_protocol::wire::deferred`'s; waiting for a result and answering it are the
//! server paths' (a session's SSE stream, a 2026-07-28 JSON answer).

use serde_json::Value;

use super::Deferrals;
use crate::upstream::Caller;
use mtg_protocol::wire::TaskStatus;
use mtg_protocol::wire::deferred::{self, CANCEL_TASK, Fetch, GET_TASK_RESULT, ToolNames, Waits};
use mtg_store::TaskRecord;

/// What a `tools/call` of one of the gateway's tools asks for.
pub enum GatewayTool<'a> {
    /// `get_task_result`, its arguments checked: which task, how long to wait for it,
    /// and the `attempt` it carried.
    GetResult(Fetch<'a>),
    /// Answered already: the result of `cancel_task`, or of a call refused for its
    /// arguments.
    Answered(Value),
}

/// With deferral on, what `tools/list` adds: the gateway's two tools, under the names
/// they go by, and output schemas that admit a deferred result.
#[derive(Debug, Clone)]
pub struct Listing {
    waits: Waits,
    names: ToolNames,
}

impl Listing {
    /// Adds the gateway's tools to a `tools/list` result (`wire::deferred::advertise`).
    pub fn advertise(&self, result: &mut Value) {
        deferred::advertise(result, &self.names, self.waits);
    }
}

impl Deferrals {
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

    /// What `tools/list` adds for `caller`, if deferral is on.
    pub async fn listing(&self, caller: &Caller<'_>) -> Option<Listing> {
        let waits = self.waits()?;
        let names = self.tool_names(caller).await;
        Some(Listing { waits, names })
    }

    /// A call of one of the gateway's tools (`params` of a `tools/call`) by `caller`, for
    /// `principal`: a `get_task_result` to answer, or the answer of any other. `None`
    /// when deferral is off or the tool is the upstream's.
    pub async fn gateway_tool<'a>(
        &self,
        caller: &Caller<'_>,
        principal: &str,
        params: &'a Value,
    ) -> Option<GatewayTool<'a>> {
        let waits = self.waits()?;
        let tool = params.get("name")?.as_str()?;
        if !deferred::may_be_gateway_tool(tool) {
            return None;
        }
        let arguments = params.get("arguments");
        let names = self.tool_names(caller).await;
        if tool == names.get_result {
            return Some(
                match deferred::fetch_arguments(arguments, &names.get_result, waits) {
                    Ok(fetch) => {
                        self.tasks
                            .meter()
                            .calls()
                            .gateway_tool_called(GET_TASK_RESULT);
                        GatewayTool::GetResult(fetch)
                    }
                    Err(refusal) => GatewayTool::Answered(refusal),
                },
            );
        }
        if tool == names.cancel {
            let result = match deferred::task_id_argument(arguments, CANCEL_TASK) {
                Ok(task_id) => self.cancel_task(task_id, principal).await,
                Err(refusal) => refusal,
            };
            return Some(GatewayTool::Answered(result));
        }
        None
    }

    /// `cancel_task`: cancels the task; the upstream hears of it (`upstream::stop`).
    async fn cancel_task(&self, task_id: &str, principal: &str) -> Value {
        self.tasks.meter().calls().gateway_tool_called(CANCEL_TASK);
        match self.tasks.cancel(task_id, principal).await {
            Ok(()) => deferred::text_result(&format!(
                "Task {task_id} is cancelled (or had already ended); its tool call stops."
            )),
            Err(_) => deferred::unknown_task(task_id),
        }
    }
}

/// A task that ended without completing, as `get_task_result` tells a model: its failure
/// or its cancellation, in words (`isError`).
pub fn not_completed(task: &TaskRecord) -> Value {
    match task.status {
        TaskStatus::Failed => {
            deferred::error_result(&format!("The tool call failed: {}", failure_of(task)))
        }
        _ => deferred::error_result(&format!(
            "The tool call was cancelled: {}",
            task.status_message.as_deref().unwrap_or("cancelled")
        )),
    }
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
