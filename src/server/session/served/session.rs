//! One 2025-xx client session the gateway serves: what the client declared, whose it
//! is, its requests in flight, and the server-to-client requests awaiting its answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::server::session::tasks::negotiate::Declared;
use mtg_protocol::jsonrpc::ErrorObject;

pub(super) type Answer = Result<Value, ErrorObject>;

pub(super) struct ServedSession {
    /// What the client declared at `initialize` that the upstream must see.
    pub capabilities: Map<String, Value>,
    /// What the client declared about tasks, if it declared `capabilities.tasks`.
    pub tasks: Option<Declared>,
    /// Who opened it; another principal does not find it.
    principal: String,
    last_used: Mutex<Instant>,
    next_request_id: AtomicU64,
    /// Server-to-client requests awaiting the client's answer, by JSON id.
    awaiting: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
    /// The client's requests being served, by JSON id, so `notifications/cancelled`
    /// stops them.
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    /// Cancelled when the session ends; every call of the session is a child of it.
    ended: CancellationToken,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A JSON-RPC id as a map key: `1` and `"1"` stay distinct.
fn id_key(id: &Value) -> String {
    id.to_string()
}

impl ServedSession {
    pub(super) fn new(
        capabilities: Map<String, Value>,
        tasks: Option<Declared>,
        principal: String,
    ) -> Self {
        Self {
            capabilities,
            tasks,
            principal,
            last_used: Mutex::new(Instant::now()),
            next_request_id: AtomicU64::new(0),
            awaiting: Mutex::default(),
            in_flight: Mutex::default(),
            ended: CancellationToken::new(),
        }
    }

    pub(super) fn belongs_to(&self, principal: &str) -> bool {
        self.principal == principal
    }

    pub(super) fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Whether nothing has used the session for `limit`; a call in flight keeps it in use.
    pub(super) fn idle_longer_than(&self, limit: Duration) -> bool {
        lock(&self.in_flight).is_empty() && lock(&self.last_used).elapsed() >= limit
    }

    /// Ends the session: its calls stop, and answers still awaited are dropped.
    pub(super) fn close(&self) {
        self.ended.cancel();
        lock(&self.awaiting).clear();
    }

    /// Registers a client request as in flight; its token stops it.
    pub(super) fn begin_call(&self, id: &Value) -> CancellationToken {
        let token = self.ended.child_token();
        lock(&self.in_flight).insert(id_key(id), token.clone());
        token
    }

    pub(super) fn end_call(&self, id: &Value) {
        lock(&self.in_flight).remove(&id_key(id));
        self.touch();
    }

    /// `notifications/cancelled` from the client.
    pub(super) fn cancel_call(&self, id: &Value) {
        if let Some(call) = lock(&self.in_flight).remove(&id_key(id)) {
            tracing::info!(request_id = %id, "session client cancelled a request");
            call.cancel();
        }
    }

    /// A new server-to-client request id and the slot its answer will arrive in.
    pub(super) fn ask(self: &Arc<Self>) -> (Value, PendingAnswer) {
        let id = Value::from(self.next_request_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        let key = id_key(&id);
        lock(&self.awaiting).insert(key.clone(), tx);
        let pending = PendingAnswer {
            session: self.clone(),
            key,
            rx,
        };
        (id, pending)
    }

    /// The client's answer to one of the gateway's requests.
    pub(super) fn answer(&self, id: &Value, outcome: Answer) {
        match lock(&self.awaiting).remove(&id_key(id)) {
            Some(waiting) => {
                let _ = waiting.send(outcome);
            }
            None => tracing::debug!(%id, "answer to no outstanding request; ignored"),
        }
    }
}

/// A server-to-client request's answer to come; forgotten when dropped unanswered.
pub(super) struct PendingAnswer {
    session: Arc<ServedSession>,
    key: String,
    rx: oneshot::Receiver<Answer>,
}

impl PendingAnswer {
    /// `None` when the session ended first.
    pub(super) async fn receive(mut self) -> Option<Answer> {
        (&mut self.rx).await.ok()
    }
}

impl Drop for PendingAnswer {
    fn drop(&mut self) {
        lock(&self.session.awaiting).remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session() -> Arc<ServedSession> {
        Arc::new(ServedSession::new(Map::new(), None, "p".into()))
    }

    #[tokio::test]
    async fn an_answer_reaches_the_request_it_names_once() {
        let session = session();
        let (first, first_answer) = session.ask();
        let (second, _second_answer) = session.ask();
        assert_ne!(first, second);
        session.answer(&first, Ok(json!({"n": 1})));
        session.answer(&first, Ok(json!({"n": 2})));
        assert_eq!(first_answer.receive().await, Some(Ok(json!({"n": 1}))));
        assert_eq!(lock(&session.awaiting).len(), 1);
    }

    #[tokio::test]
    async fn an_abandoned_request_is_forgotten() {
        let session = session();
        let (id, pending) = session.ask();
        drop(pending);
        assert!(lock(&session.awaiting).is_empty());
        // A late answer is ignored.
        session.answer(&id, Ok(json!({})));
    }

    #[test]
    fn a_call_in_flight_keeps_the_session_in_use() {
        let session = session();
        let token = session.begin_call(&json!(1));
        assert!(!session.idle_longer_than(Duration::ZERO));
        session.cancel_call(&json!(1));
        assert!(token.is_cancelled());
        assert!(session.idle_longer_than(Duration::ZERO));
    }

    #[test]
    fn closing_stops_every_call() {
        let session = session();
        let token = session.begin_call(&json!("a"));
        session.close();
        assert!(token.is_cancelled());
    }
}
