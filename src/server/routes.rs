//! The paths served: `/mcp` and `/mcp/NAME` (each upstream's world, its `Gateway`),
//! `/healthz`, `/readyz` and the OAuth metadata. A `/mcp` request goes on to
//! `super::mcp_endpoint`.

use std::collections::HashMap;
use std::sync::Arc;

use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tracing::Instrument;

use super::reply::{self, Body};
use super::{Edge, Gateway, edge, mcp_endpoint};
use mtg_protocol::jsonrpc::{ErrorObject, code};
use mtg_transport::pinned::PinnedConn;

/// What the listener serves: the edge every request passes, and an upstream's world
/// per path (`/mcp`, `/mcp/NAME`).
pub(crate) struct Routes {
    pub edge: Arc<Edge>,
    /// The upstream at `/mcp` (`--upstream URL` or `--upstream-cmd`), if any.
    pub default: Option<Arc<Gateway>>,
    /// The upstreams at `/mcp/NAME`.
    pub named: HashMap<String, Arc<Gateway>>,
    /// How each client connection's [`PinnedConn`] connects to the upstreams.
    pub(super) pinned_connectors: Arc<mtg_transport::PinnedConnectors>,
}

impl Routes {
    pub(crate) fn new(
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
