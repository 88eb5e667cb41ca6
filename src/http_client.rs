//! The gateway's outbound HTTP clients (http and https, keep-alive): to upstreams, and
//! to the JWT issuer's key endpoints.

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
pub type HttpClient = Client<Connector, Full<Bytes>>;

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

fn connector() -> Connector {
    connector_builder()
        .enable_http1()
        .enable_http2()
        .wrap_connector(tcp())
}

/// A connector for [`crate::upstream::pinned::PinnedConn`]s: HTTP/1.1 only, as a pinned
/// connection is one HTTP/1.1 connection.
pub fn pinned_connector() -> Connector {
    connector_builder().enable_http1().wrap_connector(tcp())
}

fn tcp() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http
}

fn connector_builder()
-> hyper_rustls::HttpsConnectorBuilder<hyper_rustls::builderstates::WantsProtocols1> {
    // The provider is named explicitly: another dependency (the OTLP exporter's reqwest)
    // brings a second rustls provider, and then there is no process default.
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .expect("ring supports the default TLS versions")
        .https_or_http()
}
