//! Deferred calls of 2026-07-28 clients without the tasks extension, as their transport
//! carries them (the policy, the gateway's tools and the "still running" answer are
//! `tasks::deferral`'s): their `tools/call` runs as a task of the caller, answered as if
//! forwarded when it ends within the budget and with a deferred result otherwise, in
//! JSON or on SSE; the gateway's `get_task_result` waits, then answers in 2026-07-28
//! shapes (a question as an MRTR round).

use std::time::Duration;

use serde_json::Value;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::wanted::Wanted;
use super::{Answer, Outcome, Request, caller_of, upstream_params};
use crate::server::Gateway;
use crate::server::sse::keepalive::ProgressKeepAlive;
use crate::server::sse::{sse_event, sse_response_kept};
use crate::tasks::NotificationRelay;
use crate::tasks::deferral::{Asked, Deferrals, GatewayTool, not_completed};
use crate::tasks::{Started, ToolCall};
use crate::upstream::Caller;
use mtg_protocol::jsonrpc::{self, ErrorObject};
use mtg_protocol::names::method;
use mtg_protocol::upgrade;
use mtg_protocol::wire::TaskStatus;
use mtg_protocol::wire::deferred::{self, Fetch};

/// Serves a call of one of the gateway's tools; `None` when the tool is the upstream's.
pub(super) async fn gateway_tool(gateway: &Gateway, request: &Request<'_>) -> Option<Outcome> {
    let params = request.params.as_ref()?;
    let (capabilities, auth) = caller_of(request);
    let caller = Caller {
        capabilities: &capabilities,
        auth: auth.as_ref(),
        session: None,
    };
    let asked = gateway
        .deferrals
        .gateway_tool(&caller, &request.principal, params)
        .await?;
    let result = match asked {
        GatewayTool::Answered(result) => Ok(result),
        GatewayTool::GetResult(fetch) => get_result(gateway, request, &caller, fetch).await,
    };
    Some(result.map(|mut result| {
        upgrade::complete_result(method::TOOLS_CALL, &mut result);
        jsonrpc::success_body_of(&request.id, &result).into()
    }))
}

/// Runs the call as a task with `after` as its promotion budget.
pub(super) async fn call(
    gateway: &Gateway,
    request: Request<'_>,
    tool: &str,
    after: Duration,
) -> Outcome {
    let call = tool_call(&request, None)?;
    let started = gateway.tasks.start_deferrable(call, after).await;
    // Only a deferred answer needs the caller (for the names of the gateway's tools).
    let (capabilities, auth) = caller_of(&request);
    let caller = Caller {
        capabilities: &capabilities,
        auth: auth.as_ref(),
        session: None,
    };
    let result = answer_of(started, tool, &gateway.deferrals, &caller).await?;
    Ok(jsonrpc::success_body_of(&request.id, &result).into())
}

/// The same, answered on SSE because the client asked for progress or log messages: the
/// runner relays the upstream's notifications while the caller waits, as a forwarded
/// call's stream carries them, and the stream ends with the result, the MRTR round or
/// the deferred result. A client that closes the stream within the budget cancels the
/// call.
pub(super) fn call_streamed(
    gateway: &Gateway,
    request: Request<'_>,
    tool: &str,
    after: Duration,
    wanted: Wanted,
) -> Outcome {
    let keepalive = ProgressKeepAlive::for_request(
        request.params.as_ref(),
        gateway.progress_keepalive.as_ref(),
    );
    let (relay, mut heard) = mpsc::channel(RELAYED);
    let (capabilities, auth) = caller_of(&request);
    let call = tool_call(&request, Some(relay))?;
    let tasks = gateway.tasks.clone();
    let deferrals = gateway.deferrals.clone();
    let (id, tool) = (request.id.clone(), tool.to_owned());
    let (events, stream) = mpsc::channel::<Bytes>(RELAYED);
    tokio::spawn(async move {
        let started = tasks.start_deferrable(call, after);
        tokio::pin!(started);
        let started = loop {
            tokio::select! {
                // Notifications are queued before the end: they go first.
                biased;
                Some((method, params)) = heard.recv() => {
                    if let Some(frame) = wanted.relayed_frame(&method, params) {
                        let _ = events.send(frame).await;
                    }
                }
                started = &mut started => {
                    while let Ok((method, params)) = heard.try_recv() {
                        if let Some(frame) = wanted.relayed_frame(&method, params) {
                            let _ = events.send(frame).await;
                        }
                    }
                    break started;
                }
                // Dropping the start within the budget cancels the task (`Unclaimed`).
                () = events.closed() => return,
            }
        };
        let caller = Caller {
            capabilities: &capabilities,
            auth: auth.as_ref(),
            session: None,
        };
        let last = match answer_of(started, &tool, &deferrals, &caller).await {
            Ok(result) => jsonrpc::success_body_of(&id, &result),
            Err(error) => jsonrpc::error_body(Some(&id), &error),
        };
        let _ = events.send(sse_event(&last)).await;
    });
    Ok(Answer::Stream(sse_response_kept(stream, keepalive)))
}

/// Room for relayed notifications the client has not read yet.
const RELAYED: usize = 16;

/// The call as its task's runner gets it; `relay` hears the upstream's notifications.
fn tool_call(
    request: &Request<'_>,
    relay: Option<NotificationRelay>,
) -> Result<ToolCall, ErrorObject> {
    let (capabilities, auth) = caller_of(request);
    let params = upstream_params(request.params.clone().unwrap_or_default());
    Ok(ToolCall {
        params: serde_json::value::to_raw_value(&params)
            .map_err(|e| ErrorObject::internal(format!("tool call params: {e}")))?,
        capabilities,
        auth,
        principal: request.principal.clone(),
        session: None,
        ttl_ms: None,
        relay,
    })
}

/// What the client gets once the deferrable start returned: the call's result or its
/// MRTR round (within the budget), else the deferred result.
async fn answer_of(
    started: Result<Started, ErrorObject>,
    tool: &str,
    deferrals: &Deferrals,
    caller: &Caller<'_>,
) -> Result<Value, ErrorObject> {
    let mut result = match started? {
        Started::Inline(answer) => serde_json::from_str::<Value>(answer?.get())
            .map_err(|e| ErrorObject::internal(format!("the upstream's result: {e}")))?,
        Started::Task(task) => deferrals.defer(caller, &task, tool).await,
    };
    // An MRTR round keeps its own shape, as a forwarded call's does.
    if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
        upgrade::complete_result(method::TOOLS_CALL, &mut result);
    }
    Ok(result)
}

/// `get_task_result`: waits up to `waitSeconds` (the budget without one, at most
/// `--deferred-max-wait-ms`) for the task, then answers with its result, its failure,
/// its question (MRTR) or another deferred result naming the next call.
async fn get_result(
    gateway: &Gateway,
    request: &Request<'_>,
    caller: &Caller<'_>,
    fetch: Fetch<'_>,
) -> Result<Value, ErrorObject> {
    let task_id = fetch.task_id;
    let Ok(task) = gateway
        .deferrals
        .wait(task_id, &request.principal, fetch.wait)
        .await
    else {
        return Ok(deferred::unknown_task(task_id));
    };
    Ok(match task.status {
        TaskStatus::Completed => match &task.result {
            Some(result) => serde_json::from_str(result.get())
                .map_err(|e| ErrorObject::internal(format!("the stored result: {e}")))?,
            None => deferred::error_result("The call completed without a result."),
        },
        TaskStatus::Failed | TaskStatus::Cancelled => not_completed(&task),
        // The upstream asks something: the client answers it as an MRTR round of this
        // very request, and its retry carries the answer to the task.
        TaskStatus::InputRequired => gateway.bridge.ask(
            &task,
            &request.principal,
            method::TOOLS_CALL,
            request.params.as_ref(),
        ),
        TaskStatus::Working => {
            let asked = Asked::Fetch {
                attempt: fetch.attempt,
            };
            gateway.deferrals.still_running(caller, &task, asked).await
        }
    })
}
