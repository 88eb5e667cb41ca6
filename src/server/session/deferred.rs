//! Deferred results for 2025-xx session clients the gateway serves itself
//! (`--defer-after-ms`; a stdio or 2026-07-28 upstream): a plain `tools/call` runs as a
//! task of the session, answered on SSE like a `tasks/result` stream (the upstream's
//! questions as server-to-client requests, answered by POSTed responses) that ends with
//! the call's result within the budget and with a deferred result past it; the gateway's
//! `get_task_result` is the same stream, `cancel_task` cancels.

use std::sync::Arc;
use std::time::Duration;

use http::Response;
use serde_json::Value;
use tokio::sync::mpsc;

use super::tasks::TaskSession;
use super::tasks::results::input_request;
use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::server::sse::keepalive::ProgressKeepAlive;
use crate::server::sse::{sse_event, sse_response_kept};
use crate::tasks::deferral::{Asked, Deferrals, failure_of, tool_of};
use crate::tasks::{Started, TaskService};
use crate::upstream::Caller;
use mtg_protocol::jsonrpc::{self, ErrorObject};
use mtg_protocol::names::method;
use mtg_protocol::task_support::TaskSupport;
use mtg_protocol::wire::TaskStatus;
use mtg_protocol::wire::deferred::{self, CANCEL_TASK, GET_TASK_RESULT, ToolNames, Waits};
use mtg_protocol::wire::dialect_2025::RELATED_TASK;
use mtg_store::TaskRecord;

/// Room for events the client has not read yet.
const BACKLOG: usize = 64;

/// Serves a plain `tools/call` of the session that the gateway runs as a task: with
/// deferral on, any such call and the gateway's own tools; with it off, a call of a
/// tool the upstream runs only as its own task. `None` for every other call (a
/// task-augmented one, a tool whose policy is `required` or `forbidden`).
pub async fn serve(
    gateway: &Gateway,
    session: &TaskSession,
    id: &Value,
    params: Option<&Value>,
) -> Option<Response<Body>> {
    let params = params?;
    let tool = params.get("name")?.as_str()?;
    let policy = gateway.policies.policy_of(tool);
    if params.get("task").is_some() || policy != TaskSupport::Optional {
        return None;
    }
    if let Some(waits) = gateway.deferrals.waits()
        && let Some(answer) = gateway_tool(gateway, session, id, params, waits).await
    {
        return Some(answer);
    }
    let caller = Caller {
        capabilities: &session.capabilities,
        auth: session.auth.as_ref(),
        session: None,
    };
    let limit = gateway.deferrals.answer_within(&caller, tool).await?;
    Some(call(gateway, session, id, params, tool, limit).await)
}

/// Answers a call of the gateway's `get_task_result` or `cancel_task`; `None` for any
/// other tool. For the sessions passed through too (`super::watched`).
pub async fn gateway_tool(
    gateway: &Gateway,
    session: &TaskSession,
    id: &Value,
    params: &Value,
    waits: Waits,
) -> Option<Response<Body>> {
    let tool = params.get("name")?.as_str()?;
    if !deferred::may_be_gateway_tool(tool) {
        return None;
    }
    let names = tool_names(gateway, session).await;
    if tool == names.get_result {
        return Some(get_result(gateway, session, id, params, &names, waits).await);
    }
    if tool == names.cancel {
        return Some(cancel(gateway, session, id, params).await);
    }
    None
}

/// The names of the gateway's tools for this session's upstream.
pub async fn tool_names(gateway: &Gateway, session: &TaskSession) -> ToolNames {
    let caller = Caller {
        capabilities: &session.capabilities,
        auth: session.auth.as_ref(),
        session: None,
    };
    gateway.deferrals.tool_names(&caller).await
}

/// Runs the call as a task of the session and answers it on SSE within `after`.
pub(super) async fn call(
    gateway: &Gateway,
    session: &TaskSession,
    id: &Value,
    params: &Value,
    tool: &str,
    after: Duration,
) -> Response<Body> {
    // The upstream's progress reaches the client under its own token while it waits.
    let token = params.pointer("/_meta/progressToken").cloned();
    let (relay, heard) = mpsc::channel(BACKLOG);
    let call = match session.tool_call(params, false, None, token.is_some().then_some(relay)) {
        Ok(call) => call,
        Err(error) => return reply::error(Some(id), &error),
    };
    // A session client answers no MRTR round: its task starts at once, and the stream
    // below carries the upstream's questions and the end.
    let task = match gateway.tasks.start_task(call).await {
        Ok(Started::Task(task)) => task,
        Ok(Started::Inline(answer)) => {
            return match answer {
                Ok(result) => reply::json(http::StatusCode::OK, jsonrpc::success_body(id, &result)),
                Err(error) => reply::error(Some(id), &error),
            };
        }
        Err(error) => return reply::error(Some(id), &error),
    };
    let keepalive =
        ProgressKeepAlive::for_request(Some(params), gateway.progress_keepalive.as_ref());
    let progress = token.map(|token| Progress { token, heard });
    let answering = Answering {
        id: id.clone(),
        task_id: task.task_id.clone(),
        tool: tool.to_owned(),
        limit: after,
        purpose: Purpose::Call,
        progress,
        keepalive,
    };
    stream(gateway, session, answering)
}

/// The upstream's progress of a call whose client asked for it, and the client's token.
struct Progress {
    token: Value,
    heard: mpsc::Receiver<(String, Option<Value>)>,
}

impl Progress {
    /// The next progress notification as the client's SSE frame; `None` once the runner
    /// is gone.
    async fn next(&mut self) -> Option<bytes::Bytes> {
        loop {
            let (name, mut params) = self.heard.recv().await?;
            if name != method::PROGRESS {
                continue;
            }
            if let Some(object) = params.as_mut().and_then(Value::as_object_mut) {
                object.insert("progressToken".into(), self.token.clone());
            }
            let message = jsonrpc::notification_value(&name, params);
            return Some(sse_event(&serde_json::to_vec(&message).unwrap_or_default()));
        }
    }
}

/// What the stream answers for.
#[derive(Clone, Copy, PartialEq)]
enum Purpose {
    /// The call itself: its failure is the call's error, as without deferral, and a
    /// client that leaves within the budget cancels it (it never learned the id).
    Call,
    /// `get_task_result` with the `attempt` it carried: a failure is a result saying so.
    GetResult { attempt: Option<u64> },
}

async fn get_result(
    gateway: &Gateway,
    session: &TaskSession,
    id: &Value,
    params: &Value,
    names: &ToolNames,
    waits: Waits,
) -> Response<Body> {
    let fetch = match deferred::fetch_arguments(params.get("arguments"), &names.get_result, waits) {
        Ok(fetch) => fetch,
        Err(refusal) => return tool_answer(id, refusal),
    };
    let (task_id, limit) = (fetch.task_id, fetch.wait);
    gateway.tasks.meter().gateway_tool_called(GET_TASK_RESULT);
    let Ok(task) = gateway.tasks.get(task_id, &session.principal).await else {
        return tool_answer(id, deferred::unknown_task(task_id));
    };
    let tool = tool_of(&task);
    let answering = Answering {
        id: id.clone(),
        task_id: task_id.to_owned(),
        tool,
        limit,
        purpose: Purpose::GetResult {
            attempt: fetch.attempt,
        },
        progress: None,
        keepalive: None,
    };
    stream(gateway, session, answering)
}

async fn cancel(
    gateway: &Gateway,
    session: &TaskSession,
    id: &Value,
    params: &Value,
) -> Response<Body> {
    let task_id = match deferred::task_id_argument(params.get("arguments"), CANCEL_TASK) {
        Ok(task_id) => task_id,
        Err(refusal) => return tool_answer(id, refusal),
    };
    gateway.tasks.meter().gateway_tool_called(CANCEL_TASK);
    tool_answer(
        id,
        match gateway.tasks.cancel(task_id, &session.principal).await {
            Ok(()) => deferred::text_result(&format!(
                "Task {task_id} is cancelled (or had already ended); its tool call stops."
            )),
            Err(_) => deferred::unknown_task(task_id),
        },
    )
}

fn tool_answer(id: &Value, result: Value) -> Response<Body> {
    reply::json(http::StatusCode::OK, jsonrpc::success_body_of(id, &result))
}

/// An SSE stream that delivers the task's questions as they come and ends with its
/// answer, or with a deferred result once `limit` passed.
/// One answer stream: for which request, of which task, for how long and what.
struct Answering {
    id: Value,
    task_id: String,
    tool: String,
    limit: Duration,
    purpose: Purpose,
    progress: Option<Progress>,
    keepalive: Option<ProgressKeepAlive>,
}

fn stream(gateway: &Gateway, session: &TaskSession, answering: Answering) -> Response<Body> {
    let Answering {
        id,
        task_id,
        tool,
        limit,
        purpose,
        mut progress,
        keepalive,
    } = answering;
    let (tx, rx) = mpsc::channel(BACKLOG);
    let tasks = gateway.tasks.clone();
    let dialect = gateway.dialect.clone();
    let deferrals = gateway.deferrals.clone();
    let session = session.clone();
    tokio::spawn(async move {
        let deliver = |key: &str, request: &mtg_protocol::wire::InputRequest| {
            tx.try_send(sse_event(&input_request(&task_id, key, request)))
                .is_ok()
        };
        let waiting = dialect.wait_for_end(&task_id, &session.principal, deliver);
        tokio::pin!(waiting);
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        let ended = loop {
            tokio::select! {
                biased;
                Some(frame) = async { progress.as_mut()?.next().await } => {
                    let _ = tx.send(frame).await;
                }
                ended = &mut waiting => break Some(ended),
                () = &mut deadline => break None,
                () = tx.closed() => {
                    if purpose == Purpose::Call {
                        let _ = tasks.cancel(&task_id, &session.principal).await;
                    }
                    return;
                }
            }
        };
        let answer = match ended {
            Some(Ok(Some(task))) => answer_of(&task, purpose),
            Some(Ok(None)) => return,
            Some(Err(error)) => Err(error),
            None => still_running(&tasks, &deferrals, &session, &task_id, &tool, purpose).await,
        };
        let body = match answer {
            Ok(result) => jsonrpc::success_body_of(&id, &result),
            Err(error) => jsonrpc::error_body(Some(&id), &error),
        };
        let _ = tx.send(sse_event(&body)).await;
    });
    sse_response_kept(rx, keepalive)
}

/// The answer once the budget passed: the end if it came just now, else a deferred
/// result.
async fn still_running(
    tasks: &Arc<TaskService>,
    deferrals: &Deferrals,
    session: &TaskSession,
    task_id: &str,
    tool: &str,
    purpose: Purpose,
) -> Result<Value, ErrorObject> {
    let task = tasks.get(task_id, &session.principal).await?;
    if task.status.is_terminal() {
        return answer_of(&task, purpose);
    }
    if purpose == Purpose::Call {
        tasks.call_deferred(task_id);
    }
    let caller = Caller {
        capabilities: &session.capabilities,
        auth: session.auth.as_ref(),
        session: None,
    };
    let asked = match purpose {
        Purpose::Call => Asked::Call(tool),
        Purpose::GetResult { attempt } => Asked::Fetch { attempt },
    };
    Ok(deferrals.still_running(&caller, &task, asked).await)
}

/// An ended task as the client's answer: the upstream's own result, as without deferral.
fn answer_of(task: &TaskRecord, purpose: Purpose) -> Result<Value, ErrorObject> {
    match task.status {
        TaskStatus::Completed => {
            let raw = task.result.as_deref().map_or("{}", |r| r.get());
            let mut result: Value = serde_json::from_str(raw)
                .map_err(|e| ErrorObject::internal(format!("stored result unreadable: {e}")))?;
            if let Some(object) = result.as_object_mut() {
                // 2026-07-28's field; a session client's result has none.
                object.remove("resultType");
                if let Some(meta) = object.get_mut("_meta").and_then(Value::as_object_mut) {
                    meta.remove(RELATED_TASK);
                }
            }
            Ok(result)
        }
        TaskStatus::Failed if purpose == Purpose::Call => Err(task
            .error
            .clone()
            .unwrap_or_else(|| ErrorObject::internal(failure_of(task)))),
        TaskStatus::Failed => Ok(deferred::error_result(&format!(
            "The tool call failed: {}",
            failure_of(task)
        ))),
        _ => Ok(deferred::error_result(&format!(
            "The tool call was cancelled: {}",
            task.status_message.as_deref().unwrap_or("cancelled")
        ))),
    }
}
