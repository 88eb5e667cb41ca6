//! Pass-through calls the gateway watches (#28), for sessions passed through to a
//! 2025-xx HTTP upstream: with `--defer-after-ms`, a plain `tools/call`; with
//! `--progress-keepalive-ms`, a call whose client sent `_meta.progressToken`. Every other
//! message, and every message when both are off, is neither parsed nor changed.
//!
//! The request goes upstream as the client sent it, and its answer comes back event by
//! event, each with the bytes that came (`events.rs`), so a call that ends within the
//! budget is answered to the byte as without the flag. Past the budget the client gets a
//! deferred result, and the rest of the answer, unread, becomes a task of the caller
//! (`TaskService::start_adopted`, the upstream's `adopt`): its runner reads on and
//! records, as for any task of the session. The watching itself is `watcher.rs`.

mod answer;
mod client;
mod events;
mod watcher;

use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Response, Uri, Version, header};
use serde_json::Value;

use crate::server::Gateway;
use crate::server::reply::Body;
use crate::server::session::tasks::{SessionCaller, deferred};
use crate::server::sse::keepalive::ProgressKeepAlive;
use crate::tasks::deferral::{Listing, UNTIL_IT_ENDS};
use crate::upstream::http::prepare_to_send_on;
use mtg_protocol::jsonrpc::Message;
use mtg_protocol::names::method;
use mtg_protocol::task_support::TaskSupport;

/// Whether a pass-through POST may be one to watch, judged from its bytes, so that no
/// other message is parsed: a `tools/…` method with deferral on or while the upstream
/// may have tools it runs only as its own tasks, or a progress token with keep-alive on.
pub(crate) fn may_watch(gateway: &Gateway, body: &[u8]) -> bool {
    let has = |needle: &[u8]| memchr::memmem::find(body, needle).is_some();
    let deferrals = &gateway.deferrals;
    ((deferrals.after().is_some() || deferrals.may_run_task_only_tools()) && has(b"tools/"))
        || (gateway.progress_keepalive.is_some() && has(b"progressToken"))
}

/// What the gateway does with a parsed pass-through message.
pub(crate) enum Route {
    /// Answered by the gateway: its `get_task_result` or `cancel_task`, or a call of a
    /// tool the upstream runs only as its own task, run as a task of the session.
    Answer(Response<Body>),
    /// Sent upstream and watched.
    Watch(Box<Watch>),
    /// `tools/list` with deferral on, or while the upstream may have task-only tools: the
    /// upstream's answer lists the gateway's tools too, and offers those tools.
    ListTools(Value),
    /// Not the gateway's: on to the upstream as it is.
    PassOn,
}

/// One call to watch.
pub(crate) struct Watch {
    id: Value,
    params: Value,
    tool: String,
    /// `--defer-after-ms`, for a call that may be deferred.
    defer: Option<Duration>,
    keepalive: Option<ProgressKeepAlive>,
}

pub(crate) async fn route(gateway: &Gateway, session: &SessionCaller, message: &Message) -> Route {
    let Message::Request { id, method, params } = message else {
        return Route::PassOn;
    };
    let after = gateway.deferrals.after();
    let task_only = gateway.deferrals.may_run_task_only_tools();
    if method == method::TOOLS_LIST && (after.is_some() || task_only) {
        return Route::ListTools(id.clone());
    }
    if !method::MAY_ASK_FOR_INPUT.contains(&method.as_str()) {
        return Route::PassOn;
    }
    let Some(params) = params else {
        return Route::PassOn;
    };
    let mut defer = None;
    if method == method::TOOLS_CALL {
        if let Some(answer) = deferred::gateway_tool(gateway, session, id, params).await {
            return Route::Answer(answer);
        }
        let tool = params.get("name").and_then(Value::as_str).unwrap_or("");
        let optional = gateway.policies.policy_of(tool) == TaskSupport::Optional;
        if params.get("task").is_none() && optional {
            // The upstream would refuse the call as it came: it runs as a task here.
            if task_only
                && gateway
                    .deferrals
                    .runs_only_as_task(&session.caller(), tool)
                    .await
            {
                let limit = after.unwrap_or(UNTIL_IT_ENDS);
                let answer = deferred::call(gateway, session, id, params, tool, limit).await;
                return Route::Answer(answer);
            }
            defer = after;
        }
    }
    let keepalive =
        ProgressKeepAlive::for_request(Some(params), gateway.progress_keepalive.as_ref());
    if defer.is_none() && keepalive.is_none() {
        return Route::PassOn;
    }
    Route::Watch(Box::new(Watch {
        id: id.clone(),
        tool: params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("tool")
            .to_owned(),
        params: params.clone(),
        defer,
        keepalive,
    }))
}

/// With deferral on: what `tools/list` adds (the gateway's two tools).
pub(crate) async fn listed(gateway: &Gateway, session: &SessionCaller) -> Option<Listing> {
    gateway.deferrals.listing(&session.caller()).await
}

/// Sends the request upstream as the client sent it (through the pool: the call may
/// outlive the client's connection) and answers as `watcher` decides.
pub(crate) async fn call(
    gateway: &Gateway,
    upstream: &Uri,
    mut parts: Parts,
    body: Bytes,
    session: SessionCaller,
    watch: Watch,
) -> Response<Body> {
    let accepts_sse = parts
        .headers
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| memchr::memmem::find(v.as_bytes(), b"text/event-stream").is_some());
    parts.uri = upstream.clone();
    parts.version = Version::HTTP_11;
    parts.extensions.clear();
    prepare_to_send_on(&mut parts.headers);
    let request = http::Request::from_parts(parts, http_body_util::Full::new(body));
    let watcher = watcher::Watcher::new(gateway, session, watch, accepts_sse);
    watcher.start(gateway.client.request(request)).await
}
