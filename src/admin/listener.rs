//! The operators' listener: Prometheus `/metrics`, and the admin API under `/admin/`
//! when a token is configured. It is never the client port, so exposing the MCP endpoint
//! never exposes these.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use serde::de::DeserializeOwned;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use super::service::{Admin, AdminError, DEFAULT_LIMIT, Filter};
use super::wire::ErrorReply;
use mtg_protocol::wire::TaskStatus;
use mtg_store::{InspectError, StoreError};

/// How often histograms are folded for rendering (the exporter's own default).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The admin API and the bearer token that opens it.
pub struct AdminApi {
    /// Each upstream's tasks, by name ("" for the one at `/mcp`); a request picks one
    /// with `?upstream=NAME`.
    pub admins: Vec<(String, Admin)>,
    pub token: String,
    /// The pages at `/admin/ui`, signed in with the same token.
    pub console: super::console::Console,
}

impl AdminApi {
    /// The upstream a request names, and its query without `upstream`. Without a name:
    /// the one at `/mcp`, or the only one there is.
    fn select(&self, query: &str) -> Result<(&Admin, String), Refusal> {
        let mut pairs: Vec<(String, String)> = parse_query(query)?;
        let named = pairs
            .iter()
            .position(|(key, _)| key == "upstream")
            .map(|at| pairs.remove(at).1);
        let rest = serde_urlencoded::to_string(&pairs)
            .map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, format!("bad query: {e}")))?;
        let names = || {
            self.admins
                .iter()
                .map(|(name, _)| if name.is_empty() { "\"\" (/mcp)" } else { name })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let found = match named.as_deref() {
            Some(name) => self.admins.iter().find(|(n, _)| n == name),
            None if self.admins.len() == 1 => self.admins.first(),
            None => self.admins.iter().find(|(n, _)| n.is_empty()),
        };
        match (found, named) {
            (Some((_, admin)), _) => Ok((admin, rest)),
            (None, Some(name)) => Err(Refusal::new(
                StatusCode::NOT_FOUND,
                format!("no upstream named {name:?}; the upstreams are {}", names()),
            )),
            (None, None) => Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "name an upstream with ?upstream=NAME; the upstreams are {}",
                    names()
                ),
            )),
        }
    }
}

struct Routes {
    metrics: PrometheusHandle,
    admin: Option<AdminApi>,
}

/// Serves `listener` until the process ends.
pub fn serve(listener: TcpListener, metrics: PrometheusHandle, admin: Option<AdminApi>) {
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let routes = Arc::new(Routes { metrics, admin });
    tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let routes = routes.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let routes = routes.clone();
                    async move { Ok::<_, std::convert::Infallible>(routes.route(request).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

/// Binds the listener at start, so a taken port fails the start, not a later scrape.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot serve metrics on {addr}: {e}")))
}

type Reply = Response<Full<Bytes>>;

/// A refused or failed admin call: its status and what the caller is told.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn reply(self) -> Reply {
        error(self.status, &self.message)
    }
}

impl Routes {
    async fn route(&self, request: Request<Incoming>) -> Reply {
        let path = request.uri().path().to_owned();
        if path == "/metrics" {
            return match *request.method() {
                Method::GET | Method::HEAD => Response::builder()
                    .header(header::CONTENT_TYPE, "text/plain; version=0.0.4")
                    .body(Full::from(self.metrics.render()))
                    .unwrap_or_default(),
                _ => error(StatusCode::METHOD_NOT_ALLOWED, "use GET"),
            };
        }
        let Some(rest) = path.strip_prefix("/admin/") else {
            return error(
                StatusCode::NOT_FOUND,
                "not found: /metrics and /admin/ are served here",
            );
        };
        let Some(api) = &self.admin else {
            return error(
                StatusCode::NOT_FOUND,
                "the admin API is off: start the gateway with --admin-token-file",
            );
        };
        if rest == "ui" || rest.starts_with("ui/") {
            return api.console.serve(request).await;
        }
        if !authorized(&request, &api.token) {
            let mut reply = error(
                StatusCode::UNAUTHORIZED,
                "missing or wrong admin token: send Authorization: Bearer <token>",
            );
            reply.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer realm=\"mcp-task-gateway admin\""),
            );
            return reply;
        }
        let method = request.method().clone();
        let query = request.uri().query().unwrap_or("").to_owned();
        // Nothing here takes a body; drain it so the connection stays usable.
        let _ = request.into_body().collect().await;
        let (admin, query) = match api.select(&query) {
            Ok(selected) => selected,
            Err(refusal) => return refusal.reply(),
        };
        let segments: Vec<&str> = rest.split('/').collect();
        let outcome = match (&method, segments.as_slice()) {
            (&Method::GET, ["tasks"]) => list(admin, &query).await,
            (&Method::GET, ["tasks", task_id]) => found(admin.show(task_id).await, task_id),
            (&Method::POST, ["tasks", task_id, "cancel"]) => {
                found(admin.cancel(task_id).await, task_id)
            }
            (&Method::GET, ["instances"]) => json(admin.instances().await),
            (&Method::GET, ["webhooks"]) => json(admin.webhooks().await),
            (&Method::GET, ["webhooks", id]) => subscription(admin.webhook(id).await, id),
            (&Method::POST, ["webhooks", id, "redeliver"]) => redeliver(admin, id, &query).await,
            (_, ["webhooks"] | ["webhooks", _]) => Err(Refusal::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "use GET (POST /admin/webhooks/<id>/redeliver[?event=<id>] to redeliver)",
            )),
            (_, ["tasks"] | ["tasks", _] | ["instances"]) => Err(Refusal::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "use GET (POST /admin/tasks/<id>/cancel to cancel)",
            )),
            _ => Err(Refusal::new(
                StatusCode::NOT_FOUND,
                "unknown admin path: /admin/tasks, /admin/tasks/<id>, /admin/tasks/<id>/cancel, /admin/instances, /admin/webhooks, /admin/webhooks/<id>, /admin/webhooks/<id>/redeliver",
            )),
        };
        outcome.unwrap_or_else(Refusal::reply)
    }
}

fn authorized(request: &Request<Incoming>, token: &str) -> bool {
    let Some(given) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
    else {
        return false;
    };
    // Constant time: the token must not leak a byte at a time through response timing.
    given.trim().as_bytes().ct_eq(token.as_bytes()).into()
}

/// The query of `GET /admin/tasks`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListQuery {
    status: Option<String>,
    owner: Option<String>,
    principal: Option<String>,
    tool: Option<String>,
    older_than: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

async fn list(admin: &Admin, query: &str) -> Result<Reply, Refusal> {
    let query: ListQuery = parse_query(query)?;
    let status = query
        .status
        .map(|text| {
            serde_json::from_value::<TaskStatus>(serde_json::Value::String(text.clone())).map_err(
                |_| {
                    Refusal::new(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "bad status {text:?}: one of working, input_required, completed, failed, cancelled"
                        ),
                    )
                },
            )
        })
        .transpose()?;
    let older_than = query
        .older_than
        .map(|text| {
            humantime::parse_duration(&text).map_err(|e| {
                Refusal::new(
                    StatusCode::BAD_REQUEST,
                    format!("bad olderThan {text:?}: {e} (e.g. 90s, 30m, 2h)"),
                )
            })
        })
        .transpose()?;
    let filter = Filter {
        status,
        owner: query.owner,
        principal: query.principal,
        tool: query.tool,
        older_than,
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    json(admin.list(&filter, query.cursor, limit).await)
}

/// `POST /admin/webhooks/<id>/redeliver`: one dead letter, or all without `event`.
#[derive(serde::Deserialize)]
struct RedeliverQuery {
    event: Option<String>,
}

async fn redeliver(admin: &Admin, id: &str, query: &str) -> Result<Reply, Refusal> {
    let query: RedeliverQuery = parse_query(query)?;
    subscription(admin.redeliver(id, query.event.as_deref()).await, id)
}

fn subscription<T: Serialize>(
    outcome: Result<Option<T>, AdminError>,
    id: &str,
) -> Result<Reply, Refusal> {
    match outcome {
        Ok(None) => Err(Refusal::new(
            StatusCode::NOT_FOUND,
            format!("no webhook subscription {id:?} (GET /admin/webhooks lists them)"),
        )),
        Ok(Some(value)) => json(Ok(value)),
        Err(e) => Err(failure(e)),
    }
}

fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, Refusal> {
    serde_urlencoded::from_str(query)
        .map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, format!("bad query: {e}")))
}

fn json<T: Serialize>(outcome: Result<T, AdminError>) -> Result<Reply, Refusal> {
    let value = outcome.map_err(failure)?;
    let body = serde_json::to_vec(&value)
        .map_err(|e| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::from(body))
        .unwrap_or_default())
}

fn found<T: Serialize>(
    outcome: Result<Option<T>, AdminError>,
    task_id: &str,
) -> Result<Reply, Refusal> {
    match outcome {
        Ok(None) => Err(Refusal::new(
            StatusCode::NOT_FOUND,
            format!("no task {task_id:?} (unknown, or expired)"),
        )),
        Ok(Some(value)) => json(Ok(value)),
        Err(e) => Err(failure(e)),
    }
}

fn failure(e: AdminError) -> Refusal {
    let status = match &e {
        AdminError::Inspect(InspectError::BadCursor(_)) => StatusCode::BAD_REQUEST,
        AdminError::Inspect(InspectError::Unsupported(_)) => StatusCode::BAD_REQUEST,
        AdminError::Inspect(InspectError::Store(StoreError::Unavailable(_))) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Refusal::new(status, e.to_string())
}

fn error(status: StatusCode, message: &str) -> Reply {
    let body = serde_json::to_vec(&ErrorReply {
        error: message.to_owned(),
    })
    .unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::from(body))
        .unwrap_or_default()
}
