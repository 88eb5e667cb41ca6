//! A 2025-xx client's session: passed through to the upstream's own session
//! (`passthrough/`), or served by the gateway when the upstream has no sessions
//! (`served/`); a session client's task messages, the 2025-11-25 task dialect, are
//! `tasks/`, for both. This file only picks which.

pub(crate) mod passthrough;
pub(crate) mod served;
pub(crate) mod tasks;

use http::Response;
use http::StatusCode;
use http::header;
use http::request::Parts;

use crate::server::Gateway;
use crate::server::reply::{self, Body};
use mtg_protocol::jsonrpc::{ErrorObject, Message};
use mtg_transport::pinned::PinnedConn;

/// Session traffic. `message` is the parsed body when it was read (no session id yet);
/// an established session's traffic is not parsed unless it declared tasks.
pub(crate) async fn serve(
    gateway: &Gateway,
    pinned: &PinnedConn,
    parts: Parts,
    body: bytes::Bytes,
    message: Option<Message>,
) -> Response<Body> {
    let auth = parts.headers.get(header::AUTHORIZATION);
    match gateway.upstream.session_passthrough(auth).await {
        Ok(Some(url)) => passthrough::serve(gateway, pinned, url, parts, body, message).await,
        // No upstream session to pass through to: the gateway serves the session.
        // Boxed: this future is copied at each await up to hyper's box, so its size is
        // paid by every request; a served session's state only by its own.
        Ok(None) => Box::pin(gateway.sessions.serve(gateway, &parts, body)).await,
        Err(e) => reply::error_with_status(StatusCode::BAD_GATEWAY, &ErrorObject::from(e)),
    }
}
