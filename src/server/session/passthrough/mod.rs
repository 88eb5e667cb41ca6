//! Pass-through: a 2025-xx client's session served by the upstream's own session. Its
//! requests go to the upstream as they are, on the client connection's pinned
//! connection, and the upstream's responses, SSE streams included, come back as they
//! are (`coalesce.rs` only makes fewer writes of them). The gateway reads a request only
//! where it may be the gateway's: a marked session's (`marked.rs`), a task message of a
//! session that did not declare tasks, or a call it watches (`watched/`).

pub(crate) mod coalesce;
pub(crate) mod marked;
pub(crate) mod watched;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, Uri, Version};
use http_body_util::{BodyExt, Full};

use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::server::session::tasks::{self, SessionCaller};
use crate::upstream::http::{prepare_to_send_on, remove_hop_by_hop};
use mtg_protocol::jsonrpc::{ErrorObject, Message, code};
use mtg_protocol::names;
use mtg_transport::lean_http1::forbidden_header;
use mtg_transport::pinned::{PinnedConn, PinnedError};
use mtg_transport::{CallError, Party};

/// A pass-through session's request: a marked session's goes to `marked`, a task
/// message of an unmarked one to the task handlers, a call to watch to `watched`; the
/// rest is passed through as it is. `message` is the parsed body when it was read.
pub(crate) async fn serve(
    gateway: &Gateway,
    pinned: &PinnedConn,
    url: &Uri,
    parts: Parts,
    body: Bytes,
    message: Option<Message>,
) -> Response<Body> {
    // Every branch but the plain pass-through is boxed: this future is copied at each
    // await up to hyper's box, so its size is paid by every request; the rare branches'
    // state (2–6 KB each) is paid only by the requests that take them.
    if let Some(marked) = marked::unmark(&parts.headers) {
        let served = Box::pin(marked::serve(gateway, pinned, url, parts, body, marked)).await;
        let passed = match served {
            marked::Served::Answered(response) => return response,
            marked::Served::PassedOn(passed) => *passed,
        };
        return Box::pin(marked_passed_on(gateway, pinned, url, passed)).await;
    }
    if let Some(response) = marked::serve_undeclared(gateway, &parts, &body).await {
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
        return Box::pin(marked::initialize(
            gateway, pinned, url, parts, id, params, declared,
        ))
        .await;
    }
    if parts.method == http::Method::POST
        && watched::may_watch(gateway, &body)
        && let Ok(message) = Message::parse(&body)
    {
        let session = marked::plain_session(gateway, &parts);
        match Box::pin(watched::route(gateway, &session, &message)).await {
            watched::Route::Answer(response) => return response,
            watched::Route::Watch(watch) => {
                return Box::pin(watched::call(gateway, url, parts, body, session, *watch)).await;
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
    pass_through(gateway, pinned, url, parts, body).await
}

/// An unmarked session's `tools/list` while calls are watched: the upstream's list with
/// the gateway's deferred-result tools added and its task-only tools offered for plain
/// calls.
async fn list_watched_tools(
    gateway: &Gateway,
    pinned: &PinnedConn,
    url: &Uri,
    parts: Parts,
    body: Bytes,
    session: &SessionCaller,
    id: serde_json::Value,
) -> Response<Body> {
    let listing = watched::listed(gateway, session).await;
    let response = pass_through(gateway, pinned, url, parts, body).await;
    marked::list_tools(response, &id, &gateway.policies, false, listing).await
}

/// A marked session's POST that is not a task message: watched when it is a call to
/// watch, else passed through; either way its answer is the marked session's.
async fn marked_passed_on(
    gateway: &Gateway,
    pinned: &PinnedConn,
    url: &Uri,
    passed: marked::PassedOn,
) -> Response<Body> {
    let marked::PassedOn { parts, body, call } = passed;
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
            pass_through(gateway, pinned, url, parts, body).await
        }
    };
    let listing = match listing {
        true => watched::listed(gateway, &call.session).await,
        false => None,
    };
    call.answer(gateway, response, listing).await
}

/// Sends a pass-through session's request to `upstream` on the client connection's
/// pinned connection (through the pool when the pinned connection is busy) and relays
/// the answer.
pub(crate) async fn pass_through(
    gateway: &Gateway,
    pinned: &PinnedConn,
    upstream: &Uri,
    mut parts: Parts,
    body: Bytes,
) -> Response<Body> {
    // The client's request is sent on as it is, in its own header map: only what
    // belongs to its hop is taken out.
    parts.uri = upstream.clone();
    parts.version = Version::HTTP_11;
    parts.extensions.clear();
    prepare_to_send_on(&mut parts.headers);
    if let Some(name) = forbidden_header(&parts.headers) {
        let detail = format!("the {name} header's value holds a byte HTTP forbids");
        return failed(gateway, Party::Client, "header_value", &detail);
    }
    let request = Request::from_parts(parts, body);
    match pinned.send(upstream, request).await {
        Ok(response) => relay(response).await,
        Err(PinnedError::Failed {
            party,
            kind,
            detail,
        }) => failed(gateway, party, kind, &detail),
        Err(PinnedError::Busy(request)) => {
            match gateway.client.request(request.map(Full::new)).await {
                Ok(response) => relay(response).await,
                Err(e) => {
                    let e = CallError::from(e);
                    let detail = mtg_transport::describe_client_error(&e);
                    failed(gateway, e.party(), e.kind(), &detail)
                }
            }
        }
    }
}

/// The upstream's response as it came, but for its hop-by-hop headers.
async fn relay<B>(response: Response<B>) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Unpin + Send + Sync + 'static,
    B::Error: Into<reply::BoxError> + Send + Sync,
{
    let (mut parts, body) = response.into_parts();
    // The body is forwarded unchanged, so its `Content-Length` still holds.
    remove_hop_by_hop(&mut parts.headers);
    let body = coalesce::with_first_frame(body).await;
    Response::from_parts(parts, body.map_err(Into::into).boxed())
}

/// The answer to a pass-through request that did not get the upstream's: its status,
/// code and metric follow whose failure it was.
fn failed(gateway: &Gateway, party: Party, kind: &'static str, detail: &str) -> Response<Body> {
    gateway
        .tasks
        .meter()
        .requests()
        .failed(party.metric(), kind);
    let error = match party {
        Party::Client => {
            tracing::debug!(detail, "pass-through request refused");
            ErrorObject::new(code::INVALID_REQUEST, format!("request refused: {detail}"))
        }
        Party::Upstream => {
            tracing::warn!(detail, "pass-through to the upstream failed");
            ErrorObject::internal(format!("upstream unreachable: {detail}"))
        }
        Party::Gateway => {
            tracing::error!(detail, "pass-through request could not be sent");
            ErrorObject::internal(format!("gateway error: {detail}"))
        }
    };
    reply::error_with_status(party.status(), &error)
}
