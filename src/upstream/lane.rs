//! A client connection's own HTTP/1.1 connection to the upstream, for pass-through.
//!
//! The pooled client pays on every request for the pool: a checkout, and a task spawned
//! to hand the connection back once the response body has been read. That task is a
//! wake-up of the other runtime worker more often than not. A client's HTTP/1.1
//! keep-alive connection sends one request at a time, so it can keep one upstream
//! connection to itself instead, and hand it back from the response body's last frame.
//! A request that finds the lane busy (an HTTP/2 client's concurrent streams) is given
//! back to be sent through the pool.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use tower::ServiceExt;

use super::http::Connector;
use super::legacy::describe_client_error;

/// Why a request did not go out on the lane.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// Another request of the same client connection holds the lane; send this one
    /// another way.
    #[error("the lane is busy")]
    Busy(Box<Request<Full<Bytes>>>),
    #[error("{0}")]
    Failed(String),
}

/// One per client connection; cheap to make, connects on first use.
pub struct Lane {
    state: Arc<Mutex<State>>,
    connector: Connector,
}

enum State {
    Empty,
    Busy,
    Idle(Box<Connected>),
}

struct Connected {
    /// The upstream URL this connection was opened for.
    upstream: Uri,
    /// `upstream` in origin form, the request target on the wire.
    target: Uri,
    host: HeaderValue,
    sender: SendRequest<Full<Bytes>>,
}

impl Lane {
    pub fn new(connector: Connector) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::Empty)),
            connector,
        }
    }

    /// Sends `request` to `upstream` on this lane's connection, opening one if there is
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
        // From here the lane is ours: it becomes idle again from the response body's
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

    async fn connect(&self, upstream: &Uri) -> Result<Box<Connected>, LaneError> {
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
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "pass-through upstream connection ended");
            }
        });
        let authority = upstream
            .authority()
            .ok_or_else(|| LaneError::Failed(format!("{upstream} has no host")))?;
        Ok(Box::new(Connected {
            upstream: upstream.clone(),
            target: upstream
                .path_and_query()
                .map_or_else(|| Uri::from_static("/"), |path| path.clone().into()),
            host: HeaderValue::from_str(authority.as_str())
                .map_err(|e| LaneError::Failed(e.to_string()))?,
            sender,
        }))
    }
}

/// Holds the lane busy. Dropped, it leaves the lane idle with the connection it was
/// given back, or else empty (the next request opens a new connection).
struct Claim {
    state: Arc<Mutex<State>>,
    given_back: Option<Box<Connected>>,
}

impl Claim {
    fn release(mut self, connected: Box<Connected>) {
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

/// The upstream's response body; its last frame gives the connection back to the lane.
/// Dropped before its end, it takes the connection with it (hyper then drains or
/// closes it), as a response cut short leaves the connection mid-message.
pub struct LaneBody {
    inner: Incoming,
    release: Option<(Claim, Box<Connected>)>,
}

impl LaneBody {
    fn release_if_ended(&mut self) {
        if self.inner.is_end_stream()
            && let Some((claim, connected)) = self.release.take()
        {
            claim.release(connected);
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
            None => {
                if let Some((claim, connected)) = self.release.take() {
                    claim.release(connected);
                }
            }
            Some(Ok(_)) => self.release_if_ended(),
            // A broken body leaves the connection unusable: dropping the claim empties the lane.
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
