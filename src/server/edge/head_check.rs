//! Request heads with bytes HTTP forbids (#43): NUL, another control but HTAB, DEL, a
//! bare CR, a field name that is not a token. hyper's parser refuses them with a bare
//! 400 and no hook, so the gateway looks first: [`HeadCheck`] wraps a client
//! connection, sees the bytes hyper reads, and frames HTTP/1.1 requests (`framing.rs`).
//! A head it refuses never reaches hyper. In its place hyper reads a stand-in request
//! marked for this connection, which the service answers ([`Refusals::answer`]): HTTP
//! 400, -32600 naming the header and the byte, `Connection: close`. Going through
//! hyper keeps the order of answers: requests pipelined before the refused head get
//! theirs first.
//!
//! A connection that starts with HTTP/2's preface, or whose framing this does not
//! follow (an upgrade, a body hyper refuses, a head over hyper's limit), passes
//! unchecked from there; hyper then judges it as before.

mod chunked;
mod framing;
#[cfg(test)]
mod tests;

use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{HeaderValue, Request, Response, header};
use mtg_protocol::jsonrpc::{ErrorObject, code};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::reply::{self, Body};
use mtg_transport::Party;

/// The header of the stand-in request; its value is drawn per refusal, so a client
/// cannot send a request the service takes for one.
const MARK: &str = "x-mtg-refused-head";
/// Below this much room in hyper's buffer (hyper-util reads 24 bytes to tell HTTP/2
/// from HTTP/1), the socket is read into the wrapper's own buffer instead.
const DIRECT_READ: usize = 1024;
const READ_CHUNK: usize = 8192;
/// What is read and dropped after a refusal, so that closing does not reset the
/// connection before the client has read the answer.
const DRAIN_LIMIT: usize = 64 * 1024;
/// How long hyper is kept from seeing the end of the stream after a refusal: it checks
/// for it before it writes the answer, and without half-close support drops the answer
/// of a client that shut its side. hyper answers the stand-in at once; the end comes
/// only if it waits for more (which it never should).
const REFUSED_GRACE: Duration = Duration::from_secs(10);
/// Longest header name shown in a message.
const SHOWN_NAME: usize = 64;

/// A request head refused; the message is the JSON-RPC error's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error(
        "header \"{name}\" holds byte {byte:#04x} at value offset {offset}; HTTP forbids control bytes in a field value"
    )]
    Value {
        name: String,
        byte: u8,
        offset: usize,
    },
    #[error(
        "header name \"{name}\" holds byte {byte:#04x} at offset {offset}; a field name is a token ended by ':'"
    )]
    Name {
        name: String,
        byte: u8,
        offset: usize,
    },
    #[error(
        "the request line holds byte {byte:#04x} at offset {offset}; HTTP forbids control bytes in it"
    )]
    RequestLine { byte: u8, offset: usize },
}

impl HeadError {
    fn value(name: &[u8], byte: u8, offset: usize) -> Self {
        Self::Value {
            name: shown(name),
            byte,
            offset,
        }
    }

    fn name(name: &[u8], byte: u8, offset: usize) -> Self {
        Self::Name {
            name: shown(name),
            byte,
            offset,
        }
    }

    /// Its label in `mtg_client_request_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Value { .. } => "header_value",
            Self::Name { .. } => "header_name",
            Self::RequestLine { .. } => "request_line",
        }
    }
}

impl From<&HeadError> for ErrorObject {
    fn from(error: &HeadError) -> Self {
        ErrorObject::new(code::INVALID_REQUEST, error.to_string())
    }
}

/// A header name as a message shows it: lower case, escaped, cut.
fn shown(name: &[u8]) -> String {
    let cut = &name[..name.len().min(SHOWN_NAME)];
    let mut text = cut.to_ascii_lowercase().escape_ascii().to_string();
    if cut.len() < name.len() {
        text.push('…');
    }
    text
}

/// The refusal of a connection's [`HeadCheck`], which its service answers. One per
/// connection: hyper closes it after the answer.
#[derive(Debug, Default)]
pub(crate) struct Refusals(OnceLock<Refused>);

#[derive(Debug)]
struct Refused {
    mark: String,
    error: HeadError,
}

impl Refusals {
    /// The answer to `request` if it is the stand-in of a refused head. Otherwise
    /// `None`, at the cost of one atomic load while nothing was refused.
    pub(crate) fn answer<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        let refused = self.0.get()?;
        if request.headers().get(MARK)?.as_bytes() != refused.mark.as_bytes() {
            return None;
        }
        let party = Party::Client;
        crate::telemetry::Meter::new(None)
            .requests()
            .failed(party.metric(), refused.error.kind());
        tracing::debug!(error = %refused.error, "request head refused");
        let mut response = reply::error_with_status(party.status(), &(&refused.error).into());
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        Some(response)
    }

    fn refuse(&self, error: HeadError) -> Vec<u8> {
        let mark = uuid::Uuid::new_v4().simple().to_string();
        let stand_in =
            format!("GET / HTTP/1.1\r\n{MARK}: {mark}\r\nconnection: close\r\n\r\n").into_bytes();
        let _ = self.0.set(Refused { mark, error });
        stand_in
    }
}

/// A client connection whose HTTP/1.1 request heads are checked before hyper reads
/// them. Writes pass straight through.
pub(crate) struct HeadCheck<S> {
    inner: S,
    framer: framing::Framer,
    held: Held,
    refusals: Arc<Refusals>,
    /// Whether a head was refused: nothing read after it reaches hyper.
    refused: bool,
    drained: usize,
    grace: Duration,
    /// Started once the client's side ended (or enough was drained) after a refusal.
    grace_timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// Bytes read from the socket that hyper has not been given yet: `[..given]` it has,
/// `[given..cleared]` it may have, `[cleared..]` are a head not yet whole.
#[derive(Default)]
struct Held {
    bytes: Vec<u8>,
    given: usize,
    cleared: usize,
}

impl Held {
    /// Copies cleared bytes into `buf`; whether there were any.
    fn give(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        if self.given == self.cleared {
            return false;
        }
        let n = (self.cleared - self.given).min(buf.remaining());
        buf.put_slice(&self.bytes[self.given..self.given + n]);
        self.given += n;
        if self.given == self.bytes.len() {
            // Nothing kept between requests: an idle connection holds no buffer.
            *self = Self::default();
        } else if self.given == self.cleared {
            self.bytes.drain(..self.given);
            self.cleared -= self.given;
            self.given = 0;
        }
        true
    }

    /// Reads from `inner` after what is held; how many bytes came (0: end of stream).
    fn read_from<S: AsyncRead + Unpin>(
        &mut self,
        inner: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let old = self.bytes.len();
        self.bytes.resize(old + READ_CHUNK, 0);
        let mut buf = ReadBuf::new(&mut self.bytes[old..]);
        let polled = Pin::new(inner).poll_read(cx, &mut buf);
        let n = buf.filled().len();
        self.bytes.truncate(old + n);
        polled.map_ok(|()| n)
    }
}

impl<S> HeadCheck<S> {
    pub(crate) fn new(inner: S, refusals: Arc<Refusals>) -> Self {
        Self {
            inner,
            framer: framing::Framer::new(),
            held: Held::default(),
            refusals,
            refused: false,
            drained: 0,
            grace: REFUSED_GRACE,
            grace_timer: None,
        }
    }

    /// Puts the stand-in request where the refused head was: after what was cleared.
    fn refuse(&mut self, error: HeadError) {
        let stand_in = self.refusals.refuse(error);
        self.held.bytes.truncate(self.held.cleared);
        self.held.bytes.extend_from_slice(&stand_in);
        self.held.cleared = self.held.bytes.len();
        self.refused = true;
    }
}

impl<S: AsyncRead + Unpin> HeadCheck<S> {
    /// After a refusal: reads and drops what the client still sends. hyper reads only
    /// once it has the stand-in, and needs nothing more; the end of the stream waits
    /// for [`REFUSED_GRACE`].
    fn drain(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if let Some(timer) = &mut self.grace_timer {
                return timer.as_mut().poll(cx).map(Ok);
            }
            let before = buf.filled().len();
            ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
            let n = buf.filled().len() - before;
            buf.set_filled(before);
            self.drained += n;
            if n == 0 || self.drained >= DRAIN_LIMIT {
                self.grace_timer = Some(Box::pin(tokio::time::sleep(self.grace)));
            }
        }
    }

    /// Reads into hyper's buffer and checks the bytes where they are (the usual case:
    /// nothing held, whole heads).
    fn read_direct(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<Option<()>>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let read = &buf.filled()[before..];
        if read.is_empty() {
            return Poll::Ready(Ok(Some(())));
        }
        let scanned = self.framer.scan(read);
        if scanned.clear == read.len() {
            return Poll::Ready(Ok(Some(())));
        }
        match scanned.refused {
            Some(error) => self.refuse(error),
            None => self.held.bytes.extend_from_slice(&read[scanned.clear..]),
        }
        buf.set_filled(before + scanned.clear);
        Poll::Ready(Ok((scanned.clear > 0).then_some(())))
    }

    /// Reads into the wrapper's buffer, after an unfinished head.
    fn read_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let n = ready!(self.held.read_from(&mut self.inner, cx))?;
        if n == 0 {
            // The client stopped: hyper gets what is held and judges it as before.
            self.held.cleared = self.held.bytes.len();
            self.framer.stop();
            return Poll::Ready(Ok(0));
        }
        let scanned = self.framer.scan(&self.held.bytes[self.held.cleared..]);
        self.held.cleared += scanned.clear;
        if let Some(error) = scanned.refused {
            self.refuse(error);
        }
        Poll::Ready(Ok(n))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for HeadCheck<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if buf.remaining() == 0 || this.held.give(buf) {
                return Poll::Ready(Ok(()));
            }
            if this.refused {
                return this.drain(cx, buf);
            }
            if this.held.bytes.is_empty() && buf.remaining() >= DIRECT_READ {
                if ready!(this.read_direct(cx, buf))?.is_some() {
                    return Poll::Ready(Ok(()));
                }
            } else if ready!(this.read_held(cx))? == 0 {
                // The end of the stream, after what was held if anything was.
                this.held.give(buf);
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadCheck<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
