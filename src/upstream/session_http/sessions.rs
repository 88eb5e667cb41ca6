//! The upstream sessions the gateway holds, one per capability set and credential:
//! opened on first use, closed when idle or when the table is full, forgotten when the
//! upstream forgets them.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, header};
use serde_json::{Map, Value, json};

use super::{
    PROTOCOL_HEADER, SESSION_HEADER, SessionCell, SessionHttpUpstream, UpstreamSession,
    call_stream, in_client_session,
};
use crate::upstream::{Exchange, PassThroughSession, UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::{self};
use mtg_protocol::meta;
use mtg_protocol::names::SESSION_VERSION;
use mtg_protocol::names::method;

/// A gateway-owned upstream session unused this long (and used by no call) is closed.
pub(super) const IDLE_LIMIT: Duration = Duration::from_secs(300);

/// Most gateway-owned upstream sessions at once; past it the least recently used idle
/// one is closed to make room.
const MAX_SESSIONS: usize = 1024;

impl SessionHttpUpstream {
    /// The session for these capabilities and credentials, opened on first use.
    pub(super) async fn session(
        &self,
        capabilities: &Map<String, Value>,
        auth: Option<&HeaderValue>,
    ) -> Result<Arc<UpstreamSession>, UpstreamError> {
        let subset = meta::session_subset(capabilities);
        let capabilities = &subset;
        let key = session_key(capabilities, auth);
        let (cell, evicted) = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            // Each credential and capability set has its own session: without a bound,
            // callers varying their Authorization would open sessions without end.
            let evicted = if sessions.contains_key(&key) {
                None
            } else if sessions.len() >= MAX_SESSIONS {
                match evict_one_idle(&mut sessions) {
                    Some(session) => Some(session),
                    None => {
                        return Err(UpstreamError::Unreachable(format!(
                            "the gateway already holds {MAX_SESSIONS} upstream sessions, all \
                             in use (one per credential and capability set); try again later"
                        )));
                    }
                }
            } else {
                None
            };
            (sessions.entry(key.clone()).or_default().clone(), evicted)
        };
        if let Some(session) = evicted {
            self.close_in_background(session);
        }
        let result = cell
            .get_or_try_init(|| self.open_session(key.clone(), capabilities, auth.cloned()))
            .await;
        match &result {
            Ok(session) => session.touch(),
            // Let the next call try again instead of caching the failure.
            Err(_) => self.forget(&key, &cell),
        }
        result.cloned()
    }

    /// Closes the sessions no call has used for [`IDLE_LIMIT`] and none holds now.
    pub(super) fn close_idle(&self) {
        let idle: Vec<Arc<UpstreamSession>> = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<String> = sessions
                .iter()
                .filter(|(_, cell)| {
                    cell.get()
                        .is_some_and(|s| unused(s) && s.idle_for() >= IDLE_LIMIT)
                })
                .map(|(key, _)| key.clone())
                .collect();
            keys.iter()
                .filter_map(|key| sessions.remove(key))
                .filter_map(|cell| cell.get().cloned())
                .collect()
        };
        if !idle.is_empty() {
            tracing::debug!(count = idle.len(), "closing idle upstream sessions");
        }
        for session in idle {
            self.close_in_background(session);
        }
    }

    /// Ends a session the gateway dropped: `DELETE` upstream (best effort), and its GET
    /// stream stops with the last reference.
    fn close_in_background(&self, session: Arc<UpstreamSession>) {
        let (Some(me), Some(id)) = (self.me.upgrade(), session.id.clone()) else {
            return;
        };
        tokio::spawn(async move {
            let mut request = Request::builder()
                .method(Method::DELETE)
                .uri(me.url.clone())
                .header(SESSION_HEADER, id)
                .header(PROTOCOL_HEADER, &session.protocol_version);
            if let Some(auth) = &session.auth {
                request = request.header(header::AUTHORIZATION, auth);
            }
            if let Err(e) = me.send_built(request, Bytes::new()).await {
                tracing::debug!(error = %e, "could not end an idle upstream session");
            }
        });
    }

    /// Drops a session the upstream no longer knows, so the next call opens a new one.
    pub(super) fn invalidate(&self, session: &UpstreamSession) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cell) = sessions.get(&session.key)
            && cell
                .get()
                .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), session))
        {
            sessions.remove(&session.key);
        }
    }

    fn forget(&self, key: &str, cell: &SessionCell) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.get(key).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            sessions.remove(key);
        }
    }

    async fn open_session(
        &self,
        key: String,
        capabilities: &Map<String, Value>,
        auth: Option<HeaderValue>,
    ) -> Result<Arc<UpstreamSession>, UpstreamError> {
        let id = self.next_request_id();
        let params = json!({
            "protocolVersion": SESSION_VERSION,
            "capabilities": capabilities,
            "clientInfo": mtg_protocol::names::gateway_info(),
        });
        let body = jsonrpc::request_value(id.clone(), method::INITIALIZE, Some(params));
        let response = self.post(None, None, auth.as_ref(), &body).await?;
        let session_id = response.headers().get(SESSION_HEADER).cloned();
        let mut stream = call_stream(response);
        let server = loop {
            match stream.next().await {
                Some(Ok(UpstreamEvent::Response { outcome, .. })) => {
                    break outcome.map_err(|e| {
                        UpstreamError::Protocol(format!("initialize failed: {}", e.message))
                    })?;
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e),
                None => return Err(UpstreamError::Lost("no answer to initialize".into())),
            }
        };
        let version = server
            .get("protocolVersion")
            .and_then(Value::as_str)
            .and_then(|v| HeaderValue::from_str(v).ok())
            .unwrap_or(HeaderValue::from_static(SESSION_VERSION));
        let session = Arc::new(UpstreamSession {
            id: session_id,
            protocol_version: version,
            server,
            auth,
            key,
            get_stream: Mutex::new(None),
            last_used: Mutex::new(std::time::Instant::now()),
            users: std::sync::atomic::AtomicUsize::new(0),
        });
        // The GET stream must be open before `initialized`: some upstreams (server-everything)
        // send `roots/list` on it right after, and drop it if nobody reads it.
        if session.id.is_some() {
            match self.open_get_stream(&session).await {
                Ok(stream) => {
                    let me = self
                        .me
                        .upgrade()
                        .expect("the upstream outlives its sessions");
                    let task =
                        tokio::spawn(me.serve_get_stream(Arc::downgrade(&session), Some(stream)));
                    *session.get_stream.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(task.abort_handle());
                }
                Err(e) => tracing::debug!(error = %e, "upstream offers no GET stream"),
            }
        }
        let initialized =
            jsonrpc::notification_value(mtg_protocol::names::method::INITIALIZED, None);
        self.send(&session, &initialized).await?;
        tracing::info!(upstream = %self.url, session = ?session.id, "opened upstream session");
        Ok(session)
    }

    /// Sends a request in a session a client opened through the gateway. The client
    /// numbers its own requests in that session, so the gateway's ids are strings it
    /// would not pick; a session the upstream forgot is the client's to reopen.
    pub(super) fn open_in_client_session(
        &self,
        client_session: &PassThroughSession,
        auth: Option<&HeaderValue>,
        method: &str,
        params: Option<Value>,
    ) -> Box<dyn Exchange> {
        let session = in_client_session(client_session, auth);
        let id = Value::String(format!(
            "mtg-{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        ));
        let body = jsonrpc::request_value(id.clone(), method, params);
        self.send_call(session, id, body, None)
    }
}

/// Whether no call uses the session: no exchange is open on it, and no call asked for
/// it in the last 10 s (one may still wait for the upstream to answer its request).
fn unused(session: &Arc<UpstreamSession>) -> bool {
    session.users.load(Ordering::Relaxed) == 0 && session.idle_for() >= Duration::from_secs(10)
}

/// Removes the least recently used unused session; the removed one, if any.
fn evict_one_idle(sessions: &mut HashMap<String, SessionCell>) -> Option<Arc<UpstreamSession>> {
    let key = sessions
        .iter()
        .filter_map(|(key, cell)| {
            cell.get()
                .filter(|s| unused(s))
                .map(|s| (key, s.idle_for()))
        })
        .max_by_key(|(_, idle)| *idle)
        .map(|(key, _)| key.clone())?;
    sessions.remove(&key).and_then(|cell| cell.get().cloned())
}

fn session_key(capabilities: &Map<String, Value>, auth: Option<&HeaderValue>) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(capabilities).expect("JSON values serialize"));
    hasher.update([0]);
    if let Some(auth) = auth {
        hasher.update(auth.as_bytes());
    }
    format!("{:x}", hasher.finalize())
}
