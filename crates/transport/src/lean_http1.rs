//! HTTP/1.1 to `http://` upstreams for the calls the gateway makes itself, where a call
//! may stay open for minutes.
//!
//! An open call on HTTP/1.1 occupies a connection for as long. hyper's client connection
//! keeps about 23 KB of heap for its whole life (docs/benchmarks.md, run 17): a dispatch
//! channel whose first block is 9 KB, an 8 KiB header buffer, a spawned connection task
//! and a pool watcher. None of those sizes is an option. Here the connection is the
//! response body itself: the socket, the call's framing state (`ureq-proto`, sans-IO)
//! and a read buffer that exists only while bytes are being read. An idle wait for the
//! upstream's next event holds no buffer at all.
//!
//! Connections are kept alive and reused: a body read to its end hands its socket back
//! to the pool. An idle socket the upstream has closed is not reused. A request on a
//! reused socket that could not be written (the upstream's keep-alive timeout raced the
//! reuse) is sent once more on a new one; so is an idempotent request (a GET stream, a
//! DELETE) that was written and got no answer. A `tools/call` that was written is never
//! sent twice: the upstream may have started it before the connection broke.

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::uri::Authority;
use http::{HeaderName, HeaderValue, Method, Request, Response, Uri, header};
use http_body::{Body, Frame};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tower::ServiceExt;
use ureq_proto::BodyMode;
use ureq_proto::client::state::{RecvBody, RecvResponse, SendBody, SendRequest};
use ureq_proto::client::{
    Await100Result, Call, RecvBodyResult, RecvResponseResult, SendRequestResult,
};

use super::Party;

/// How long an idle connection is kept for reuse (hyper's client keeps its own 90 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections kept per upstream and runtime; more are closed as they come back.
const MAX_IDLE_PER_UPSTREAM: usize = 1024;
/// The largest response head read before the upstream counts as broken.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Why a request to an upstream failed, or its body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LeanError {
    #[error("connecting to the upstream failed: {0}")]
    Connect(String),
    #[error("the upstream's connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the upstream broke HTTP/1.1: {0}")]
    Protocol(#[from] ureq_proto::Error),
    /// The request's header value holds bytes HTTP forbids in a field value (controls
    /// but HTAB, DEL): the client's, refused before anything is written.
    #[error("the {0} header's value holds a byte HTTP forbids (a control character)")]
    HeaderValue(HeaderName),
    /// The gateway could not encode its own request as HTTP/1.1.
    #[error("the request could not be encoded as HTTP/1.1: {0}")]
    Encode(ureq_proto::Error),
    #[error("the upstream closed the connection before its response ended")]
    Closed,
    #[error("the upstream's response head is over {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("the request cannot be sent: {0}")]
    Request(&'static str),
}

impl LeanError {
    /// Whose failure this is: the client's request, the upstream, or the gateway.
    pub(crate) fn party(&self) -> Party {
        match self {
            Self::HeaderValue(_) => Party::Client,
            Self::Encode(_) | Self::Request(_) => Party::Gateway,
            Self::Connect(_)
            | Self::Io(_)
            | Self::Protocol(_)
            | Self::Closed
            | Self::HeadTooLarge => Party::Upstream,
        }
    }

    /// The metric label of this failure, within its party's series.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Connect(_) => "unreachable",
            Self::Io(_) | Self::Closed => "lost",
            Self::Protocol(_) | Self::HeadTooLarge => "protocol",
            Self::HeaderValue(_) => "header_value",
            Self::Encode(_) | Self::Request(_) => "request_encoding",
        }
    }
}

/// Whether `value` is a field value HTTP/1.1 lets through (RFC 9110 §5.5): visible
/// ASCII, SP, HTAB and obs-text (0x80–0xFF). `HeaderValue` is built checked almost
/// everywhere; this holds the line for values built without the check.
pub(crate) fn is_field_value(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80)
}

/// The first header whose value HTTP forbids, if any.
pub fn forbidden_header(headers: &http::HeaderMap) -> Option<&HeaderName> {
    headers
        .iter()
        .find(|(_, value)| !is_field_value(value.as_bytes()))
        .map(|(name, _)| name)
}

/// The connections to `http://` upstreams, shared by every world of the process.
pub(crate) struct LeanPool {
    connector: HttpConnector,
    /// How much is read from a socket at once.
    read_size: usize,
    idle: Mutex<HashMap<PoolKey, Vec<Idle>>>,
}

/// Idle sockets are kept per runtime: a socket is driven by the runtime it was opened
/// on, and each of the gateway's worker threads runs its own (its
/// src/server/edge/workers.rs), whose requests and upstream exchanges stay on that
/// thread.
type PoolKey = (tokio::runtime::Id, Authority);

struct Idle {
    stream: TcpStream,
    since: Instant,
}

impl LeanPool {
    pub(crate) fn new(connector: HttpConnector, read_size: usize) -> Arc<Self> {
        Arc::new(Self {
            connector,
            read_size: read_size.max(512),
            idle: Mutex::new(HashMap::new()),
        })
    }

    /// Sends `request` (an absolute `http://` URI) and reads the response head.
    pub(crate) async fn request(
        self: &Arc<Self>,
        request: Request<Bytes>,
    ) -> Result<Response<LeanBody>, LeanError> {
        let authority = request
            .uri()
            .authority()
            .cloned()
            .ok_or(LeanError::Request("the URI has no host"))?;
        let key = (tokio::runtime::Handle::current().id(), authority);
        let uri = request.uri().clone();
        let mut outgoing = Outgoing::held(request)?;
        let idle = self.take_idle(&key);
        let head = outgoing
            .send(idle, || connect(&self.connector, uri), self.read_size)
            .await?;
        let home = Pooled {
            pool: Arc::clone(self),
            key,
        };
        Ok(outgoing.respond(head, home))
    }

    fn take_idle(&self, key: &PoolKey) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.get_mut(key)?;
        while let Some(conn) = list.pop() {
            if conn.since.elapsed() < IDLE_TIMEOUT && still_open(&conn.stream) {
                return Some(conn.stream);
            }
        }
        None
    }

    fn put_idle(&self, key: PoolKey, stream: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.entry(key).or_default();
        // The oldest are first: drop those past their time, and make room.
        let expired = list
            .iter()
            .take_while(|conn| conn.since.elapsed() >= IDLE_TIMEOUT)
            .count();
        list.drain(..expired);
        if list.len() >= MAX_IDLE_PER_UPSTREAM {
            list.remove(0);
        }
        list.push(Idle {
            stream,
            since: Instant::now(),
        });
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.values().map(Vec::len).sum()
    }
}

/// Opens a new connection to `uri`'s host.
pub(crate) async fn connect(connector: &HttpConnector, uri: Uri) -> Result<TcpStream, LeanError> {
    let io = connector
        .clone()
        .oneshot(uri)
        .await
        .map_err(|e| LeanError::Connect(super::describe_client_error(&e)))?;
    Ok(io.into_inner())
}

/// Where a body's socket goes once the body has been read to its end and HTTP/1.1 lets
/// the connection carry another request: the pool's idle list, or the pinned connection
/// of a client connection, which keeps the socket to itself ([`crate::pinned`]). A body that does not end well
/// drops its home with the socket closed.
pub(crate) trait Home: Send + Sync + 'static {
    fn keep(self, stream: TcpStream);
    /// How much is read from the socket at once.
    fn read_size(&self) -> usize;
}

/// The pool's own sockets.
pub(crate) struct Pooled {
    pool: Arc<LeanPool>,
    key: PoolKey,
}

impl Home for Pooled {
    fn keep(self, stream: TcpStream) {
        self.pool.put_idle(self.key, stream);
    }

    fn read_size(&self) -> usize {
        self.pool.read_size
    }
}

/// A request encoded for the wire, with the call that reads its response; it can be
/// written more than once (on a new connection after a reused one failed).
pub(crate) struct Outgoing {
    wire: Vec<u8>,
    call: Call<RecvResponse>,
    idempotent: bool,
}

impl Outgoing {
    /// Encodes `request`, whose URI is absolute (its host is the `Host` header unless
    /// one is set).
    pub(crate) fn new(request: Request<Bytes>) -> Result<Self, LeanError> {
        Self::encode(request, false)
    }

    /// [`Self::new`] for a call that may wait long (the gateway's own calls): its
    /// response is read by a stand-in that keeps none of the request ([`stand_in`]).
    /// Not for every request: the stand-in costs a second, empty encoding (the CPU
    /// guard's pass-through count +3 %, run 32).
    pub(crate) fn held(request: Request<Bytes>) -> Result<Self, LeanError> {
        Self::encode(request, true)
    }

    fn encode(request: Request<Bytes>, read_by_stand_in: bool) -> Result<Self, LeanError> {
        let idempotent = request.method().is_idempotent();
        let (mut parts, body) = request.into_parts();
        if let Some(name) = forbidden_header(&parts.headers) {
            return Err(LeanError::HeaderValue(name.clone()));
        }
        let needs_length = matches!(parts.method, Method::POST | Method::PUT | Method::PATCH);
        if needs_length || !body.is_empty() {
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        // ureq-proto refuses an `Authorization` value that is not visible ASCII, which
        // HTTP allows (obs-text): such values are written here, after its head.
        let spliced = take_obs_text_authorization(&mut parts.headers);
        let reader = read_by_stand_in.then(|| stand_in(&parts)).flatten();
        let mut call = Call::new(Request::from_parts(parts, ())).map_err(LeanError::Encode)?;
        // A client's method and body go on as they came, as hyper's client sends them:
        // any method token HTTP allows (`BREW`, `post`), a body on any method.
        call.allow_non_standard_methods(true);
        if !body.is_empty() {
            call.force_send_body();
        }
        let mut call = call.proceed();
        let mut wire = encode_head(&mut call)?;
        splice_authorization(&mut wire, &spliced);
        let call = add_body(call, &mut wire, &body)?;
        // The request is on the wire: the call that reads its response need not keep it.
        let call = reader.unwrap_or(call);
        Ok(Self {
            wire,
            call,
            idempotent,
        })
    }

    /// Sends the request on `reused`, a kept connection, if there is one; else, or when
    /// that attempt failed in a way that allows another ([`Self::may_go_again`]), on a
    /// new connection from `connect`.
    pub(crate) async fn send<F>(
        &mut self,
        reused: Option<TcpStream>,
        connect: impl FnOnce() -> F,
        read_size: usize,
    ) -> Result<Head, LeanError>
    where
        F: Future<Output = Result<TcpStream, LeanError>>,
    {
        if let Some(stream) = reused {
            match self.exchange(stream, read_size).await {
                Err(failed) if self.may_go_again(&failed) => {}
                attempt => return attempt.map_err(Attempt::into_error),
            }
        }
        let stream = connect().await?;
        self.exchange(stream, read_size)
            .await
            .map_err(Attempt::into_error)
    }

    /// Writes the request on `stream` and reads its response head; the call is advanced
    /// only once a byte of an answer came, so a failed attempt can be made again.
    async fn exchange(&mut self, mut stream: TcpStream, read_size: usize) -> Result<Head, Attempt> {
        stream
            .write_all(&self.wire)
            .await
            .map_err(|e| Attempt::Unsent(e.into()))?;
        let mut read = BytesMut::new();
        let mut answered = false;
        loop {
            let filled =
                std::future::poll_fn(|cx| poll_fill(&mut stream, &mut read, read_size, cx)).await;
            let failed = |e: LeanError| match answered {
                false => Attempt::Unanswered(e),
                true => Attempt::Failed(e),
            };
            match filled {
                Ok(0) => return Err(failed(LeanError::Closed)),
                Ok(_) => answered = true,
                Err(e) => return Err(failed(e.into())),
            }
            loop {
                let (used, response) = self
                    .call
                    .try_response(&read, false)
                    .map_err(|e| Attempt::Failed(e.into()))?;
                read.advance(used);
                if let Some(response) = response {
                    return Ok(Head {
                        stream,
                        read,
                        response,
                    });
                }
                // An informational head (100, 103) was skipped: the final one may follow
                // in the same bytes.
                if used == 0 {
                    break;
                }
            }
            if read.len() > MAX_HEAD_BYTES {
                return Err(Attempt::Failed(LeanError::HeadTooLarge));
            }
        }
    }

    /// Whether an attempt on a reused socket that failed this way may be made again on
    /// a new one: when the request was not written whole, or it is idempotent and got
    /// no answer. A written `tools/call` may have started upstream.
    fn may_go_again(&self, failed: &Attempt) -> bool {
        match failed {
            Attempt::Unsent(_) => true,
            Attempt::Unanswered(_) => self.idempotent,
            Attempt::Failed(_) => false,
        }
    }

    /// The response whose head `head` is; its body's socket goes `home` when it ends.
    pub(crate) fn respond<H: Home>(self, head: Head, home: H) -> Response<LeanBody<H>> {
        let Head {
            stream,
            read,
            response,
        } = head;
        let body = match self.call.proceed() {
            Some(RecvResponseResult::RecvBody(call)) => LeanBody::reading(stream, home, call, read),
            Some(RecvResponseResult::Cleanup(call)) => {
                if !call.must_close_connection() && read.is_empty() {
                    home.keep(stream);
                }
                LeanBody::empty()
            }
            Some(RecvResponseResult::Redirect(_)) | None => LeanBody::empty(),
        };
        response.map(|()| body)
    }
}

/// A call that reads the response to the request of `parts` as its own call would,
/// without holding the request: ureq-proto keeps a call's request, its headers and those
/// it adds, for the call's whole life, about 1 KB of heap for as long as a task's call
/// waits (docs/benchmarks.md, run 32). Reading needs only the method (a `HEAD` has no
/// body), the version and whether the request asked to close the connection. `None`
/// for a `CONNECT`, whose request target the stand-in cannot take.
fn stand_in(parts: &http::request::Parts) -> Option<Call<RecvResponse>> {
    let method = match parts.method {
        Method::CONNECT => return None,
        Method::HEAD => Method::HEAD,
        _ => Method::GET,
    };
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.version_mut() = parts.version;
    for value in parts.headers.get_all(header::CONNECTION) {
        request
            .headers_mut()
            .append(header::CONNECTION, value.clone());
    }
    let mut call = Call::new(request).ok()?.proceed();
    // Its head goes nowhere: writing it is how the call comes to wait for a response.
    let mut head = [0u8; 256];
    while !call.can_proceed() {
        call.write(&mut head).ok()?;
    }
    match call.proceed().ok()? {
        Some(SendRequestResult::RecvResponse(call)) => Some(call),
        _ => None,
    }
}

/// Takes the `Authorization` values ureq-proto would refuse (obs-text), all of them if
/// one is such, to write after the head it encoded.
fn take_obs_text_authorization(headers: &mut http::HeaderMap) -> Vec<HeaderValue> {
    let any_obs_text = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .any(|value| value.to_str().is_err());
    if !any_obs_text {
        return Vec::new();
    }
    match headers.entry(header::AUTHORIZATION) {
        http::header::Entry::Occupied(entry) => entry.remove_entry_mult().1.collect(),
        http::header::Entry::Vacant(_) => Vec::new(),
    }
}

/// The request head as ureq-proto writes it.
fn encode_head(call: &mut Call<SendRequest>) -> Result<Vec<u8>, LeanError> {
    let mut wire = vec![0; 1024];
    let mut used = 0;
    while !call.can_proceed() {
        match call.write(&mut wire[used..]) {
            Ok(n) => used += n,
            Err(ureq_proto::Error::OutputOverflow) => wire.resize(wire.len() * 2, 0),
            Err(e) => return Err(LeanError::Encode(e)),
        }
    }
    wire.truncate(used);
    Ok(wire)
}

/// Writes `values` as `Authorization` lines at the end of the head in `wire`.
fn splice_authorization(wire: &mut Vec<u8>, values: &[HeaderValue]) {
    if values.is_empty() {
        return;
    }
    // The head ends with the empty line: the values go before it.
    let mut lines = Vec::new();
    for value in values {
        lines.extend_from_slice(b"authorization: ");
        lines.extend_from_slice(value.as_bytes());
        lines.extend_from_slice(b"\r\n");
    }
    let end = wire.len().saturating_sub(2);
    wire.splice(end..end, lines);
}

/// Adds the body after the head, if the request has one, and leaves the call waiting
/// for the response.
fn add_body(
    call: Call<SendRequest>,
    wire: &mut Vec<u8>,
    body: &Bytes,
) -> Result<Call<RecvResponse>, LeanError> {
    let write_body = |wire: &mut Vec<u8>, mut call: Call<SendBody>| {
        wire.extend_from_slice(body);
        call.consume_direct_write(body.len())
            .map_err(LeanError::Encode)?;
        call.proceed()
            .ok_or(LeanError::Request("the body is shorter than its length"))
    };
    match call.proceed().map_err(LeanError::Encode)? {
        Some(SendRequestResult::RecvResponse(call)) => Ok(call),
        Some(SendRequestResult::SendBody(call)) => write_body(wire, call),
        // The body is here whole (the client's `Expect` was answered by the gateway's
        // server): it is sent at once, as hyper's client sends it.
        Some(SendRequestResult::Await100(call)) => {
            match call.proceed().map_err(LeanError::Encode)? {
                Await100Result::SendBody(call) => write_body(wire, call),
                Await100Result::RecvResponse(call) => Ok(call),
            }
        }
        None => Err(LeanError::Request("the request head was not written")),
    }
}

/// What an attempt to send a request came to, when it did not get a head.
enum Attempt {
    /// The request could not be written whole: the upstream cannot have acted on it.
    Unsent(LeanError),
    /// The request was written and nothing came back.
    Unanswered(LeanError),
    Failed(LeanError),
}

impl Attempt {
    fn into_error(self) -> LeanError {
        match self {
            Attempt::Unsent(e) | Attempt::Unanswered(e) | Attempt::Failed(e) => e,
        }
    }
}

/// A response head, with the connection it came on.
pub(crate) struct Head {
    stream: TcpStream,
    /// What was read past the head: the body's first bytes.
    read: BytesMut,
    response: Response<()>,
}

/// Reads once the socket is readable; the buffer is grown only then, so that a wait
/// holds no buffer. `Ok(0)` is the end of the stream.
///
/// The read goes through tokio's `AsyncRead`, which takes a read that did not fill the
/// buffer as the socket drained and clears its readiness; `try_read_buf` keeps the
/// readiness until a read fails, which cost a system call that would block after each
/// response (docs/benchmarks.md, run 35).
fn poll_fill(
    stream: &mut TcpStream,
    read: &mut BytesMut,
    size: usize,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<usize>> {
    ready!(stream.poll_read_ready(cx))?;
    read.reserve(size);
    let filled = tokio_util::io::poll_read_buf(Pin::new(stream), cx, read);
    if filled.is_pending() && read.is_empty() {
        // The readiness was stale (it is cleared now): the wait that follows must not
        // hold the buffer just reserved.
        *read = BytesMut::new();
    }
    filled
}

/// Whether an idle socket can be used: not closed by the upstream, with nothing unread.
/// Asked of the socket itself (a peek), not of tokio's readiness, which may not have
/// seen the upstream's FIN yet.
pub(crate) fn still_open(stream: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    let peeked = socket2::SockRef::from(stream).peek(&mut byte);
    matches!(peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// A response body read straight from its connection.
pub(crate) struct LeanBody<H: Home = Pooled> {
    reading: Option<Box<Reading<H>>>,
}

struct Reading<H> {
    stream: TcpStream,
    home: H,
    call: Call<RecvBody>,
    /// Bytes read and not yet decoded; empty (unallocated) between reads.
    read: BytesMut,
}

impl<H: Home> LeanBody<H> {
    fn empty() -> Self {
        Self { reading: None }
    }

    fn reading(stream: TcpStream, home: H, call: Call<RecvBody>, read: BytesMut) -> Self {
        // The head's buffer, drained, would stay allocated until the first body bytes
        // come.
        let read = if read.is_empty() {
            BytesMut::new()
        } else {
            read
        };
        Self {
            reading: Some(Box::new(Reading {
                stream,
                home,
                call,
                read,
            })),
        }
    }

    /// The body is read to its end: the connection goes home if HTTP/1.1 lets it.
    fn end(&mut self) {
        let Some(reading) = self.reading.take() else {
            return;
        };
        let Reading {
            stream,
            home,
            call,
            read,
        } = *reading;
        let reusable = match call.proceed() {
            Some(RecvBodyResult::Cleanup(call)) => !call.must_close_connection(),
            Some(RecvBodyResult::Redirect(call)) => !call.must_close_connection(),
            None => false,
        };
        if reusable && read.is_empty() {
            home.keep(stream);
        }
    }
}

/// The most a dropped body reads to save its connection.
const MAX_DRAIN_BYTES: usize = 64 * 1024;

impl<H: Home> Drop for LeanBody<H> {
    /// A body dropped before its end keeps its connection only if the rest has already
    /// come: a stream's last chunk usually follows its last event at once, while the
    /// reader has what it wanted. Otherwise the connection is closed, which is how the
    /// upstream learns that no one waits for the call.
    fn drop(&mut self) {
        if self
            .reading
            .as_mut()
            .is_some_and(|reading| reading.drain_arrived())
        {
            self.end();
        }
    }
}

impl<H: Home> Reading<H> {
    /// Reads and discards what has arrived of the body, without waiting; whether that
    /// was all of it.
    fn drain_arrived(&mut self) -> bool {
        if matches!(self.call.body_mode(), BodyMode::CloseDelimited) {
            return false;
        }
        let mut out = [0u8; 2048];
        let mut drained = 0;
        loop {
            while !self.read.is_empty() {
                let Ok((used, produced)) = self.call.read(&self.read, &mut out) else {
                    return false;
                };
                if used == 0 && produced == 0 {
                    break;
                }
                self.read.advance(used);
                drained += used;
            }
            if self.call.can_proceed() {
                return true;
            }
            if drained > MAX_DRAIN_BYTES {
                return false;
            }
            // A read only when the runtime saw the socket readable (tokio keeps that
            // until a read would block): no system call for a body with nothing more.
            self.read.reserve(self.home.read_size());
            match self.stream.try_read_buf(&mut self.read) {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
    }
}

impl<H: Home> Body for LeanBody<H> {
    type Data = Bytes;
    type Error = LeanError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, LeanError>>> {
        let this = self.get_mut();
        loop {
            let Some(reading) = this.reading.as_mut() else {
                return Poll::Ready(None);
            };
            if !reading.read.is_empty() {
                let mut out = BytesMut::zeroed(reading.read.len());
                let (used, produced) = match reading.call.read(&reading.read, &mut out) {
                    Ok(read) => read,
                    Err(e) => {
                        this.reading = None;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                };
                reading.read.advance(used);
                if reading.read.is_empty() {
                    // Release the buffer: the wait for the next bytes holds none.
                    reading.read = BytesMut::new();
                }
                if produced > 0 {
                    out.truncate(produced);
                    return Poll::Ready(Some(Ok(Frame::data(out.freeze()))));
                }
                if used > 0 {
                    continue;
                }
            }
            let close_delimited = matches!(reading.call.body_mode(), BodyMode::CloseDelimited);
            if !close_delimited && reading.call.can_proceed() {
                this.end();
                return Poll::Ready(None);
            }
            let filled = ready!(poll_fill(
                &mut reading.stream,
                &mut reading.read,
                reading.home.read_size(),
                cx
            ));
            match filled {
                Ok(0) if close_delimited => {
                    this.reading = None;
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    this.reading = None;
                    return Poll::Ready(Some(Err(LeanError::Closed)));
                }
                Ok(_) => {}
                Err(e) => {
                    this.reading = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.reading.is_none()
    }
}
