//! 2025-xx clients, which hold an MCP session: passed through to the upstream's own
//! session (`passthrough`), served by the gateway when the upstream has no sessions
//! (`served`), and their 2025-11-25 task dialect (`tasks`).

pub mod coalesce;
pub mod deferred;
pub mod passthrough;
pub mod served;
pub mod tasks;
pub mod watched;

use http::Response;
use http::StatusCode;
use http::header;
use http::request::Parts;

use crate::server::Gateway;
use crate::server::reply::{self, Body};
use mtg_protocol::jsonrpc::{ErrorObject, Message};
use mtg_protocol::names;
use mtg_transport::pinned::PinnedConn;

/// Session traffic. `message` is the parsed body when it was read (no session id yet);
/// an established session's traffic is not parsed unless it declared tasks.
pub async fn serve(
    gateway: &Gateway,
    pinned: &PinnedConn,
    parts: Parts,
    body: bytes::Bytes,
    message: Option<Message>,
) -> Response<Body> {
    // Every branch but the plain pass-through is boxed: this future is copied at each
    // await up to hyper's box, so its size is paid by every request; the rare branches'
    // state (2–6 KB each) is paid only by the requests that take them.
    let auth = parts.headers.get(header::AUTHORIZATION);
    match gateway.upstream.session_passthrough(auth).await {
        Ok(Some(url)) => {
            if let Some(marked) = tasks::marked::unmark(&parts.headers) {
                let served = Box::pin(tasks::marked::serve(
                    gateway, pinned, url, parts, body, marked,
                ))
                .await;
                let passed = match served {
                    tasks::marked::Served::Answered(response) => return response,
                    tasks::marked::Served::PassedOn(passed) => *passed,
                };
                return Box::pin(marked_passed_on(gateway, pinned, url, passed)).await;
            }
            if let Some(response) = tasks::marked::serve_undeclared(gateway, &parts, &body).await {
                return response;
            }
            if let Some(Message::Request {
                id,
                method,
                params: Some(params),
            }) = message
                && method == names::method::INITIALIZE
                && let Some(declared) = tasks::negotiate::declared(Some(&params))
            {
                return Box::pin(tasks::marked::initialize(
                    gateway, pinned, url, parts, id, params, declared,
                ))
                .await;
            }
            if parts.method == http::Method::POST
                && watched::may_watch(gateway, &body)
                && let Ok(message) = Message::parse(&body)
            {
                let session = tasks::marked::plain_session(gateway, &parts);
                match Box::pin(watched::route(gateway, &session, &message)).await {
                    watched::Route::Answer(response) => return response,
                    watched::Route::Watch(watch) => {
                        return Box::pin(watched::call(gateway, url, parts, body, session, *watch))
                            .await;
                    }
                    watched::Route::ListTools(id) => {
                        return Box::pin(list_watched_tools(
                            gateway, pinned, url, parts, body, &session, id,
                        ))
                        .await;
                    }
                    watched::Route::PassOn => {}
                }
            }
            passthrough::forward(gateway, pinned, url, parts, body).await
        }
        // No upstream session to pass through to: the gateway serves the session.
        Ok(None) => Box::pin(gateway.sessions.serve(gateway, &parts, body)).await,
        Err(e) => reply::error_with_status(StatusCode::BAD_GATEWAY, &ErrorObject::from(e)),
    }
}

/// An unmarked session's `tools/list` while calls are watched: the upstream's list with
/// the gateway's deferred-result tools added and its task-only tools offered for plain
/// calls.
async fn list_watched_tools(
    gateway: &Gateway,
    pinned: &PinnedConn,
    url: &http::Uri,
    parts: Parts,
    body: bytes::Bytes,
    session: &tasks::TaskSession,
    id: serde_json::Value,
) -> Response<Body> {
    let listed = watched::listed(gateway, session).await;
    let response = passthrough::forward(gateway, pinned, url, parts, body).await;
    tasks::marked::list_tools(response, &id, &gateway.policies, false, listed).await
}

/// A marked session's POST that is not a task message: watched when it is a call to
/// watch, else passed through; either way its answer is the marked session's.
async fn marked_passed_on(
    gateway: &Gateway,
    pinned: &PinnedConn,
    url: &http::Uri,
    passed: tasks::marked::PassedOn,
) -> Response<Body> {
    let tasks::marked::PassedOn { parts, body, call } = passed;
    let watching = gateway.deferrals.after().is_some()
        || gateway.progress_keepalive.is_some()
        || gateway.deferrals.may_run_task_only_tools();
    let route = match watching {
        true => watched::route(gateway, &call.session, &call.message).await,
        false => watched::Route::PassOn,
    };
    let listing = matches!(route, watched::Route::ListTools(_));
    let response = match route {
        watched::Route::Answer(response) => return response,
        watched::Route::Watch(watch) => {
            let session = call.session.clone();
            watched::call(gateway, url, parts, body, session, *watch).await
        }
        watched::Route::ListTools(_) | watched::Route::PassOn => {
            passthrough::forward(gateway, pinned, url, parts, body).await
        }
    };
    let listed = match listing {
        true => watched::listed(gateway, &call.session).await,
        false => None,
    };
    call.answer(gateway, response, listed).await
}
