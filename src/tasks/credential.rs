//! The caller's `Authorization` header, kept in the task record so that another
//! instance can run the call again after this one is lost. It is sealed (ChaCha20-
//! Poly1305) under a key derived from the `requestState` secret every instance shares,
//! and bound to the task: a reader of the store sees no credential, and a sealed one
//! cannot be moved to another task.
//!
//! `mtgc1.<base64url(nonce ‖ ciphertext ‖ tag)>`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::Sha256;

use super::mrtr_bridge::StateKeys;

const PREFIX: &str = "mtgc1.";
/// Separates this key from the `requestState` MACs made with the same secret.
const LABEL: &[u8] = b"mcp-task-gateway credential v1";

fn key_from(secret: &[u8]) -> LessSafeKey {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any size");
    mac.update(LABEL);
    let bytes = mac.finalize().into_bytes();
    let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).expect("32 bytes is the key size");
    LessSafeKey::new(key)
}

/// Seals `credential` for the task `task_id`; `None` only if the system has no
/// randomness to give.
pub(super) fn seal(keys: &StateKeys, task_id: &str, credential: &[u8]) -> Option<String> {
    let secret = keys.secrets().next()?;
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new().fill(&mut nonce).ok()?;
    let mut sealed = credential.to_vec();
    key_from(secret)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(task_id.as_bytes()),
            &mut sealed,
        )
        .ok()?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Some(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(out)))
}

/// The credential sealed for `task_id`, if one of `keys` opens it.
pub(super) fn open(keys: &StateKeys, task_id: &str, sealed: &str) -> Option<Vec<u8>> {
    let bytes = URL_SAFE_NO_PAD.decode(sealed.strip_prefix(PREFIX)?).ok()?;
    if bytes.len() < NONCE_LEN {
        return None;
    }
    let (nonce, body) = bytes.split_at(NONCE_LEN);
    keys.secrets().find_map(|secret| {
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = key_from(secret)
            .open_in_place(nonce, Aad::from(task_id.as_bytes()), &mut body)
            .ok()?;
        Some(plain.to_vec())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_shared_key_opens_it_and_only_for_its_task() {
        let keys = StateKeys::new(b"k".repeat(32), None);
        let sealed = seal(&keys, "task-1", b"Bearer abc").unwrap();
        assert!(!sealed.contains("abc"));
        assert_eq!(open(&keys, "task-1", &sealed).unwrap(), b"Bearer abc");
        assert_eq!(open(&keys, "task-2", &sealed), None);
        assert_eq!(
            open(&StateKeys::new(b"x".repeat(32), None), "task-1", &sealed),
            None
        );
        // During a rotation the previous key still opens what it sealed.
        let rotated = StateKeys::new(b"n".repeat(32), Some(b"k".repeat(32)));
        assert_eq!(open(&rotated, "task-1", &sealed).unwrap(), b"Bearer abc");
        let mut tampered = sealed.clone();
        tampered.pop();
        assert_eq!(open(&keys, "task-1", &tampered), None);
        assert_eq!(open(&keys, "task-1", "mtgc1.AA"), None);
    }
}
