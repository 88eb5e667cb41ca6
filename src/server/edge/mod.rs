//! The connection edge: accepting and spreading connections over the workers, TLS, and
//! the checks every `/mcp` request passes before a client generation's handler sees it
//! (origin, caller, scopes, body limit, rate of `tasks/*`).

pub(crate) mod accept;
pub(crate) mod authn;
pub(crate) mod balance;
pub(crate) mod head_check;
pub(crate) mod idle_poll;
pub(crate) mod task_rate;
pub(crate) mod tls;
pub(crate) mod workers;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderMap, Response, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::server::reply::Body;
use crate::server::{Routes, route};
use mtg_transport::pinned::{self, PinnedConn};

/// How long in-flight requests may take to finish after shutdown begins.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// What every `/mcp` request passes before a handler sees it, built at start (the files
/// the config names are read and checked then).
pub(crate) struct Edge {
    /// The TLS listener's acceptor (`--tls-cert`), if on.
    pub tls: Option<tls::Acceptor>,
    /// `--max-task-requests-per-second`, if set.
    task_rate: Option<task_rate::TaskRequestRate>,
    allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    /// Whether the standard headers must match the body (not `--lenient-headers`).
    pub strict_headers: bool,
    identity_header: Option<http::HeaderName>,
}

/// What the edge is built from (`settings::edge`).
pub(crate) struct EdgeSettings {
    pub tls: Option<tls::TlsFiles>,
    pub max_task_requests_per_second: u32,
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub strict_headers: bool,
    pub identity_header: Option<http::HeaderName>,
}

impl Edge {
    /// Loads the TLS files, refusing a pair that does not load.
    pub(crate) fn start(settings: EdgeSettings) -> std::io::Result<Self> {
        let tls = settings
            .tls
            .map(tls::Acceptor::start)
            .transpose()
            .map_err(std::io::Error::other)?;
        Ok(Self {
            tls,
            task_rate: task_rate::TaskRequestRate::new(settings.max_task_requests_per_second),
            allowed_origins: settings.allowed_origins,
            max_body_bytes: settings.max_body_bytes,
            strict_headers: settings.strict_headers,
            identity_header: settings.identity_header,
        })
    }

    /// The refusal of a `tasks/*` request over its caller's rate, if any; `principal` is
    /// asked only then.
    pub(crate) fn limit_task_request(
        &self,
        principal: impl FnOnce() -> String,
        method: &str,
        id: &Value,
    ) -> Option<Response<Body>> {
        let rate = self.task_rate.as_ref()?;
        if !method.starts_with("tasks/") {
            return None;
        }
        rate.check(&principal(), Some(id))
    }

    /// Who is calling (`edge::authn::admit` decided it): the token's subject, the configured
    /// identity header, else a hash of the credentials. Tasks and gateway-served
    /// sessions are bound to it.
    pub(crate) fn principal(&self, parts: &Parts) -> String {
        match parts.extensions.get::<authn::Caller>() {
            Some(caller) => caller.principal.clone(),
            None => principal(&parts.headers, self.identity_header.as_ref()),
        }
    }

    /// Whether a browser's `Origin` may call.
    pub(crate) fn origin_allowed(&self, origin: &http::HeaderValue) -> bool {
        origin_allowed(origin, &self.allowed_origins)
    }
}

/// Serves the connections of this worker's `seat` until `shutdown` resolves, then lets
/// in-flight requests finish.
pub(crate) async fn serve(
    listener: TcpListener,
    routes: Arc<Routes>,
    mut seat: balance::Seat,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer, open) = tokio::select! {
            next = seat.next_connection(&listener) => next,
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let tls = routes.edge.tls.clone();
        let routes = routes.clone();
        let pinned = Arc::new(PinnedConn::new(
            routes.pinned_connectors.clone(),
            pinned::IDLE_LIMIT,
        ));
        let refusals = Arc::new(head_check::Refusals::default());
        let answers = refusals.clone();
        let service = hyper::service::service_fn(move |request| {
            handle(routes.clone(), pinned.clone(), answers.clone(), request)
        });
        let watcher = graceful.watcher();
        let builder = builder.clone();
        tokio::spawn(async move {
            let _open = open;
            let served = match tls {
                None => {
                    let stream = head_check::HeadCheck::new(stream, refusals);
                    let connection =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(connection.into_owned()).await
                }
                // The handshake runs here, not in the accept loop: a slow client delays
                // only itself.
                Some(tls) => match tls.accept(stream).await {
                    Ok(stream) => {
                        let stream = head_check::HeadCheck::new(stream, refusals);
                        let connection =
                            builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                        watcher.watch(connection.into_owned()).await
                    }
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                },
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    // Other workers now serve what they would have handed over.
    drop(seat);
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections were still open after the grace period");
    }
}

/// One request: the stand-in of a head `HeadCheck` refused is answered, never routed.
/// The handling is boxed: hyper keeps room for the service's future for as long as the
/// connection (or HTTP/2 stream) lives, and a request's handling takes 5.4 KiB (its rare
/// branches are boxed further down). An idle keep-alive connection or a long stream then
/// holds a pointer instead.
async fn handle(
    routes: Arc<Routes>,
    pinned: Arc<PinnedConn>,
    refusals: Arc<head_check::Refusals>,
    request: http::Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    if let Some(refused) = refusals.answer(&request) {
        return Ok(refused);
    }
    Ok(Box::pin(route(&routes, &pinned, request)).await)
}

/// Who is calling: the configured identity header, else a hash of the credentials.
/// Tasks are bound to it.
pub(crate) fn principal(headers: &HeaderMap, identity_header: Option<&http::HeaderName>) -> String {
    use sha2::{Digest, Sha256};
    let source = match identity_header {
        Some(name) => headers.get(name),
        None => headers.get(header::AUTHORIZATION),
    };
    match source {
        Some(value) => format!("{:x}", Sha256::digest(value.as_bytes())),
        None => "anonymous".to_owned(),
    }
}

/// Browsers send `Origin`; only configured origins (default: loopback) may call, which
/// stops DNS rebinding.
pub(crate) fn origin_allowed(origin: &http::HeaderValue, allowed: &[String]) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    if !allowed.is_empty() {
        return allowed.iter().any(|a| a == origin || a == "*");
    }
    let Ok(uri) = origin.parse::<http::Uri>() else {
        return false;
    };
    matches!(
        uri.host(),
        Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(value: &str) -> http::HeaderValue {
        http::HeaderValue::from_str(value).unwrap()
    }

    #[test]
    fn only_loopback_origins_pass_by_default() {
        for allowed in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
        ] {
            assert!(origin_allowed(&origin(allowed), &[]), "{allowed}");
        }
        for refused in [
            "http://evil.example",
            "http://localhost.evil.example",
            "null",
            "http://127.0.0.2",
        ] {
            assert!(!origin_allowed(&origin(refused), &[]), "{refused}");
        }
    }

    #[test]
    fn configured_origins_replace_the_loopback_default() {
        let allowed = vec!["https://app.example".to_owned()];
        assert!(origin_allowed(&origin("https://app.example"), &allowed));
        assert!(!origin_allowed(&origin("http://localhost"), &allowed));
        assert!(!origin_allowed(
            &origin("https://app.example.evil"),
            &allowed
        ));
        assert!(origin_allowed(&origin("http://any"), &["*".to_owned()]));
        let not_text = http::HeaderValue::from_bytes(b"http://\xff").unwrap();
        assert!(!origin_allowed(&not_text, &[]));
    }
}
