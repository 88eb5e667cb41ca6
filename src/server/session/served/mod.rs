//! The 2025-xx client sessions the gateway serves itself: every 2025-xx client whose
//! upstream has no session of its own to pass it through to (a stdio process, or a
//! 2026-07-28 server, which is stateless). One table, whatever the upstream: sessions are
//! minted at `initialize`, bound to the principal that opened them, forgotten after
//! `--session-idle-timeout-ms` without use, and at most `--max-sessions` at once.
//! Requests go upstream only through the `Upstream` trait (`call`).
//!
//! Sessions live in this instance's memory: session clients need sticky routing anyway.

mod call;
mod session;

use mtg_protocol::names::method;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::server::session::tasks::{
    self as session_tasks, Handled, SessionCaller, negotiate::Declared,
};
use crate::telemetry;
use crate::upstream::Caller;
use call::CallContext;
use mtg_protocol::jsonrpc::{self, ErrorObject, Message, code};
use mtg_protocol::names::SESSION_VERSION;
use session::ServedSession;

use mtg_protocol::names::header::MCP_SESSION_ID as SESSION_HEADER;
use mtg_protocol::names::{SESSION_VERSIONS, gateway_info};
/// Capabilities of the client that the upstream is told of with every request.
const CLIENT_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

/// Limits of the session table, from the config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLimits {
    pub idle_timeout: Duration,
    pub max_sessions: usize,
}

pub(crate) struct ServedSessions {
    sessions: Mutex<HashMap<String, Arc<ServedSession>>>,
    limits: SessionLimits,
    meter: telemetry::Meter,
}

impl ServedSessions {
    /// The table, and (inside a runtime) a sweep that forgets idle sessions.
    pub(crate) fn start(limits: SessionLimits, meter: telemetry::Meter) -> Arc<Self> {
        let table = Arc::new(Self {
            sessions: Mutex::default(),
            limits,
            meter,
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(sweep(Arc::downgrade(&table)));
        }
        table
    }

    pub(crate) async fn serve(
        &self,
        gateway: &Gateway,
        parts: &Parts,
        body: Bytes,
    ) -> Response<Body> {
        let principal = gateway.edge.principal(parts);
        let session_id = parts
            .headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok());
        if parts.method != Method::POST {
            return self
                .serve_not_post(gateway, parts, session_id, principal)
                .await;
        }
        let message = match Message::parse(&body) {
            Ok(message) => message,
            Err(e) => return reply::error(None, &e.to_error_object()),
        };
        let Some(session_id) = session_id else {
            return match message {
                Message::Request { id, method, params } if method == method::INITIALIZE => {
                    self.initialize(gateway, &id, params.as_ref(), parts, principal)
                        .await
                }
                _ => reply::error_with_status(
                    StatusCode::BAD_REQUEST,
                    &ErrorObject::new(
                        code::INVALID_REQUEST,
                        "Bad Request: send initialize first, then Mcp-Session-Id on every request",
                    ),
                ),
            };
        };
        let Some(session) = self.find(session_id, &principal) else {
            return session_not_found();
        };
        let caller = SessionCaller {
            id: session_id.to_owned(),
            upstream: None,
            capabilities: session.capabilities.clone(),
            auth: parts.headers.get(header::AUTHORIZATION).cloned(),
            principal,
            modes: session.tasks.is_some_and(|declared| declared.modes),
        };
        if session.tasks.is_some() || session_tasks::may_be_undeclared_tasks(&message) {
            let handled = match session.tasks {
                Some(_) => session_tasks::handle(gateway, &caller, &message).await,
                None => session_tasks::handle_undeclared(gateway, &caller, &message).await,
            };
            if let Handled::Reply(response) = handled {
                session.touch();
                return response;
            }
        }
        match message {
            Message::Request { id, method, .. } if method == method::INITIALIZE => reply::error(
                Some(&id),
                &ErrorObject::new(
                    code::INVALID_REQUEST,
                    "Invalid Request: Server already initialized",
                ),
            ),
            Message::Request { id, method, params } => {
                let request = call::ClientRequest { id, method, params };
                serve_request(gateway, parts, session, &caller, request).await
            }
            Message::Notification { method, params } => {
                if method == method::CANCELLED
                    && let Some(request_id) = params.as_ref().and_then(|p| p.get("requestId"))
                {
                    session.cancel_call(request_id);
                }
                // Others (initialized, roots/list_changed) concern the session the
                // gateway keeps with the upstream, not this one.
                reply::accepted()
            }
            Message::Response { id, outcome } => {
                session.answer(&id, outcome);
                reply::accepted()
            }
        }
    }

    /// A GET or DELETE: the session's end, or the pushes of its tasks; any other method
    /// is not allowed.
    async fn serve_not_post(
        &self,
        gateway: &Gateway,
        parts: &Parts,
        session_id: Option<&str>,
        principal: String,
    ) -> Response<Body> {
        if parts.method == Method::DELETE {
            return match session_id.and_then(|id| self.remove(id, &principal)) {
                Some(_) => reply::plain(StatusCode::OK, ""),
                None => session_not_found(),
            };
        }
        if parts.method == Method::GET
            && let Some(id) = session_id
            && let Some(session) = self.find(id, &principal)
            && session.tasks.is_some()
        {
            // The pushes of the session's tasks; nothing else is sent outside a call.
            return session_tasks::push::stream(
                gateway.tasks.clone(),
                id.to_owned(),
                principal,
                None,
            )
            .await;
        }
        let mut response = reply::plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "this gateway offers no standalone SSE stream for this upstream; messages come on each request's stream\n",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
        response
    }

    async fn initialize(
        &self,
        gateway: &Gateway,
        id: &Value,
        params: Option<&Value>,
        parts: &Parts,
        principal: String,
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
            .filter(|v| SESSION_VERSIONS.contains(v))
            .unwrap_or(SESSION_VERSION);
        let caller = Caller {
            capabilities: &capabilities,
            auth: parts.headers.get(header::AUTHORIZATION),
            session: None,
        };
        let server = match gateway.upstream.server_info(&caller).await {
            Ok(server) => server,
            Err(e) => return reply::error(Some(id), &ErrorObject::from(e)),
        };
        let mut result = initialize_result(&server, version);
        let tasks = session_tasks::negotiate::declared(params);
        if let Some(declared) = tasks {
            session_tasks::negotiate::advertise_tasks(&mut result, declared);
        }
        let Some(session_id) = self.open(capabilities, tasks, principal) else {
            return reply::error_with_status(
                StatusCode::SERVICE_UNAVAILABLE,
                &ErrorObject::internal(
                    "too many open sessions; end some with DELETE or try again later",
                ),
            );
        };
        tracing::info!(session = %session_id, version, "serving a client session");
        let mut response = reply::json(StatusCode::OK, jsonrpc::success_body_of(id, &result));
        if let Ok(value) = HeaderValue::from_str(&session_id) {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
        response
    }

    fn open(
        &self,
        capabilities: Map<String, Value>,
        tasks: Option<Declared>,
        principal: String,
    ) -> Option<String> {
        let mut sessions = self.lock();
        if sessions.len() >= self.limits.max_sessions {
            self.forget_idle(&mut sessions);
        }
        if sessions.len() >= self.limits.max_sessions {
            self.meter.sessions().refused();
            return None;
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        sessions.insert(
            id.clone(),
            Arc::new(ServedSession::new(capabilities, tasks, principal)),
        );
        self.meter.sessions().opened();
        Some(id)
    }

    fn find(&self, id: &str, principal: &str) -> Option<Arc<ServedSession>> {
        let mut sessions = self.lock();
        let session = sessions.get(id)?;
        if !session.belongs_to(principal) {
            return None;
        }
        // Past its idle timeout a session is gone, whether or not the sweep ran yet.
        if session.idle_longer_than(self.limits.idle_timeout) {
            if let Some(session) = sessions.remove(id) {
                session.close();
                self.meter.sessions().ended("expired");
            }
            return None;
        }
        session.touch();
        Some(session.clone())
    }

    fn remove(&self, id: &str, principal: &str) -> Option<Arc<ServedSession>> {
        self.find(id, principal)?;
        let session = self.lock().remove(id)?;
        session.close();
        self.meter.sessions().ended("deleted");
        tracing::debug!(session = %id, "session ended by the client");
        Some(session)
    }

    fn forget_idle(&self, sessions: &mut HashMap<String, Arc<ServedSession>>) {
        let limit = self.limits.idle_timeout;
        sessions.retain(|id, session| {
            let keep = !session.idle_longer_than(limit);
            if !keep {
                session.close();
                self.meter.sessions().ended("expired");
                tracing::debug!(session = %id, "idle session forgotten");
            }
            keep
        });
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<ServedSession>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A request of the session's client the task handlers did not take: a plain call the
/// gateway runs as a task (`tasks::deferred`), else sent upstream (`call`).
async fn serve_request(
    gateway: &Gateway,
    parts: &Parts,
    session: Arc<ServedSession>,
    caller: &SessionCaller,
    request: call::ClientRequest,
) -> Response<Body> {
    if request.method == method::TOOLS_CALL
        && let Some(response) =
            session_tasks::deferred::serve(gateway, caller, &request.id, request.params.as_ref())
                .await
    {
        session.touch();
        return response;
    }
    // With deferral on, `tools/list` also lists the gateway's two tools.
    let deferral = match request.method == method::TOOLS_LIST {
        true => gateway.deferrals.listing(&caller.caller()).await,
        false => None,
    };
    let context = CallContext {
        upstream: gateway.upstream.clone(),
        auth: parts.headers.get(header::AUTHORIZATION).cloned(),
        timeout: gateway.upstream_timeout,
        tool_policies: gateway.policies.clone(),
        declared_tasks: session.tasks.is_some(),
        deferral,
        progress_keepalive: gateway.progress_keepalive.clone(),
    };
    call::serve(session, context, request).await
}

/// Forgets idle sessions now and then, until the table is dropped.
async fn sweep(table: Weak<ServedSessions>) {
    let every = match table.upgrade() {
        Some(table) => (table.limits.idle_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(60)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(table) = table.upgrade() else {
            return;
        };
        let mut sessions = table.lock();
        table.forget_idle(&mut sessions);
    }
}

/// The 2025-xx `InitializeResult` for the upstream's server information; a
/// 2026-07-28 upstream's extensions are not shown to a 2025-xx client.
fn initialize_result(server: &Value, version: &str) -> Value {
    let mut capabilities = mtg_protocol::upgrade::capabilities_of(server);
    capabilities.remove("extensions");
    let server_info = server
        .get("serverInfo")
        .cloned()
        .unwrap_or_else(gateway_info);
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

fn session_not_found() -> Response<Body> {
    reply::error_with_status(
        StatusCode::NOT_FOUND,
        &ErrorObject::new(
            code::INVALID_REQUEST,
            "Session not found: initialize a new one",
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max_sessions: usize, idle_timeout: Duration) -> ServedSessions {
        ServedSessions {
            sessions: Mutex::default(),
            limits: SessionLimits {
                idle_timeout,
                max_sessions,
            },
            meter: telemetry::Meter::new(None),
        }
    }

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
    fn a_session_is_found_only_by_its_principal() {
        let table = table(10, Duration::from_secs(60));
        let id = table.open(Map::new(), None, "alice".into()).unwrap();
        assert!(table.find(&id, "alice").is_some());
        assert!(table.find(&id, "mallory").is_none());
        assert!(table.remove(&id, "mallory").is_none());
        assert!(table.remove(&id, "alice").is_some());
        assert!(table.find(&id, "alice").is_none());
    }

    #[test]
    fn a_full_table_makes_room_by_forgetting_idle_sessions_only() {
        let table = table(2, Duration::ZERO);
        let busy = table.open(Map::new(), None, "p".into()).unwrap();
        // With no idle time allowed, `find` would forget them: reach them directly.
        let session = |id: &str| table.lock().get(id).cloned().unwrap();
        let in_flight = session(&busy).begin_call(&json!(1));
        table.open(Map::new(), None, "p".into()).unwrap();
        // The idle one goes; the one with a call in flight stays.
        let third = table.open(Map::new(), None, "p".into()).unwrap();
        assert!(table.lock().contains_key(&busy));
        assert!(!in_flight.is_cancelled());
        // Now both are in use: no room.
        let _also_busy = session(&third).begin_call(&json!(1));
        assert!(table.open(Map::new(), None, "p".into()).is_none());
    }
}
