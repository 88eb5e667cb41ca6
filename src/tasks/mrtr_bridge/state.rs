//! The `requestState` of a held call: which call and round it answers, sealed with an
//! HMAC the instances share, bound to the principal and to the request it was issued
//! for, and short-lived.
//!
//! `mtg1.<payload>.<mac>`, both base64url: the payload is JSON (task id, the round's
//! keys, expiry, digest of the request); the MAC covers the payload and the principal,
//! which is not written into the token.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

const PREFIX: &str = "mtg1.";

/// The secret every instance signs with, and the one before it during a rotation.
#[derive(Clone)]
pub struct StateKeys {
    current: Vec<u8>,
    previous: Option<Vec<u8>>,
}

impl std::fmt::Debug for StateKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateKeys(..)")
    }
}

impl StateKeys {
    pub fn new(current: Vec<u8>, previous: Option<Vec<u8>>) -> Self {
        Self { current, previous }
    }

    /// A key of this process alone: states it signs are good on this instance only.
    pub fn random() -> Self {
        let mut key = uuid::Uuid::new_v4().as_bytes().to_vec();
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self::new(key, None)
    }

    /// The current secret, then the previous one, to derive other keys from.
    pub(crate) fn secrets(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.current.as_slice()).chain(self.previous.as_deref())
    }

    fn mac(key: &[u8], payload: &[u8], principal: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any size");
        mac.update(payload);
        mac.update(b"\0");
        mac.update(principal.as_bytes());
        mac
    }
}

/// What a state says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Claims {
    #[serde(rename = "t")]
    pub task_id: String,
    /// The input keys this round asked for.
    #[serde(rename = "k")]
    pub keys: Vec<String>,
    /// Milliseconds since the epoch after which the state is refused.
    #[serde(rename = "e")]
    pub expires_at_ms: u64,
    /// Digest of the method and params (without `_meta` and the MRTR fields).
    #[serde(rename = "d")]
    pub request: String,
    /// A task's own call, asked within the promotion budget (it becomes a task the client
    /// sees if it outlasts the budget), rather than a hidden held call.
    #[serde(rename = "v", default, skip_serializing_if = "std::ops::Not::not")]
    pub visible: bool,
}

/// Why a `requestState` is refused; the client gets -32602 with this text.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum StateError {
    #[error("requestState is malformed")]
    Malformed,
    #[error("requestState was not issued by this gateway for this caller")]
    Forged,
    #[error("requestState has expired: the held call was not resumed in time")]
    Expired,
    #[error("requestState was issued for another request (method or params differ)")]
    OtherRequest,
}

/// Whether `state` is one of the gateway's (others belong to a 2026 upstream).
pub(super) fn is_ours(state: &str) -> bool {
    state.starts_with(PREFIX)
}

pub(super) fn seal(keys: &StateKeys, claims: &Claims, principal: &str) -> String {
    let payload = serde_json::to_vec(claims).expect("claims serialize");
    let mac = StateKeys::mac(&keys.current, &payload, principal).finalize();
    format!(
        "{PREFIX}{}.{}",
        URL_SAFE_NO_PAD.encode(&payload),
        URL_SAFE_NO_PAD.encode(mac.into_bytes())
    )
}

/// The claims of a state sealed for `principal` and this request, not yet expired.
pub(super) fn open(
    keys: &StateKeys,
    state: &str,
    principal: &str,
    request: &str,
    now_ms: u64,
) -> Result<Claims, StateError> {
    let body = state.strip_prefix(PREFIX).ok_or(StateError::Malformed)?;
    let (payload, mac) = body.split_once('.').ok_or(StateError::Malformed)?;
    let payload = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| StateError::Malformed)?;
    let mac = URL_SAFE_NO_PAD
        .decode(mac)
        .map_err(|_| StateError::Malformed)?;
    let genuine = std::iter::once(&keys.current)
        .chain(keys.previous.as_ref())
        .any(|key| {
            StateKeys::mac(key, &payload, principal)
                .verify_slice(&mac)
                .is_ok()
        });
    if !genuine {
        return Err(StateError::Forged);
    }
    let claims: Claims = serde_json::from_slice(&payload).map_err(|_| StateError::Malformed)?;
    if now_ms > claims.expires_at_ms {
        return Err(StateError::Expired);
    }
    if claims.request != request {
        return Err(StateError::OtherRequest);
    }
    Ok(claims)
}

/// The digest that binds a state to its request: the method and the params without
/// `_meta` (progress tokens and the client's capabilities may differ between tries) and
/// without `inputResponses` and `requestState`.
pub fn request_digest(method: &str, params: Option<&Value>) -> String {
    let mut params = params.cloned().unwrap_or(Value::Null);
    if let Some(object) = params.as_object_mut() {
        for field in ["_meta", "inputResponses", "requestState"] {
            object.remove(field);
        }
    }
    let mut hash = Sha256::new();
    hash.update(method.as_bytes());
    hash.update(b"\0");
    // serde_json's maps are sorted, so equal params give equal text.
    hash.update(params.to_string().as_bytes());
    URL_SAFE_NO_PAD.encode(hash.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims() -> Claims {
        Claims {
            task_id: "t-1".into(),
            keys: vec!["input-0".into()],
            expires_at_ms: 2_000,
            request: request_digest("tools/call", Some(&json!({"name": "ask"}))),
            visible: false,
        }
    }

    #[test]
    fn a_sealed_state_opens_for_its_principal_and_request_only() {
        let keys = StateKeys::random();
        let state = seal(&keys, &claims(), "alice");
        assert!(is_ours(&state));
        let digest = claims().request;
        assert_eq!(open(&keys, &state, "alice", &digest, 1_000), Ok(claims()));
        assert_eq!(
            open(&keys, &state, "mallory", &digest, 1_000),
            Err(StateError::Forged)
        );
        assert_eq!(
            open(&keys, &state, "alice", &digest, 2_001),
            Err(StateError::Expired)
        );
        let other = request_digest("tools/call", Some(&json!({"name": "other"})));
        assert_eq!(
            open(&keys, &state, "alice", &other, 1_000),
            Err(StateError::OtherRequest)
        );
    }

    #[test]
    fn a_changed_payload_or_another_key_is_forged() {
        let keys = StateKeys::random();
        let state = seal(&keys, &claims(), "alice");
        let digest = claims().request;
        let mut longer = claims();
        longer.expires_at_ms = u64::MAX;
        let forged_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&longer).unwrap());
        let mac = state.rsplit_once('.').unwrap().1;
        let tampered = format!("{PREFIX}{forged_payload}.{mac}");
        assert_eq!(
            open(&keys, &tampered, "alice", &digest, 1_000),
            Err(StateError::Forged)
        );
        assert_eq!(
            open(&StateKeys::random(), &state, "alice", &digest, 1_000),
            Err(StateError::Forged)
        );
        assert_eq!(
            open(&keys, "mtg1.x", "alice", &digest, 1_000),
            Err(StateError::Malformed)
        );
    }

    #[test]
    fn during_a_rotation_states_of_the_previous_key_still_open() {
        let old = StateKeys::new(b"old-secret-old-secret-old-secret".to_vec(), None);
        let state = seal(&old, &claims(), "alice");
        let rotated = StateKeys::new(
            b"new-secret-new-secret-new-secret".to_vec(),
            Some(b"old-secret-old-secret-old-secret".to_vec()),
        );
        assert!(open(&rotated, &state, "alice", &claims().request, 1_000).is_ok());
        let after = StateKeys::new(b"new-secret-new-secret-new-secret".to_vec(), None);
        assert_eq!(
            open(&after, &state, "alice", &claims().request, 1_000),
            Err(StateError::Forged)
        );
    }

    #[test]
    fn the_digest_ignores_meta_and_the_mrtr_fields() {
        let first = json!({"name": "ask", "arguments": {"a": 1}, "_meta": {"progressToken": 1}});
        let retry = json!({"arguments": {"a": 1}, "name": "ask", "inputResponses": {}, "requestState": "s"});
        assert_eq!(
            request_digest("tools/call", Some(&first)),
            request_digest("tools/call", Some(&retry))
        );
        assert_ne!(
            request_digest("tools/call", Some(&first)),
            request_digest("prompts/get", Some(&first))
        );
    }
}
