//! Building HTTP responses.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use mtg_protocol::jsonrpc::{self, ErrorObject, code};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(super) type Body = BoxBody<Bytes, BoxError>;

pub(super) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub(super) fn json(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON-RPC error with the HTTP status the spec gives its code.
pub(super) fn error(id: Option<&Value>, error: &ErrorObject) -> Response<Body> {
    json(status_for(error.code), jsonrpc::error_body(id, error))
}

/// An error with a status chosen by the caller (413, 403, ...).
pub(super) fn error_with_status(status: StatusCode, error: &ErrorObject) -> Response<Body> {
    json(status, jsonrpc::error_body(None, error))
}

/// A malformed request: HTTP 400 whatever the code (e.g. -32602 for missing `_meta`).
pub(super) fn bad_request(id: Option<&Value>, error: &ErrorObject) -> Response<Body> {
    json(StatusCode::BAD_REQUEST, jsonrpc::error_body(id, error))
}

fn status_for(error_code: i64) -> StatusCode {
    match error_code {
        code::PARSE_ERROR
        | code::INVALID_REQUEST
        | code::HEADER_MISMATCH
        | code::MISSING_REQUIRED_CLIENT_CAPABILITY
        | code::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
        code::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

pub(super) fn plain(status: StatusCode, message: &'static str) -> Response<Body> {
    text(status, message)
}

pub(super) fn text(status: StatusCode, text: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    response
}

pub(super) fn accepted() -> Response<Body> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}
