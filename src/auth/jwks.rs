//! The issuer's signing keys (JWKS): fetched from `--auth-jwt-jwks-url` or found through
//! the issuer's metadata, kept in memory, fetched again every ten minutes and whenever a
//! token names a key id the set lacks (key rotation), at most every five seconds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::sync::Mutex;

use mtg_transport::HttpClient;

const REFRESH_EVERY: Duration = Duration::from_secs(600);
/// An unknown key id fetches the set again, but not more often than this (a flood of
/// tokens with made-up key ids must not become a flood of requests to the issuer).
const REFETCH_AFTER: Duration = Duration::from_secs(5);
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum JwksError {
    #[error("cannot fetch {url}: {detail}")]
    Fetch { url: String, detail: String },
    #[error("{url} is not a JSON Web Key Set: {detail}")]
    Malformed { url: String, detail: String },
}

/// Where the keys come from.
#[derive(Debug, Clone)]
pub(crate) enum KeySource {
    /// A JWKS URL.
    Url(String),
    /// The issuer's metadata (`/.well-known/oauth-authorization-server`, then
    /// `/.well-known/openid-configuration`) names the JWKS URL.
    Discovery { issuer: String },
}

pub(crate) struct Jwks {
    client: HttpClient,
    source: KeySource,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    keys: Arc<Vec<Jwk>>,
    fetched_at: Option<Instant>,
    jwks_url: Option<String>,
}

impl Jwks {
    pub(crate) fn new(client: HttpClient, source: KeySource) -> Self {
        Self {
            client,
            source,
            state: Mutex::default(),
        }
    }

    /// The key to check a token signed with `alg` under `kid` (or, without a key id,
    /// the one key of the set that fits `alg`); `Ok(None)` when the issuer has none.
    pub(crate) async fn key_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Option<DecodingKey>, JwksError> {
        let keys = self.keys(false).await?;
        if let Some(key) = pick(&keys, kid, alg) {
            return Ok(Some(key));
        }
        // Perhaps rotated: look again, if the set is not fresh.
        let keys = self.keys(true).await?;
        Ok(pick(&keys, kid, alg))
    }

    async fn keys(&self, missing_one: bool) -> Result<Arc<Vec<Jwk>>, JwksError> {
        let mut state = self.state.lock().await;
        let stale = match state.fetched_at {
            None => true,
            Some(at) if missing_one => at.elapsed() >= REFETCH_AFTER,
            Some(at) => at.elapsed() >= REFRESH_EVERY,
        };
        if stale {
            match self.fetch(&mut state).await {
                Ok(keys) => {
                    tracing::info!(keys = keys.len(), "fetched the issuer's signing keys");
                    state.keys = Arc::new(keys);
                    state.fetched_at = Some(Instant::now());
                }
                // Keep serving with the keys we have; try again after REFETCH_AFTER.
                Err(e) if state.fetched_at.is_some() => {
                    tracing::warn!(error = %e, "could not refresh the issuer's signing keys");
                    state.fetched_at = Some(Instant::now() - REFRESH_EVERY + REFETCH_AFTER);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(state.keys.clone())
    }

    async fn fetch(&self, state: &mut State) -> Result<Vec<Jwk>, JwksError> {
        let url = match (&self.source, &state.jwks_url) {
            (KeySource::Url(url), _) => url.clone(),
            (KeySource::Discovery { .. }, Some(url)) => url.clone(),
            (KeySource::Discovery { issuer }, None) => {
                let url = self.discover(issuer).await?;
                state.jwks_url = Some(url.clone());
                url
            }
        };
        let document = self.get_json(&url).await?;
        let set: JwkSet = serde_json::from_value(document).map_err(|e| JwksError::Malformed {
            url: url.clone(),
            detail: e.to_string(),
        })?;
        Ok(set.keys)
    }

    /// The `jwks_uri` of the issuer's metadata (RFC 8414, then OpenID Connect).
    async fn discover(&self, issuer: &str) -> Result<String, JwksError> {
        let base = issuer.trim_end_matches('/');
        let mut last = None;
        for path in [
            "/.well-known/oauth-authorization-server",
            "/.well-known/openid-configuration",
        ] {
            let url = format!("{base}{path}");
            match self.get_json(&url).await {
                Ok(metadata) => match metadata.get("jwks_uri").and_then(|v| v.as_str()) {
                    Some(jwks) => return Ok(jwks.to_owned()),
                    None => {
                        last = Some(JwksError::Malformed {
                            url,
                            detail: "no jwks_uri".into(),
                        })
                    }
                },
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| JwksError::Fetch {
            url: base.to_owned(),
            detail: "no metadata".into(),
        }))
    }

    async fn get_json(&self, url: &str) -> Result<serde_json::Value, JwksError> {
        let fetch_error = |detail: String| JwksError::Fetch {
            url: url.to_owned(),
            detail,
        };
        let request = http::Request::get(url)
            .header(http::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|e| fetch_error(e.to_string()))?;
        let response = tokio::time::timeout(FETCH_TIMEOUT, self.client.request(request))
            .await
            .map_err(|_| fetch_error(format!("no answer within {FETCH_TIMEOUT:?}")))?
            .map_err(|e| fetch_error(e.to_string()))?;
        if !response.status().is_success() {
            return Err(fetch_error(format!("HTTP {}", response.status())));
        }
        let body = Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
            .collect()
            .await
            .map_err(|e| fetch_error(e.to_string()))?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| JwksError::Malformed {
            url: url.to_owned(),
            detail: e.to_string(),
        })
    }
}

/// The key that may check `alg` under `kid`: its type must fit the algorithm (never a
/// symmetric key, so a public key can never serve as an HMAC secret), and a key that
/// names its algorithm must name this one.
fn pick(keys: &[Jwk], kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
    let fits = |jwk: &&Jwk| {
        let family_fits = matches!(
            (&jwk.algorithm, alg.family()),
            (
                AlgorithmParameters::RSA(_),
                jsonwebtoken::AlgorithmFamily::Rsa
            ) | (
                AlgorithmParameters::EllipticCurve(_),
                jsonwebtoken::AlgorithmFamily::Ec
            ) | (
                AlgorithmParameters::OctetKeyPair(_),
                jsonwebtoken::AlgorithmFamily::Ed
            )
        );
        let alg_fits = jwk
            .common
            .key_algorithm
            .is_none_or(|named| format!("{named:?}") == format!("{alg:?}"));
        family_fits && alg_fits
    };
    let mut candidates = keys.iter().filter(fits);
    let jwk = match kid {
        Some(kid) => candidates.find(|jwk| jwk.common.key_id.as_deref() == Some(kid))?,
        None => {
            let first = candidates.next()?;
            // Without a key id, only an unambiguous set is usable.
            if candidates.next().is_some() {
                return None;
            }
            first
        }
    };
    DecodingKey::from_jwk(jwk).ok()
}
