//! Legacy (2025-xx, session-based) clients: their requests go to the upstream as they
//! are, and the upstream's responses, SSE streams included, come back as they are.

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, Uri, Version};
use http_body_util::{BodyExt, Full};

use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::server::session::coalesce;
use crate::upstream::http::{prepare_to_send_on, remove_hop_by_hop};
use mtg_protocol::jsonrpc::{ErrorObject, code};
use mtg_transport::lean_http1::forbidden_header;
use mtg_transport::pinned::{PinnedConn, PinnedError};
use mtg_transport::{CallError, Party};

/// Sends a 2025-xx session client's request to `upstream` on the client connection's pinned connection (through
/// the pool when the pinned connection is busy) and relays the answer.
pub async fn forward(
    gateway: &Gateway,
    pinned: &PinnedConn,
    upstream: &Uri,
    mut parts: Parts,
    body: Bytes,
) -> Response<Body> {
    // The client's request is sent on as it is, in its own header map: only what
    // belongs to its hop is taken out.
    parts.uri = upstream.clone();
    parts.version = Version::HTTP_11;
    parts.extensions.clear();
    prepare_to_send_on(&mut parts.headers);
    if let Some(name) = forbidden_header(&parts.headers) {
        let detail = format!("the {name} header's value holds a byte HTTP forbids");
        return failed(gateway, Party::Client, "header_value", &detail);
    }
    let request = Request::from_parts(parts, body);
    match pinned.send(upstream, request).await {
        Ok(response) => relay(response).await,
        Err(PinnedError::Failed {
            party,
            kind,
            detail,
        }) => failed(gateway, party, kind, &detail),
        Err(PinnedError::Busy(request)) => {
            match gateway.client.request(request.map(Full::new)).await {
                Ok(response) => relay(response).await,
                Err(e) => {
                    let e = CallError::from(e);
                    let detail = mtg_transport::describe_client_error(&e);
                    failed(gateway, e.party(), e.kind(), &detail)
                }
            }
        }
    }
}

/// The upstream's response as it came, but for its hop-by-hop headers.
async fn relay<B>(response: Response<B>) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Unpin + Send + Sync + 'static,
    B::Error: Into<reply::BoxError> + Send + Sync,
{
    let (mut parts, body) = response.into_parts();
    // The body is forwarded unchanged, so its `Content-Length` still holds.
    remove_hop_by_hop(&mut parts.headers);
    let body = coalesce::with_first_frame(body).await;
    Response::from_parts(parts, body.map_err(Into::into).boxed())
}

/// The answer to a pass-through request that did not get the upstream's: its status,
/// code and metric follow whose failure it was.
fn failed(gateway: &Gateway, party: Party, kind: &'static str, detail: &str) -> Response<Body> {
    gateway
        .tasks
        .meter()
        .requests()
        .failed(party.metric(), kind);
    let error = match party {
        Party::Client => {
            tracing::debug!(detail, "pass-through request refused");
            ErrorObject::new(code::INVALID_REQUEST, format!("request refused: {detail}"))
        }
        Party::Upstream => {
            tracing::warn!(detail, "pass-through to the upstream failed");
            ErrorObject::internal(format!("upstream unreachable: {detail}"))
        }
        Party::Gateway => {
            tracing::error!(detail, "pass-through request could not be sent");
            ErrorObject::internal(format!("gateway error: {detail}"))
        }
    };
    reply::error_with_status(party.status(), &error)
}
