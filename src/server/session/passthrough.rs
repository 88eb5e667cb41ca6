//! Legacy (2025-xx, session-based) clients: their requests go to the upstream as they
//! are, and the upstream's responses, SSE streams included, come back as they are.

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Full};

use crate::http_client::HttpClient;
use crate::server::reply::{self, Body};
use crate::server::session::coalesce;
use crate::upstream::http::describe_client_error;
use crate::upstream::http::{prepare_to_send_on, remove_hop_by_hop};
use crate::upstream::pinned::{LaneError, PinnedConn};
use mtg_protocol::jsonrpc::ErrorObject;

/// Sends a 2025-xx session client's request to `upstream` on the client connection's pinned connection (through
/// the pool when the pinned connection is busy) and relays the answer.
pub async fn forward(
    client: &HttpClient,
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
    let request = Request::from_parts(parts, body);
    match pinned.send(upstream, request).await {
        Ok(response) => relay(response).await,
        Err(LaneError::Failed(detail)) => bad_gateway(&detail),
        Err(LaneError::Busy(request)) => match client.request(request.map(Full::new)).await {
            Ok(response) => relay(response).await,
            Err(e) => bad_gateway(&describe_client_error(&e)),
        },
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

fn bad_gateway(detail: &str) -> Response<Body> {
    tracing::warn!(detail, "pass-through to the upstream failed");
    reply::error_with_status(
        StatusCode::BAD_GATEWAY,
        &ErrorObject::internal(format!("upstream unreachable: {detail}")),
    )
}
