//! 2026-07-28 (stateless) requests: the methods the gateway owns, and the bridge to the
//! 2025-xx session upstream for everything else.

mod deferred;
mod forwarded;
pub(super) mod listen;
mod wanted;

use http::request::Parts;
use http::{HeaderMap, HeaderValue, Response, header};
use mtg_protocol::names::method;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::tasks::policy::CallPlan;
use crate::tasks::{Started, ToolCall, render};
use crate::upstream::Caller;
use mtg_protocol::jsonrpc::{self, ErrorObject, Message, code};
use mtg_protocol::names::STATELESS_VERSION;
use mtg_protocol::task_support::TaskSupport;
use mtg_protocol::wire::{self, ResultType, TaskIdParams, UpdateTaskParams};
use mtg_protocol::{headers, meta};

/// A 2026-07-28 message, as `server::generation::classify` found it: checks its headers and
/// `_meta`, then serves it.
pub(super) async fn serve(gateway: &Gateway, parts: &Parts, message: Message) -> Response<Body> {
    let (id, method, params) = match message {
        Message::Request { id, method, params } => (id, method, params),
        // Stateless clients cancel by closing the stream; their notifications end here.
        Message::Notification { .. } => return reply::accepted(),
        Message::Response { id, .. } => {
            return reply::error(
                Some(&id),
                &ErrorObject::new(
                    code::INVALID_REQUEST,
                    "clients must not send JSON-RPC responses",
                ),
            );
        }
    };
    let span = tracing::Span::current();
    span.record("method", method.as_str());
    if !parts.headers.contains_key("traceparent") {
        crate::telemetry::traces::continue_from_meta(&span, params.as_ref());
    }
    if let Err(error) = headers::validate(
        &parts.headers,
        &method,
        params.as_ref(),
        STATELESS_VERSION,
        gateway.edge.strict_headers,
    ) {
        return reply::error(Some(&id), &error);
    }
    if meta::client_capabilities(params.as_ref()).is_none() {
        return reply::bad_request(
            Some(&id),
            &ErrorObject::invalid_params(format!(
                "params._meta[\"{}\"] is required in {STATELESS_VERSION} requests",
                meta::META_CLIENT_CAPABILITIES
            )),
        );
    }
    let principal = gateway.edge.principal(parts);
    let request = Request {
        id,
        method,
        params,
        parts,
        principal,
    };
    handle(gateway, request).await
}

/// One 2026-07-28 request, parsed and with its headers checked.
pub(super) struct Request<'a> {
    pub id: Value,
    pub method: String,
    pub params: Option<Value>,
    pub parts: &'a Parts,
    pub principal: String,
}

/// `tools/call` and forwarded requests are boxed: this future is copied at each await up
/// to hyper's box, and their 3–4 KB of state would make every poll pay for it.
pub(super) async fn handle(gateway: &Gateway, request: Request<'_>) -> Response<Body> {
    let id = request.id.clone();
    let outcome = match request.method.as_str() {
        method::SERVER_DISCOVER => discover(gateway, &request).await,
        method::TOOLS_CALL => Box::pin(tools_call(gateway, request)).await,
        method::TASKS_GET | method::TASKS_UPDATE | method::TASKS_CANCEL => {
            tasks_method(gateway, &request).await
        }
        // The prefix is the extension's: nothing under it reaches the upstream.
        other if other.starts_with("tasks/") => Err(ErrorObject::new(
            code::METHOD_NOT_FOUND,
            format!(
                "{other} is not a method of the tasks extension for 2026-07-28: use tasks/get, tasks/update or tasks/cancel"
            ),
        )),
        method::SUBSCRIPTIONS_LISTEN => {
            crate::server::stateless::listen::listen(crate::server::stateless::listen::Listen {
                tasks: &gateway.tasks,
                followers: &gateway.followers,
                upstream: &gateway.upstream,
                id: &request.id,
                params: request.params.as_ref(),
                principal: &request.principal,
                auth: authorization(&request.parts.headers),
                closing: gateway.closing.clone(),
            })
            .await
            .map(Answer::Stream)
        }
        _ => Box::pin(forwarded::serve(gateway, request)).await,
    };
    match outcome {
        Ok(Answer::Json(body)) => reply::json(http::StatusCode::OK, body),
        Ok(Answer::Stream(response)) => response,
        Err(error) => reply::error(Some(&id), &error),
    }
}

/// A JSON-RPC response body, or an SSE stream that ends with one.
enum Answer {
    Json(Vec<u8>),
    Stream(Response<Body>),
}

impl From<Vec<u8>> for Answer {
    fn from(body: Vec<u8>) -> Self {
        Answer::Json(body)
    }
}

type Outcome = Result<Answer, ErrorObject>;

async fn discover(gateway: &Gateway, request: &Request<'_>) -> Outcome {
    let (capabilities, auth) = caller_of(request);
    let caller = Caller {
        capabilities: &capabilities,
        auth: auth.as_ref(),
        session: None,
    };
    let result = gateway.upstream.discover_result(&caller).await?;
    Ok(jsonrpc::success_body_of(&request.id, &result).into())
}

async fn tools_call(gateway: &Gateway, request: Request<'_>) -> Outcome {
    let params = request.params.as_ref();
    let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Err(ErrorObject::invalid_params(
            "tools/call needs params.name, the tool to call",
        ));
    };
    // A retry of a call asked within the promotion budget, or of a held call.
    if crate::tasks::mrtr_bridge::resumes_held_call(params) {
        return forwarded::serve(gateway, request).await;
    }
    let defer_after = gateway
        .deferrals
        .after()
        .filter(|_| !meta::declares_tasks(params));
    if defer_after.is_some()
        && let Some(answered) = deferred::gateway_tool(gateway, &request).await
    {
        return answered;
    }
    // The client must mirror the arguments the tool annotates (SEP-2243); a load
    // balancer may have routed on those headers.
    let (capabilities, auth) = caller_of(&request);
    let caller = Caller {
        capabilities: &capabilities,
        auth: auth.as_ref(),
        session: None,
    };
    if let Some(annotations) = gateway.upstream.tool_annotations(&caller, tool).await {
        headers::validate_params(
            &request.parts.headers,
            &annotations,
            params.and_then(|p| p.get("arguments")),
            gateway.edge.strict_headers,
        )?;
    }
    let declared = meta::declares_tasks(params);
    match gateway.policies.plan(tool, declared) {
        CallPlan::RejectMissingCapability => Err(ErrorObject::new(
            code::MISSING_REQUIRED_CLIENT_CAPABILITY,
            format!("tool {tool:?} runs only as a task: declare the io.modelcontextprotocol/tasks extension"),
        )
        .with_data(wire::missing_tasks_capability_data())),
        // Any tool but a `forbidden` one runs as the caller's task, answered on the
        // call, with deferral on and when the upstream runs it only as its own task
        // (the call could not be forwarded as it came).
        CallPlan::Inline => {
            let budget = match gateway.policies.policy_of(tool) {
                TaskSupport::Forbidden => None,
                _ => gateway.deferrals.answer_within(&caller, tool).await,
            };
            let tool = tool.to_owned();
            call_inline(gateway, request, &tool, budget).await
        }
        CallPlan::Task => start_task(gateway, request, capabilities, auth).await,
    }
}

/// A call the client gets the answer of on the call: run as its task within `budget`
/// (`deferred.rs`: deferral on, or a tool the upstream runs only as its own task), else
/// forwarded as it came. A `forbidden` tool is never a task, deferred or not.
async fn call_inline(
    gateway: &Gateway,
    request: Request<'_>,
    tool: &str,
    budget: Option<std::time::Duration>,
) -> Outcome {
    let Some(after) = budget else {
        return forwarded::serve(gateway, request).await;
    };
    match wanted::Wanted::of(request.params.as_ref()) {
        None => deferred::call(gateway, request, tool, after).await,
        Some(wanted) => deferred::call_streamed(gateway, request, tool, after, wanted),
    }
}

/// A call of a client with the tasks extension, as a task: `CreateTaskResult`, or the
/// result when it ends within the promotion budget.
async fn start_task(
    gateway: &Gateway,
    request: Request<'_>,
    capabilities: serde_json::Map<String, Value>,
    auth: Option<HeaderValue>,
) -> Outcome {
    let params = upstream_params(request.params.unwrap_or_default());
    let call = ToolCall {
        params: serde_json::value::to_raw_value(&params)
            .map_err(|e| ErrorObject::internal(format!("tool call params: {e}")))?,
        capabilities,
        auth,
        principal: request.principal,
        session: None,
        ttl_ms: None,
        relay: None,
    };
    match gateway.tasks.start_task(call).await? {
        Started::Task(task) => Ok(jsonrpc::success_body_of(
            &request.id,
            &render::task_result(&task, ResultType::Task),
        )
        .into()),
        Started::Inline(Ok(result)) => Ok(jsonrpc::success_body(&request.id, &result).into()),
        Started::Inline(Err(error)) => Err(error),
    }
}

async fn tasks_method(gateway: &Gateway, request: &Request<'_>) -> Outcome {
    if !meta::declares_tasks(request.params.as_ref()) {
        return Err(ErrorObject::new(
            code::MISSING_REQUIRED_CLIENT_CAPABILITY,
            format!("{} needs the io.modelcontextprotocol/tasks extension in the request's clientCapabilities", request.method),
        )
        .with_data(wire::missing_tasks_capability_data()));
    }
    let tasks = &gateway.tasks;
    let principal = &request.principal;
    match request.method.as_str() {
        "tasks/get" => {
            let params: TaskIdParams = parse_params(request)?;
            let task = tasks.get(&params.task_id, principal).await?;
            Ok(jsonrpc::success_body_of(
                &request.id,
                &render::task_result(&task, ResultType::Complete),
            )
            .into())
        }
        method::TASKS_UPDATE => {
            let params: UpdateTaskParams = parse_params(request)?;
            tasks
                .update(&params.task_id, principal, params.input_responses)
                .await?;
            Ok(jsonrpc::success_body_of(&request.id, &wire::ACK).into())
        }
        _ => {
            let params: TaskIdParams = parse_params(request)?;
            tasks.cancel(&params.task_id, principal).await?;
            Ok(jsonrpc::success_body_of(&request.id, &wire::ACK).into())
        }
    }
}

/// Read from the request's tree where it is, not from a copy: a poll's params are only
/// read.
fn parse_params<T: DeserializeOwned>(request: &Request<'_>) -> Result<T, ErrorObject> {
    T::deserialize(request.params.as_ref().unwrap_or(&Value::Null))
        .map_err(|e| ErrorObject::invalid_params(format!("invalid {} params: {e}", request.method)))
}

/// Who the caller is upstream: the capabilities it declared (a session upstream keeps
/// the part its sessions are keyed by) and its credentials.
fn caller_of(request: &Request<'_>) -> (serde_json::Map<String, Value>, Option<HeaderValue>) {
    (
        meta::forwarded_capabilities(request.params.as_ref()),
        authorization(&request.parts.headers),
    )
}

fn authorization(headers: &HeaderMap) -> Option<HeaderValue> {
    headers.get(header::AUTHORIZATION).cloned()
}

/// Params without what belongs to the client-gateway hop: the 2026 `_meta` keys, and
/// the 2025-11-25 task dialect's `task` param (a plain upstream would reject it) and
/// related-task `_meta` (a 2025-11-25 upstream would hold its answer for a
/// `tasks/result` nobody sends). A 2026-07-28 client does not speak that dialect.
fn upstream_params(mut params: Value) -> Value {
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(mtg_protocol::wire::dialect_2025::RELATED_TASK);
    }
    meta::strip_stateless_meta(&mut params);
    if let Some(obj) = params.as_object_mut() {
        obj.remove("task");
    }
    params
}
