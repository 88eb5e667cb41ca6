//! Console sign-ins, kept in this instance's memory: a random id in an `HttpOnly`
//! cookie, and a CSRF token of the session's own for the requests that change
//! something. Kept here rather than derived from the admin token so that signing out
//! ends a session for good (a derived cookie would stay valid until it expires on every
//! instance that did not hear of the sign-out); the price is one sign-in per instance.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderMap;
use http::header::COOKIE;
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

/// The cookie's name.
pub(super) const COOKIE_NAME: &str = "mtg_console";
/// Most sessions kept at once: signing in again and again replaces the oldest.
const MAX_SESSIONS: usize = 256;

#[derive(Debug, thiserror::Error)]
#[error("the system's random number generator failed")]
pub(super) struct NoRandomness;

/// A signed-in session as a request finds it.
#[derive(Debug, Clone)]
pub(super) struct SignedIn {
    pub csrf: String,
}

struct Session {
    expires_at: Instant,
    csrf: String,
}

pub(super) struct Sessions {
    ttl: Duration,
    /// By the SHA-256 of the cookie's value, so a lookup's timing says nothing of ids.
    open: Mutex<HashMap<[u8; 32], Session>>,
    random: SystemRandom,
}

impl Sessions {
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            open: Mutex::new(HashMap::new()),
            random: SystemRandom::new(),
        }
    }

    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new session; its cookie's value (its CSRF token is found with it).
    pub(super) fn open(&self) -> Result<String, NoRandomness> {
        let cookie = self.random_text()?;
        let csrf = self.random_text()?;
        let now = Instant::now();
        let mut open = self.lock();
        open.retain(|_, session| session.expires_at > now);
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, session)| session.expires_at)
                .map(|(digest, _)| *digest)
        {
            open.remove(&oldest);
        }
        open.insert(
            digest(&cookie),
            Session {
                expires_at: now + self.ttl,
                csrf,
            },
        );
        Ok(cookie)
    }

    /// The live session a request's cookie names.
    pub(super) fn find(&self, headers: &HeaderMap) -> Option<SignedIn> {
        let cookie = cookie_of(headers)?;
        let open = self.lock();
        let session = open.get(&digest(cookie))?;
        (session.expires_at > Instant::now()).then(|| SignedIn {
            csrf: session.csrf.clone(),
        })
    }

    /// Ends the session a request's cookie names, if any.
    pub(super) fn close(&self, headers: &HeaderMap) {
        if let Some(cookie) = cookie_of(headers) {
            self.lock().remove(&digest(cookie));
        }
    }

    fn random_text(&self) -> Result<String, NoRandomness> {
        let mut bytes = [0u8; 32];
        self.random.fill(&mut bytes).map_err(|_| NoRandomness)?;
        Ok(URL_SAFE_NO_PAD.encode(bytes))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn digest(cookie: &str) -> [u8; 32] {
    Sha256::digest(cookie.as_bytes()).into()
}

/// The console cookie's value among a request's cookies.
fn cookie_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value)
}

/// `Set-Cookie` for a new session: only for the console's paths, never sent by another
/// site's request, out of reach of scripts; `Secure` when the listener has TLS.
pub(super) fn set_cookie(value: &str, ttl: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE_NAME}={value}; Path=/admin/ui; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
        ttl.as_secs().max(1)
    )
}

/// `Set-Cookie` that makes the browser forget the session.
pub(super) fn clear_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE_NAME}=; Path=/admin/ui; Max-Age=0; HttpOnly; SameSite=Strict{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(line: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, line.parse().unwrap());
        headers
    }

    #[test]
    fn a_session_is_found_by_its_cookie_until_closed() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let cookie = sessions.open().unwrap();
        let headers = with_cookie(&format!("other=1; {COOKIE_NAME}={cookie}"));
        let csrf = sessions.find(&headers).unwrap().csrf;
        assert!(csrf.len() >= 43 && csrf != cookie, "{csrf}");
        assert!(sessions.find(&with_cookie("mtg_console=forged")).is_none());
        assert!(sessions.find(&HeaderMap::new()).is_none());
        sessions.close(&headers);
        assert!(sessions.find(&headers).is_none());
    }

    #[test]
    fn an_expired_session_is_not_found() {
        let sessions = Sessions::new(Duration::ZERO);
        let cookie = sessions.open().unwrap();
        let headers = with_cookie(&format!("{COOKIE_NAME}={cookie}"));
        assert!(sessions.find(&headers).is_none());
    }

    #[test]
    fn sessions_are_bounded() {
        let sessions = Sessions::new(Duration::from_secs(60));
        for _ in 0..MAX_SESSIONS + 10 {
            sessions.open().unwrap();
        }
        assert_eq!(sessions.lock().len(), MAX_SESSIONS);
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_scoped() {
        let set = set_cookie("abc", Duration::from_secs(3600), false);
        assert_eq!(
            set,
            "mtg_console=abc; Path=/admin/ui; Max-Age=3600; HttpOnly; SameSite=Strict"
        );
        assert!(set_cookie("abc", Duration::from_secs(1), true).ends_with("; Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
