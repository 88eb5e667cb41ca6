//! Standard Webhooks signatures: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`,
//! keyed by the bytes of a `whsec_<base64>` secret; with two secrets (a rotation), both
//! signatures, space-separated.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// One signing key.
#[derive(Clone)]
pub(crate) struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BadSecret {
    #[error("expected whsec_ followed by base64")]
    Prefix,
    #[error("the part after whsec_ is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("the key is empty")]
    Empty,
}

impl Secret {
    /// A secret as a file holds it: `whsec_<base64>`, surrounding whitespace ignored.
    pub(crate) fn parse(text: &str) -> Result<Self, BadSecret> {
        let encoded = text
            .trim()
            .strip_prefix("whsec_")
            .ok_or(BadSecret::Prefix)?;
        let key = STANDARD.decode(encoded)?;
        if key.is_empty() {
            return Err(BadSecret::Empty);
        }
        Ok(Self(key))
    }
}

/// The `webhook-signature` header value for one request.
pub(crate) fn signature(secrets: &[Secret], id: &str, timestamp: u64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| {
            // HMAC takes a key of any length.
            let mut mac = Hmac::<Sha256>::new_from_slice(&secret.0).expect("HMAC takes any key");
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.to_string().as_bytes());
            mac.update(b".");
            mac.update(body);
            format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn signs_as_the_reference_libraries_do() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let sig = signature(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn two_secrets_sign_twice_and_bad_ones_are_refused() {
        let a = Secret::parse("whsec_YWFhYQ==").unwrap();
        let b = Secret::parse(" whsec_YmJiYg==\n").unwrap();
        let both = signature(&[a.clone(), b], "msg_1", 1, b"{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], signature(&[a], "msg_1", 1, b"{}"));
        assert!(Secret::parse("YWFhYQ==").is_err());
        assert!(Secret::parse("whsec_!!").is_err());
        assert!(Secret::parse("whsec_").is_err());
    }
}
