//! The console's static files, inside the binary: nothing is fetched from anywhere else
//! and nothing is installed beside the gateway.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;

use super::Reply;

const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");
const ICON: &str = include_str!("assets/icon.svg");
pub(super) const SIGN_IN: &str = include_str!("assets/sign-in.html");
pub(super) const APP: &str = include_str!("assets/app.html");

/// `/admin/ui/assets/<name>`.
pub(super) fn serve(name: &str) -> Option<Reply> {
    let (body, content_type) = match name {
        "console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "console.css" => (STYLE, "text/css; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => return None,
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .ok()
}
