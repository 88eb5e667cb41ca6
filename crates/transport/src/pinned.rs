//! A client connection's own HTTP/1.1 connection to the upstream, for pass-through.
//!
//! The pooled client pays on every request for the pool: a checkout, and a task spawned
//! to hand the connection back once the response body has been read (without them, a
//! pass-through request at one connection made 2 fewer system calls and 1.2 fewer
//! context switches, and took ~20 % less CPU; docs/benchmarks.md). A client's HTTP/1.1
//! keep-alive connection sends one request at a time, so it can keep one upstream
//! connection to itself instead, and hand it back from the response body's last frame.
//!
//! To an `http://` upstream the connection is a bare socket that the request's own task
//! writes and reads (`lean_http1`): no connection task, no channel between two tasks,
//! so a request and its answer each cost one task wake-up fewer. `https://` upstreams
//! keep hyper's connection, as TLS needs its own driver.
//!
//! A request that finds the pinned connection busy (an HTTP/2 client's concurrent
//! streams) is given back to be sent through the pool. A connection left idle for the
//! idle limit is closed, as the pool closes its idle connections, so that idle clients
//! do not hold upstream connections.

use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::lean_http1::{self, Home, LeanBody, Outgoing};
use crate::{CallBodyError, Party, PinnedConnectors, describe_client_error};

/// Why a request did not go out on the pinned connection.
#[derive(Debug, thiserror::Error)]
pub enum PinnedError {
    /// Another request of the same client connection holds the pinned connection; send this one
    /// another way.
    #[error("the pinned connection is busy")]
    Busy(Box<Request<Bytes>>),
    #[error("{detail}")]
    Failed {
        /// Whose failure it is: the answer's status and metric follow it.
        party: Party,
        /// The metric label, within the party's series.
        kind: &'static str,
        detail: String,
    },
}

impl PinnedError {
    fn upstream(kind: &'static str, detail: String) -> Self {
        Self::Failed {
            party: Party::Upstream,
            kind,
            detail,
        }
    }

    fn lean(e: &lean_http1::LeanError) -> Self {
        Self::Failed {
            party: e.party(),
            kind: e.kind(),
            detail: e.to_string(),
        }
    }

    /// hyper refusing the request itself is the gateway's; the rest the upstream's.
    fn hyper(e: &hyper::Error) -> Self {
        let (party, kind) = match e.is_user() {
            true => (Party::Gateway, "request_encoding"),
            false => (Party::Upstream, "lost"),
        };
        Self::Failed {
            party,
            kind,
            detail: describe_client_error(e),
        }
    }
}

/// How long a pinned connection keeps an idle connection: the pooled client's default.
pub const IDLE_LIMIT: Duration = Duration::from_secs(90);

/// How much a plain connection reads at once: a pass-through answer is usually one
/// read; a large one is relayed in frames of this size. The buffer exists only while
/// bytes are being read.
const READ_SIZE: usize = 16 * 1024;

/// One per client connection; cheap to make, connects on first use.
pub struct PinnedConn {
    state: Arc<Mutex<State>>,
    connectors: Arc<PinnedConnectors>,
    idle_limit: Duration,
    /// Dropped with the pinned connection, it ends the task that closes idle
    /// connections; that task starts with the first connection.
    reaper: OnceLock<oneshot::Sender<()>>,
}

enum State {
    Empty,
    Busy,
    Idle(Box<Connected>),
}

/// A kept connection: the upstream connection a pinned connection keeps between
/// requests, or has lent to the request in flight until its response body ends.
struct Connected {
    /// When it was last handed back.
    idle_since: Instant,
    /// The upstream URL this connection was opened for.
    upstream: Uri,
    conn: Conn,
}

/// The connection itself, by the upstream's scheme.
enum Conn {
    /// An `http://` upstream's socket, between requests.
    Plain(TcpStream),
    /// An `https://` upstream's hyper connection.
    Tls(TlsConn),
}

struct TlsConn {
    /// `upstream` in origin form, the request target on the wire.
    target: Uri,
    host: HeaderValue,
    sender: SendRequest<Full<Bytes>>,
}

impl PinnedConn {
    pub fn new(connectors: Arc<PinnedConnectors>, idle_limit: Duration) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::Empty)),
            connectors,
            idle_limit,
            reaper: OnceLock::new(),
        }
    }

    /// Sends `request` to `upstream` on this pinned connection, opening one if there is
    /// none (or it was for another URL). A request on a reused connection that was not
    /// written because the upstream had just closed it, or an idempotent one that got
    /// no answer, is sent again once, on a new one.
    pub async fn send(
        &self,
        upstream: &Uri,
        request: Request<Bytes>,
    ) -> Result<Response<PinnedBody>, PinnedError> {
        // The kept connection, if it was opened for this upstream.
        let kept = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match std::mem::replace(&mut *state, State::Busy) {
                State::Busy => return Err(PinnedError::Busy(Box::new(request))),
                State::Idle(connected) if connected.upstream == *upstream => Some(connected),
                State::Idle(_) | State::Empty => None,
            }
        };
        // From here the pinned connection is ours: it becomes idle again from the
        // response body's end, and empty if anything fails or is dropped on the way.
        let claim = Claim {
            state: self.state.clone(),
            given_back: None,
        };
        if upstream.scheme() == Some(&http::uri::Scheme::HTTPS) {
            let kept = kept.and_then(|connected| match connected.conn {
                Conn::Tls(conn) => Some(conn),
                Conn::Plain(_) => None,
            });
            return self.send_tls(kept, claim, upstream, request).await;
        }
        let kept = kept.and_then(|connected| match connected.conn {
            Conn::Plain(stream) if lean_http1::still_open(&stream) => Some(stream),
            _ => None,
        });
        self.send_plain(kept, claim, upstream, request).await
    }

    async fn send_plain(
        &self,
        kept: Option<TcpStream>,
        claim: Claim,
        upstream: &Uri,
        request: Request<Bytes>,
    ) -> Result<Response<PinnedBody>, PinnedError> {
        let (mut parts, body) = request.into_parts();
        parts.uri = upstream.clone();
        parts.headers.remove(header::HOST);
        let failed = |e: lean_http1::LeanError| PinnedError::lean(&e);
        let mut outgoing = Outgoing::new(Request::from_parts(parts, body)).map_err(failed)?;
        let head = outgoing
            .send(kept, || self.connect_plain(upstream), READ_SIZE)
            .await
            .map_err(failed)?;
        let home = GoHome {
            claim,
            upstream: upstream.clone(),
        };
        let response = outgoing.respond(head, home);
        Ok(response.map(|body| PinnedBody(Inner::Plain(body))))
    }

    async fn connect_plain(&self, upstream: &Uri) -> Result<TcpStream, lean_http1::LeanError> {
        self.reap_idle();
        lean_http1::connect(&self.connectors.tcp, upstream.clone()).await
    }

    async fn send_tls(
        &self,
        kept: Option<TlsConn>,
        claim: Claim,
        upstream: &Uri,
        request: Request<Bytes>,
    ) -> Result<Response<PinnedBody>, PinnedError> {
        let mut request = request.map(Full::new);
        let (mut conn, mut reused) = match kept {
            Some(conn) => (conn, true),
            None => (self.connect_tls(upstream).await?, false),
        };
        loop {
            if conn.sender.ready().await.is_err() {
                conn = self.connect_tls(upstream).await?;
                reused = false;
            }
            *request.uri_mut() = conn.target.clone();
            request
                .headers_mut()
                .insert(header::HOST, conn.host.clone());
            match conn.sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let connected = Box::new(Connected {
                        idle_since: Instant::now(),
                        upstream: upstream.clone(),
                        conn: Conn::Tls(conn),
                    });
                    let mut body = TlsBody {
                        inner: body,
                        release: Some((claim, connected)),
                    };
                    body.release_if_ended();
                    return Ok(Response::from_parts(parts, PinnedBody(Inner::Tls(body))));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => {
                        request = unsent;
                        conn = self.connect_tls(upstream).await?;
                        reused = false;
                    }
                    _ => return Err(PinnedError::hyper(e.error())),
                },
            }
        }
    }

    /// Boxed: a connection is opened once per client connection (and after a loss), and
    /// inline its 2.4 KB of state would be in every request's future, copied at each await.
    fn connect_tls<'a>(
        &'a self,
        upstream: &'a Uri,
    ) -> Pin<Box<dyn Future<Output = Result<TlsConn, PinnedError>> + Send + 'a>> {
        Box::pin(self.open_tls(upstream))
    }

    async fn open_tls(&self, upstream: &Uri) -> Result<TlsConn, PinnedError> {
        self.reap_idle();
        let authority = upstream.authority().ok_or_else(|| {
            PinnedError::upstream("unreachable", format!("{upstream} has no host"))
        })?;
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|e| PinnedError::upstream("unreachable", e.to_string()))?;
        let failed = |e: &(dyn std::error::Error + 'static)| {
            PinnedError::upstream(
                "unreachable",
                format!("connecting: {}", describe_client_error(e)),
            )
        };
        let io = self
            .connectors
            .tls
            .clone()
            .oneshot(upstream.clone())
            .await
            .map_err(|e| failed(&*e))?;
        let (sender, connection) = http1::handshake(io).await.map_err(|e| failed(&e))?;
        // Ends when the sender is dropped: with the pinned connection, or by the reaper.
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "pass-through upstream connection ended");
            }
        });
        Ok(TlsConn {
            target: upstream
                .path_and_query()
                .map_or_else(|| Uri::from_static("/"), |path| path.clone().into()),
            host,
            sender,
        })
    }

    /// Starts, once, the task that closes this pinned connection's idle connections.
    fn reap_idle(&self) {
        self.reaper.get_or_init(|| {
            let (stop, stopped) = oneshot::channel();
            let state = Arc::downgrade(&self.state);
            let limit = self.idle_limit;
            tokio::spawn(async move {
                tokio::select! {
                    () = close_idle(state, limit) => {}
                    _ = stopped => {}
                }
            });
            stop
        });
    }
}

/// Closes the connection that has sat idle in the pinned connection for `limit`, for as
/// long as the pinned connection exists.
async fn close_idle(pinned: Weak<Mutex<State>>, limit: Duration) {
    let mut check_at = Instant::now() + limit;
    loop {
        tokio::time::sleep_until(check_at).await;
        let Some(pinned) = pinned.upgrade() else {
            return;
        };
        let mut state = pinned.lock().unwrap_or_else(PoisonError::into_inner);
        check_at = match &*state {
            State::Idle(connected) if Instant::now() >= connected.idle_since + limit => {
                // Dropped, the connection is closed.
                *state = State::Empty;
                Instant::now() + limit
            }
            State::Idle(connected) => connected.idle_since + limit,
            State::Busy | State::Empty => Instant::now() + limit,
        };
    }
}

/// Holds the pinned connection busy. Dropped, it leaves the pinned connection idle with
/// the connection it was given back, or else empty (the next request opens a new one).
struct Claim {
    state: Arc<Mutex<State>>,
    given_back: Option<Box<Connected>>,
}

impl Claim {
    fn release(mut self, mut connected: Box<Connected>) {
        connected.idle_since = Instant::now();
        self.given_back = Some(connected);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let next = match self.given_back.take() {
            Some(connected) => State::Idle(connected),
            None => State::Empty,
        };
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = next;
    }
}

/// Where a plain body's socket goes when the body ends: back to its pinned connection.
struct GoHome {
    claim: Claim,
    upstream: Uri,
}

impl Home for GoHome {
    fn keep(self, stream: TcpStream) {
        self.claim.release(Box::new(Connected {
            idle_since: Instant::now(),
            upstream: self.upstream,
            conn: Conn::Plain(stream),
        }));
    }

    fn read_size(&self) -> usize {
        READ_SIZE
    }
}

/// The upstream's response body; its end gives the connection back to the pinned
/// connection. Dropped before its end, it takes the connection with it, as a response
/// cut short leaves the connection mid-message (a plain socket is closed, which tells
/// the upstream no one waits; hyper drains or closes its own).
pub struct PinnedBody(Inner);

enum Inner {
    Plain(LeanBody<GoHome>),
    Tls(TlsBody),
}

struct TlsBody {
    inner: Incoming,
    release: Option<(Claim, Box<Connected>)>,
}

impl TlsBody {
    fn give_back(&mut self) {
        if let Some((claim, connected)) = self.release.take() {
            claim.release(connected);
        }
    }

    fn release_if_ended(&mut self) {
        if self.inner.is_end_stream() {
            self.give_back();
        }
    }

    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        match &frame {
            None => self.give_back(),
            Some(Ok(_)) => self.release_if_ended(),
            // A broken body leaves the connection unusable: dropping the claim empties the pinned connection.
            Some(Err(_)) => self.release = None,
        }
        Poll::Ready(frame)
    }
}

impl Body for PinnedBody {
    type Data = Bytes;
    type Error = CallBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, CallBodyError>>> {
        match &mut self.0 {
            Inner::Plain(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Inner::Tls(body) => body.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Plain(body) => body.is_end_stream(),
            Inner::Tls(body) => body.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Plain(body) => body.size_hint(),
            Inner::Tls(body) => body.inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests;
