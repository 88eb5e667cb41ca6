//! The gateway as an OAuth 2.1 resource server (MCP authorization): bearer JWTs are
//! checked at the edge against the issuer's keys (`jwks.rs`), and the caller is the
//! token's (issuer, subject), so a refreshed token keeps access to its tasks. Off unless
//! `--auth-jwt-issuer` is set.
//!
//! Failures are HTTP 401 with `WWW-Authenticate: Bearer resource_metadata="…"` pointing
//! at the RFC 9728 metadata the gateway serves (`/.well-known/oauth-protected-resource`),
//! or 403 `insufficient_scope` when a method's required scopes are missing.

pub(crate) mod jwks;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use jwks::{Jwks, KeySource};

/// What the config says about tokens.
#[derive(Debug, Clone)]
pub(crate) struct AuthSettings {
    pub issuer: String,
    /// The gateway's resource URI (RFC 8707): tokens must name it in `aud`.
    pub audience: String,
    pub keys: KeySource,
    /// Accepted signature algorithms; never `none`, never HMAC.
    pub algorithms: Vec<Algorithm>,
    pub leeway: Duration,
    /// Scopes a `tools/call` needs, and scopes every `tasks/*` request needs.
    pub tools_call_scopes: Vec<String>,
    pub tasks_scopes: Vec<String>,
}

/// What the gateway sends upstream as `Authorization`.
#[derive(Debug, Clone)]
pub(crate) enum UpstreamCredential {
    /// The caller's own header, unchanged.
    Client,
    /// Nothing: the upstream trusts the gateway's network position.
    None,
    /// One credential of the gateway's for every request (`Bearer <service token>`).
    Static(http::HeaderValue),
}

impl UpstreamCredential {
    /// Puts this credential in place of the caller's.
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        match self {
            Self::Client => {}
            Self::None => {
                headers.remove(http::header::AUTHORIZATION);
            }
            Self::Static(value) => {
                headers.insert(http::header::AUTHORIZATION, value.clone());
            }
        }
    }
}

/// Who a valid token says the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub issuer: String,
    pub subject: String,
    pub scopes: HashSet<String>,
}

impl Identity {
    /// The key tasks are bound to: the same for every token of this subject.
    pub(crate) fn principal(&self) -> String {
        let mut hash = Sha256::new();
        hash.update(b"jwt\0");
        hash.update(self.issuer.as_bytes());
        hash.update(b"\0");
        hash.update(self.subject.as_bytes());
        format!("{:x}", hash.finalize())
    }
}

/// Why a request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    #[error("this MCP server needs a bearer token (Authorization: Bearer <token>)")]
    Missing,
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("the token's signing keys cannot be fetched: {0}")]
    KeysUnavailable(String),
    #[error("the token lacks the scope this request needs: {0}")]
    InsufficientScope(String),
}

impl AuthFailure {
    /// The HTTP status: 401, 403 for a missing scope, 503 when the issuer's keys cannot
    /// be had (the client's token may well be good).
    pub(crate) fn status(&self) -> http::StatusCode {
        match self {
            Self::Missing | Self::Invalid(_) => http::StatusCode::UNAUTHORIZED,
            Self::InsufficientScope(_) => http::StatusCode::FORBIDDEN,
            Self::KeysUnavailable(_) => http::StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    /// RFC 8693 / 9068: space-separated.
    #[serde(default)]
    scope: Option<String>,
    /// Some issuers (Azure AD, Okta) use `scp`, a string or a list.
    #[serde(default)]
    scp: Option<Value>,
    exp: u64,
}

/// Tokens checked recently, by digest: a client polling a task sends the same token
/// many times, and a signature check costs tens of microseconds.
const CACHE_LIMIT: usize = 10_000;

pub(crate) struct Authenticator {
    settings: AuthSettings,
    /// Shared by every path's authenticator: one issuer, one key fetch.
    jwks: Arc<Jwks>,
    /// Token digest → (identity, expiry in unix seconds).
    checked: Mutex<HashMap<[u8; 32], (Identity, u64)>>,
    metadata_url: String,
}

impl Authenticator {
    pub(crate) fn new(settings: AuthSettings, client: mtg_transport::HttpClient) -> Self {
        let metadata_url = metadata_url(&settings.audience);
        Self {
            jwks: Arc::new(Jwks::new(client, settings.keys.clone())),
            settings,
            checked: Mutex::new(HashMap::new()),
            metadata_url,
        }
    }

    /// The same checks for another resource (a named upstream's path): tokens must name
    /// `audience`; the issuer's keys are shared.
    pub(crate) fn for_audience(&self, audience: String) -> Self {
        Self {
            metadata_url: metadata_url(&audience),
            settings: AuthSettings {
                audience,
                ..self.settings.clone()
            },
            jwks: self.jwks.clone(),
            checked: Mutex::new(HashMap::new()),
        }
    }

    /// The caller a request's bearer token names.
    pub(crate) async fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, AuthFailure> {
        let token = bearer(headers).ok_or(AuthFailure::Missing)?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = unix_now();
        if let Some((identity, exp)) = self.lock().get(&digest)
            && now <= exp + self.settings.leeway.as_secs()
        {
            return Ok(identity.clone());
        }
        let (identity, exp) = self.verify(token).await?;
        let mut checked = self.lock();
        if checked.len() >= CACHE_LIMIT {
            checked.retain(|_, (_, exp)| now <= *exp);
            if checked.len() >= CACHE_LIMIT {
                checked.clear();
            }
        }
        checked.insert(digest, (identity.clone(), exp));
        Ok(identity)
    }

    async fn verify(&self, token: &str) -> Result<(Identity, u64), AuthFailure> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| AuthFailure::Invalid(format!("malformed: {e}")))?;
        if !self.settings.algorithms.contains(&header.alg) {
            return Err(AuthFailure::Invalid(format!(
                "algorithm {:?} is not accepted",
                header.alg
            )));
        }
        let key = self
            .jwks
            .key_for(header.kid.as_deref(), header.alg)
            .await
            .map_err(|e| AuthFailure::KeysUnavailable(e.to_string()))?
            .ok_or_else(|| {
                AuthFailure::Invalid(match &header.kid {
                    Some(kid) => format!("no signing key {kid:?} for {:?}", header.alg),
                    None => format!("no key id, and no single key for {:?}", header.alg),
                })
            })?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.settings.leeway.as_secs();
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| AuthFailure::Invalid(describe(&e)))?
            .claims;
        let identity = Identity {
            issuer: claims.iss,
            subject: claims.sub,
            scopes: scopes_of(claims.scope.as_deref(), claims.scp.as_ref()),
        };
        Ok((identity, claims.exp))
    }

    /// The scopes `method` needs that `identity` lacks, if any.
    pub(crate) fn check_scopes(
        &self,
        identity: &Identity,
        method: &str,
    ) -> Result<(), AuthFailure> {
        let needed = if method == mtg_protocol::names::method::TOOLS_CALL {
            &self.settings.tools_call_scopes
        } else if method.starts_with("tasks/") {
            &self.settings.tasks_scopes
        } else {
            return Ok(());
        };
        let missing: Vec<&str> = needed
            .iter()
            .filter(|scope| !identity.scopes.contains(*scope))
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(AuthFailure::InsufficientScope(missing.join(" ")))
        }
    }

    /// Whether any method needs scopes (then the gateway reads each request's method).
    pub(crate) fn checks_scopes(&self) -> bool {
        !self.settings.tools_call_scopes.is_empty() || !self.settings.tasks_scopes.is_empty()
    }

    /// The `WWW-Authenticate` value for `failure` (RFC 6750 §3, RFC 9728 §5.1).
    pub(crate) fn challenge(&self, failure: &AuthFailure) -> String {
        let metadata = format!("resource_metadata=\"{}\"", self.metadata_url);
        match failure {
            AuthFailure::Missing | AuthFailure::KeysUnavailable(_) => format!("Bearer {metadata}"),
            AuthFailure::Invalid(detail) => format!(
                "Bearer error=\"invalid_token\", error_description=\"{}\", {metadata}",
                quoted(detail)
            ),
            AuthFailure::InsufficientScope(scopes) => format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\", {metadata}",
                quoted(scopes)
            ),
        }
    }

    /// RFC 9728 protected resource metadata.
    pub(crate) fn metadata(&self) -> Value {
        let mut scopes: Vec<&String> = self
            .settings
            .tools_call_scopes
            .iter()
            .chain(&self.settings.tasks_scopes)
            .collect();
        scopes.sort();
        scopes.dedup();
        json!({
            "resource": self.settings.audience,
            "authorization_servers": [self.settings.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": scopes,
            "resource_name": "mcp-task-gateway",
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Identity, u64)>> {
        self.checked.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where the metadata of `resource` lives (RFC 9728 §3.1): the well-known path is put
/// between the host and the resource's path.
pub(crate) fn metadata_url(resource: &str) -> String {
    match resource.parse::<http::Uri>() {
        Ok(uri) if uri.scheme().is_some() && uri.authority().is_some() => {
            let path = uri.path().trim_end_matches('/');
            format!(
                "{}://{}/.well-known/oauth-protected-resource{path}",
                uri.scheme_str().unwrap_or("https"),
                uri.authority().map(|a| a.as_str()).unwrap_or_default()
            )
        }
        _ => "/.well-known/oauth-protected-resource".to_owned(),
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn scopes_of(scope: Option<&str>, scp: Option<&Value>) -> HashSet<String> {
    let mut scopes: HashSet<String> = scope
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    match scp {
        Some(Value::String(s)) => scopes.extend(s.split_whitespace().map(str::to_owned)),
        Some(Value::Array(items)) => {
            scopes.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
        }
        _ => {}
    }
    scopes
}

/// A short reason, without echoing the token.
fn describe(error: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "the token is for another audience (aud)".into(),
        ErrorKind::InvalidIssuer => "the token is from another issuer (iss)".into(),
        ErrorKind::InvalidSignature => "the signature does not verify".into(),
        ErrorKind::InvalidAlgorithm => "the algorithm does not fit the key".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim:?} claim"),
        other => format!("{other:?}"),
    }
}

/// Text safe inside a quoted-string of a header.
fn quoted(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .map(|c| if c == '"' || c == '\\' { '\'' } else { c })
        .collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Parses `--auth-jwt-algorithms`: asymmetric algorithms only.
pub(crate) fn parse_algorithm(text: &str) -> Result<Algorithm, String> {
    let alg: Algorithm = text
        .trim()
        .parse()
        .map_err(|_| format!("unknown JWT algorithm {text:?}"))?;
    if alg.family() == jsonwebtoken::AlgorithmFamily::Hmac {
        return Err(format!(
            "{text}: HMAC algorithms are refused (a resource server has no shared secret; \
             a public key must never serve as one)"
        ));
    }
    Ok(alg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_lives_beside_the_resource() {
        assert_eq!(
            metadata_url("https://gw.example.com/mcp"),
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("https://gw.example.com"),
            "https://gw.example.com/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn hmac_and_unknown_algorithms_are_refused() {
        assert_eq!(parse_algorithm("ES256"), Ok(Algorithm::ES256));
        assert!(parse_algorithm("HS256").is_err());
        assert!(parse_algorithm("none").is_err());
    }

    #[test]
    fn scopes_come_from_scope_and_scp() {
        let scopes = scopes_of(Some("a b"), Some(&json!(["c"])));
        assert_eq!(scopes.len(), 3);
        assert!(scopes_of(None, Some(&json!("d e"))).contains("e"));
    }

    #[test]
    fn the_principal_is_the_subject_at_its_issuer() {
        let identity = |iss: &str, sub: &str| Identity {
            issuer: iss.into(),
            subject: sub.into(),
            scopes: HashSet::new(),
        };
        assert_eq!(
            identity("i", "s").principal(),
            identity("i", "s").principal()
        );
        assert_ne!(
            identity("i", "s").principal(),
            identity("j", "s").principal()
        );
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(
            identity("ab", "c").principal(),
            identity("a", "bc").principal()
        );
    }
}
