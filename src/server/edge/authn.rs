//! The edge check of every `/mcp` request: who the caller is (a bearer JWT when
//! `--auth-jwt-issuer` is set, else the identity header or a hash of `Authorization`),
//! the scopes its method needs, and what goes upstream as `Authorization` in its place.

use http::request::Parts;
use http::{StatusCode, header};
use serde::Deserialize;

use super::principal;
use crate::auth::{AuthFailure, Authenticator, Identity, UpstreamCredential};
use crate::server::{Gateway, reply};
use mtg_protocol::jsonrpc::{ErrorObject, code};
use reply::Body;

/// The caller, as this request's front decided it.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub principal: String,
    pub identity: Option<Identity>,
}

/// Authenticates the request, notes the caller in `parts.extensions`, and puts the
/// upstream credential in place of the caller's; the refusal, if any.
pub(crate) async fn admit(gateway: &Gateway, parts: &mut Parts) -> Option<http::Response<Body>> {
    let identity = match &gateway.auth {
        // Boxed: without auth (the default) its state would still be in every request's
        // future.
        Some(auth) => match Box::pin(auth.authenticate(&parts.headers)).await {
            Ok(identity) => Some(identity),
            Err(failure) => return Some(refusal(auth, &failure)),
        },
        None => None,
    };
    // Noted only when the headers alone will not tell it later: a token's subject, or
    // a caller whose `Authorization` is about to be replaced. Otherwise the principal is
    // worked out where a handler needs it (pass-through traffic never does).
    let principal = match (&identity, &gateway.upstream_credential) {
        (Some(identity), _) => Some(identity.principal()),
        (None, UpstreamCredential::Client) => None,
        (None, _) => Some(principal(
            &parts.headers,
            gateway.edge.identity_header.as_ref(),
        )),
    };
    if let Some(principal) = principal {
        parts.extensions.insert(Caller {
            principal,
            identity,
        });
    }
    gateway.upstream_credential.apply(&mut parts.headers);
    None
}

/// The refusal of `method` when the caller's token lacks a scope it needs. `method` is
/// `None` when the body was not read (a session's traffic): then it is read here, only
/// if any scope is required.
pub(crate) fn check_scopes(
    gateway: &Gateway,
    parts: &Parts,
    method: Option<&str>,
    body: &[u8],
) -> Option<http::Response<Body>> {
    let auth = gateway.auth.as_ref()?;
    let identity = parts
        .extensions
        .get::<Caller>()
        .and_then(|c| c.identity.as_ref())?;
    if !auth.checks_scopes() {
        return None;
    }
    #[derive(Deserialize)]
    struct MethodOnly {
        method: Option<String>,
    }
    let read;
    let method = match method {
        Some(method) => method,
        None => {
            read = serde_json::from_slice::<MethodOnly>(body)
                .ok()
                .and_then(|m| m.method);
            read.as_deref()?
        }
    };
    auth.check_scopes(identity, method)
        .err()
        .map(|failure| refusal(auth, &failure))
}

/// RFC 9728 metadata, at `/.well-known/oauth-protected-resource[/<path>]`.
pub(crate) fn metadata(gateway: &Gateway) -> http::Response<Body> {
    match &gateway.auth {
        Some(auth) => reply::json(
            StatusCode::OK,
            serde_json::to_vec(&auth.metadata()).unwrap_or_default(),
        ),
        None => reply::plain(
            StatusCode::NOT_FOUND,
            "not found: this gateway does not check tokens (--auth-jwt-issuer)\n",
        ),
    }
}

fn refusal(auth: &Authenticator, failure: &AuthFailure) -> http::Response<Body> {
    tracing::info!(reason = %failure, "request refused at the edge");
    let mut response = reply::error_with_status(
        failure.status(),
        &ErrorObject::new(code::INVALID_REQUEST, failure.to_string()),
    );
    if let Ok(value) = http::HeaderValue::from_str(&auth.challenge(failure)) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}
