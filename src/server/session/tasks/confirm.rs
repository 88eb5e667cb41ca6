//! Whether a pass-through session the gateway is about to answer for itself exists. The
//! upstream holds such sessions; the 2025 transport answers 404 for an id no session
//! has, so the gateway answers a task message of a session only once the upstream has
//! confirmed it (a `ping` in that session), and passes on the upstream's 404 otherwise.
//! A confirmation is kept for a minute, per instance, so a polling client costs one
//! ping a minute.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::{Response, StatusCode};
use serde_json::Map;
use sha2::{Digest, Sha256};

use super::SessionCaller;
use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::upstream::{Caller, UpstreamError, forward};
use mtg_protocol::jsonrpc::{ErrorObject, code};

/// How long a confirmed session is taken on trust.
const CONFIRMED_FOR: Duration = Duration::from_secs(60);
/// Confirmations kept; at the bound the oldest half is dropped.
const MAX_CONFIRMED: usize = 4096;
/// The longest wait for the upstream's answer to the ping.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Sessions the upstream confirmed lately, by a hash of (principal, session id): a
/// 5,000-byte id costs what a short one does.
#[derive(Default)]
pub(crate) struct Confirmed(Mutex<HashMap<[u8; 32], Instant>>);

impl Confirmed {
    fn key(session: &SessionCaller) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(session.principal.as_bytes());
        hash.update([0]);
        hash.update(session.id.as_bytes());
        hash.finalize().into()
    }

    fn fresh(&self, key: &[u8; 32]) -> bool {
        let known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        known
            .get(key)
            .is_some_and(|since| since.elapsed() < CONFIRMED_FOR)
    }

    fn remember(&self, key: [u8; 32]) {
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= MAX_CONFIRMED {
            known.retain(|_, since| since.elapsed() < CONFIRMED_FOR);
            if known.len() >= MAX_CONFIRMED {
                let mut ages: Vec<Instant> = known.values().copied().collect();
                ages.sort_unstable();
                let cut = ages[ages.len() / 2];
                known.retain(|_, since| *since > cut);
            }
        }
        known.insert(key, Instant::now());
    }
}

/// `None` when the gateway may answer for `session` (a pass-through session the
/// upstream has, or one it could not tell about: the upstream failing is not a
/// verdict); else the answer a session id no session has gets: HTTP 404.
pub(crate) async fn unknown_session(
    gateway: &Gateway,
    session: &SessionCaller,
) -> Option<Response<Body>> {
    let upstream_session = session.upstream.as_ref()?;
    let key = Confirmed::key(session);
    if gateway.confirmed_sessions.fresh(&key) {
        return None;
    }
    let capabilities = Map::new();
    let caller = Caller {
        capabilities: &capabilities,
        auth: session.auth.as_ref(),
        session: Some(upstream_session),
    };
    let pinged = forward::request(
        gateway.upstream.as_ref(),
        &caller,
        mtg_protocol::names::method::PING,
        None,
        Some(PING_TIMEOUT),
    )
    .await;
    match pinged {
        Err(UpstreamError::SessionExpired) => Some(session_not_found()),
        Ok(_) => {
            gateway.confirmed_sessions.remember(key);
            None
        }
        Err(e) => {
            tracing::debug!(error = %e, "could not confirm a pass-through session");
            None
        }
    }
}

/// The 2025 transport's answer to a session id no session has.
pub(crate) fn session_not_found() -> Response<Body> {
    reply::error_with_status(
        StatusCode::NOT_FOUND,
        &ErrorObject::new(
            code::INVALID_REQUEST,
            "Session not found: initialize a new one",
        ),
    )
}
