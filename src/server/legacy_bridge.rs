//! Legacy (2025-xx, session) clients in front of a 2026-07-28 upstream, which has no
//! sessions to pass them through to: the gateway serves their sessions itself.
//!
//! Each request becomes a stateless 2026-07-28 request carrying the capabilities the
//! client declared at `initialize`. When the upstream answers `tools/call`,
//! `prompts/get` or `resources/read` with an `InputRequiredResult`, its `inputRequests`
//! go to the client as server-to-client requests on that POST's SSE stream; once the
//! client has answered them all, the gateway retries with the answers and the exact
//! `requestState`, round after round, and the final answer ends the stream.
//!
//! Sessions live in this instance's memory: legacy sessions need sticky routing anyway.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use super::Gateway;
use super::reply::{self, Body};
use crate::protocol::jsonrpc::{self, ErrorObject, Message, code};
use crate::protocol::meta::LEGACY_PROTOCOL_VERSION;
use crate::protocol::mrtr::{self, InputRequired, MAX_ROUNDS_WITHOUT_INPUT};
use crate::upstream::{Caller, Upstream, UpstreamError, UpstreamEvent, forward};

const SESSION_HEADER: &str = "mcp-session-id";
/// Legacy versions a client may negotiate; others get the newest.
const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Methods whose answer may be an `InputRequiredResult`.
const MRTR_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];
/// Session capabilities passed on to the upstream with every request.
const CLIENT_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];
const MAX_SESSIONS: usize = 10_000;
/// A session unused for this long is forgotten (clients that never send DELETE).
const IDLE_SESSION: Duration = Duration::from_secs(3600);

/// The legacy sessions this gateway instance serves.
#[derive(Default)]
pub struct LegacySessions {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

struct Session {
    capabilities: Map<String, Value>,
    /// The credentials it was opened with; other credentials do not find it.
    auth: Option<HeaderValue>,
    last_used: Mutex<Instant>,
    next_request_id: AtomicU64,
    /// Server-to-client requests awaiting the client's answer, by JSON id.
    awaiting: Mutex<HashMap<String, oneshot::Sender<Result<Value, ErrorObject>>>>,
    /// Client requests being bridged, by JSON id, so `notifications/cancelled` stops them.
    in_flight: Mutex<HashMap<String, AbortHandle>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A JSON-RPC id as a map key: `1` and `"1"` stay distinct.
fn id_key(id: &Value) -> String {
    id.to_string()
}

impl LegacySessions {
    pub async fn serve(&self, gateway: &Gateway, parts: &Parts, body: Bytes) -> Response<Body> {
        let auth = parts.headers.get(header::AUTHORIZATION);
        let session_id = parts
            .headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok());
        if parts.method == Method::DELETE {
            return match session_id.and_then(|id| self.remove(id, auth)) {
                Some(_) => reply::plain(StatusCode::OK, ""),
                None => session_not_found(),
            };
        }
        if parts.method != Method::POST {
            let mut response = reply::plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "this gateway offers no standalone SSE stream for this upstream\n",
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            return response;
        }
        let message = match Message::parse(&body) {
            Ok(message) => message,
            Err(e) => {
                return reply::error_with_status(StatusCode::BAD_REQUEST, &e.to_error_object());
            }
        };
        if let Message::Request { id, method, params } = &message
            && method == "initialize"
        {
            return self.initialize(gateway, id, params.as_ref(), auth).await;
        }
        let Some(session_id) = session_id else {
            return reply::error_with_status(
                StatusCode::BAD_REQUEST,
                &ErrorObject::new(
                    code::INVALID_REQUEST,
                    "Bad Request: send initialize first, then Mcp-Session-Id on every request",
                ),
            );
        };
        let Some(session) = self.find(session_id, auth) else {
            return session_not_found();
        };
        match message {
            Message::Request { id, method, params } => {
                session.request(gateway, id, method, params).await
            }
            Message::Notification { method, params } => {
                if method == "notifications/cancelled"
                    && let Some(request_id) = params.as_ref().and_then(|p| p.get("requestId"))
                {
                    session.cancel(request_id);
                }
                reply::accepted()
            }
            Message::Response { id, outcome } => {
                session.answer(&id, outcome);
                reply::accepted()
            }
        }
    }

    async fn initialize(
        &self,
        gateway: &Gateway,
        id: &Value,
        params: Option<&Value>,
        auth: Option<&HeaderValue>,
    ) -> Response<Body> {
        let declared = params
            .and_then(|p| p.get("capabilities"))
            .and_then(Value::as_object);
        let capabilities: Map<String, Value> = CLIENT_CAPABILITIES
            .iter()
            .filter_map(|name| {
                let value = declared?.get(*name).filter(|v| v.is_object())?;
                Some(((*name).to_owned(), value.clone()))
            })
            .collect();
        let requested = params
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = requested
            .filter(|v| LEGACY_VERSIONS.contains(v))
            .unwrap_or(LEGACY_PROTOCOL_VERSION);
        let caller = Caller {
            capabilities: &capabilities,
            auth,
        };
        let server = match gateway.upstream.server_info(&caller).await {
            Ok(server) => server,
            Err(e) => return reply::error(Some(id), &ErrorObject::internal(e.to_string())),
        };
        let result = initialize_result(&server, version);
        let Some(session_id) = self.open(capabilities, auth.cloned()) else {
            return reply::error_with_status(
                StatusCode::SERVICE_UNAVAILABLE,
                &ErrorObject::internal("too many legacy sessions; try again later"),
            );
        };
        tracing::info!(session = %session_id, version, "serving a legacy session for a 2026-07-28 upstream");
        let mut response = reply::json(StatusCode::OK, jsonrpc::success_body_of(id, &result));
        if let Ok(value) = HeaderValue::from_str(&session_id) {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
        response
    }

    fn open(&self, capabilities: Map<String, Value>, auth: Option<HeaderValue>) -> Option<String> {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| lock(&s.last_used).elapsed() < IDLE_SESSION);
        if sessions.len() >= MAX_SESSIONS {
            return None;
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let session = Session {
            capabilities,
            auth,
            last_used: Mutex::new(Instant::now()),
            next_request_id: AtomicU64::new(0),
            awaiting: Mutex::default(),
            in_flight: Mutex::default(),
        };
        sessions.insert(id.clone(), Arc::new(session));
        Some(id)
    }

    fn find(&self, id: &str, auth: Option<&HeaderValue>) -> Option<Arc<Session>> {
        let session = lock(&self.sessions).get(id).cloned()?;
        if session.auth.as_ref() != auth {
            return None;
        }
        *lock(&session.last_used) = Instant::now();
        Some(session)
    }

    fn remove(&self, id: &str, auth: Option<&HeaderValue>) -> Option<Arc<Session>> {
        self.find(id, auth)?;
        let session = lock(&self.sessions).remove(id)?;
        for (_, call) in lock(&session.in_flight).drain() {
            call.abort();
        }
        Some(session)
    }
}

impl Session {
    async fn request(
        self: Arc<Self>,
        gateway: &Gateway,
        id: Value,
        method: String,
        params: Option<Value>,
    ) -> Response<Body> {
        if method == "ping" {
            return reply::json(StatusCode::OK, jsonrpc::success_body_of(&id, &json!({})));
        }
        let params = params.map(without_legacy_task);
        if MRTR_METHODS.contains(&method.as_str()) {
            return self.bridge_rounds(gateway, id, method, params);
        }
        let caller = Caller {
            capabilities: &self.capabilities,
            auth: self.auth.as_ref(),
        };
        let answer = forward::forward(
            gateway.upstream.as_ref(),
            &caller,
            &method,
            params,
            gateway.upstream_timeout,
        )
        .await;
        match answer {
            Ok(Ok(result)) => reply::json(StatusCode::OK, jsonrpc::success_body_of(&id, &result)),
            Ok(Err(error)) => reply::json(StatusCode::OK, jsonrpc::error_body(Some(&id), &error)),
            Err(e) => reply::json(
                StatusCode::OK,
                jsonrpc::error_body(Some(&id), &ErrorObject::internal(e.to_string())),
            ),
        }
    }

    /// Answers on an SSE stream: the upstream's notifications, a server-to-client
    /// request per input request, and the final response.
    fn bridge_rounds(
        self: Arc<Self>,
        gateway: &Gateway,
        id: Value,
        method: String,
        params: Option<Value>,
    ) -> Response<Body> {
        let (events, stream) = mpsc::channel::<Bytes>(16);
        let upstream = gateway.upstream.clone();
        let timeout = gateway.upstream_timeout;
        let session = self.clone();
        let request_id = id.clone();
        let call = tokio::spawn(async move {
            let rounds = session.rounds(upstream.as_ref(), &method, params, &events);
            let outcome = match timeout {
                Some(limit) => tokio::time::timeout(limit, rounds)
                    .await
                    .unwrap_or_else(|_| {
                        Err(ErrorObject::internal(
                            UpstreamError::Timeout(limit.as_millis() as u64).to_string(),
                        ))
                    }),
                None => rounds.await,
            };
            let last = match outcome {
                Ok(result) => jsonrpc::success_body_of(&request_id, &result),
                Err(error) => jsonrpc::error_body(Some(&request_id), &error),
            };
            // The client may have gone; then there is nobody to tell.
            let _ = events.send(sse_event(&last)).await;
            lock(&session.in_flight).remove(&id_key(&request_id));
        });
        lock(&self.in_flight).insert(id_key(&id), call.abort_handle());
        sse_response(stream)
    }

    async fn rounds(
        &self,
        upstream: &dyn Upstream,
        method: &str,
        original: Option<Value>,
        events: &mpsc::Sender<Bytes>,
    ) -> Result<Value, ErrorObject> {
        let caller = Caller {
            capabilities: &self.capabilities,
            auth: self.auth.as_ref(),
        };
        let original = original.unwrap_or_else(|| json!({}));
        let mut params = original.clone();
        let mut without_input = 0;
        loop {
            let result = self
                .call_once(upstream, &caller, method, params, events)
                .await?;
            if !mrtr::is_input_required(&result) {
                return Ok(result);
            }
            let round = InputRequired::parse(&result)
                .map_err(|e| ErrorObject::internal(format!("upstream sent a {e}")))?;
            without_input = if round.input_requests.is_empty() {
                without_input + 1
            } else {
                0
            };
            if without_input > MAX_ROUNDS_WITHOUT_INPUT {
                return Err(ErrorObject::internal(format!(
                    "{MAX_ROUNDS_WITHOUT_INPUT} InputRequiredResults in a row asked for no input"
                )));
            }
            let mut asked = Vec::new();
            for (key, request) in round.input_requests {
                let (request_id, answer) = self.expect_answer();
                let message =
                    jsonrpc::request_value(request_id.clone(), &request.method, request.params);
                let body = serde_json::to_vec(&message).expect("JSON values serialize");
                events
                    .send(sse_event(&body))
                    .await
                    .map_err(|_| client_gone())?;
                asked.push((key, answer));
            }
            let mut responses = Map::new();
            for (key, answer) in asked {
                let outcome = tokio::select! {
                    outcome = answer.receive() => outcome,
                    () = events.closed() => return Err(client_gone()),
                };
                match outcome {
                    Some(Ok(result)) => responses.insert(key, result),
                    Some(Err(error)) => {
                        return Err(ErrorObject::internal(format!(
                            "the client refused the upstream's input request: {}",
                            error.message
                        )));
                    }
                    None => return Err(client_gone()),
                };
            }
            params = mrtr::retry_params(&original, responses, round.request_state.as_deref());
        }
    }

    /// Sends one request upstream and returns its result. Its notifications go to the
    /// client; so do requests an upstream sends on the call's stream (a session-style
    /// upstream), whose answers go back on the exchange.
    async fn call_once(
        &self,
        upstream: &dyn Upstream,
        caller: &Caller<'_>,
        method: &str,
        params: Value,
        events: &mpsc::Sender<Bytes>,
    ) -> Result<Value, ErrorObject> {
        let internal = |e: UpstreamError| ErrorObject::internal(e.to_string());
        let mut exchange = upstream
            .open_call(caller, method, Some(params))
            .await
            .map_err(internal)?;
        loop {
            let event = tokio::select! {
                event = exchange.next() => event,
                () = events.closed() => return Err(client_gone()),
            };
            let (message, upstream_request) = match event {
                None => {
                    return Err(internal(UpstreamError::Lost(
                        "no answer on the stream".into(),
                    )));
                }
                Some(Err(e)) => return Err(internal(e)),
                Some(Ok(UpstreamEvent::Response { id, outcome }))
                    if &id == exchange.request_id() =>
                {
                    return outcome;
                }
                Some(Ok(UpstreamEvent::Response { .. })) => continue,
                Some(Ok(UpstreamEvent::Notification { method, params })) => {
                    (jsonrpc::notification_value(&method, params), None)
                }
                Some(Ok(UpstreamEvent::Request { id, method, params })) => {
                    let (client_id, answer) = self.expect_answer();
                    (
                        jsonrpc::request_value(client_id, &method, params),
                        Some((id, answer)),
                    )
                }
            };
            let body = serde_json::to_vec(&message).expect("JSON values serialize");
            events
                .send(sse_event(&body))
                .await
                .map_err(|_| client_gone())?;
            if let Some((upstream_id, answer)) = upstream_request {
                let outcome = tokio::select! {
                    outcome = answer.receive() => outcome.ok_or_else(client_gone)?,
                    () = events.closed() => return Err(client_gone()),
                };
                exchange
                    .reply(upstream_id, outcome)
                    .await
                    .map_err(internal)?;
            }
        }
    }

    /// A new server-to-client request id and the slot its answer will arrive in.
    fn expect_answer(&self) -> (Value, PendingAnswer<'_>) {
        let id = Value::from(self.next_request_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        let key = id_key(&id);
        lock(&self.awaiting).insert(key.clone(), tx);
        (
            id,
            PendingAnswer {
                session: self,
                key,
                rx,
            },
        )
    }

    fn answer(&self, id: &Value, outcome: Result<Value, ErrorObject>) {
        match lock(&self.awaiting).remove(&id_key(id)) {
            Some(waiting) => {
                let _ = waiting.send(outcome);
            }
            None => tracing::debug!(%id, "answer to no outstanding request; ignored"),
        }
    }

    fn cancel(&self, request_id: &Value) {
        if let Some(call) = lock(&self.in_flight).remove(&id_key(request_id)) {
            tracing::info!(%request_id, "legacy client cancelled a request");
            call.abort();
        }
    }
}

/// A server-to-client request's answer to come; forgotten when dropped unanswered.
struct PendingAnswer<'a> {
    session: &'a Session,
    key: String,
    rx: oneshot::Receiver<Result<Value, ErrorObject>>,
}

impl PendingAnswer<'_> {
    async fn receive(mut self) -> Option<Result<Value, ErrorObject>> {
        (&mut self.rx).await.ok()
    }
}

impl Drop for PendingAnswer<'_> {
    fn drop(&mut self) {
        lock(&self.session.awaiting).remove(&self.key);
    }
}

fn client_gone() -> ErrorObject {
    ErrorObject::internal("the client closed the stream")
}

/// The legacy `InitializeResult` for a 2026-07-28 upstream's server information; its
/// 2026 extensions are not shown to a 2025 client.
fn initialize_result(server: &Value, version: &str) -> Value {
    let mut capabilities = server
        .get("capabilities")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    capabilities.remove("extensions");
    let server_info = server.get("serverInfo").cloned().unwrap_or_else(
        || json!({"name": "mcp-task-gateway", "version": env!("CARGO_PKG_VERSION")}),
    );
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": server_info,
    });
    if let Some(instructions) = server.get("instructions").filter(|i| i.is_string()) {
        result["instructions"] = instructions.clone();
    }
    result
}

/// The 2025-11-25 task dialect's `task` param is not forwarded (see `server/modern.rs`).
fn without_legacy_task(mut params: Value) -> Value {
    if let Some(obj) = params.as_object_mut() {
        obj.remove("task");
    }
    params
}

fn session_not_found() -> Response<Body> {
    reply::error_with_status(
        StatusCode::NOT_FOUND,
        &ErrorObject::new(code::INVALID_REQUEST, "Session not found"),
    )
}

fn sse_event(json: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(json.len() + 24);
    frame.extend_from_slice(b"event: message\ndata: ");
    frame.extend_from_slice(json);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

fn sse_response(events: mpsc::Receiver<Bytes>) -> Response<Body> {
    let frames = futures_util::stream::unfold(events, |mut events| async move {
        let event = events.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(event)), events))
    });
    let body = StreamBody::new(frames)
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_result_hides_2026_extensions() {
        let server = json!({
            "protocolVersion": "2026-07-28",
            "capabilities": {"tools": {}, "extensions": {"x/y": {}}},
            "serverInfo": {"name": "up", "version": "1"},
        });
        let result = initialize_result(&server, "2025-06-18");
        assert_eq!(
            result,
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "up", "version": "1"}})
        );
    }

    #[test]
    fn sse_events_are_framed() {
        assert_eq!(
            sse_event(br#"{"a":1}"#),
            Bytes::from_static(b"event: message\ndata: {\"a\":1}\n\n")
        );
    }
}
