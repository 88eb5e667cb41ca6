//! A client connection's own HTTP/1.1 connection to the upstream, for pass-through.
//!
//! The pooled client pays on every request for the pool: a checkout, and a task spawned
//! to hand the connection back once the response body has been read (without them, a
//! pass-through request at one connection made 2 fewer system calls and 1.2 fewer
//! context switches, and took ~20 % less CPU; docs/benchmarks.md). A client's HTTP/1.1
//! keep-alive connection sends one request at a time, so it can keep one upstream
//! connection to itself instead, and hand it back from the response body's last frame.
//! A request that finds the pinned connection busy (an HTTP/2 client's concurrent streams) is given
//! back to be sent through the pool. A connection left idle for the pinned connection's idle limit
//! is closed, as the pool closes its idle connections, so that idle clients do not
//! hold upstream connections.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use tokio::time::Instant;
use tower::ServiceExt;

use super::http::describe_client_error;
use crate::http_client::Connector;

/// Why a request did not go out on the pinned connection.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// Another request of the same client connection holds the pinned connection; send this one
    /// another way.
    #[error("the pinned connection is busy")]
    Busy(Box<Request<Full<Bytes>>>),
    #[error("{0}")]
    Failed(String),
}

/// How long a pinned connection keeps an idle connection: the pooled client's default.
pub const IDLE_LIMIT: Duration = Duration::from_secs(90);

/// One per client connection; cheap to make, connects on first use.
pub struct PinnedConn {
    state: Arc<Mutex<State>>,
    connector: Connector,
    idle_limit: Duration,
}

enum State {
    Empty,
    Busy,
    Idle(Box<Connected>),
}

struct Connected {
    /// Tells this connection from the pinned connection's later ones.
    id: u64,
    /// When it was last handed back.
    idle_since: Instant,
    /// The upstream URL this connection was opened for.
    upstream: Uri,
    /// `upstream` in origin form, the request target on the wire.
    target: Uri,
    host: HeaderValue,
    sender: SendRequest<Full<Bytes>>,
}

impl PinnedConn {
    pub fn new(connector: Connector, idle_limit: Duration) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::Empty)),
            connector,
            idle_limit,
        }
    }

    /// Sends `request` to `upstream` on this pinned connection's connection, opening one if there is
    /// none (or it was for another URL). A request that was not written because the
    /// idle connection had just closed is sent again once, on a new one.
    pub async fn send(
        &self,
        upstream: &Uri,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<LaneBody>, LaneError> {
        let held = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match std::mem::replace(&mut *state, State::Busy) {
                State::Busy => return Err(LaneError::Busy(Box::new(request))),
                State::Idle(connected) if connected.upstream == *upstream => Some(connected),
                State::Idle(_) | State::Empty => None,
            }
        };
        // From here the pinned connection is ours: it becomes idle again from the response body's
        // end, and empty if anything fails or is dropped on the way.
        let claim = Claim {
            state: self.state.clone(),
            given_back: None,
        };
        let (mut connected, mut reused) = match held {
            Some(connected) => (connected, true),
            None => (self.connect(upstream).await?, false),
        };
        loop {
            if connected.sender.ready().await.is_err() {
                connected = self.connect(upstream).await?;
                reused = false;
            }
            *request.uri_mut() = connected.target.clone();
            request
                .headers_mut()
                .insert(header::HOST, connected.host.clone());
            match connected.sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let mut body = LaneBody {
                        inner: body,
                        release: Some((claim, connected)),
                    };
                    body.release_if_ended();
                    return Ok(Response::from_parts(parts, body));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => {
                        request = unsent;
                        connected = self.connect(upstream).await?;
                        reused = false;
                    }
                    _ => return Err(LaneError::Failed(describe_client_error(e.error()))),
                },
            }
        }
    }

    /// Boxed: a connection is opened once per client connection (and after a loss), and
    /// inline its 2.4 KB of state would be in every request's future, copied at each await.
    fn connect<'a>(
        &'a self,
        upstream: &'a Uri,
    ) -> Pin<Box<dyn Future<Output = Result<Box<Connected>, LaneError>> + Send + 'a>> {
        Box::pin(self.open(upstream))
    }

    async fn open(&self, upstream: &Uri) -> Result<Box<Connected>, LaneError> {
        let authority = upstream
            .authority()
            .ok_or_else(|| LaneError::Failed(format!("{upstream} has no host")))?;
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|e| LaneError::Failed(e.to_string()))?;
        let failed = |e: &(dyn std::error::Error + 'static)| {
            LaneError::Failed(format!("connecting: {}", describe_client_error(e)))
        };
        let io = self
            .connector
            .clone()
            .oneshot(upstream.clone())
            .await
            .map_err(|e| failed(&*e))?;
        let (sender, connection) = http1::handshake(io).await.map_err(|e| failed(&e))?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let idle_too_long = idle_too_long(Arc::downgrade(&self.state), id, self.idle_limit);
        tokio::spawn(async move {
            tokio::select! {
                ended = connection => if let Err(e) = ended {
                    tracing::debug!(error = %e, "pass-through upstream connection ended");
                },
                // Dropping the connection closes it.
                () = idle_too_long => {}
            }
        });
        Ok(Box::new(Connected {
            id,
            idle_since: Instant::now(),
            upstream: upstream.clone(),
            target: upstream
                .path_and_query()
                .map_or_else(|| Uri::from_static("/"), |path| path.clone().into()),
            host,
            sender,
        }))
    }
}

/// Resolves once connection `id` has sat idle in the pinned connection for `limit` (and takes it
/// out of the pinned connection), or the pinned connection is gone.
async fn idle_too_long(pinned: Weak<Mutex<State>>, id: u64, limit: Duration) {
    let mut check_at = Instant::now() + limit;
    loop {
        tokio::time::sleep_until(check_at).await;
        let Some(pinned) = pinned.upgrade() else {
            return;
        };
        let mut state = pinned.lock().unwrap_or_else(PoisonError::into_inner);
        check_at = match &*state {
            State::Idle(connected) if connected.id == id => {
                let due = connected.idle_since + limit;
                if Instant::now() >= due {
                    *state = State::Empty;
                    return;
                }
                due
            }
            _ => Instant::now() + limit,
        };
    }
}

/// Holds the pinned connection busy. Dropped, it leaves the pinned connection idle with the connection it was
/// given back, or else empty (the next request opens a new connection).
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

/// The upstream's response body; its last frame gives the connection back to the pinned connection.
/// Dropped before its end, it takes the connection with it (hyper then drains or
/// closes it), as a response cut short leaves the connection mid-message.
pub struct LaneBody {
    inner: Incoming,
    release: Option<(Claim, Box<Connected>)>,
}

impl LaneBody {
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
}

impl Body for LaneBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
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

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::SeqCst;

    use http_body_util::BodyExt;
    use hyper_util::rt::TokioIo;

    use super::*;
    use crate::http_client::pinned_connector;

    /// An HTTP/1.1 server on 127.0.0.1 that answers "ok", counting the connections it
    /// accepted and those still open.
    struct Upstream {
        url: Uri,
        accepted: Arc<AtomicUsize>,
        open: Arc<AtomicUsize>,
    }

    async fn upstream() -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let (count_accepted, count_open) = (accepted.clone(), open.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count_accepted.fetch_add(1, SeqCst);
                count_open.fetch_add(1, SeqCst);
                let count_open = count_open.clone();
                tokio::spawn(async move {
                    let ok = hyper::service::service_fn(|_| async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    });
                    let _ = http1_server()
                        .serve_connection(TokioIo::new(stream), ok)
                        .await;
                    count_open.fetch_sub(1, SeqCst);
                });
            }
        });
        Upstream {
            url: url.parse().unwrap(),
            accepted,
            open,
        }
    }

    fn http1_server() -> hyper::server::conn::http1::Builder {
        hyper::server::conn::http1::Builder::new()
    }

    async fn send(pinned: &PinnedConn, url: &Uri) -> Response<LaneBody> {
        match pinned
            .send(url, Request::new(Full::new(Bytes::new())))
            .await
        {
            Ok(response) => response,
            Err(e) => panic!("{e}"),
        }
    }

    async fn get(pinned: &PinnedConn, url: &Uri) -> Bytes {
        let body = send(pinned, url).await.into_body();
        body.collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn one_connection_carries_the_requests_one_after_another() {
        let upstream = upstream().await;
        let pinned = PinnedConn::new(pinned_connector(), IDLE_LIMIT);
        for _ in 0..3 {
            assert_eq!(get(&pinned, &upstream.url).await, "ok");
        }
        assert_eq!(upstream.accepted.load(SeqCst), 1);
    }

    #[tokio::test]
    async fn a_request_that_finds_the_lane_busy_is_given_back() {
        let upstream = upstream().await;
        let pinned = PinnedConn::new(pinned_connector(), IDLE_LIMIT);
        let unread = send(&pinned, &upstream.url).await;
        let second = pinned
            .send(&upstream.url, Request::new(Full::new(Bytes::new())))
            .await;
        assert!(matches!(second, Err(LaneError::Busy(_))));
        // Read to its end, the first answer hands the connection back.
        assert_eq!(unread.into_body().collect().await.unwrap().to_bytes(), "ok");
        assert_eq!(get(&pinned, &upstream.url).await, "ok");
        assert_eq!(upstream.accepted.load(SeqCst), 1);
    }

    #[tokio::test]
    async fn an_answer_dropped_unread_takes_its_connection_with_it() {
        let upstream = upstream().await;
        let pinned = PinnedConn::new(pinned_connector(), IDLE_LIMIT);
        drop(send(&pinned, &upstream.url).await);
        assert_eq!(get(&pinned, &upstream.url).await, "ok");
        assert_eq!(upstream.accepted.load(SeqCst), 2);
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_after_the_limit_and_reopened_on_use() {
        let upstream = upstream().await;
        let pinned = PinnedConn::new(pinned_connector(), Duration::from_millis(200));
        assert_eq!(get(&pinned, &upstream.url).await, "ok");
        let deadline = Instant::now() + Duration::from_secs(10);
        while upstream.open.load(SeqCst) > 0 {
            assert!(
                Instant::now() < deadline,
                "the idle connection is still open"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(get(&pinned, &upstream.url).await, "ok");
        assert_eq!(upstream.accepted.load(SeqCst), 2);
    }
}
