//! Sessions the gateway opens itself on a 2025-xx (stateful) Streamable HTTP upstream,
//! to serve stateless 2026-07-28 clients and to run tasks.
//!
//! Capabilities are per request downstream but per session upstream (an upstream may
//! offer a tool only to sessions that declared elicitation), so sessions are keyed by
//! the capabilities declared and by the caller's credentials.
//!
//! Here: the upstream, its calls and their exchanges. `sessions.rs` holds the table of
//! sessions (opening, idle closing, eviction, forgetting); `get_stream.rs` answers what
//! the upstream asks on a session's GET stream.

use mtg_protocol::names::method;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Uri, header};
use http_body_util::{BodyExt, Full};
use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;
use tokio::task::AbortHandle;

use async_trait::async_trait;

use super::http::truncate_on_char;
use super::{
    CallStream, Caller, Exchange, Opened, PassThroughSession, StopReason, Upstream, UpstreamError,
    UpstreamEvent,
};
use mtg_protocol::jsonrpc::{self, ErrorObject, Message};
use mtg_transport::{CallBody, CallClient};

use mtg_protocol::names::header::{
    MCP_PROTOCOL_VERSION as PROTOCOL_HEADER, MCP_SESSION_ID as SESSION_HEADER,
};

mod get_stream;
mod sessions;

use sessions::IDLE_LIMIT;

/// One upstream session and what its `initialize` returned.
pub(crate) struct UpstreamSession {
    /// `None` for upstreams that run without sessions.
    pub id: Option<HeaderValue>,
    pub protocol_version: HeaderValue,
    /// The `InitializeResult` (capabilities, serverInfo, instructions).
    pub server: Value,
    auth: Option<HeaderValue>,
    key: String,
    /// The task that answers the session's GET stream.
    get_stream: Mutex<Option<AbortHandle>>,
    /// When a call last asked for this session (for closing idle ones).
    last_used: Mutex<std::time::Instant>,
    /// Exchanges open on it (a task's call may hold one for hours).
    users: std::sync::atomic::AtomicUsize,
}

impl UpstreamSession {
    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }
}

impl Drop for UpstreamSession {
    fn drop(&mut self) {
        if let Some(get_stream) = self
            .get_stream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            get_stream.abort();
        }
    }
}

type SessionCell = Arc<OnceCell<Arc<UpstreamSession>>>;

pub(crate) struct SessionHttpUpstream {
    /// Itself, for the background tasks and exchanges it starts.
    me: std::sync::Weak<SessionHttpUpstream>,
    client: CallClient,
    url: Uri,
    /// Answer to `roots/list` requests that belong to no call.
    roots: Value,
    /// Gateway-assigned request ids, unique across all sessions, so two clients that
    /// use the same id never collide upstream.
    next_id: AtomicU64,
    sessions: Mutex<HashMap<String, SessionCell>>,
    /// `notifications/cancelled` sent from drops (the safety net of `upstream::stop`),
    /// which a graceful stop waits for.
    cancels: tokio_util::task::TaskTracker,
}

impl SessionHttpUpstream {
    pub(crate) fn new(client: CallClient, url: Uri, roots: &[String]) -> Arc<Self> {
        let roots = roots
            .iter()
            .map(|uri| json!({"uri": uri}))
            .collect::<Vec<_>>();
        let upstream = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            client,
            url,
            roots: json!({ "roots": roots }),
            next_id: AtomicU64::new(1),
            sessions: Mutex::new(HashMap::new()),
            cancels: tokio_util::task::TaskTracker::new(),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&upstream);
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(IDLE_LIMIT / 5);
                loop {
                    tick.tick().await;
                    let Some(upstream) = weak.upgrade() else {
                        return;
                    };
                    upstream.close_idle();
                }
            });
        }
        upstream
    }

    fn next_request_id(&self) -> Value {
        Value::from(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// A request the client sent itself in its session, as an exchange.
    fn adopted(
        &self,
        client_session: &PassThroughSession,
        auth: Option<&HeaderValue>,
        id: Value,
        stream: CallStream,
    ) -> Box<dyn Exchange> {
        let session = in_client_session(client_session, auth);
        self.exchange(session, Answer::Stream(stream), id)
    }

    /// Sends request `id` (`body`) on `session`: its exchange, whose first `next` waits
    /// for the response head, so that a stop reaches the call from the start
    /// (`upstream::stop`; a JSON-response upstream sends its head only when the call
    /// ends). With `resend`, a session of the gateway's that the upstream forgot
    /// (restart, expiry) is replaced once and the request sent again there.
    fn send_call(
        &self,
        session: Arc<UpstreamSession>,
        id: Value,
        body: Value,
        resend: Option<Resend>,
    ) -> Box<dyn Exchange> {
        let upstream = self.upstream();
        let current = Arc::new(Mutex::new(session.clone()));
        let sent_on = current.clone();
        let head: PendingPost = Box::pin(async move {
            let mut session = session;
            let mut resend = resend;
            loop {
                let answered = upstream.post_on(&session, &body).await;
                let forgotten = matches!(answered, Err(UpstreamError::SessionExpired));
                let Some(again) = resend.take().filter(|_| forgotten) else {
                    return answered;
                };
                upstream.invalidate(&session);
                let fresh = upstream
                    .session(&again.capabilities, again.auth.as_ref())
                    .await?;
                fresh.users.fetch_add(1, Ordering::Relaxed);
                session.users.fetch_sub(1, Ordering::Relaxed);
                *lock(&sent_on) = fresh.clone();
                session = fresh;
            }
        });
        let exchange = self.exchange_on(current, Answer::Head(Mutex::new(head)), id);
        Box::new(exchange)
    }

    /// The exchange of a request sent on `session` as `id`.
    fn exchange(
        &self,
        session: Arc<UpstreamSession>,
        answer: Answer,
        id: Value,
    ) -> Box<dyn Exchange> {
        Box::new(self.exchange_on(Arc::new(Mutex::new(session)), answer, id))
    }

    fn exchange_on(
        &self,
        session: Arc<Mutex<Arc<UpstreamSession>>>,
        answer: Answer,
        id: Value,
    ) -> SessionHttpExchange {
        lock(&session).users.fetch_add(1, Ordering::Relaxed);
        SessionHttpExchange {
            upstream: self.upstream(),
            session,
            answer,
            id,
            settled: false,
        }
    }

    /// Itself, for what outlives a call of its own.
    fn upstream(&self) -> Arc<SessionHttpUpstream> {
        self.me
            .upgrade()
            .expect("the upstream is alive while called")
    }

    /// Sends a notification or a response on `session`.
    async fn send(&self, session: &UpstreamSession, message: &Value) -> Result<(), UpstreamError> {
        let response = self.post_on(session, message).await?;
        // Drain so the connection goes back to the pool.
        let _ = response.into_body().collect().await;
        Ok(())
    }

    async fn post_on(
        &self,
        session: &UpstreamSession,
        body: &Value,
    ) -> Result<hyper::Response<CallBody>, UpstreamError> {
        self.post(
            session.id.as_ref(),
            Some(&session.protocol_version),
            session.auth.as_ref(),
            body,
        )
        .await
    }

    async fn post(
        &self,
        session_id: Option<&HeaderValue>,
        version: Option<&HeaderValue>,
        auth: Option<&HeaderValue>,
        body: &Value,
    ) -> Result<hyper::Response<CallBody>, UpstreamError> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream");
        for (name, value) in [(SESSION_HEADER, session_id), (PROTOCOL_HEADER, version)] {
            if let Some(value) = value {
                request = request.header(name, value);
            }
        }
        if let Some(auth) = auth {
            request = request.header(header::AUTHORIZATION, auth);
        }
        if let Some(headers) = request.headers_mut() {
            crate::telemetry::traces::inject_into(headers);
        }
        let bytes = Bytes::from(serde_json::to_vec(body).expect("JSON values serialize"));
        let response = self.send_built(request, bytes).await?;
        check_status(response, session_id.is_some()).await
    }

    /// Sends a request built elsewhere; the connection failing is `Unreachable`.
    async fn send_built(
        &self,
        request: http::request::Builder,
        body: Bytes,
    ) -> Result<hyper::Response<CallBody>, UpstreamError> {
        let request = request
            .body(Full::new(body))
            .map_err(|e| UpstreamError::from_build(&e))?;
        self.client
            .request(request)
            .await
            .map_err(|e| UpstreamError::from_call(&e))
    }
}

#[async_trait]
impl Upstream for SessionHttpUpstream {
    async fn open_call(&self, caller: &Caller<'_>, method: &str, params: Option<Value>) -> Opened {
        if let Some(client_session) = caller.session {
            return Ok(self.open_in_client_session(client_session, caller.auth, method, params));
        }
        let session = self.session(caller.capabilities, caller.auth).await?;
        let id = self.next_request_id();
        let body = jsonrpc::request_value(id.clone(), method, params);
        let resend = Resend {
            capabilities: caller.capabilities.clone(),
            auth: caller.auth.cloned(),
        };
        Ok(self.send_call(session, id, body, Some(resend)))
    }

    async fn server_info(&self, caller: &Caller<'_>) -> Result<Value, UpstreamError> {
        Ok(self
            .session(caller.capabilities, caller.auth)
            .await?
            .server
            .clone())
    }

    fn passthrough_url(&self) -> Option<&Uri> {
        Some(&self.url)
    }

    fn adopt(
        &self,
        session: &PassThroughSession,
        auth: Option<&HeaderValue>,
        id: Value,
        stream: CallStream,
    ) -> Option<Box<dyn Exchange>> {
        Some(self.adopted(session, auth, id, stream))
    }

    async fn ready(&self) -> Result<(), UpstreamError> {
        super::http::probe_reachable(&self.client, &self.url).await
    }

    /// Lets the cancels of calls stopped at shutdown reach the upstream (2 s at most).
    async fn shutdown(&self) {
        self.cancels.close();
        if tokio::time::timeout(Duration::from_secs(2), self.cancels.wait())
            .await
            .is_err()
        {
            tracing::warn!("some notifications/cancelled could not be sent before stopping");
        }
    }
}

/// A request on a 2025-xx session: its SSE stream, and answers POSTed to the session.
struct SessionHttpExchange {
    upstream: Arc<SessionHttpUpstream>,
    /// The session the request is in: another once, if the upstream forgot the first
    /// before the head came (`send_call`).
    session: Arc<Mutex<Arc<UpstreamSession>>>,
    answer: Answer,
    id: Value,
    /// The answer came, the stream ended, or the call was stopped: nothing to stop.
    settled: bool,
}

/// The upstream's answer to the request, as far as it came.
enum Answer {
    /// The POST on its way, its response head not come: a JSON-response upstream sends
    /// it only when the call ends. Behind a lock only to be `Sync`: it is reached
    /// through `&mut self`, never locked.
    Head(Mutex<PendingPost>),
    Stream(CallStream),
}

/// A request's response head, on its way.
type PendingPost = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<hyper::Response<CallBody>, UpstreamError>> + Send>,
>;

/// What sends a request again in a new session of the gateway's.
struct Resend {
    capabilities: Map<String, Value>,
    auth: Option<HeaderValue>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl SessionHttpExchange {
    fn session(&self) -> Arc<UpstreamSession> {
        lock(&self.session).clone()
    }
}

impl Drop for SessionHttpExchange {
    /// The safety net (`upstream::stop`): an exchange dropped unsettled and not stopped
    /// (its future dropped from outside: a client that hung up while its handler
    /// awaited, a panic) still stops the call, since a 2025-xx server goes on working
    /// after a closed stream.
    fn drop(&mut self) {
        let session = self.session();
        session.users.fetch_sub(1, Ordering::Relaxed);
        if !self.settled {
            cancel_in_background(&self.upstream, &session, &self.id);
        }
    }
}

/// Sends `notifications/cancelled` for request `id` on `session`, from a drop; a graceful
/// stop waits for these (`shutdown`).
fn cancel_in_background(
    upstream: &Arc<SessionHttpUpstream>,
    session: &Arc<UpstreamSession>,
    id: &Value,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let notice = cancelled(id, StopReason::Abandoned);
    let sending = {
        let (upstream, session) = (upstream.clone(), session.clone());
        async move {
            if let Err(e) = upstream.send(&session, &notice).await {
                tracing::debug!(error = %e, "could not cancel an abandoned call upstream");
            }
        }
    };
    upstream.cancels.spawn_on(sending, &runtime);
}

/// `notifications/cancelled` for request `id`.
fn cancelled(id: &Value, reason: StopReason) -> Value {
    jsonrpc::notification_value(
        method::CANCELLED,
        Some(json!({"requestId": id, "reason": reason.words()})),
    )
}

#[async_trait]
impl Exchange for SessionHttpExchange {
    async fn next(&mut self) -> Option<Result<UpstreamEvent, UpstreamError>> {
        if let Answer::Head(head) = &mut self.answer {
            // Cancel-safe: the POST stays here until its head comes.
            let head = head.get_mut().unwrap_or_else(|p| p.into_inner());
            match head.await {
                Ok(response) => self.answer = Answer::Stream(call_stream(response)),
                Err(e) => {
                    // Answered, even if with an error: nothing runs upstream to stop.
                    self.settled = true;
                    return Some(Err(e));
                }
            }
        }
        let Answer::Stream(stream) = &mut self.answer else {
            return None;
        };
        let event = stream.next().await;
        let answered = match &event {
            Some(Ok(Message::Response { id, .. })) => *id == self.id,
            Some(Ok(_)) => false,
            None | Some(Err(_)) => true,
        };
        if answered {
            self.settled = true;
        }
        event
    }

    async fn reply(
        &self,
        id: Value,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), UpstreamError> {
        let reply = jsonrpc::response_value(id, outcome);
        self.upstream.send(&self.session(), &reply).await
    }

    /// POSTs `notifications/cancelled` in the call's session (`upstream::stop`), also
    /// while the response head has not come.
    async fn stop(&mut self, reason: StopReason) -> Result<(), UpstreamError> {
        if std::mem::replace(&mut self.settled, true) {
            return Ok(());
        }
        let notice = cancelled(&self.id, reason);
        self.upstream.send(&self.session(), &notice).await
    }

    fn request_id(&self) -> &Value {
        &self.id
    }
}

/// A client's own upstream session, for a request in it: not one of the gateway's
/// sessions, so it is never listed, its GET stream never answered, and never closed.
fn in_client_session(
    client_session: &PassThroughSession,
    auth: Option<&HeaderValue>,
) -> Arc<UpstreamSession> {
    Arc::new(UpstreamSession {
        id: client_session.id.clone(),
        protocol_version: client_session.protocol_version.clone(),
        server: Value::Null,
        auth: auth.cloned(),
        key: String::new(),
        get_stream: Mutex::new(None),
        last_used: Mutex::new(std::time::Instant::now()),
        users: std::sync::atomic::AtomicUsize::new(0),
    })
}

fn call_stream(response: hyper::Response<CallBody>) -> CallStream {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    CallStream::new(response.into_body(), content_type.as_deref())
}

async fn check_status(
    response: hyper::Response<CallBody>,
    had_session: bool,
) -> Result<hyper::Response<CallBody>, UpstreamError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut body = String::from_utf8_lossy(&body).into_owned();
    // The spec says 404 for an unknown session; the TypeScript SDK answers 400
    // "No valid session ID provided".
    let session_unknown = status == http::StatusCode::NOT_FOUND
        || (status == http::StatusCode::BAD_REQUEST
            && body.to_ascii_lowercase().contains("session"));
    if had_session && session_unknown {
        return Err(UpstreamError::SessionExpired);
    }
    truncate_on_char(&mut body, 300);
    Err(UpstreamError::Status {
        status: status.as_u16(),
        body,
    })
}
