//! Which headers may cross from one hop to the next, reaching an upstream at all, and
//! describing a failed request to one.

use http::{HeaderMap, HeaderName, header};

use bytes::Bytes;
use http_body_util::Full;

use mtg_transport::CallClient;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1), with the
/// obsolete `Proxy-Connection` that some clients still send.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes what must not pass from one hop to the next, in either direction: the
/// hop-by-hop headers and those the `Connection` header names as its options.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|option| HeaderName::from_bytes(option.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(&HOP_BY_HOP) {
        headers.remove(name);
    }
}

/// Makes the headers of a received request fit to send on: no hop-by-hop headers, and
/// none that the client sets for the new request itself (its target host, the body's
/// length).
pub(crate) fn prepare_to_send_on(headers: &mut HeaderMap) {
    remove_hop_by_hop(headers);
    headers.remove(header::HOST);
    headers.remove(header::CONTENT_LENGTH);
}

/// Whether an HTTP upstream answers at all, for `/readyz`. Any HTTP answer but a 5xx
/// counts: a sessionless GET is refused (400/405) by a healthy MCP server, without side
/// effects.
pub(crate) async fn probe_reachable(
    client: &CallClient,
    url: &http::Uri,
) -> Result<(), super::UpstreamError> {
    use super::UpstreamError;
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(2);
    let request = http::Request::get(url.clone())
        .header(http::header::ACCEPT, "text/event-stream")
        .body(Full::new(Bytes::new()))
        .map_err(|e| UpstreamError::from_build(&e))?;
    let response = tokio::time::timeout(LIMIT, client.request(request))
        .await
        .map_err(|_| UpstreamError::Timeout(LIMIT.as_millis() as u64))?
        .map_err(|e| UpstreamError::from_call(&e))?;
    if response.status().is_server_error() {
        return Err(UpstreamError::Status {
            status: response.status().as_u16(),
            body: String::new(),
        });
    }
    Ok(())
}

/// Cuts `text` to at most `max` bytes, on a character boundary.
pub(super) fn truncate_on_char(text: &mut String, max: usize) {
    if text.len() > max {
        let cut = (0..=max)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_connection_options_are_removed() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Hop"),
            ("connection", "upgrade"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("upgrade", "websocket"),
            ("transfer-encoding", "chunked"),
            ("proxy-connection", "keep-alive"),
            ("host", "gateway:8080"),
            ("content-length", "12"),
            ("mcp-session-id", "s-1"),
            ("authorization", "Bearer t"),
        ] {
            headers.append(HeaderName::from_static(name), value.parse().unwrap());
        }
        let mut response = headers.clone();
        remove_hop_by_hop(&mut response);
        let mut names: Vec<_> = response.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["authorization", "content-length", "host", "mcp-session-id"]
        );

        prepare_to_send_on(&mut headers);
        let mut names: Vec<_> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["authorization", "mcp-session-id"]);
    }
}
