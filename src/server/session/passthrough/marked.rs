//! Task-declaring session clients of a 2025-xx HTTP upstream. The upstream keeps the
//! session; the gateway marks the session id it hands the client (`mtg-t.<upstream
//! id>`), so that any instance, without shared state, knows a session declared tasks and
//! which upstream session it is. Unmarked sessions never come here: their traffic stays
//! byte for byte.

use bytes::Bytes;
use futures_util::StreamExt;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Response, Uri, header};
use http_body_util::{BodyExt, Full};
use serde_json::{Map, Value};
use sse_stream::SseStream;

use crate::server::session::tasks::negotiate::{self, Declared};
use crate::server::session::tasks::{self, Handled, SessionCaller, push};

use super::pass_through;
use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::tasks::deferral::Listing;
use crate::upstream::PassThroughSession;
use mtg_protocol::headers::MCP_PROTOCOL_VERSION;
use mtg_protocol::jsonrpc::{self, ErrorObject, Message};
use mtg_protocol::names::header::MCP_SESSION_ID;
use mtg_protocol::names::{SESSION_VERSION, method};
use mtg_transport::pinned::PinnedConn;

/// Session ids of clients that declared tasks, and of those that declared SEP-1905
/// response modes too.
const MARK: &str = "mtg-t.";
const MARK_MODES: &str = "mtg-tm.";

/// What a marked session id says.
pub(crate) struct Marked {
    /// The id as the client sends it.
    client_id: String,
    /// The upstream's own id; `None` when the upstream issued none.
    upstream: Option<HeaderValue>,
    modes: bool,
}

/// `Some` when the request's session id is one the gateway marked.
pub(crate) fn unmark(headers: &HeaderMap) -> Option<Marked> {
    let client_id = headers.get(MCP_SESSION_ID)?.to_str().ok()?;
    let (rest, modes) = match client_id.strip_prefix(MARK_MODES) {
        Some(rest) => (rest, true),
        None => (client_id.strip_prefix(MARK)?, false),
    };
    let upstream = if rest.is_empty() {
        None
    } else {
        Some(HeaderValue::from_str(rest).ok()?)
    };
    Some(Marked {
        client_id: client_id.to_owned(),
        upstream,
        modes,
    })
}

fn mark(upstream: Option<&HeaderValue>, modes: bool) -> Option<HeaderValue> {
    let prefix = if modes { MARK_MODES } else { MARK };
    let upstream = upstream.map_or(Ok(""), HeaderValue::to_str).ok()?;
    HeaderValue::from_str(&format!("{prefix}{upstream}")).ok()
}

/// `initialize` from a client that declared `capabilities.tasks`.
pub(crate) async fn initialize(
    gateway: &Gateway,
    pinned: &PinnedConn,
    url: &Uri,
    parts: Parts,
    id: Value,
    mut params: Value,
    declared: Declared,
) -> Response<Body> {
    negotiate::without_client_tasks(&mut params);
    let request = jsonrpc::request_value(id.clone(), method::INITIALIZE, Some(params));
    let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
    let mut response = pass_through(gateway, pinned, url, parts, body).await;
    if !response.status().is_success() {
        return response;
    }
    let upstream = response.headers().get(MCP_SESSION_ID).cloned();
    if let Some(marked) = mark(upstream.as_ref(), declared.modes) {
        response.headers_mut().insert(MCP_SESSION_ID, marked);
    }
    rewrite_result(response, &id, |result| {
        negotiate::advertise_tasks(result, declared);
    })
    .await
}

/// What [`serve`] did with a request of a marked session.
pub(crate) enum Served {
    Answered(Response<Body>),
    /// A POST the task handlers did not take: the caller sends it upstream (under the
    /// upstream's session id, already in `parts`) and gives the answer to
    /// [`MarkedCall::answer`].
    PassedOn(Box<PassedOn>),
}

pub(crate) struct PassedOn {
    pub parts: Parts,
    pub body: Bytes,
    pub call: MarkedCall,
}

/// A marked session's message on its way upstream.
pub(crate) struct MarkedCall {
    pub message: Message,
    pub session: SessionCaller,
    modes: bool,
}

impl MarkedCall {
    /// The upstream's answer as the client gets it: the session id marked again, and
    /// `tools/list` annotated (with `listing`, the gateway's tools added).
    pub(crate) async fn answer(
        self,
        gateway: &Gateway,
        response: Response<Body>,
        listing: Option<Listing>,
    ) -> Response<Body> {
        let response = remarked(response, self.modes);
        match self.message {
            Message::Request { id, method, .. } if method == method::TOOLS_LIST => {
                list_tools(response, &id, &gateway.policies, true, listing).await
            }
            _ => response,
        }
    }
}

/// Any request of a marked session: the gateway's own methods are answered here; the
/// rest goes to the upstream under the upstream's session id.
pub(crate) async fn serve(
    gateway: &Gateway,
    pinned: &PinnedConn,
    url: &Uri,
    mut parts: Parts,
    body: Bytes,
    marked: Marked,
) -> Served {
    match &marked.upstream {
        Some(id) => parts.headers.insert(MCP_SESSION_ID, id.clone()),
        None => parts.headers.remove(MCP_SESSION_ID),
    };
    if parts.method == Method::GET {
        let principal = gateway.edge.principal(&parts);
        let upstream = pass_through(gateway, pinned, url, parts, body).await;
        let upstream = if push::is_event_stream(&upstream) {
            Some(upstream)
        } else {
            push::discard(upstream).await;
            None
        };
        return Served::Answered(
            push::stream(gateway.tasks.clone(), marked.client_id, principal, upstream).await,
        );
    }
    if parts.method != Method::POST {
        let response = pass_through(gateway, pinned, url, parts, body).await;
        return Served::Answered(remarked(response, marked.modes));
    }
    let message = match Message::parse(&body) {
        Ok(message) => message,
        Err(e) => return Served::Answered(reply::error(None, &e.to_error_object())),
    };
    let session = task_session(
        gateway,
        &parts,
        marked.client_id,
        marked.upstream,
        marked.modes,
    );
    if tasks::gateway_may_answer(&message)
        && let Some(not_found) = Box::pin(tasks::confirm::unknown_session(gateway, &session)).await
    {
        return Served::Answered(not_found);
    }
    if let Handled::Reply(response) = tasks::handle(gateway, &session, &message).await {
        return Served::Answered(response);
    }
    let call = MarkedCall {
        message,
        session,
        modes: marked.modes,
    };
    Served::PassedOn(Box::new(PassedOn { parts, body, call }))
}

/// The upstream's `tools/list` answer with each tool's task support as the gateway
/// serves it (`negotiate::show_task_support`; `declared`: the session declared tasks)
/// and, with deferral on, the gateway's two tools and the output schemas that admit a
/// deferred result.
pub(crate) async fn list_tools(
    response: Response<Body>,
    id: &Value,
    policies: &crate::tasks::policy::Policies,
    declared: bool,
    listing: Option<Listing>,
) -> Response<Body> {
    rewrite_result(response, id, |result| {
        negotiate::show_task_support(result, policies, declared);
        if let Some(listing) = &listing {
            listing.advertise(result);
        }
    })
    .await
}

/// A request of an unmarked session (it did not declare `capabilities.tasks`) that is
/// the gateway's all the same (`super::handle_undeclared`): its answer, or `None` for
/// everything else, which goes to the upstream byte for byte.
pub(crate) async fn serve_undeclared(
    gateway: &Gateway,
    parts: &Parts,
    body: &Bytes,
) -> Option<Response<Body>> {
    if parts.method != Method::POST || !tasks::may_concern_tasks(body) {
        return None;
    }
    let message = Message::parse(body).ok()?;
    let id = parts.headers.get(MCP_SESSION_ID)?;
    // Unmarked: the client's id is the upstream's own.
    let client_id = id.to_str().ok()?.to_owned();
    let session = task_session(gateway, parts, client_id, Some(id.clone()), false);
    // Boxed: rare, and inline it would add 1.8 KB to every pass-through request's future.
    match Box::pin(tasks::handle_undeclared(gateway, &session, &message)).await {
        Handled::Reply(response) => Some(response),
        Handled::PassOn => None,
    }
}

/// An unmarked pass-through session (it did not declare tasks) as the task handlers
/// see it: the client's session id is the upstream's own.
pub(crate) fn plain_session(gateway: &Gateway, parts: &Parts) -> SessionCaller {
    let id = parts.headers.get(MCP_SESSION_ID);
    let client_id = id.and_then(|id| id.to_str().ok()).unwrap_or_default();
    task_session(gateway, parts, client_id.to_owned(), id.cloned(), false)
}

/// A pass-through session as the task handlers see it: its calls run in the client's
/// own upstream session (`upstream_id`), at the version the client negotiated.
fn task_session(
    gateway: &Gateway,
    parts: &Parts,
    client_id: String,
    upstream_id: Option<HeaderValue>,
    modes: bool,
) -> SessionCaller {
    SessionCaller {
        id: client_id,
        upstream: Some(PassThroughSession {
            id: upstream_id,
            protocol_version: parts
                .headers
                .get(MCP_PROTOCOL_VERSION)
                .cloned()
                .unwrap_or(HeaderValue::from_static(SESSION_VERSION)),
        }),
        capabilities: Map::new(),
        auth: parts.headers.get(header::AUTHORIZATION).cloned(),
        principal: gateway.edge.principal(parts),
        modes,
    }
}

/// The upstream's answer with its session id marked again: some upstreams (the
/// TypeScript SDK's) send `Mcp-Session-Id` on every answer, and clients adopt it.
fn remarked(mut response: Response<Body>, modes: bool) -> Response<Body> {
    let upstream = response.headers().get(MCP_SESSION_ID).cloned();
    if let Some(upstream) = upstream
        && let Some(marked) = mark(Some(&upstream), modes)
    {
        response.headers_mut().insert(MCP_SESSION_ID, marked);
    }
    response
}

/// The upstream's answer with the result of response `id` edited, as JSON or as the
/// same SSE events.
async fn rewrite_result(
    response: Response<Body>,
    id: &Value,
    edit: impl FnOnce(&mut Value),
) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return reply::error_with_status(
                http::StatusCode::BAD_GATEWAY,
                &ErrorObject::internal(format!("upstream connection lost: {e}")),
            );
        }
    };
    let is_sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    let mut edit = Some(edit);
    let rewritten = if is_sse {
        let mut out = Vec::with_capacity(bytes.len() + 128);
        let mut events = SseStream::new(Full::new(bytes));
        while let Some(Ok(mut event)) = events.next().await {
            if let Some(data) = &event.data
                && let Some(edited) = edit_message(data.as_bytes(), id, &mut edit)
            {
                event.data = Some(String::from_utf8_lossy(&edited).into_owned());
            }
            out.extend_from_slice(&Bytes::from(event));
        }
        Bytes::from(out)
    } else {
        edit_message(&bytes, id, &mut edit).map_or(bytes, Bytes::from)
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, reply::full(rewritten))
}

/// The message re-serialised with its result edited, if it is the response `id`.
fn edit_message(
    data: &[u8],
    id: &Value,
    edit: &mut Option<impl FnOnce(&mut Value)>,
) -> Option<Vec<u8>> {
    let mut message: Value = serde_json::from_slice(data).ok()?;
    if message.get("id") != Some(id) {
        return None;
    }
    let result = message.get_mut("result")?;
    (edit.take()?)(result);
    serde_json::to_vec(&message).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(session: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(MCP_SESSION_ID, HeaderValue::from_str(session).unwrap());
        headers
    }

    #[test]
    fn marks_round_trip_and_plain_ids_are_not_marked() {
        let upstream = HeaderValue::from_static("abc-123");
        for modes in [false, true] {
            let marked = mark(Some(&upstream), modes).unwrap();
            let seen = unmark(&headers(marked.to_str().unwrap())).unwrap();
            assert_eq!(seen.upstream, Some(upstream.clone()));
            assert_eq!(seen.modes, modes);
        }
        let none = unmark(&headers(mark(None, false).unwrap().to_str().unwrap())).unwrap();
        assert_eq!(none.upstream, None);
        assert!(unmark(&headers("abc-123")).is_none());
    }

    #[tokio::test]
    async fn an_sse_answer_keeps_its_other_events() {
        let body = "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"tools\":[]}}\n\n";
        let response = Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(reply::full(body))
            .unwrap();
        let rewritten = rewrite_result(response, &Value::from(4), |r| {
            r["tools"] = Value::from(1);
        })
        .await;
        let text = rewritten.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(text.to_vec()).unwrap();
        assert!(text.contains("notifications/message"), "{text}");
        assert!(text.contains("\"tools\":1"), "{text}");
        assert!(text.contains("id: 1"), "{text}");
    }
}
