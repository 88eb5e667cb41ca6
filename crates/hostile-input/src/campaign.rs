//! Running the requests: workers on HTTP/1.1 connections (hyper) and on raw TCP, each
//! request's outcome judged and tallied.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::Request;
use http_body_util::BodyExt;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::ANSWER_TIMEOUT;
use crate::case::{Case, Context, End, HttpCase, RawCase, ReqBody, Wire};
use crate::classes::generate;
use crate::http1::parse_responses;
use crate::tally::{Failure, Tally};
use crate::verdict::{Answer, Outcome, Verdict, judge};

/// Sends requests `base..base + count` from `concurrency` workers; their tallies merged.
pub(crate) async fn campaign(
    context: &Arc<Context>,
    base: u64,
    count: u64,
    concurrency: usize,
    sent: Option<Arc<AtomicU64>>,
) -> Tally {
    let next = Arc::new(AtomicU64::new(base));
    let end = base + count;
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let context = context.clone();
        let next = next.clone();
        let sent = sent.clone();
        workers.push(tokio::spawn(async move {
            let mut worker = Worker::new(context);
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= end {
                    break;
                }
                worker.one(index).await;
                if let Some(sent) = &sent {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            worker.tally
        }));
    }
    let mut total = Tally::default();
    for worker in workers {
        match worker.await {
            Ok(tally) => total.merge(tally),
            Err(e) => {
                total.failures += 1;
                total.keep(Failure {
                    class: "harness",
                    index: 0,
                    reason: format!("a worker died: {e}"),
                    request: Vec::new(),
                });
            }
        }
    }
    total
}

pub(crate) struct Worker {
    context: Arc<Context>,
    connection: Option<SendRequest<ReqBody>>,
    /// The last request the kept connection answered, named in a failure on it: the two
    /// together reproduce a connection that ended between requests.
    previous: Option<String>,
    pub(crate) tally: Tally,
}

impl Worker {
    pub(crate) fn new(context: Arc<Context>) -> Self {
        Self {
            context,
            connection: None,
            previous: None,
            tally: Tally::default(),
        }
    }

    async fn one(&mut self, index: u64) {
        let case = generate(&self.context, index);
        let started = Instant::now();
        let outcome = match &case.wire {
            Wire::Http(http) => self.send_http(http).await,
            Wire::Raw(raw) => send_raw(self.context.addr, raw).await,
        };
        let mut verdict = judge(&case, &outcome);
        if let Wire::Http(http) = &case.wire {
            self.note_connection(index, &case, http, &outcome, &mut verdict);
        }
        self.tally
            .record(&case, index, &outcome, verdict, started.elapsed());
    }

    /// Names the kept connection's last request in a failure on it; remembers this one.
    fn note_connection(
        &mut self,
        index: u64,
        case: &Case,
        http: &HttpCase,
        outcome: &Outcome,
        verdict: &mut Verdict,
    ) {
        if let (Some(failure), Outcome::Closed(_), Some(previous)) =
            (&mut verdict.failure, outcome, &self.previous)
        {
            let _ = write!(failure, "; the connection had just answered {previous}");
        }
        self.previous = match outcome {
            Outcome::Responses(answers) => answers.first().map(|answer| {
                format!(
                    "request {index} ({}: {} {} -> {})",
                    case.class, http.method, http.path, answer.status
                )
            }),
            _ => None,
        };
    }

    /// One request on this worker's keep-alive connection, opened again when closed.
    pub(crate) async fn send_http(&mut self, http: &HttpCase) -> Outcome {
        let request = match http.request() {
            Ok(request) => request,
            Err(e) => return Outcome::ClientError(format!("building the request: {e}")),
        };
        let (sender, response) = match self.exchange(request).await {
            Ok(exchange) => exchange,
            Err(outcome) => return outcome,
        };
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let body = match tokio::time::timeout(ANSWER_TIMEOUT, response.into_body().collect()).await
        {
            Err(_) => return Outcome::TimedOut,
            Ok(Err(e)) => return Outcome::BrokenBody(describe_hyper(&e)),
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        self.connection = Some(sender);
        Outcome::Responses(vec![Answer {
            status,
            content_type,
            body,
        }])
    }
}

/// A connection that answered, and its answer.
type Exchanged = (SendRequest<ReqBody>, hyper::Response<hyper::body::Incoming>);

impl Worker {
    async fn sender(&mut self) -> Result<SendRequest<ReqBody>, Outcome> {
        if let Some(mut sender) = self.connection.take()
            && sender.ready().await.is_ok()
        {
            return Ok(sender);
        }
        self.previous = None;
        connect(self.context.addr)
            .await
            .map_err(|e| Outcome::ClientError(format!("connect: {e}")))
    }

    /// Sends `request`; once more on a new connection when the kept one turned out to be
    /// closed before a byte of it was written (the gateway closes a connection after
    /// answering a request whose body it did not read).
    async fn exchange(&mut self, request: Request<ReqBody>) -> Result<Exchanged, Outcome> {
        let mut request = request;
        for attempt in 0..2 {
            let mut sender = self.sender().await?;
            let sent = tokio::time::timeout(ANSWER_TIMEOUT, sender.try_send_request(request));
            match sent.await {
                Err(_) => return Err(Outcome::TimedOut),
                Ok(Ok(response)) => return Ok((sender, response)),
                Ok(Err(mut e)) => match e.take_message() {
                    Some(unsent) if attempt == 0 => request = unsent,
                    _ => return Err(Outcome::Closed(describe_hyper(e.error()))),
                },
            }
        }
        Err(Outcome::ClientError("the request could not be sent".into()))
    }
}

pub(crate) async fn connect(addr: SocketAddr) -> std::io::Result<SendRequest<ReqBody>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        // Its errors reach the request that was on it.
        let _ = connection.await;
    });
    Ok(sender)
}

fn describe_hyper(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// Writes the bytes (dribbled if asked), half-closes or aborts, and reads until the
/// gateway closes; then parses whatever came back as HTTP/1.1 responses.
pub(crate) async fn send_raw(addr: SocketAddr, raw: &RawCase) -> Outcome {
    let mut stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(e) => return Outcome::ClientError(format!("connect: {e}")),
    };
    let _ = stream.set_nodelay(true);
    // The gateway may close before it read everything: a failed write is not a failure.
    let _ = write_raw(&mut stream, raw).await;
    match raw.end {
        End::Abort => {
            let _ = stream.set_zero_linger();
            return Outcome::Aborted;
        }
        End::HalfClose => {
            let _ = stream.shutdown().await;
        }
        End::Linger => {}
    }
    let mut received = Vec::new();
    let read = read_until_closed(&mut stream, raw.end, &mut received).await;
    // No TIME_WAIT on this side: a million short connections would use up the ports.
    let _ = stream.set_zero_linger();
    let reset = match read {
        Err(_) => return Outcome::TimedOut,
        Ok(Err(e)) => Some(e.to_string()),
        Ok(Ok(_)) => None,
    };
    if received.is_empty() {
        return Outcome::Closed(reset.unwrap_or_else(|| "closed without a response".into()));
    }
    if raw.h2 {
        return h2_frames(&received);
    }
    match parse_responses(&received, raw.head_request) {
        Ok(answers) => Outcome::Responses(answers),
        Err(e) => Outcome::Malformed(format!("{e} (reset: {reset:?})"), received),
    }
}

/// Reads until the gateway closes; a lingering case half-closes if that takes long.
async fn read_until_closed(
    stream: &mut TcpStream,
    end: End,
    received: &mut Vec<u8>,
) -> Result<std::io::Result<usize>, tokio::time::error::Elapsed> {
    if let End::Linger = end {
        let first = tokio::time::timeout(LINGER, stream.read_to_end(received)).await;
        if first.is_ok() {
            return first;
        }
        let _ = stream.shutdown().await;
    }
    tokio::time::timeout(ANSWER_TIMEOUT, stream.read_to_end(received)).await
}

/// How long a lingering raw case waits before it half-closes.
const LINGER: Duration = Duration::from_secs(2);

async fn write_raw(stream: &mut TcpStream, raw: &RawCase) -> std::io::Result<()> {
    match raw.dribble {
        None => stream.write_all(&raw.bytes).await,
        Some((chunk, pause)) => {
            for piece in raw.bytes.chunks(chunk.max(1)) {
                stream.write_all(piece).await?;
                tokio::time::sleep(pause).await;
            }
            Ok(())
        }
    }
}

/// What an HTTP/2 server writes to a bad preface: frames, the first a SETTINGS or GOAWAY.
fn h2_frames(received: &[u8]) -> Outcome {
    match received.get(3) {
        Some(0x4 | 0x7) if received.len() >= 9 => Outcome::H2Frames,
        _ => Outcome::Malformed("not HTTP/2 frames".into(), received.to_vec()),
    }
}
