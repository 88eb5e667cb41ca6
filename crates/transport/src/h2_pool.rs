//! HTTP/2 to one upstream, on a pool of connections (`--upstream-http2`).
//!
//! An open call on HTTP/1.1 occupies a connection: a socket on both sides for every task
//! in flight (and, over TLS, hyper's and rustls's buffers: 23 KB and more,
//! docs/benchmarks.md, run 17). On HTTP/2 a call is a stream. But a server caps the
//! streams open on one connection (`SETTINGS_MAX_CONCURRENT_STREAMS`, typically 100 to
//! 250), and a stream
//! over the cap waits inside hyper until another ends: hyper-util's pooled client keeps
//! one HTTP/2 connection per host, so past the cap its open calls queued behind each
//! other. This pool counts the streams it opened on each connection and opens another
//! connection when every one is full, so that no call waits behind another.
//!
//! hyper does not tell the peer's stream cap, so the pool's cap per connection is
//! configured (`--upstream-http2-max-streams`, default 100): it must not exceed the
//! server's.
//!
//! `http://` upstreams get HTTP/2 with prior knowledge (h2c). `https://` ones get it when
//! ALPN chooses h2; when it chooses HTTP/1.1, every request goes to the HTTP/1.1 client.

mod preface;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tower::ServiceExt;

use super::{CallBody, Connector, Http1Client, describe_client_error};

/// How often an HTTP/2 connection with calls open is pinged, and how long the answer
/// may take before the connection counts as dead: an open call on a connection lost
/// without a FIN (a vanished peer) then fails instead of waiting forever.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a request to the upstream over HTTP/2 failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PoolError {
    #[error(
        "could not open an HTTP/2 connection to the upstream (--upstream-http2; does it \
         speak HTTP/2?): {0}"
    )]
    Connect(Arc<str>),
    /// hyper's error is the source: describing the error walks the sources.
    #[error("HTTP/2 request to the upstream failed")]
    Request {
        #[source]
        source: Arc<hyper::Error>,
    },
    #[error(
        "the upstream did not answer in HTTP/2 (is it HTTP/1.1 only? --upstream-http2 needs \
         HTTP/2, for http:// with prior knowledge)"
    )]
    NotHttp2 {
        #[source]
        source: Arc<hyper::Error>,
    },
    #[error("the request's URL {0} is not this pool's upstream")]
    OtherOrigin(Uri),
}

impl PoolError {
    /// Whose failure this is: hyper refusing what the gateway asked it to send is the
    /// gateway's; the rest is the upstream's.
    pub(crate) fn party(&self) -> super::Party {
        match self {
            Self::Request { source } if source.is_user() => super::Party::Gateway,
            Self::OtherOrigin(_) => super::Party::Gateway,
            Self::Connect(_) | Self::Request { .. } | Self::NotHttp2 { .. } => {
                super::Party::Upstream
            }
        }
    }

    /// The metric label of this failure, within its party's series.
    pub(crate) fn kind(&self) -> &'static str {
        match (self, self.party()) {
            (Self::Connect(_), _) => "unreachable",
            (Self::NotHttp2 { .. }, _) => "protocol",
            (_, super::Party::Gateway) => "request_encoding",
            _ => "lost",
        }
    }
}

fn h2_error(error: &hyper::Error) -> Option<&h2::Error> {
    std::error::Error::source(error)?.downcast_ref::<h2::Error>()
}

/// The pool's settings.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    /// Streams the pool opens on one connection at most.
    pub max_streams: usize,
}

/// Connections to one upstream origin, each carrying up to `max_streams` calls.
pub struct H2Pool {
    /// `scheme://authority` of the upstream: what each connection is opened to.
    origin: Uri,
    connector: Connector,
    settings: PoolSettings,
    /// For an `https://` upstream whose ALPN answer was HTTP/1.1.
    http1: Http1Client,
    alpn_chose_http1: AtomicBool,
    connections: Mutex<Vec<Arc<Link>>>,
}

/// One connection, being opened or open, and the streams the pool placed on it.
struct Link {
    streams: AtomicUsize,
    /// Set when a request on it failed for the whole connection (a GOAWAY, a reset
    /// connection): new calls go elsewhere; its open streams end as the server decides.
    broken: AtomicBool,
    /// Whether the server's first frame was SETTINGS, to tell an HTTP/1.1-only server.
    preface: preface::Preface,
    opened: Shared<BoxFuture<'static, Result<Opened, PoolError>>>,
}

#[derive(Clone)]
enum Opened {
    Http2(SendRequest<Full<Bytes>>),
    /// TLS's ALPN chose HTTP/1.1: the upstream offers no HTTP/2.
    Http1,
}

impl Link {
    /// Whether new streams may go on it. One still connecting may.
    fn usable(&self) -> bool {
        if self.broken.load(Ordering::Relaxed) {
            return false;
        }
        match self.opened.peek() {
            Some(Ok(Opened::Http2(sender))) => !sender.is_closed(),
            Some(Ok(Opened::Http1)) | Some(Err(_)) => false,
            None => true,
        }
    }

    fn streams(&self) -> usize {
        self.streams.load(Ordering::Relaxed)
    }
}

/// A stream's place on a connection, given back when the stream's body ends or is
/// dropped (the response, or the request given up before its answer).
pub(crate) struct StreamSlot {
    link: Arc<Link>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.link.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

impl H2Pool {
    /// A pool for the upstream at `url`; connects on first use.
    pub(crate) fn new(
        url: &Uri,
        connector: Connector,
        http1: Http1Client,
        settings: PoolSettings,
    ) -> Self {
        let mut origin = http::uri::Builder::new();
        if let Some(scheme) = url.scheme() {
            origin = origin.scheme(scheme.clone());
        }
        if let Some(authority) = url.authority() {
            origin = origin.authority(authority.clone());
        }
        let origin = origin
            .path_and_query("/")
            .build()
            .unwrap_or_else(|_| url.clone());
        Self {
            origin,
            connector,
            settings: PoolSettings {
                max_streams: settings.max_streams.max(1),
            },
            http1,
            alpn_chose_http1: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
        }
    }

    /// Sends `request` on a stream of a connection with room, opening one if none has.
    pub(crate) async fn request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<CallBody>, super::CallError> {
        if request.uri().scheme() != self.origin.scheme()
            || request.uri().authority() != self.origin.authority()
        {
            return Err(PoolError::OtherOrigin(request.uri().clone()).into());
        }
        if self.alpn_chose_http1.load(Ordering::Relaxed) {
            return self.http1.request(request).await;
        }
        // A request hyper gives back unsent (its connection closed meanwhile) goes again,
        // on another connection. One the server refused (REFUSED_STREAM) or cut by a
        // GOAWAY fails: sending it again would need a copy of every request kept until
        // its answer's head, which for a JSON upstream is the whole call.
        let mut request = request;
        let mut tries = 0;
        loop {
            tries += 1;
            let slot = self.checkout();
            let mut sender = match slot.link.opened.clone().await {
                Ok(Opened::Http2(sender)) => sender,
                Ok(Opened::Http1) => {
                    self.alpn_chose_http1.store(true, Ordering::Relaxed);
                    tracing::warn!(upstream = %self.origin, "--upstream-http2: the upstream's TLS chose HTTP/1.1 (ALPN); its calls use HTTP/1.1");
                    drop(slot);
                    return self.http1.request(request).await;
                }
                Err(e) => return Err(e.into()),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    return Ok(response.map(|body| CallBody::pooled(body, slot)));
                }
                Err(mut failed) => {
                    let unsent = failed.take_message();
                    let error = failed.into_error();
                    if unsent.is_some() || connection_wide(&error) {
                        slot.link.broken.store(true, Ordering::Relaxed);
                    }
                    match unsent {
                        Some(unsent) if tries < 3 => {
                            tracing::debug!(upstream = %self.origin, %error, "HTTP/2 connection closed before the request went out; sending it on another");
                            request = unsent;
                        }
                        _ => {
                            let source = Arc::new(error);
                            return Err(if slot.link.preface.spoke_http2() {
                                PoolError::Request { source }
                            } else {
                                PoolError::NotHttp2 { source }
                            }
                            .into());
                        }
                    }
                }
            }
        }
    }

    /// A place for one more stream: on the first usable connection with room, else on
    /// a new one. Broken connections leave the pool (their streams keep them alive
    /// until they end), and of the connections without streams one at most is kept.
    fn checkout(&self) -> StreamSlot {
        let mut links = self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut idle_kept = false;
        links.retain(|link| {
            if !link.usable() {
                return false;
            }
            if link.streams() == 0 {
                if idle_kept {
                    return false;
                }
                idle_kept = true;
            }
            true
        });
        let link = match links
            .iter()
            .find(|link| link.streams() < self.settings.max_streams)
        {
            Some(link) => link.clone(),
            None => {
                let preface = preface::Preface::default();
                let opened = open(
                    self.connector.clone(),
                    self.origin.clone(),
                    self.settings,
                    preface.clone(),
                );
                let link = Arc::new(Link {
                    streams: AtomicUsize::new(0),
                    broken: AtomicBool::new(false),
                    preface,
                    opened: opened.boxed().shared(),
                });
                links.push(link.clone());
                tracing::debug!(upstream = %self.origin, connections = links.len(), "opening an HTTP/2 connection");
                link
            }
        };
        link.streams.fetch_add(1, Ordering::Relaxed);
        StreamSlot { link }
    }
}

/// An error that ends every stream of its connection, not just one.
fn connection_wide(error: &hyper::Error) -> bool {
    error.is_closed() || h2_error(error).is_some_and(|e| e.is_go_away() || e.is_io())
}

/// Opens one connection: TCP (and TLS, offering h2 and HTTP/1.1), then the HTTP/2
/// handshake; the connection's own task is spawned on the current runtime.
async fn open(
    connector: Connector,
    origin: Uri,
    settings: PoolSettings,
    preface: preface::Preface,
) -> Result<Opened, PoolError> {
    let failed = |e: &dyn std::fmt::Display| PoolError::Connect(Arc::from(e.to_string()));
    let io = connector
        .oneshot(origin.clone())
        .await
        .map_err(|e| failed(&describe_client_error(&*e)))?;
    if matches!(io, MaybeHttpsStream::Https(_)) && !io.connected().is_negotiated_h2() {
        return Ok(Opened::Http1);
    }
    let stream: Box<dyn Stream> = match io {
        MaybeHttpsStream::Http(tcp) => Box::new(tcp.into_inner()),
        MaybeHttpsStream::Https(tls) => Box::new(tls.into_inner()),
    };
    let io = TokioIo::new(preface::Watched::new(stream, preface));
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .initial_max_send_streams(settings.max_streams)
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .handshake(io)
        .await
        .map_err(|e| failed(&e))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(upstream = %origin, %error, "HTTP/2 connection to the upstream ended");
        }
    });
    Ok(Opened::Http2(sender))
}

/// A connection's byte stream, TCP or TLS.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}
