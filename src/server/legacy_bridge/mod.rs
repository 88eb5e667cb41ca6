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

mod session;
mod sse;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};
use serde_json::{Map, Value, json};

use super::Gateway;
use super::reply::{self, Body};
use crate::protocol::jsonrpc::{self, ErrorObject, Message, code};
use crate::protocol::meta::LEGACY_PROTOCOL_VERSION;
use crate::upstream::Caller;
use session::Session;

const SESSION_HEADER: &str = "mcp-session-id";
/// Legacy versions a client may negotiate; others get the newest.
const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
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
        sessions.retain(|_, s| s.idle_for() < IDLE_SESSION);
        if sessions.len() >= MAX_SESSIONS {
            return None;
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let session = Session::new(capabilities, auth);
        sessions.insert(id.clone(), Arc::new(session));
        Some(id)
    }

    fn find(&self, id: &str, auth: Option<&HeaderValue>) -> Option<Arc<Session>> {
        let session = lock(&self.sessions).get(id).cloned()?;
        if !session.belongs_to(auth) {
            return None;
        }
        session.touch();
        Some(session)
    }

    fn remove(&self, id: &str, auth: Option<&HeaderValue>) -> Option<Arc<Session>> {
        self.find(id, auth)?;
        let session = lock(&self.sessions).remove(id)?;
        session.close();
        Some(session)
    }
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

fn session_not_found() -> Response<Body> {
    reply::error_with_status(
        StatusCode::NOT_FOUND,
        &ErrorObject::new(code::INVALID_REQUEST, "Session not found"),
    )
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
}
