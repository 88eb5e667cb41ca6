//! mcp-task-gateway's outbound HTTP: what the gateway sends to an upstream MCP server,
//! and to a JWT issuer's key endpoints, leaves through this crate (`http://` and
//! `https://`, connections kept alive and reused).
//!
//! # What it offers
//!
//! - **A pinned connection per client connection**, for pass-through
//!   ([`pinned::PinnedConn`]). A client's HTTP/1.1 keep-alive connection sends one
//!   request at a time, so it can keep one upstream connection to itself instead of going
//!   through a pool (a checkout, and a task to hand the connection back, per request:
//!   ~20 % of a pass-through request's CPU). To an `http://` upstream it is a bare socket
//!   that the request's own task writes and reads; to an `https://` one, hyper's HTTP/1.1
//!   connection. One [`PinnedConnectors`] serves the process ([`pinned_connectors`]).
//! - **The lean HTTP/1.1 client** ([`lean_http1`]), for the gateway's own calls to
//!   `http://` upstreams ([`call_client`]). It exists for memory: such a call (a task's
//!   `tools/call`) may stay open for minutes, an open call on HTTP/1.1 occupies a
//!   connection for as long, and hyper's client connection kept about 23 KB of heap a
//!   call, whatever it carried (docs/benchmarks.md, runs 17 and 24). Here the response
//!   body is the connection: the socket, `ureq-proto`'s sans-IO framing state, and a read
//!   buffer that exists only while bytes are being read. `https://` upstreams get hyper's
//!   client, HTTP/1.1 only.
//! - **The HTTP/2 pool** ([`h2_pool`], [`CallClient::http2`]; the gateway's
//!   `--upstream-http2`): each call a stream, on as many connections as the cap of
//!   streams per connection ([`h2_pool::PoolSettings`]) needs, so that no call waits
//!   behind another. When TLS's ALPN chooses HTTP/1.1, the calls go to the HTTP/1.1
//!   client.
//! - **The pooled client** ([`client`], hyper-util's): for pass-through requests that
//!   find their pinned connection busy (an HTTP/2 client's concurrent streams), and for
//!   the JWT issuer's keys.
//! - **Whose failure it is** ([`Party`]). Every error here ([`CallError`],
//!   [`pinned::PinnedError`], and the [`lean_http1::LeanError`] and
//!   [`h2_pool::PoolError`] inside them) says whether the client's request, the upstream or the gateway caused
//!   it, with a metric label of its kind; [`Party::status`] and [`Party::metric`] name
//!   the HTTP status and the counter that go with it. A client's request is never
//!   blamed on the upstream.
//!
//! # Contract
//!
//! - A request goes out as the caller built it: an absolute URI, hop-by-hop headers
//!   already taken out. Besides the request target, only `Host` and `Content-Length` are
//!   set here. A header value with bytes HTTP forbids is refused before anything is
//!   written ([`lean_http1::forbidden_header`]; the client's failure).
//! - A request is sent again, on another connection, only when the upstream cannot have
//!   acted on it: it could not be written on a reused connection (or hyper gave it back
//!   unsent), or it is idempotent and got no answer there. A written `POST` (a
//!   `tools/call`) never is.
//! - A response body ([`CallBody`], [`pinned::PinnedBody`]) gives its connection back
//!   when it is read to its end. Dropped before, it closes the connection (a lean body
//!   first reads, without waiting, what has already arrived), which tells the upstream
//!   that no one waits.
//! - Everything runs on the caller's tokio runtime (I/O and time enabled). An idle
//!   `http://` socket is reused only on the runtime that opened it; HTTP/2 and TLS
//!   connections, and a pinned connection's closing of its idle connection, are tasks
//!   spawned there.
//! - Every upstream socket has TCP keep-alive (30 s idle, then three probes 10 s apart),
//!   and HTTP/2 connections ping: a call open on a connection lost without a FIN fails
//!   instead of waiting for ever. An idle HTTP/1.1 connection is closed after 90 s; the
//!   HTTP/2 pool keeps at most one connection without streams.
//!
//! # What it does not know
//!
//! MCP: JSON-RPC, sessions, tasks, MRTR; which requests a client may retry. The task
//! store, the gateway's flags and its metrics recorder: it takes plain values (a read
//! buffer size, [`h2_pool::PoolSettings`], an idle limit) and gives back a [`Party`] and
//! a kind for the gateway to answer with and count. It uses no other crate of the
//! workspace.
//!
//! # Tests
//!
//! `cargo nextest run -p mtg-transport` (or `cargo test -p mtg-transport`) runs the unit
//! tests beside each module (`lean_http1/tests.rs`, `h2_pool/tests.rs`,
//! `pinned/tests.rs`) against real servers on 127.0.0.1: hyper's HTTP/1.1 and h2c
//! servers, and scripted sockets that misbehave on cue (close while idle, hang up on the
//! second request, cut a body short, answer with something that is not HTTP). No other
//! process, and no network but loopback. The gateway's integration tests
//! (`tests/integration/`: `passthrough`, `header_values`, `upstream_http2`) drive the
//! crate through the whole gateway. The `https://` paths (hyper's TLS connections) have
//! no test of their own, here or there.

// A failed request is an error value here, never a panic; unit tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod h2_pool;
pub mod lean_http1;
pub mod pinned;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub(crate) type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
/// hyper-util's pooled client, `http://` and `https://` (HTTP/1.1, or HTTP/2 by ALPN).
pub type HttpClient = Client<Connector, Full<Bytes>>;

/// The client for pass-through: large bodies get hyper's adaptive read buffer.
pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build(connector())
}

/// The HTTP/1.1 client for the upstream calls and sessions the gateway makes itself
/// (tasks, bridged requests): many connections open, mostly idle, each reading
/// `read_buffer` bytes at a time. `http://` upstreams get [`lean_http1`]'s pool, which
/// holds no buffer while a call waits; `https://` ones hyper's client, whose TLS offers
/// HTTP/1.1 only (HTTP/2 is [`h2_pool`]'s, with `--upstream-http2`: hyper's pooled
/// client keeps one HTTP/2 connection per host, on which calls past the server's stream
/// cap would wait behind each other).
pub fn call_client(read_buffer: usize) -> Http1Client {
    Http1Client {
        plain: lean_http1::LeanPool::new(tcp(), read_buffer),
        tls: Arc::new(
            Client::builder(TokioExecutor::new())
                .http1_read_buf_exact_size(read_buffer)
                .build(http1_connector()),
        ),
    }
}

/// HTTP/1.1 to upstreams, a connection per call in flight.
#[derive(Clone)]
pub struct Http1Client {
    plain: Arc<lean_http1::LeanPool>,
    tls: Arc<HttpClient>,
}

impl Http1Client {
    pub(crate) async fn request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<CallBody>, CallError> {
        if request.uri().scheme() == Some(&http::uri::Scheme::HTTPS) {
            return Ok(self.tls.request(request).await?.map(CallBody::from));
        }
        let (parts, body) = request.into_parts();
        // A `Full` body is one frame, ready at once.
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let response = self.plain.request(Request::from_parts(parts, body)).await?;
        Ok(response.map(CallBody::from))
    }
}

/// How the gateway's own calls reach one upstream.
#[derive(Clone)]
pub enum CallClient {
    /// A connection per call in flight (HTTP/1.1), the default.
    Http1(Http1Client),
    /// Streams on a pool of HTTP/2 connections (`--upstream-http2`).
    Http2(Arc<h2_pool::H2Pool>),
}

impl CallClient {
    /// HTTP/2 to the upstream at `url` (falling back to `http1` when its TLS chooses
    /// HTTP/1.1).
    pub fn http2(url: &http::Uri, http1: Http1Client, settings: h2_pool::PoolSettings) -> Self {
        Self::Http2(Arc::new(h2_pool::H2Pool::new(
            url,
            connector(),
            http1,
            settings,
        )))
    }

    pub async fn request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<CallBody>, CallError> {
        match self {
            Self::Http1(client) => client.request(request).await,
            Self::Http2(pool) => pool.request(request).await,
        }
    }
}

/// Why one of the gateway's own requests to an upstream failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Http1(#[from] hyper_util::client::legacy::Error),
    #[error(transparent)]
    Http2(#[from] h2_pool::PoolError),
    #[error(transparent)]
    Lean(#[from] lean_http1::LeanError),
}

impl CallError {
    /// Whose failure this is; see [`Party`].
    pub fn party(&self) -> Party {
        match self {
            Self::Lean(e) => e.party(),
            Self::Http2(e) => e.party(),
            Self::Http1(e) => match hyper_source(e) {
                Some(hyper) if hyper.is_user() => Party::Gateway,
                _ => Party::Upstream,
            },
        }
    }

    /// The metric label of this failure, within its party's series.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Lean(e) => e.kind(),
            Self::Http2(e) => e.kind(),
            Self::Http1(e) if e.is_connect() => "unreachable",
            Self::Http1(_) => match self.party() {
                Party::Gateway => "request_encoding",
                _ => "lost",
            },
        }
    }
}

fn hyper_source<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a hyper::Error> {
    std::error::Error::source(error)?.downcast_ref::<hyper::Error>()
}

/// Who a failed exchange with an upstream is blamed on. A client's request is never
/// reported as the upstream's failure: each party has its own answer and metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    /// The client sent what cannot go upstream: HTTP 400, -32600 naming what.
    Client,
    /// The upstream could not be reached, broke the connection or HTTP: HTTP 502,
    /// -32603, `mtg_upstream_errors_total`.
    Upstream,
    /// The gateway could not build or send its own request: HTTP 500, -32603.
    Gateway,
}

impl Party {
    /// The HTTP status of a request refused or failed for this party's reason.
    pub fn status(self) -> http::StatusCode {
        match self {
            Self::Client => http::StatusCode::BAD_REQUEST,
            Self::Upstream => http::StatusCode::BAD_GATEWAY,
            Self::Gateway => http::StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The counter this party's failures go to, labelled by kind.
    pub fn metric(self) -> &'static str {
        match self {
            Self::Client => "mtg_client_request_errors_total",
            Self::Upstream => "mtg_upstream_errors_total",
            Self::Gateway => "mtg_gateway_errors_total",
        }
    }
}

/// Why reading a response body from an upstream failed.
#[derive(Debug, thiserror::Error)]
pub enum CallBodyError {
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    #[error(transparent)]
    Lean(#[from] lean_http1::LeanError),
}

/// A response body from an upstream; on HTTP/2 it holds its stream's place in the pool
/// until it ends, so that the pool counts the streams open on each connection.
pub struct CallBody {
    inner: BodyInner,
    slot: Option<h2_pool::StreamSlot>,
}

enum BodyInner {
    Hyper(Incoming),
    Lean(lean_http1::LeanBody),
}

impl CallBody {
    fn pooled(inner: Incoming, slot: h2_pool::StreamSlot) -> Self {
        Self {
            inner: BodyInner::Hyper(inner),
            slot: Some(slot),
        }
    }
}

impl From<Incoming> for CallBody {
    fn from(inner: Incoming) -> Self {
        Self {
            inner: BodyInner::Hyper(inner),
            slot: None,
        }
    }
}

impl From<lean_http1::LeanBody> for CallBody {
    fn from(inner: lean_http1::LeanBody) -> Self {
        Self {
            inner: BodyInner::Lean(inner),
            slot: None,
        }
    }
}

impl Body for CallBody {
    type Data = Bytes;
    type Error = CallBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, CallBodyError>>> {
        let polled = match &mut self.inner {
            BodyInner::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            BodyInner::Lean(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        };
        if let Poll::Ready(None | Some(Err(_))) = polled {
            // The stream is over: its place is free.
            self.slot = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            BodyInner::Hyper(body) => body.is_end_stream(),
            BodyInner::Lean(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            BodyInner::Hyper(body) => body.size_hint(),
            BodyInner::Lean(body) => body.size_hint(),
        }
    }
}

fn connector() -> Connector {
    connector_builder()
        .enable_http1()
        .enable_http2()
        .wrap_connector(tcp())
}

/// How a [`crate::pinned::PinnedConn`] connects: a bare socket to an
/// `http://` upstream, rustls with HTTP/1.1 only to an `https://` one (a pinned
/// connection is one HTTP/1.1 connection). One for the process, shared.
pub struct PinnedConnectors {
    pub(crate) tcp: HttpConnector,
    pub(crate) tls: Connector,
}

pub fn pinned_connectors() -> Arc<PinnedConnectors> {
    Arc::new(PinnedConnectors {
        tcp: tcp(),
        tls: http1_connector(),
    })
}

fn http1_connector() -> Connector {
    connector_builder().enable_http1().wrap_connector(tcp())
}

/// TCP keep-alive on every upstream socket: an open call on a connection that a vanished
/// host, or a load balancer's idle timer, dropped without a FIN fails after about a
/// minute (30 s idle, then three probes 10 s apart) instead of waiting for ever; the
/// probes also keep such idle timers from firing. HTTP/2 connections ping as well
/// (`h2_pool`).
const TCP_KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(30);
const TCP_KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
const TCP_KEEPALIVE_PROBES: u32 = 3;

pub(crate) fn tcp() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_keepalive(Some(TCP_KEEPALIVE_IDLE));
    http.set_keepalive_interval(Some(TCP_KEEPALIVE_INTERVAL));
    http.set_keepalive_retries(Some(TCP_KEEPALIVE_PROBES));
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

/// An error and its sources on one line: hyper's client errors print as "client error
/// (Connect)", and the sources say why.
pub fn describe_client_error(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
