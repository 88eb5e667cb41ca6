//! Legacy (2025-xx, session-based) clients in front of a stdio upstream. There is no
//! upstream HTTP server to pass them through to, so the gateway serves their
//! Streamable HTTP sessions itself: `initialize` is answered from the process's own
//! handshake, `Mcp-Session-Id` is minted here, requests are multiplexed onto the
//! process, upstream requests go out on the request's SSE stream and the client's
//! POSTed answers are mapped back, and DELETE ends the session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::reply::{self, Body, BoxError};
use crate::protocol::jsonrpc::{self, ErrorObject, Message, code};
use crate::protocol::meta::LEGACY_PROTOCOL_VERSION;
use crate::upstream::stdio::{Replier, StdioExchange, StdioUpstream};
use crate::upstream::{Caller, Exchange, UpstreamEvent};

const SESSION_HEADER: &str = "mcp-session-id";
/// Versions a session may use; a client asking for another gets the newest.
const SESSION_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// More sessions than this and new `initialize` requests are refused.
const MAX_SESSIONS: usize = 10_000;

struct Session {
    /// What the client declared: decides which upstream requests may reach it.
    capabilities: Map<String, Value>,
    /// Upstream requests sent to the client and not answered yet, by id.
    pending: Mutex<HashMap<String, Replier>>,
    /// The client's requests in flight, by the client's id, to cancel them.
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    ended: CancellationToken,
}

pub struct StdioSessions {
    upstream: Arc<StdioUpstream>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl StdioSessions {
    pub fn new(upstream: Arc<StdioUpstream>) -> Self {
        Self {
            upstream,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub async fn handle(&self, parts: &Parts, body: Bytes) -> Response<Body> {
        let session_id = parts
            .headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let session = session_id.as_deref().and_then(|id| self.get(id));
        match (&parts.method, session_id, session) {
            (&Method::POST, None, _) => self.initialize(&body).await,
            (_, Some(_), None) => reply::error_with_status(
                StatusCode::NOT_FOUND,
                &ErrorObject::new(
                    code::INVALID_REQUEST,
                    "Session not found: initialize a new one",
                ),
            ),
            (&Method::POST, Some(_), Some(session)) => self.post(session, &body).await,
            (&Method::DELETE, Some(id), Some(session)) => {
                self.lock().remove(&id);
                session.ended.cancel();
                tracing::debug!(session = %id, "session ended by the client");
                reply::text(StatusCode::OK, "")
            }
            (&Method::GET, Some(_), Some(_)) => reply::plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "this gateway offers no standalone SSE stream; messages come on each request's stream\n",
            ),
            _ => reply::plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"),
        }
    }

    async fn initialize(&self, body: &[u8]) -> Response<Body> {
        let (id, params) = match Message::parse(body) {
            Ok(Message::Request { id, method, params }) if method == "initialize" => (id, params),
            Ok(_) => {
                return reply::error_with_status(
                    StatusCode::BAD_REQUEST,
                    &ErrorObject::new(
                        code::INVALID_REQUEST,
                        "Bad Request: no session; send initialize first",
                    ),
                );
            }
            Err(e) => return reply::error(None, &e.to_error_object()),
        };
        if self.lock().len() >= MAX_SESSIONS {
            return reply::error_with_status(
                StatusCode::SERVICE_UNAVAILABLE,
                &ErrorObject::internal("too many sessions; end some with DELETE"),
            );
        }
        let params = params.unwrap_or_default();
        let capabilities = params
            .get("capabilities")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let no_caps = Map::new();
        let caller = Caller {
            capabilities: &no_caps,
            auth: None,
        };
        let mut result =
            match crate::upstream::Upstream::server_info(self.upstream.as_ref(), &caller).await {
                Ok(server) => server,
                Err(e) => return reply::error(Some(&id), &ErrorObject::internal(e.to_string())),
            };
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = requested
            .filter(|v| SESSION_VERSIONS.contains(v))
            .unwrap_or(LEGACY_PROTOCOL_VERSION);
        result["protocolVersion"] = version.into();
        let session_id = uuid::Uuid::new_v4().to_string();
        self.lock().insert(
            session_id.clone(),
            Arc::new(Session {
                capabilities,
                pending: Mutex::new(HashMap::new()),
                in_flight: Mutex::new(HashMap::new()),
                ended: CancellationToken::new(),
            }),
        );
        tracing::debug!(session = %session_id, version, "session opened");
        let mut response = reply::json(StatusCode::OK, jsonrpc::success_body_of(&id, &result));
        if let Ok(value) = HeaderValue::from_str(&session_id) {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
        response
    }

    async fn post(&self, session: Arc<Session>, body: &[u8]) -> Response<Body> {
        let message = match Message::parse(body) {
            Ok(message) => message,
            Err(e) => return reply::error(None, &e.to_error_object()),
        };
        match message {
            Message::Request { id, method, .. } if method == "initialize" => reply::error(
                Some(&id),
                &ErrorObject::new(
                    code::INVALID_REQUEST,
                    "Invalid Request: Server already initialized",
                ),
            ),
            Message::Request { id, method, .. } if method == "ping" => {
                reply::json(StatusCode::OK, jsonrpc::success_body_of(&id, &json!({})))
            }
            Message::Request { id, method, params } => {
                self.request(session, id, method, params).await
            }
            Message::Response { id, outcome } => {
                let replier = session
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id_key(&id));
                match replier {
                    Some(replier) => {
                        if let Err(e) = replier.reply(&id, outcome) {
                            tracing::warn!(error = %e, "could not pass a client's answer upstream");
                        }
                    }
                    None => tracing::debug!(%id, "answer to no pending upstream request"),
                }
                reply::accepted()
            }
            Message::Notification { method, params } => {
                if method == "notifications/cancelled"
                    && let Some(request_id) = params.as_ref().and_then(|p| p.get("requestId"))
                    && let Some(token) = session
                        .in_flight
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&id_key(request_id))
                {
                    token.cancel();
                }
                // Others (initialized, roots/list_changed) concern the session the
                // gateway keeps with the process, not this one.
                reply::accepted()
            }
        }
    }

    /// Sends the request upstream and streams what comes back as SSE.
    async fn request(
        &self,
        session: Arc<Session>,
        id: Value,
        method: String,
        params: Option<Value>,
    ) -> Response<Body> {
        let caller = Caller {
            capabilities: &session.capabilities,
            auth: None,
        };
        let exchange = match self.upstream.open(&caller, &method, params).await {
            Ok(exchange) => exchange,
            Err(e) => return reply::error(Some(&id), &ErrorObject::internal(e.to_string())),
        };
        let cancel = session.ended.child_token();
        session
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id_key(&id), cancel.clone());
        let (frames, body) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(16);
        tokio::spawn(relay(session, exchange, id, cancel, frames));
        let stream = futures_util::stream::unfold(body, |mut body| async move {
            body.recv().await.map(|frame| (frame, body))
        });
        let mut response = Response::new(StreamBody::new(stream).boxed());
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    }

    fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.lock().get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Copies one exchange onto the request's SSE stream until its answer, a cancellation,
/// the end of the session, or the client going away.
async fn relay(
    session: Arc<Session>,
    mut exchange: StdioExchange,
    client_id: Value,
    cancel: CancellationToken,
    frames: mpsc::Sender<Result<Frame<Bytes>, BoxError>>,
) {
    let replier = exchange.replier();
    loop {
        let event = tokio::select! {
            event = exchange.next() => event,
            () = cancel.cancelled() => {
                let _ = exchange.cancel("cancelled by the client").await;
                break;
            }
            () = frames.closed() => break,
        };
        let message = match event {
            Some(Ok(UpstreamEvent::Response { outcome, .. })) => {
                let _ = frames
                    .send(Ok(sse(&jsonrpc::response_value(
                        client_id.clone(),
                        outcome,
                    ))))
                    .await;
                break;
            }
            Some(Ok(UpstreamEvent::Request { id, method, params })) => {
                session
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id_key(&id), replier.clone());
                jsonrpc::request_value(id, &method, params)
            }
            Some(Ok(UpstreamEvent::Notification { method, params })) => {
                jsonrpc::notification_value(&method, params)
            }
            Some(Err(e)) => {
                let error = ErrorObject::internal(e.to_string());
                let _ = frames
                    .send(Ok(sse(&jsonrpc::response_value(
                        client_id.clone(),
                        Err(error),
                    ))))
                    .await;
                break;
            }
            None => break,
        };
        if frames.send(Ok(sse(&message))).await.is_err() {
            break;
        }
    }
    session
        .in_flight
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id_key(&client_id));
}

fn sse(message: &Value) -> Frame<Bytes> {
    let data = serde_json::to_string(message).expect("JSON values serialize");
    Frame::data(Bytes::from(format!("event: message\ndata: {data}\n\n")))
}

/// Ids as map keys; a number and its decimal string are the same id (clients differ).
fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) if s.parse::<u64>().is_ok() => s.clone(),
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}
