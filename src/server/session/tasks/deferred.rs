//! Deferred calls of session clients, as their transport carries them (the policy, the
//! gateway's tools and the "still running" answer are `tasks::deferral`'s): a plain
//! `tools/call` of a gateway-served session (`--defer-after-ms`; a stdio or 2026-07-28
//! upstream), or of a tool the upstream runs only as its own task in any session, runs
//! as a task of the session, answered on SSE like a `tasks/result` stream (the upstream's
//! questions as server-to-client requests, answered by POSTed responses) that ends with
//! the call's result within the budget and with a deferred result past it; the gateway's
//! `get_task_result` is the same stream, and its answer the session's shape.

use std::sync::Arc;
use std::time::Duration;

use http::Response;
use serde_json::Value;
use tokio::sync::mpsc;

use super::SessionCaller;
use super::results::input_request;
use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::server::sse::keepalive::ProgressKeepAlive;
use crate::server::sse::{sse_event, sse_response_kept};
use crate::tasks::deferral::{Asked, Deferrals, GatewayTool, failure_of, not_completed, tool_of};
use crate::tasks::{Started, TaskService};
use mtg_protocol::jsonrpc::{self, ErrorObject};
use mtg_protocol::names::method;
use mtg_protocol::task_support::TaskSupport;
use mtg_protocol::wire::TaskStatus;
use mtg_protocol::wire::deferred::{self, Fetch};
use mtg_protocol::wire::dialect_2025::RELATED_TASK;
use mtg_store::TaskRecord;

/// Room for events the client has not read yet.
const BACKLOG: usize = 64;

/// Serves a plain `tools/call` of the session that the gateway runs as a task: with
/// deferral on, any such call and the gateway's own tools; with it off, a call of a
/// tool the upstream runs only as its own task. `None` for every other call (a
/// task-augmented one, a tool whose policy is `required` or `forbidden`).
pub(crate) async fn serve(
    gateway: &Gateway,
    session: &SessionCaller,
    id: &Value,
    params: Option<&Value>,
) -> Option<Response<Body>> {
    let params = params?;
    let tool = params.get("name")?.as_str()?;
    let policy = gateway.policies.policy_of(tool);
    if params.get("task").is_some() || policy != TaskSupport::Optional {
        return None;
    }
    if let Some(answer) = gateway_tool(gateway, session, id, params).await {
        return Some(answer);
    }
    let limit = gateway
        .deferrals
        .answer_within(&session.caller(), tool)
        .await?;
    Some(call(gateway, session, id, params, tool, limit).await)
}

/// Answers a call of the gateway's `get_task_result` or `cancel_task` (deferral on);
/// `None` for any other tool. For the sessions passed through too (`passthrough::watched`).
pub(crate) async fn gateway_tool(
    gateway: &Gateway,
    session: &SessionCaller,
    id: &Value,
    params: &Value,
) -> Option<Response<Body>> {
    let asked = gateway
        .deferrals
        .gateway_tool(&session.caller(), &session.principal, params)
        .await?;
    Some(match asked {
        GatewayTool::Answered(result) => tool_answer(id, result),
        GatewayTool::GetResult(fetch) => get_result(gateway, session, id, fetch).await,
    })
}

/// Runs the call as a task of the session and answers it on SSE within `after`.
pub(crate) async fn call(
    gateway: &Gateway,
    session: &SessionCaller,
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

/// `get_task_result`: the same stream as the call's, for `fetch.wait`.
async fn get_result(
    gateway: &Gateway,
    session: &SessionCaller,
    id: &Value,
    fetch: Fetch<'_>,
) -> Response<Body> {
    let Ok(task) = gateway.tasks.get(fetch.task_id, &session.principal).await else {
        return tool_answer(id, deferred::unknown_task(fetch.task_id));
    };
    let answering = Answering {
        id: id.clone(),
        task_id: fetch.task_id.to_owned(),
        tool: tool_of(&task),
        limit: fetch.wait,
        purpose: Purpose::GetResult {
            attempt: fetch.attempt,
        },
        progress: None,
        keepalive: None,
    };
    stream(gateway, session, answering)
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

fn stream(gateway: &Gateway, session: &SessionCaller, answering: Answering) -> Response<Body> {
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
            None => past_budget(&tasks, &deferrals, &session, &task_id, &tool, purpose).await,
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
async fn past_budget(
    tasks: &Arc<TaskService>,
    deferrals: &Deferrals,
    session: &SessionCaller,
    task_id: &str,
    tool: &str,
    purpose: Purpose,
) -> Result<Value, ErrorObject> {
    let task = tasks.get(task_id, &session.principal).await?;
    if task.status.is_terminal() {
        return answer_of(&task, purpose);
    }
    let caller = session.caller();
    Ok(match purpose {
        Purpose::Call => deferrals.defer(&caller, &task, tool).await,
        Purpose::GetResult { attempt } => {
            let asked = Asked::Fetch { attempt };
            deferrals.still_running(&caller, &task, asked).await
        }
    })
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
        _ => Ok(not_completed(task)),
    }
}
