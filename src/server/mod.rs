//! The HTTP front: the routes, and which client generation sent each `/mcp` request.
//! `edge` holds the connections and the checks every request passes; `stateless` serves
//! 2026-07-28 clients, `session` 2025-xx clients.

pub mod edge;
mod reply;
pub(crate) mod session;
mod sse;
mod stateless;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::tasks::TaskService;
use crate::tasks::deferral::Deferrals;
use crate::tasks::dialect_2025::SessionDialect;
use crate::tasks::listen::Followers;
use crate::tasks::mrtr_bridge::MrtrBridge;
use crate::tasks::policy::Policies;
use crate::upstream::Upstream;
use mtg_protocol::headers::MCP_PROTOCOL_VERSION;
use mtg_protocol::jsonrpc::{ErrorObject, Message, code};
use mtg_protocol::meta;
use mtg_transport::HttpClient;
use mtg_transport::pinned::PinnedConn;
use reply::Body;

use mtg_protocol::names::header::MCP_SESSION_ID as SESSION_HEADER;
use mtg_protocol::names::{self, SESSION_VERSIONS, STATELESS_VERSION};

/// What the listener serves: the edge every request passes, and an upstream's world
/// per path (`/mcp`, `/mcp/NAME`).
pub struct Routes {
    pub edge: Arc<Edge>,
    /// The upstream at `/mcp` (`--upstream URL` or `--upstream-cmd`), if any.
    pub default: Option<Arc<Gateway>>,
    /// The upstreams at `/mcp/NAME`.
    pub named: HashMap<String, Arc<Gateway>>,
    /// How each client connection's [`PinnedConn`] connects to the upstreams.
    pinned_connectors: Arc<mtg_transport::PinnedConnectors>,
}

impl Routes {
    pub fn new(
        edge: Arc<Edge>,
        default: Option<Arc<Gateway>>,
        named: HashMap<String, Arc<Gateway>>,
    ) -> Self {
        Self {
            edge,
            default,
            named,
            pinned_connectors: mtg_transport::pinned_connectors(),
        }
    }

    /// The world serving `/mcp` (`name` `None`) or `/mcp/NAME`.
    fn world(&self, name: Option<&str>) -> Option<&Arc<Gateway>> {
        match name {
            None => self.default.as_ref(),
            Some(name) => self.named.get(name),
        }
    }

    /// The paths served, for a 404 that says where to go instead.
    fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.named.keys().map(|n| format!("/mcp/{n}")).collect();
        paths.sort();
        if self.default.is_some() {
            paths.insert(0, "/mcp".to_owned());
        }
        paths
    }
}

/// Everything a request handler needs for one upstream, built once at start: the edge
/// every request passes, and the services behind it. Each path (`/mcp`, `/mcp/NAME`)
/// has one, so nothing of one upstream's reaches another's.
pub struct Gateway {
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
    pub dialect: SessionDialect,
    pub followers: Followers,
    pub deferrals: Deferrals,
    /// `--progress-keepalive-ms`, for the streams of calls that asked for progress.
    pub progress_keepalive: Option<sse::keepalive::Every>,
    pub policies: Policies,
    pub upstream_timeout: Option<Duration>,
    check_upstream_readiness: bool,
    /// Session clients whose upstream has no sessions to pass them through to.
    sessions: Arc<session::served::GatewaySessions>,
    /// Pass-through sessions the upstream confirmed lately (`session/tasks/confirm.rs`).
    confirmed_sessions: session::tasks::confirm::Confirmed,
    /// Cancelled when the gateway starts to stop: long-lived streams end gracefully
    /// instead of holding the connection drain.
    pub closing: tokio_util::sync::CancellationToken,
}

/// What the services behind the edge are built from (`settings::gateway`).
pub struct GatewaySettings {
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
    pub fn new(
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
            dialect: SessionDialect::new(tasks.clone()),
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
            sessions: session::served::GatewaySessions::start(settings.session_limits, meter),
            confirmed_sessions: Default::default(),
        }
    }
}

pub use edge::{Edge, EdgeSettings};

/// `pinned` is the client connection's own connection to the upstream, for pass-through.
pub(crate) async fn route(
    routes: &Routes,
    pinned: &PinnedConn,
    request: Request<Incoming>,
) -> Response<Body> {
    let path = request.uri().path();
    if path == "/healthz" {
        return reply::plain(StatusCode::OK, "ok\n");
    }
    if path == "/readyz" {
        return readiness(routes).await;
    }
    if let Some(resource) = path.strip_prefix("/.well-known/oauth-protected-resource") {
        // The metadata of `/mcp/NAME` lives at `…/mcp/NAME` (RFC 9728 §3.1); any other
        // suffix is the `/mcp` resource's, as before there were names.
        let world = match resource.strip_prefix("/mcp/") {
            Some(name) => routes.named.get(name),
            None => routes.default.as_ref(),
        };
        return match world {
            Some(gateway) => edge::authn::metadata(gateway),
            None => unknown_path(routes, path),
        };
    }
    let name = match path.strip_prefix("/mcp") {
        Some("") => None,
        Some(rest) => match rest.strip_prefix('/') {
            Some(name) if !name.is_empty() && !name.contains('/') => Some(name),
            _ => return unknown_path(routes, path),
        },
        None => return unknown_path(routes, path),
    };
    let Some(gateway) = routes.world(name) else {
        return unknown_path(routes, path);
    };
    let span = tracing::info_span!("request", method = tracing::field::Empty);
    crate::telemetry::traces::continue_from_headers(&span, request.headers());
    let started = std::time::Instant::now();
    let mut method = String::from("invalid");
    let response = mcp_endpoint(gateway, pinned, request, &mut method)
        .instrument(span)
        .await;
    gateway
        .tasks
        .meter()
        .requests()
        .served(&method, started.elapsed());
    response
}

/// 404 naming the paths served: a JSON-RPC error, since an MCP client shows its
/// message.
fn unknown_path(routes: &Routes, path: &str) -> Response<Body> {
    let paths = routes.paths();
    let message = match path.strip_prefix("/mcp/") {
        Some(name) => format!(
            "no upstream named {name:?} here; this gateway serves {}",
            paths.join(", ")
        ),
        None => format!("not found: this gateway serves MCP at {}", paths.join(", ")),
    };
    reply::error_with_status(
        StatusCode::NOT_FOUND,
        &ErrorObject::new(code::INVALID_REQUEST, message).with_data(json!({"paths": paths})),
    )
}

/// Ready when the store answers and (unless skipped) an upstream does. With named
/// upstreams the body says how each is; one upstream down does not take the others'
/// paths out of service.
async fn readiness(routes: &Routes) -> Response<Body> {
    let worlds: Vec<&Arc<Gateway>> = routes.default.iter().chain(routes.named.values()).collect();
    let Some(first) = worlds.first() else {
        return reply::plain(StatusCode::SERVICE_UNAVAILABLE, "no upstream\n");
    };
    let mut problems = Vec::new();
    if let Err(e) = first.tasks.store().ping().await {
        problems.push(format!("store: {e}"));
    }
    let mut upstreams = serde_json::Map::new();
    let mut upstream_ready = false;
    for gateway in &worlds {
        let state = if gateway.check_upstream_readiness {
            gateway.upstream.ready().await.map_err(|e| e.to_string())
        } else {
            Ok(())
        };
        let label = gateway.name.clone().unwrap_or_default();
        match state {
            Ok(()) => {
                upstream_ready = true;
                upstreams.insert(label, json!("ready"));
            }
            Err(e) => {
                match &gateway.name {
                    Some(name) => problems.push(format!("upstream {name}: {e}")),
                    None => problems.push(format!("upstream: {e}")),
                }
                upstreams.insert(label, json!(e));
            }
        }
    }
    let ready = upstream_ready && !problems.iter().any(|p| p.starts_with("store:"));
    if routes.named.is_empty() && ready {
        return reply::plain(StatusCode::OK, "ready\n");
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = json!({"ready": ready, "problems": problems});
    if !routes.named.is_empty() {
        body["upstreams"] = Value::Object(upstreams);
    }
    let mut response = reply::json(status, serde_json::to_vec(&body).unwrap_or_default());
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
    // gateway does not read it, unless it may say 2026-07-28, which outranks the
    // session id (`classify`). The metric label keeps its old name for dashboards.
    if parts.headers.contains_key(SESSION_HEADER)
        && (parts.method != Method::POST || !may_say_stateless(&parts.headers, &body))
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

/// Whether a request with `Mcp-Session-Id` may be other than session traffic by
/// [`classify`], judged without parsing: its header is not a session version, or its
/// body may hold the `_meta` version key (`protocolVersion`, or an escape that could
/// spell it). Only then is session traffic parsed.
fn may_say_stateless(headers: &HeaderMap, body: &[u8]) -> bool {
    let session_header = match headers.get(MCP_PROTOCOL_VERSION) {
        None => true,
        Some(v) => v
            .to_str()
            .map(str::trim)
            .is_ok_and(|v| v.starts_with("2024-") || v.starts_with("2025-")),
    };
    !session_header
        || memchr::memchr(b'\\', body).is_some()
        || memchr::memmem::find(body, b"protocolVersion").is_some()
}

/// A request's generation, one rule for every path (ARCHITECTURE.md, "The era"):
/// `initialize` opens a session; else a version in `_meta` makes the request of the
/// 2026-07-28 form (2026-07-28, or -32022), whatever its header or `Mcp-Session-Id`
/// say (a disagreeing header is -32020 on the stateless path); else the header
/// decides (2026-07-28 without `_meta`: -32602; a session version or none: session
/// traffic; another: -32022). `Mcp-Session-Id` never makes a request a session's
/// when its own version says 2026-07-28: such a request is answered as 2026-07-28,
/// its session id ignored.
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

    /// The generation rule over every combination of its signals (#43): the header,
    /// the `_meta` version (also as a non-string), `Mcp-Session-Id`, the method and the
    /// message kind, with the `_meta` key sometimes written with JSON escapes.
    mod generation_props {
        use super::*;
        use proptest::prelude::*;

        /// What ARCHITECTURE.md ("The era") says, written apart from `classify`.
        #[derive(Debug, PartialEq)]
        enum Expected {
            Session,
            Stateless,
            Rejected(i64),
        }

        fn expected(
            kind: u8,
            method: &str,
            meta: &Option<Value>,
            header: Option<&str>,
        ) -> Expected {
            if kind == 2 || method == "initialize" {
                return Expected::Session;
            }
            match meta.as_ref().and_then(Value::as_str) {
                Some("2026-07-28") => return Expected::Stateless,
                Some(_) => return Expected::Rejected(code::UNSUPPORTED_PROTOCOL_VERSION),
                None => {}
            }
            match header.map(str::trim) {
                None => Expected::Session,
                Some("2026-07-28") => Expected::Rejected(code::INVALID_PARAMS),
                Some(v) if v.starts_with("2024-") || v.starts_with("2025-") => Expected::Session,
                Some(_) => Expected::Rejected(code::UNSUPPORTED_PROTOCOL_VERSION),
            }
        }

        fn header_version() -> impl Strategy<Value = Option<String>> {
            prop_oneof![
                Just(None),
                Just(Some("2026-07-28".to_owned())),
                Just(Some(" 2026-07-28 ".to_owned())),
                Just(Some("2025-11-25".to_owned())),
                Just(Some("2025-06-18".to_owned())),
                Just(Some("2024-11-05".to_owned())),
                Just(Some("2026-01-01".to_owned())),
                "[ -~]{0,12}".prop_map(Some),
            ]
        }

        fn meta_version() -> impl Strategy<Value = Option<Value>> {
            prop_oneof![
                Just(None),
                Just(Some(json!("2026-07-28"))),
                Just(Some(json!("2025-11-25"))),
                Just(Some(json!("2030-01-01"))),
                Just(Some(json!(20260728))),
                Just(Some(Value::Null)),
                "[ -~]{0,12}".prop_map(|v| Some(json!(v))),
            ]
        }

        fn session_id() -> impl Strategy<Value = Option<String>> {
            prop_oneof![
                Just(None),
                Just(Some("../..".to_owned())),
                Just(Some("x".repeat(5000))),
                Just(Some("mtg-t.abc".to_owned())),
                "[0-9a-f]{32}".prop_map(Some),
            ]
        }

        fn method() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "initialize",
                "tasks/get",
                "tasks/result",
                "tasks/list",
                "tools/call",
                "tools/list",
                "ping",
                "notifications/initialized",
            ])
        }

        /// The body as a client may write it: the `_meta` key plain, or with escapes.
        fn body(kind: u8, method: &str, meta: &Option<Value>, escape: u8) -> Vec<u8> {
            let mut params = json!({"taskId": "t-1", "name": "echo"});
            if let Some(version) = meta {
                params["_meta"] = json!({ meta::META_PROTOCOL_VERSION: version });
            }
            let message = match kind {
                0 => json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
                1 => json!({"jsonrpc": "2.0", "method": method, "params": params}),
                _ => json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            };
            let text = message.to_string();
            let key = meta::META_PROTOCOL_VERSION;
            let written = match escape {
                0 => key.to_owned(),
                1 => key.replace('/', "\\/"),
                _ => format!("\\u{:04x}{}", key.as_bytes()[0], &key[1..]),
            };
            text.replace(key, &written).into_bytes()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// One rule, whatever the session id: a request is classified as the
            /// documented table says, and the session id never changes it.
            #[test]
            fn every_combination_of_signals_follows_the_one_rule(
                kind in 0u8..3,
                method in method(),
                meta_v in meta_version(),
                header in header_version(),
                session in session_id(),
                escape in 0u8..3,
            ) {
                let bytes = body(kind, method, &meta_v, escape);
                let message = Message::parse(&bytes).expect("a JSON-RPC message");
                let mut headers = HeaderMap::new();
                if let Some(v) = &header {
                    headers.insert(MCP_PROTOCOL_VERSION, v.parse().unwrap());
                }
                let without = classify(&headers, &message);
                if let Some(id) = &session {
                    headers.insert(SESSION_HEADER, id.parse().unwrap());
                }
                let with = classify(&headers, &message);
                let outcome = |era: Era| match era {
                    Era::Session => Expected::Session,
                    Era::Stateless => Expected::Stateless,
                    Era::Rejected(e) => Expected::Rejected(e.code),
                };
                let want = expected(kind, method, &meta_v, header.as_deref());
                prop_assert_eq!(outcome(without), outcome(with));
                prop_assert_eq!(outcome(classify(&headers, &message)), want);
            }

            /// Session traffic is read only when it may be other than a session's: a
            /// POST with `Mcp-Session-Id` that the rule gives to 2026-07-28 (or
            /// refuses) is always parsed, however its `_meta` key is written.
            #[test]
            fn session_traffic_the_rule_may_take_is_always_read(
                kind in 0u8..3,
                method in method(),
                meta_v in meta_version(),
                header in header_version(),
                escape in 0u8..3,
            ) {
                let bytes = body(kind, method, &meta_v, escape);
                let mut headers = HeaderMap::new();
                if let Some(v) = &header {
                    headers.insert(MCP_PROTOCOL_VERSION, v.parse().unwrap());
                }
                headers.insert(SESSION_HEADER, "s-1".parse().unwrap());
                if expected(kind, method, &meta_v, header.as_deref()) != Expected::Session {
                    prop_assert!(may_say_stateless(&headers, &bytes));
                }
            }
        }
    }
}
