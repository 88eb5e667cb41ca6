//! The HTTP front: the routes, and which client generation sent each `/mcp` request.
//! `edge` holds the connections and the checks every request passes; `stateless` serves
//! 2026-07-28 clients, `session` 2025-xx clients.

pub mod edge;
mod reply;
pub(crate) mod session;
mod sse;
mod stateless;

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::http_client::{Connector, HttpClient};
use crate::tasks::TaskService;
use crate::tasks::deferral::Deferrals;
use crate::tasks::dialect_2025::SessionDialect;
use crate::tasks::listen::Followers;
use crate::tasks::mrtr_bridge::MrtrBridge;
use crate::tasks::policy::Policies;
use crate::upstream::Upstream;
use crate::upstream::pinned::PinnedConn;
use mtg_protocol::headers::MCP_PROTOCOL_VERSION;
use mtg_protocol::jsonrpc::{ErrorObject, Message, code};
use mtg_protocol::meta;
use reply::Body;

use mtg_protocol::names::header::MCP_SESSION_ID as SESSION_HEADER;
use mtg_protocol::names::{self, SESSION_VERSIONS, STATELESS_VERSION};

/// Everything a request handler needs, built once at start: the edge every request
/// passes, and the services behind it.
pub struct Gateway {
    /// The checks of every `/mcp` request and what they need (`edge`).
    pub edge: Edge,
    pub client: HttpClient,
    /// Opens each client connection's [`PinnedConn`] to the upstream.
    pinned_connector: Connector,
    pub upstream: Arc<dyn Upstream>,
    pub tasks: Arc<TaskService>,
    /// The features built on the tasks: held calls (MRTR bridge), the 2025-11-25
    /// dialect, and following tasks for listen streams.
    pub bridge: MrtrBridge,
    pub dialect: SessionDialect,
    pub followers: Followers,
    pub deferrals: Deferrals,
    /// `--progress-keepalive-ms`, for the streams of calls that asked for progress.
    pub progress_keepalive: Option<Duration>,
    pub policies: Policies,
    pub upstream_timeout: Option<Duration>,
    check_upstream_readiness: bool,
    /// Session clients whose upstream has no sessions to pass them through to.
    sessions: Arc<session::served::GatewaySessions>,
    /// Cancelled when the gateway starts to stop: long-lived streams end gracefully
    /// instead of holding the connection drain.
    pub closing: tokio_util::sync::CancellationToken,
}

/// What the services behind the edge are built from (`settings::gateway`).
pub struct GatewaySettings {
    pub policies: Policies,
    pub upstream_timeout: Option<Duration>,
    /// Whether `/readyz` asks the upstream too (not `--readyz-skip-upstream`).
    pub check_upstream_readiness: bool,
    pub session_limits: session::served::SessionLimits,
    /// `--progress-keepalive-ms`; `None` is off.
    pub progress_keepalive: Option<Duration>,
}

impl Gateway {
    pub fn new(
        settings: GatewaySettings,
        client: HttpClient,
        upstream: Arc<dyn Upstream>,
        tasks: Arc<TaskService>,
        closing: tokio_util::sync::CancellationToken,
        edge: Edge,
    ) -> Self {
        Self {
            edge,
            closing,
            client,
            pinned_connector: crate::http_client::pinned_connector(),
            upstream,
            bridge: MrtrBridge::new(tasks.clone()),
            dialect: SessionDialect::new(tasks.clone()),
            followers: Followers::new(tasks.clone()),
            deferrals: Deferrals::new(tasks.clone()),
            progress_keepalive: settings.progress_keepalive,
            tasks,
            policies: settings.policies,
            upstream_timeout: settings.upstream_timeout,
            check_upstream_readiness: settings.check_upstream_readiness,
            sessions: session::served::GatewaySessions::start(settings.session_limits),
        }
    }
}

pub use edge::{Edge, EdgeSettings};

/// `pinned` is the client connection's own connection to the upstream, for pass-through.
pub(crate) async fn route(
    gateway: &Gateway,
    pinned: &PinnedConn,
    request: Request<Incoming>,
) -> Response<Body> {
    match request.uri().path() {
        "/healthz" => reply::plain(StatusCode::OK, "ok\n"),
        "/readyz" => readiness(gateway).await,
        path if path.starts_with("/.well-known/oauth-protected-resource") => {
            edge::authn::metadata(gateway)
        }
        "/mcp" => {
            let span = tracing::info_span!("request", method = tracing::field::Empty);
            crate::telemetry::traces::continue_from_headers(&span, request.headers());
            let started = std::time::Instant::now();
            let mut method = String::from("invalid");
            let response = mcp_endpoint(gateway, pinned, request, &mut method)
                .instrument(span)
                .await;
            crate::telemetry::request_served(&method, started.elapsed());
            response
        }
        _ => reply::plain(
            StatusCode::NOT_FOUND,
            "not found: the MCP endpoint is /mcp\n",
        ),
    }
}

/// Ready when the store answers and (unless skipped) the upstream does.
async fn readiness(gateway: &Gateway) -> Response<Body> {
    let mut problems = Vec::new();
    if let Err(e) = gateway.tasks.store().ping().await {
        problems.push(format!("store: {e}"));
    }
    if gateway.check_upstream_readiness
        && let Err(e) = gateway.upstream.ready().await
    {
        problems.push(format!("upstream: {e}"));
    }
    if problems.is_empty() {
        return reply::plain(StatusCode::OK, "ready\n");
    }
    let mut response = reply::json(
        StatusCode::SERVICE_UNAVAILABLE,
        serde_json::to_vec(&json!({"ready": false, "problems": problems})).unwrap_or_default(),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    response
}

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
    let body = match Limited::new(body, gateway.edge.max_body_bytes)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
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
            return response;
        }
        Err(e) => {
            return reply::error_with_status(
                StatusCode::BAD_REQUEST,
                &ErrorObject::new(
                    code::INVALID_REQUEST,
                    format!("could not read the body: {e}"),
                ),
            );
        }
    };
    // Session traffic goes where its session lives (`passthrough` decides): the
    // gateway does not read it. The metric label keeps its old name for dashboards.
    if parts.headers.contains_key(SESSION_HEADER) {
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
    if let Message::Request { method: m, .. } = &message
        && let Some(refusal) = edge::authn::check_scopes(gateway, &parts, Some(m), &body)
    {
        return refusal;
    }
    if let Message::Request { id, method: m, .. } = &message
        && let Some(refusal) =
            gateway
                .edge
                .limit_task_request(|| gateway.edge.principal(&parts), m, id)
    {
        return refusal;
    }
    match classify(&parts.headers, &message) {
        Era::Session => {
            "legacy_passthrough".clone_into(method);
            session::serve(gateway, pinned, parts, body, Some(message)).await
        }
        Era::Rejected(error) => reply::bad_request(message_id(&message), &error),
        Era::Stateless => {
            match &message {
                Message::Request { method: m, .. } => m.clone_into(method),
                Message::Notification { .. } => "notification".clone_into(method),
                Message::Response { .. } => {}
            }
            stateless::serve(gateway, &parts, message).await
        }
    }
}

/// Which generation of client sent a request (`mtg_protocol::names` explains the two).
enum Era {
    Session,
    Stateless,
    Rejected(ErrorObject),
}

/// Stateless requests carry their version in `_meta`; `initialize` and requests without
/// any 2026-07-28 marker belong to sessions.
fn classify(headers: &HeaderMap, message: &Message) -> Era {
    let (method, params) = match message {
        Message::Request { method, params, .. } | Message::Notification { method, params } => {
            (method.as_str(), params.as_ref())
        }
        Message::Response { .. } => return Era::Session,
    };
    if method == names::method::INITIALIZE {
        return Era::Session;
    }
    let header_version = headers
        .get(MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    match (meta::protocol_version(params), header_version) {
        (Some(STATELESS_VERSION), _) => Era::Stateless,
        (Some(other), _) => Era::Rejected(unsupported_version(other, &[STATELESS_VERSION])),
        (None, None) => Era::Session,
        (None, Some(STATELESS_VERSION)) => Era::Rejected(ErrorObject::invalid_params(format!(
            "params._meta[\"{}\"] is required in {STATELESS_VERSION} requests",
            meta::META_PROTOCOL_VERSION
        ))),
        (None, Some(v)) if v.starts_with("2024-") || v.starts_with("2025-") => Era::Session,
        (None, Some(other)) => Era::Rejected(unsupported_version(other, &SESSION_VERSIONS)),
    }
}

/// -32022 naming the versions a request of this form accepts: a stateless request
/// (version in `_meta`) only 2026-07-28, a session request (version in the header
/// alone) only the session versions.
fn unsupported_version(requested: &str, supported: &[&str]) -> ErrorObject {
    ErrorObject::new(
        code::UNSUPPORTED_PROTOCOL_VERSION,
        format!(
            "Unsupported protocol version {requested:?}; this request's form accepts {}",
            supported.join(", ")
        ),
    )
    .with_data(json!({"supported": supported, "requested": requested}))
}

fn message_id(message: &Message) -> Option<&Value> {
    match message {
        Message::Request { id, .. } | Message::Response { id, .. } => Some(id),
        Message::Notification { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, params: Value) -> Message {
        Message::Request {
            id: json!(1),
            method: method.into(),
            params: Some(params),
        }
    }

    fn headers(version: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(version) = version {
            headers.insert(MCP_PROTOCOL_VERSION, version.parse().unwrap());
        }
        headers
    }

    fn with_version(version: &str) -> Value {
        json!({"_meta": {meta::META_PROTOCOL_VERSION: version}})
    }

    fn rejected_code(era: Era) -> i64 {
        match era {
            Era::Rejected(error) => error.code,
            Era::Session => panic!("a session request, expected a rejection"),
            Era::Stateless => panic!("modern, expected a rejection"),
        }
    }

    #[test]
    fn the_version_in_meta_makes_a_request_modern() {
        let message = request("tools/list", with_version(STATELESS_VERSION));
        assert!(matches!(classify(&headers(None), &message), Era::Stateless));
        let header = headers(Some(STATELESS_VERSION));
        assert!(matches!(classify(&header, &message), Era::Stateless));
    }

    #[test]
    fn initialize_responses_and_unmarked_requests_are_session_traffic() {
        let initialize = request("initialize", with_version(STATELESS_VERSION));
        assert!(matches!(
            classify(&headers(None), &initialize),
            Era::Session
        ));
        let response = Message::Response {
            id: json!(1),
            outcome: Ok(json!({})),
        };
        assert!(matches!(classify(&headers(None), &response), Era::Session));
        let plain = request("tools/list", json!({}));
        assert!(matches!(classify(&headers(None), &plain), Era::Session));
        for version in ["2025-11-25", "2025-03-26", "2024-11-05"] {
            assert!(matches!(
                classify(&headers(Some(version)), &plain),
                Era::Session
            ));
        }
    }

    #[test]
    fn unknown_versions_and_a_modern_header_without_meta_are_rejected() {
        let plain = request("tools/list", json!({}));
        let unknown = request("tools/list", with_version("2030-01-01"));
        assert_eq!(
            rejected_code(classify(&headers(None), &unknown)),
            code::UNSUPPORTED_PROTOCOL_VERSION
        );
        assert_eq!(
            rejected_code(classify(&headers(Some("1999-01-01")), &plain)),
            code::UNSUPPORTED_PROTOCOL_VERSION
        );
        assert_eq!(
            rejected_code(classify(&headers(Some(STATELESS_VERSION)), &plain)),
            code::INVALID_PARAMS
        );
    }
}
