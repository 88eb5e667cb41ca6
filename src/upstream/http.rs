//! The HTTP client to upstreams (http and https, pooled, keep-alive).

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The client for pass-through: large bodies get hyper's adaptive read buffer.
pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build(connector())
}

/// The client for the upstream calls and sessions the gateway makes itself (tasks,
/// bridged requests): many connections held open, mostly idle, each with a read buffer
/// of `read_buffer` bytes (hyper's adaptive one starts at 8 KiB, which was a third of a
/// running task's memory).
pub fn call_client(read_buffer: usize) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http1_read_buf_exact_size(read_buffer)
        .build(connector())
}

fn connector() -> hyper_rustls::HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    // The provider is named explicitly: another dependency (the OTLP exporter's reqwest)
    // brings a second rustls provider, and then there is no process default.
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .expect("ring supports the default TLS versions")
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http)
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1): never
/// copied from one hop to the next, in either direction.
pub fn is_hop_by_hop(name: &http::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Headers not copied into a request sent on: the hop-by-hop ones, and those the
/// client sets for the new request itself (its target host, the body's length).
pub fn is_set_per_request(name: &http::HeaderName) -> bool {
    is_hop_by_hop(name) || matches!(name.as_str(), "host" | "content-length")
}

/// Whether an HTTP upstream answers at all, for `/readyz`. Any HTTP answer but a 5xx
/// counts: a sessionless GET is refused (400/405) by a healthy MCP server, without side
/// effects.
pub async fn probe_reachable(
    client: &HttpClient,
    url: &http::Uri,
) -> Result<(), super::UpstreamError> {
    use super::UpstreamError;
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(2);
    let request = http::Request::get(url.clone())
        .header(http::header::ACCEPT, "text/event-stream")
        .body(Full::new(Bytes::new()))
        .map_err(|e| UpstreamError::Unreachable(e.to_string()))?;
    let response = tokio::time::timeout(LIMIT, client.request(request))
        .await
        .map_err(|_| UpstreamError::Timeout(LIMIT.as_millis() as u64))?
        .map_err(|e| UpstreamError::Unreachable(super::legacy::describe_client_error(&e)))?;
    if response.status().is_server_error() {
        return Err(UpstreamError::Status {
            status: response.status().as_u16(),
            body: String::new(),
        });
    }
    Ok(())
}
