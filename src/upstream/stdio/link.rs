//! One running upstream process: requests multiplexed onto its stdin under
//! gateway-assigned ids, and every line it writes on stdout routed back to the call it
//! belongs to (or answered by the gateway when it belongs to none).

use mtg_protocol::names::method;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::attribution::{Candidate, Owner, owner_of};
use super::habits::Habits;
use crate::upstream::{UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::{self, ErrorObject, Message, code};
use mtg_protocol::meta;

/// The longest a call the gateway gave up on still counts when attributing requests.
/// It normally stops counting sooner: see `Link::cancel`.
const GHOST_GRACE: Duration = Duration::from_secs(30);

pub(super) type Events = mpsc::UnboundedReceiver<Result<UpstreamEvent, UpstreamError>>;
type EventSender = mpsc::UnboundedSender<Result<UpstreamEvent, UpstreamError>>;

/// What every process of one upstream shares.
pub(super) struct LinkContext {
    /// Ids for requests sent upstream and for upstream requests shown to callers;
    /// unique across processes and restarts, so an answer can never reach the wrong
    /// process.
    next_id: AtomicU64,
    /// The answer to `roots/list` requests that belong to no call.
    roots: Value,
    pub habits: Habits,
}

impl LinkContext {
    pub(super) fn new(roots: &[String]) -> Self {
        let roots: Vec<Value> = roots.iter().map(|uri| json!({"uri": uri})).collect();
        Self {
            next_id: AtomicU64::new(1),
            roots: json!({ "roots": roots }),
            habits: Habits::default(),
        }
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

pub(super) use mtg_protocol::names::Generation;

/// What the client behind a call declared it can be asked.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Grants {
    elicitation_form: bool,
    elicitation_url: bool,
    sampling: bool,
    roots: bool,
}

impl Grants {
    pub(super) fn from_capabilities(capabilities: &Map<String, Value>) -> Self {
        let elicitation = capabilities.get("elicitation").and_then(Value::as_object);
        Self {
            // `elicitation: {}` means form mode, for clients older than the modes.
            elicitation_form: elicitation.is_some_and(|e| e.is_empty() || e.contains_key("form")),
            elicitation_url: elicitation.is_some_and(|e| e.contains_key("url")),
            sampling: capabilities.get("sampling").is_some_and(Value::is_object),
            roots: capabilities.get("roots").is_some_and(Value::is_object),
        }
    }

    /// Whether the client can be given elicitations or sampling requests at all.
    pub(super) fn can_be_asked(&self) -> bool {
        self.elicitation_form || self.elicitation_url || self.sampling
    }

    fn allow(&self, method: &str, params: Option<&Value>) -> bool {
        match method {
            "elicitation/create" => {
                match params.and_then(|p| p.get("mode")).and_then(Value::as_str) {
                    Some("url") => self.elicitation_url,
                    _ => self.elicitation_form,
                }
            }
            "sampling/createMessage" => self.sampling,
            "roots/list" => self.roots,
            _ => true,
        }
    }
}

/// A request to send.
pub(super) struct Outgoing<'a> {
    pub method: &'a str,
    pub params: Option<Value>,
    /// False for requests that cannot ask for input; they never own a request.
    pub may_ask: bool,
    pub grants: Grants,
    /// The caller's capabilities, for the `_meta` of 2026-07-28 requests.
    pub capabilities: &'a Map<String, Value>,
}

struct CallEntry {
    events: EventSender,
    may_ask: bool,
    grants: Grants,
    /// The caller's progress token, and the gateway's own that replaced it upstream.
    progress: Option<(Value, Value)>,
    habit: String,
    asked: bool,
    /// Set once the caller stopped reading; the entry lingers until this passes.
    ghost_until: Option<Instant>,
}

struct ServerRequest {
    upstream_id: Value,
    call: u64,
}

#[derive(Default)]
struct LinkState {
    calls: HashMap<u64, CallEntry>,
    /// Upstream requests handed to callers, by the id the callers see.
    server_requests: HashMap<u64, ServerRequest>,
    /// Pings sent after a cancellation, and the cancelled call each one retires.
    barriers: HashMap<u64, u64>,
    closed: Option<UpstreamError>,
}

impl LinkState {
    fn drop_expired_ghosts(&mut self, now: Instant) {
        self.calls
            .retain(|_, call| call.ghost_until.is_none_or(|until| until > now));
    }
}

/// What to do with a request from the upstream, decided under the lock.
enum Verdict {
    Deliver(EventSender, u64),
    Refuse(String),
    Gateway,
}

pub(super) struct Link {
    pub slot: usize,
    pub pid: u32,
    context: Arc<LinkContext>,
    /// Lines for the writer task, which owns stdin; writes never block the reader, so
    /// a server that stops reading cannot deadlock the gateway.
    writer: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    state: Mutex<LinkState>,
    generation: OnceLock<Generation>,
    /// The handshake's answer, in `InitializeResult` shape.
    server: OnceLock<Value>,
}

impl Link {
    pub(super) fn new(
        slot: usize,
        pid: u32,
        context: Arc<LinkContext>,
        writer: mpsc::UnboundedSender<Vec<u8>>,
    ) -> Self {
        Self {
            slot,
            pid,
            context,
            writer: Mutex::new(Some(writer)),
            state: Mutex::new(LinkState::default()),
            generation: OnceLock::new(),
            server: OnceLock::new(),
        }
    }

    pub(super) fn generation(&self) -> Option<Generation> {
        self.generation.get().copied()
    }

    pub(super) fn set_generation(&self, generation: Generation) {
        let _ = self.generation.set(generation);
    }

    pub(super) fn set_server(&self, server: Value) {
        let _ = self.server.set(server);
    }

    pub(super) fn server(&self) -> Option<&Value> {
        self.server.get()
    }

    /// Registers the call, then sends it; what comes back arrives on the receiver.
    pub(super) fn start(&self, outgoing: Outgoing<'_>) -> Result<(u64, Events), UpstreamError> {
        let id = self.context.next_id();
        let mut params = outgoing.params;
        // Notifications carry no stream on stdio: the token routes progress back, so
        // each call gets one the gateway knows to be unique.
        let mut progress = None;
        if let Some(token) = params
            .as_mut()
            .and_then(|p| p.get_mut("_meta"))
            .and_then(|m| m.get_mut("progressToken"))
        {
            let ours = Value::from(format!("mtg-{id}"));
            progress = Some((std::mem::replace(token, ours.clone()), ours));
        }
        if self.generation() == Some(Generation::Stateless) {
            params = Some(meta::with_stateless_meta(params, outgoing.capabilities));
        }
        let (events, receiver) = mpsc::unbounded_channel();
        {
            let mut state = self.lock();
            if let Some(error) = &state.closed {
                return Err(error.clone());
            }
            state.calls.insert(
                id,
                CallEntry {
                    events,
                    may_ask: outgoing.may_ask,
                    grants: outgoing.grants,
                    progress,
                    habit: super::habits::key_of(outgoing.method, params.as_ref()),
                    asked: false,
                    ghost_until: None,
                },
            );
        }
        let line = jsonrpc::request_value(Value::from(id), outgoing.method, params);
        if let Err(e) = self.send(&line) {
            self.lock().calls.remove(&id);
            return Err(e);
        }
        Ok((id, receiver))
    }

    /// Answers an upstream request that was handed to a caller under `id`.
    pub(super) fn answer(
        &self,
        id: &Value,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), UpstreamError> {
        let pending = id_number(id).and_then(|n| self.lock().server_requests.remove(&n));
        match pending {
            Some(request) => self.send(&jsonrpc::response_value(request.upstream_id, outcome)),
            None => {
                tracing::debug!(%id, "answer to an upstream request that is no longer pending");
                Ok(())
            }
        }
    }

    /// Sends `notifications/cancelled` for a call, then a `ping`. The call stays a
    /// candidate until the ping is answered: the server reads stdin in order, so by
    /// then it has seen the cancellation, and anything it sent for the call before
    /// came earlier on stdout.
    pub(super) fn cancel(&self, id: u64, reason: &str) -> Result<(), UpstreamError> {
        self.forget(id);
        let notice = jsonrpc::notification_value(
            method::CANCELLED,
            Some(json!({"requestId": id, "reason": reason})),
        );
        self.send(&notice)?;
        let barrier = self.context.next_id();
        self.lock().barriers.insert(barrier, id);
        self.send(&jsonrpc::request_value(
            Value::from(barrier),
            method::PING,
            None,
        ))
    }

    /// The caller stopped reading: the call lingers as a ghost so its late requests
    /// are not taken for another call's, and its pending requests are refused.
    pub(super) fn forget(&self, id: u64) {
        let refused: Vec<Value> = {
            let mut state = self.lock();
            match state.calls.get_mut(&id) {
                Some(call) if call.may_ask => {
                    call.ghost_until.get_or_insert(Instant::now() + GHOST_GRACE);
                }
                Some(_) => {
                    state.calls.remove(&id);
                }
                None => {}
            }
            let mine: Vec<u64> = state
                .server_requests
                .iter()
                .filter(|(_, r)| r.call == id)
                .map(|(sid, _)| *sid)
                .collect();
            mine.into_iter()
                .filter_map(|sid| state.server_requests.remove(&sid))
                .map(|r| r.upstream_id)
                .collect()
        };
        for upstream_id in refused {
            let error = ErrorObject::internal("the call this request belongs to was cancelled");
            let _ = self.send(&jsonrpc::response_value(upstream_id, Err(error)));
        }
    }

    /// Sends a notification from a caller (e.g. a session client's cancellation).
    pub(super) fn notify(&self, method: &str, params: Option<Value>) -> Result<(), UpstreamError> {
        self.send(&jsonrpc::notification_value(method, params))
    }

    /// The process is gone: every call in flight fails with `error`.
    pub(super) fn close(&self, error: UpstreamError) {
        let calls = {
            let mut state = self.lock();
            state.closed.get_or_insert(error.clone());
            state.server_requests.clear();
            std::mem::take(&mut state.calls)
        };
        self.close_stdin();
        for (_, call) in calls {
            let _ = call.events.send(Err(error.clone()));
        }
    }

    /// Closes the process's stdin, the polite way to ask a stdio server to exit.
    pub(super) fn close_stdin(&self) {
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    pub(super) fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }

    /// Handles one line the process wrote on stdout.
    pub(super) fn dispatch(&self, line: &[u8]) {
        let message = match Message::parse(line) {
            Ok(message) => message,
            Err(e) => {
                tracing::warn!(
                    target: "upstream_stdout",
                    slot = self.slot,
                    pid = self.pid,
                    error = %e,
                    line = %preview(line),
                    "skipped a stdout line that is not a JSON-RPC message"
                );
                return;
            }
        };
        match message {
            Message::Response { id, outcome } => self.on_response(id, outcome),
            Message::Request { id, method, params } => self.on_request(id, method, params),
            Message::Notification { method, params } => self.on_notification(method, params),
        }
    }

    fn on_response(&self, id: Value, outcome: Result<Value, ErrorObject>) {
        let Some(call) = id_number(&id).and_then(|n| {
            let mut state = self.lock();
            if let Some(cancelled) = state.barriers.remove(&n) {
                if state
                    .calls
                    .get(&cancelled)
                    .is_some_and(|c| c.ghost_until.is_some())
                {
                    state.calls.remove(&cancelled);
                }
                return None;
            }
            let call = state.calls.remove(&n)?;
            state.server_requests.retain(|_, r| r.call != n);
            Some((n, call))
        }) else {
            tracing::debug!(%id, "response to a request nobody waits for (or a barrier ping)");
            return;
        };
        let (n, call) = call;
        if call.may_ask && !call.asked {
            self.context.habits.ran_quietly(&call.habit);
        }
        let _ = call.events.send(Ok(UpstreamEvent::Response {
            id: Value::from(n),
            outcome,
        }));
    }

    fn on_request(&self, id: Value, method: String, params: Option<Value>) {
        if method == method::PING {
            let _ = self.send(&jsonrpc::response_value(id, Ok(json!({}))));
            return;
        }
        let verdict = self.judge(&id, &method, params.as_ref());
        match verdict {
            Verdict::Deliver(events, sid) => {
                let event = UpstreamEvent::Request {
                    id: Value::from(sid),
                    method,
                    params,
                };
                if events.send(Ok(event)).is_err() {
                    self.lock().server_requests.remove(&sid);
                    let error = ErrorObject::internal("the call this request belongs to has ended");
                    let _ = self.send(&jsonrpc::response_value(id, Err(error)));
                }
            }
            Verdict::Refuse(message) => {
                tracing::warn!(slot = self.slot, pid = self.pid, %method, "{message}");
                let error = ErrorObject::new(code::INTERNAL_ERROR, message);
                let _ = self.send(&jsonrpc::response_value(id, Err(error)));
            }
            Verdict::Gateway => {
                let outcome = match method.as_str() {
                    "roots/list" => Ok(self.context.roots.clone()),
                    other => Err(ErrorObject::new(
                        code::METHOD_NOT_FOUND,
                        format!("{other} outside a call cannot be answered by the gateway"),
                    )),
                };
                tracing::debug!(%method, "answered an upstream request that belongs to no call");
                let _ = self.send(&jsonrpc::response_value(id, outcome));
            }
        }
    }

    fn judge(&self, upstream_id: &Value, method: &str, params: Option<&Value>) -> Verdict {
        let mut state = self.lock();
        state.drop_expired_ghosts(Instant::now());
        let owner = owner_of(
            method,
            params,
            state.calls.iter().map(|(id, call)| Candidate {
                id: *id,
                progress_token: call.progress.as_ref().map(|(_, ours)| ours),
                may_ask: call.may_ask,
            }),
        );
        match owner {
            Owner::NoCall => Verdict::Gateway,
            Owner::Ambiguous(ids) => {
                // Any of them may have asked: none may pass for quiet when it ends.
                for id in &ids {
                    if let Some(call) = state.calls.get_mut(id) {
                        call.asked = true;
                        self.context.habits.suspect(&call.habit);
                    }
                }
                Verdict::Refuse(format!(
                    "{method} refused: {} calls were in flight on this upstream process and \
                     a stdio request does not say which one it belongs to; the gateway does \
                     not guess. Retry the call: it now runs on a process of its own",
                    ids.len()
                ))
            }
            Owner::Call(call_id) => {
                let sid = self.context.next_id();
                let Some(call) = state.calls.get_mut(&call_id) else {
                    return Verdict::Gateway;
                };
                call.asked = true;
                self.context.habits.asked(&call.habit);
                if call.ghost_until.is_some() {
                    return Verdict::Refuse(format!(
                        "{method} refused: the call it belongs to was cancelled"
                    ));
                }
                if !call.grants.allow(method, params) {
                    return Verdict::Refuse(format!(
                        "{method} refused: the client of this call did not declare the capability for it"
                    ));
                }
                let events = call.events.clone();
                state.server_requests.insert(
                    sid,
                    ServerRequest {
                        upstream_id: upstream_id.clone(),
                        call: call_id,
                    },
                );
                Verdict::Deliver(events, sid)
            }
        }
    }

    fn on_notification(&self, method: String, mut params: Option<Value>) {
        let target = {
            let state = self.lock();
            match method.as_str() {
                method::PROGRESS => {
                    let token = params.as_ref().and_then(|p| p.get("progressToken"));
                    state.calls.values().find_map(|call| match &call.progress {
                        Some((theirs, ours)) if Some(ours) == token => {
                            Some((call.events.clone(), Some(("progressToken", theirs.clone()))))
                        }
                        _ => None,
                    })
                }
                // The upstream gave up on one of its own requests.
                method::CANCELLED => {
                    let request_id = params.as_ref().and_then(|p| p.get("requestId"));
                    state
                        .server_requests
                        .iter()
                        .find(|(_, r)| Some(&r.upstream_id) == request_id)
                        .and_then(|(sid, r)| {
                            let call = state.calls.get(&r.call)?;
                            Some((call.events.clone(), Some(("requestId", Value::from(*sid)))))
                        })
                }
                _ => None,
            }
        };
        match target {
            Some((events, rewrite)) => {
                if let (Some((field, value)), Some(p)) = (rewrite, params.as_mut()) {
                    p[field] = value;
                }
                let _ = events.send(Ok(UpstreamEvent::Notification { method, params }));
            }
            None => tracing::debug!(slot = self.slot, %method, "upstream notification for no call"),
        }
    }

    fn send(&self, message: &Value) -> Result<(), UpstreamError> {
        let mut line = serde_json::to_vec(message).expect("JSON values serialize");
        line.push(b'\n');
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        match writer.as_ref().map(|w| w.send(line)) {
            Some(Ok(())) => Ok(()),
            _ => Err(self.lock().closed.clone().unwrap_or_else(|| {
                UpstreamError::Lost("the upstream process's stdin is closed".into())
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Gateway ids are numbers; some servers echo them as strings.
fn id_number(id: &Value) -> Option<u64> {
    id.as_u64().or_else(|| id.as_str()?.parse().ok())
}

/// The start of a line, for logs.
fn preview(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

#[cfg(test)]
mod tests;
