//! Legacy (2025-xx, session-based) clients: their requests go to the upstream as they
//! are, and the upstream's responses, SSE streams included, come back as they are.

use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};

use super::coalesce;
use super::reply::{self, Body};
use crate::protocol::jsonrpc::ErrorObject;
use crate::upstream::http::{HttpClient, is_hop_by_hop, is_set_per_request};
use crate::upstream::legacy::describe_client_error;

pub async fn forward(
    client: &HttpClient,
    upstream: &Uri,
    parts: &Parts,
    body: Bytes,
) -> Response<Body> {
    let mut request = http::Request::builder()
        .method(parts.method.clone())
        .uri(upstream.clone());
    for (name, value) in &parts.headers {
        if !is_set_per_request(name) {
            request = request.header(name, value);
        }
    }
    let request = match request.body(Full::new(body)) {
        Ok(request) => request,
        Err(e) => return bad_gateway(&e.to_string()),
    };
    match client.request(request).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            // The body is forwarded unchanged, so its `Content-Length` still holds.
            let hop_by_hop: Vec<_> = parts
                .headers
                .keys()
                .filter(|name| is_hop_by_hop(name))
                .cloned()
                .collect();
            for name in hop_by_hop {
                parts.headers.remove(name);
            }
            let body = coalesce::with_first_frame(body).await;
            Response::from_parts(parts, body.map_err(Into::into).boxed())
        }
        Err(e) => bad_gateway(&describe_client_error(&e)),
    }
}

fn bad_gateway(detail: &str) -> Response<Body> {
    tracing::warn!(detail, "pass-through to the upstream failed");
    reply::error_with_status(
        StatusCode::BAD_GATEWAY,
        &ErrorObject::internal(format!("upstream unreachable: {detail}")),
    )
}
