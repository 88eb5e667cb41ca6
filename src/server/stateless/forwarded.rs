//! 2026-07-28 requests the gateway forwards to the upstream instead of making a task
//! of them (clients without the tasks extension, `forbidden` tools, every method the
//! gateway does not own), completed for the 2026 schema.
//!
//! - A request with `_meta.progressToken` or `_meta["io.modelcontextprotocol/logLevel"]`
//!   is answered on SSE: the call's progress under the client's token and its log
//!   messages at or above the client's level, then the result. Closing the stream
//!   cancels the call upstream.
//! - When the upstream asks for input (a session or stdio upstream's elicitation,
//!   sampling or roots request) in `tools/call`, `prompts/get` or `resources/read`, the
//!   call is held (`tasks::mrtr_bridge`) and the client gets an `InputRequiredResult`; its retry
//!   resumes the held call.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::wanted::Wanted;
use super::{Answer, Outcome, Request, caller_of, upstream_params};
use crate::server::Gateway;
use crate::server::reply::Body;
use crate::server::sse::keepalive::ProgressKeepAlive;
use crate::server::sse::{sse_event, sse_response_kept};
use crate::tasks::deferral::{Asked, Deferrals};
use crate::tasks::mrtr_bridge::{self, BridgedCall, MrtrBridge, Resumed};
use crate::upstream::forward::{self, Forwarded, How};
use crate::upstream::{Caller, Upstream, UpstreamEvent};
use mtg_protocol::jsonrpc::{self, ErrorObject};
use mtg_protocol::meta;
use mtg_protocol::names::method;
use mtg_protocol::upgrade;
use mtg_protocol::wire::ResultType;
use mtg_store::TaskRecord;

/// Where a bridged request goes and how long it may take.
#[derive(Clone)]
struct Route {
    pub upstream: Arc<dyn Upstream>,
    pub bridge: MrtrBridge,
    pub timeout: Option<Duration>,
    /// With `--defer-after-ms`, for a client without the tasks extension: where its
    /// deferred calls' answers and the gateway's tools come from.
    pub deferral: Option<Deferrals>,
    /// `--progress-keepalive-ms`.
    pub progress_keepalive: Option<crate::server::sse::keepalive::Every>,
}

/// The answer: a JSON-RPC body, or a response streaming one.
enum Answered {
    Json(Result<Value, ErrorObject>),
    Stream(Response<Body>),
}

/// Forwards a request the gateway does not own, or will not make a task of, to the
/// upstream; its answer as the client gets it.
pub(super) async fn serve(gateway: &Gateway, request: Request<'_>) -> Outcome {
    let (capabilities, auth) = caller_of(&request);
    let route = Route {
        upstream: gateway.upstream.clone(),
        bridge: gateway.bridge.clone(),
        timeout: gateway.upstream_timeout,
        deferral: gateway
            .deferrals
            .after()
            .filter(|_| !meta::declares_tasks(request.params.as_ref()))
            .map(|_| gateway.deferrals.clone()),
        progress_keepalive: gateway.progress_keepalive.clone(),
    };
    let call = BridgedCall {
        upstream_params: request.params.clone().map(upstream_params),
        client_params: request.params,
        method: request.method,
        capabilities,
        auth,
        principal: request.principal,
    };
    match answer_bridged(route, request.id.clone(), call).await {
        Answered::Json(result) => {
            let raw: Box<RawValue> = serde_json::value::to_raw_value(&result?)
                .map_err(|e| ErrorObject::internal(e.to_string()))?;
            Ok(jsonrpc::success_body(&request.id, &raw).into())
        }
        Answered::Stream(response) => Ok(Answer::Stream(response)),
    }
}

/// Answers the request `id`, owned (a streamed answer runs after the handler returned).
async fn answer_bridged(route: Route, id: Value, call: BridgedCall) -> Answered {
    if mrtr_bridge::resumes_held_call(call.client_params.as_ref()) {
        let params = call.client_params.clone().unwrap_or_default();
        let resumed = match route
            .bridge
            .resume(&call.principal, &call.method, &params)
            .await
        {
            Ok(Resumed::Reply(result)) => Ok(result),
            Ok(Resumed::StillRunning(task)) => Ok(still_running(&route, &call, &task).await),
            Err(e) => Err(e),
        };
        return Answered::Json(resumed.map(|mut result| {
            // A further round or a task keeps its own shape.
            let complete = !matches!(
                result.get("resultType").and_then(Value::as_str),
                Some("input_required" | "task")
            );
            if complete {
                upgrade::complete_result(&call.method, &mut result);
            }
            result
        }));
    }
    match Wanted::of(call.client_params.as_ref()) {
        Some(wanted) => Answered::Stream(streamed(route, id, call, wanted)),
        None => Answered::Json(answer(&route, call, None).await),
    }
}

/// Forwards the call; holds it if the upstream asks for input on the way.
async fn answer(
    route: &Route,
    call: BridgedCall,
    relay: Option<&mpsc::Sender<UpstreamEvent>>,
) -> Result<Value, ErrorObject> {
    let caller = Caller {
        capabilities: &call.capabilities,
        auth: call.auth.as_ref(),
        session: None,
    };
    let how = How {
        timeout: route.timeout,
        relay,
        hold: method::MAY_ASK_FOR_INPUT.contains(&call.method.as_str()),
    };
    let forwarded = forward::forward(
        route.upstream.as_ref(),
        &caller,
        &call.method,
        call.upstream_params.clone(),
        how,
    )
    .await?;
    match forwarded {
        Forwarded::Answer(answer) => {
            let mut result = answer?;
            upgrade::complete_result(&call.method, &mut result);
            if call.method == method::TOOLS_LIST
                && let Some(deferrals) = &route.deferral
                && let Some(listing) = deferrals.listing(&caller).await
            {
                listing.advertise(&mut result);
            }
            Ok(result)
        }
        Forwarded::AsksForInput {
            exchange,
            asked,
            later,
        } => route.bridge.hold(call, exchange, asked, later).await,
    }
}

/// A deferred call's answer to a retry that found it still running.
async fn still_running(route: &Route, call: &BridgedCall, task: &TaskRecord) -> Value {
    let Some(deferrals) = &route.deferral else {
        return json!(crate::tasks::render::task_result(task, ResultType::Task));
    };
    let caller = Caller {
        capabilities: &call.capabilities,
        auth: call.auth.as_ref(),
        session: None,
    };
    // The retry is of the deferred call itself, or of a `get_task_result` that asked.
    let asked = Asked::Retry(call.client_params.as_ref());
    deferrals.still_running(&caller, task, asked).await
}

/// The answer on SSE: the call's notifications the client asked for, then the result.
fn streamed(route: Route, id: Value, call: BridgedCall, wanted: Wanted) -> Response<Body> {
    let keepalive = ProgressKeepAlive::for_request(
        call.client_params.as_ref(),
        route.progress_keepalive.as_ref(),
    );
    let (events, stream) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let (notifications, mut heard) = mpsc::channel::<UpstreamEvent>(16);
        let forwarding = answer(&route, call, Some(&notifications));
        tokio::pin!(forwarding);
        let relay = |event: UpstreamEvent| {
            let UpstreamEvent::Notification { method, params } = event else {
                return None;
            };
            wanted.passes(&method, params.as_ref()).then(|| {
                let message = jsonrpc::notification_value(&method, params);
                sse_event(&serde_json::to_vec(&message).expect("JSON values serialize"))
            })
        };
        let answer = loop {
            tokio::select! {
                // Notifications are queued before the answer: they go first.
                biased;
                Some(event) = heard.recv() => {
                    if let Some(frame) = relay(event) {
                        // A client that left is noticed by the branch below.
                        let _ = events.send(frame).await;
                    }
                }
                answer = &mut forwarding => {
                    while let Ok(event) = heard.try_recv() {
                        if let Some(frame) = relay(event) {
                            let _ = events.send(frame).await;
                        }
                    }
                    break Some(answer);
                }
                // The client closed its stream.
                () = events.closed() => break None,
            }
        };
        let Some(answer) = answer else {
            // With the relay's receiver gone, the forward stops the call upstream
            // (`upstream::stop`), also while its response head has not come (a
            // JSON-response upstream sends it only when the call ends).
            drop(heard);
            let _ = forwarding.await;
            return;
        };
        let last = match answer {
            Ok(result) => jsonrpc::success_body_of(&id, &result),
            Err(error) => jsonrpc::error_body(Some(&id), &error),
        };
        // The client may have gone; then there is nobody to tell.
        let _ = events.send(sse_event(&last)).await;
    });
    sse_response_kept(stream, keepalive)
}
