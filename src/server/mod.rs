//! The HTTP front. `routes` picks a path's world; a `/mcp` request passes the `edge`
//! checks, `generation` tells which client sent it, and it goes to who serves that
//! client: `stateless/` a 2026-07-28 client, `session/` a 2025-xx client's session.

pub(crate) mod edge;
mod generation;
mod reply;
mod routes;
pub(crate) mod session;
mod sse;
mod stateless;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use crate::tasks::TaskService;
use crate::tasks::deferral::Deferrals;
use crate::tasks::dialect_2025::Dialect2025;
use crate::tasks::follow::Followers;
use crate::tasks::mrtr_bridge::MrtrBridge;
use crate::tasks::policy::Policies;
use crate::upstream::Upstream;
use mtg_protocol::jsonrpc::{ErrorObject, Message, code};
use mtg_protocol::names::Generation;
use mtg_protocol::names::header::MCP_SESSION_ID as SESSION_HEADER;
use mtg_transport::HttpClient;
use mtg_transport::pinned::PinnedConn;
use reply::Body;

pub(crate) use routes::Routes;
pub(crate) use routes::route;

/// Everything a request handler needs for one upstream, built once at start: the edge
/// every request passes, and the services behind it. Each path (`/mcp`, `/mcp/NAME`)
/// has one, so nothing of one upstream's reaches another's.
pub(crate) struct Gateway {
    /// The upstream's name, `None` for the one at `/mcp`.
    pub name: Option<String>,
    /// The checks of every request and what they need (`edge`), shared by all paths.
    pub edge: Arc<Edge>,
    /// Bearer JWT validation (`--auth-jwt-issuer`) for this path's resource, if on.
    pub auth: Option<Arc<crate::auth::Authenticator>>,
    /// What goes upstream as `Authorization` (`--upstream-credential`).
    pub upstream_credential: crate::auth::UpstreamCredential,
    pub client: HttpClient,
    pub upstream: Arc<dyn Upstream>,
    pub tasks: Arc<TaskService>,
    /// The features built on the tasks: held calls (MRTR bridge), the 2025-11-25
    /// dialect, and following tasks for listen streams.
    pub bridge: MrtrBridge,
    pub dialect: Dialect2025,
    pub followers: Followers,
    pub deferrals: Deferrals,
    /// `--progress-keepalive-ms`, for the streams of calls that asked for progress.
    pub progress_keepalive: Option<sse::keepalive::Every>,
    pub policies: Policies,
    pub upstream_timeout: Option<Duration>,
    check_upstream_readiness: bool,
    /// Session clients whose upstream has no sessions to pass them through to.
    sessions: Arc<session::served::ServedSessions>,
    /// Pass-through sessions the upstream confirmed lately (`session/tasks/confirm.rs`).
    confirmed_sessions: session::tasks::confirm::Confirmed,
    /// Cancelled when the gateway starts to stop: long-lived streams end gracefully
    /// instead of holding the connection drain.
    pub closing: tokio_util::sync::CancellationToken,
}

/// What the services behind the edge are built from (`settings::gateway`).
pub(crate) struct GatewaySettings {
    /// The upstream's name, `None` for the one at `/mcp`.
    pub name: Option<String>,
    pub policies: Policies,
    pub upstream_timeout: Option<Duration>,
    /// Whether `/readyz` asks the upstream too (not `--readyz-skip-upstream`).
    pub check_upstream_readiness: bool,
    pub session_limits: session::served::SessionLimits,
    /// `--progress-keepalive-ms`; `None` is off.
    pub progress_keepalive: Option<Duration>,
    /// What goes upstream as `Authorization`.
    pub upstream_credential: crate::auth::UpstreamCredential,
}

impl Gateway {
    /// `auth` checks tokens for this path's resource (`Authenticator::for_audience`).
    pub(crate) fn new(
        settings: GatewaySettings,
        client: HttpClient,
        upstream: Arc<dyn Upstream>,
        tasks: Arc<TaskService>,
        closing: tokio_util::sync::CancellationToken,
        edge: Arc<Edge>,
        auth: Option<Arc<crate::auth::Authenticator>>,
    ) -> Self {
        let meter = tasks.meter().clone();
        Self {
            name: settings.name,
            edge,
            auth,
            upstream_credential: settings.upstream_credential,
            closing,
            client,
            upstream,
            bridge: MrtrBridge::new(tasks.clone()),
            dialect: Dialect2025::new(tasks.clone()),
            followers: Followers::new(tasks.clone()),
            deferrals: Deferrals::new(tasks.clone()),
            progress_keepalive: settings
                .progress_keepalive
                .map(|period| sse::keepalive::Every {
                    period,
                    meter: meter.clone(),
                }),
            tasks,
            policies: settings.policies,
            upstream_timeout: settings.upstream_timeout,
            check_upstream_readiness: settings.check_upstream_readiness,
            sessions: session::served::ServedSessions::start(settings.session_limits, meter),
            confirmed_sessions: Default::default(),
        }
    }
}

pub(crate) use edge::{Edge, EdgeSettings};

/// Serves one request to `/mcp`; `method` is set to what the request turned out to be,
/// for the metrics.
async fn mcp_endpoint(
    gateway: &Gateway,
    pinned: &PinnedConn,
    request: Request<Incoming>,
    method: &mut String,
) -> Response<Body> {
    if let Some(origin) = request.headers().get(header::ORIGIN)
        && !gateway.edge.origin_allowed(origin)
    {
        return reply::error_with_status(
            StatusCode::FORBIDDEN,
            &ErrorObject::new(code::INVALID_REQUEST, "Origin not allowed"),
        );
    }
    let (mut parts, body) = request.into_parts();
    // Before the body is read: an unauthenticated caller costs no more than its headers.
    if let Some(refusal) = edge::authn::admit(gateway, &mut parts).await {
        return refusal;
    }
    let body = match read_body(gateway, body).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    // Session traffic goes where its session lives (`session::serve` decides): the
    // gateway does not read it, unless it may say 2026-07-28, which outranks the
    // session id (`generation`). The metric label keeps its old name for dashboards.
    if parts.headers.contains_key(SESSION_HEADER)
        && (parts.method != Method::POST || !generation::may_say_stateless(&parts.headers, &body))
    {
        "legacy_passthrough".clone_into(method);
        if let Some(refusal) = edge::authn::check_scopes(gateway, &parts, None, &body) {
            return refusal;
        }
        return session::serve(gateway, pinned, parts, body, None).await;
    }
    if parts.method != Method::POST {
        return reply::plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET and DELETE belong to 2025-xx sessions; send Mcp-Session-Id\n",
        );
    }
    let message = match Message::parse(&body) {
        Ok(message) => message,
        Err(e) => return reply::error(None, &e.to_error_object()),
    };
    if let Some(refusal) = check_request(gateway, &parts, &message, &body) {
        return refusal;
    }
    match generation::classify(&parts.headers, &message) {
        Ok(Generation::Session) => {
            "legacy_passthrough".clone_into(method);
            session::serve(gateway, pinned, parts, body, Some(message)).await
        }
        Err(error) => reply::bad_request(message_id(&message), &error),
        Ok(Generation::Stateless) => {
            match &message {
                Message::Request { method: m, .. } => m.clone_into(method),
                Message::Notification { .. } => "notification".clone_into(method),
                Message::Response { .. } => {}
            }
            stateless::serve(gateway, &parts, message).await
        }
    }
}

/// The request's body, up to the edge's limit; else the answer that refuses it.
async fn read_body(gateway: &Gateway, body: Incoming) -> Result<Bytes, Response<Body>> {
    match Limited::new(body, gateway.edge.max_body_bytes)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let mut response = reply::error_with_status(
                StatusCode::PAYLOAD_TOO_LARGE,
                &ErrorObject::new(
                    code::INVALID_REQUEST,
                    format!(
                        "request body exceeds the limit of {} bytes",
                        gateway.edge.max_body_bytes
                    ),
                ),
            );
            // The rest of the body is not read: the connection cannot carry another
            // request, and the client must be told so rather than find it closed.
            response
                .headers_mut()
                .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
            Err(response)
        }
        Err(e) => Err(reply::error_with_status(
            StatusCode::BAD_REQUEST,
            &ErrorObject::new(
                code::INVALID_REQUEST,
                format!("could not read the body: {e}"),
            ),
        )),
    }
}

/// The edge's checks of a parsed request: the caller's scopes for its method, and the
/// `tasks/*` rate of its principal.
fn check_request(
    gateway: &Gateway,
    parts: &http::request::Parts,
    message: &Message,
    body: &[u8],
) -> Option<Response<Body>> {
    let Message::Request { id, method, .. } = message else {
        return None;
    };
    if let Some(refusal) = edge::authn::check_scopes(gateway, parts, Some(method), body) {
        return Some(refusal);
    }
    gateway
        .edge
        .limit_task_request(|| gateway.edge.principal(parts), method, id)
}

fn message_id(message: &Message) -> Option<&Value> {
    match message {
        Message::Request { id, .. } | Message::Response { id, .. } => Some(id),
        Message::Notification { .. } => None,
    }
}
