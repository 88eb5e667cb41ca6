//! One legacy session served by the gateway: its requests, bridged to the upstream
//! round by round, and the answers its client POSTs to the gateway's requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use super::sse::{sse_event, sse_response};
use super::{Gateway, id_key, lock};
use crate::protocol::jsonrpc::{self, ErrorObject};
use crate::protocol::mrtr::{self, InputRequired, MAX_ROUNDS_WITHOUT_INPUT};
use crate::server::reply::{self, Body};
use crate::upstream::{Caller, Upstream, UpstreamError, UpstreamEvent, forward};

/// Methods whose answer may be an `InputRequiredResult`.
const MRTR_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

pub(super) struct Session {
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

impl Session {
    pub(super) fn new(capabilities: Map<String, Value>, auth: Option<HeaderValue>) -> Self {
        Self {
            capabilities,
            auth,
            last_used: Mutex::new(Instant::now()),
            next_request_id: AtomicU64::new(0),
            awaiting: Mutex::default(),
            in_flight: Mutex::default(),
        }
    }

    pub(super) fn belongs_to(&self, auth: Option<&HeaderValue>) -> bool {
        self.auth.as_ref() == auth
    }

    pub(super) fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    pub(super) fn idle_for(&self) -> std::time::Duration {
        lock(&self.last_used).elapsed()
    }

    /// Stops the session's bridged calls (DELETE).
    pub(super) fn close(&self) {
        for (_, call) in lock(&self.in_flight).drain() {
            call.abort();
        }
    }

    pub(super) async fn request(
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

    pub(super) fn answer(&self, id: &Value, outcome: Result<Value, ErrorObject>) {
        match lock(&self.awaiting).remove(&id_key(id)) {
            Some(waiting) => {
                let _ = waiting.send(outcome);
            }
            None => tracing::debug!(%id, "answer to no outstanding request; ignored"),
        }
    }

    pub(super) fn cancel(&self, request_id: &Value) {
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

/// The 2025-11-25 task dialect's `task` param is not forwarded (see `server/modern.rs`).
fn without_legacy_task(mut params: Value) -> Value {
    if let Some(obj) = params.as_object_mut() {
        obj.remove("task");
    }
    params
}
