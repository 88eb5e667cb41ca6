//! `plain_server`: a plain MCP server (no Tasks support) for integration tests.
//!
//! It speaks the *stateful* Streamable HTTP transport of MCP 2025-11-25 (and
//! accepts 2025-06-18 / 2025-03-26), modelled on the TypeScript SDK's
//! `StreamableHTTPServerTransport`. The gateway under test proxies it.
//!
//! ```text
//! cargo run --release -p fixture-servers --bin plain_server -- --listen 127.0.0.1:9000 [--request-timeout-secs 60]
//! ```
//!
//! On start it prints exactly one line to stdout,
//! `listening on http://127.0.0.1:PORT/mcp`, and flushes it.
//!
//! * `POST /mcp`, `GET /mcp`, `DELETE /mcp`: the MCP endpoint.
//! * `GET /stats`: counters for tests (see [`stats_json`]).
//!
//! Every SSE event the server writes is framed as
//! `id: <N>\nevent: message\ndata: <compact JSON>\n\n`, where `N` is a
//! per-session counter starting at 1 and shared by all streams of the session.
//! Keep-alives are SSE comments `: keepalive\n\n` every 15 s on every open
//! stream. No priming event is sent: the server does not support resumption.
//!
//! Batches (JSON arrays, as in 2025-03-26) are accepted: all responses to the
//! requests of one batch go on that POST's single SSE stream, which ends once
//! the last of them is sent.
//!
//! Logs go to stderr (`RUST_LOG`, default `warn`).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io::{self, Write};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use futures_util::future;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, LengthLimitError, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
const SUPPORTED_PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// Same limits as the TypeScript SDK.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
const MAX_BATCH: usize = 100;
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);
/// Upper bound on `sleep`'s `steps`, so a test typo cannot flood a stream.
const MAX_SLEEP_STEPS: u64 = 1000;

// JSON-RPC / MCP error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
/// Transport-level errors (TS SDK convention) and the SDK's request timeout.
const TRANSPORT_ERROR: i64 = -32000;
const SESSION_NOT_FOUND: i64 = -32001;
const REQUEST_TIMEOUT: i64 = -32001;

#[derive(Parser, Debug)]
#[command(about = "Plain MCP server (no tasks) over stateful Streamable HTTP; a test fixture")]
struct Cli {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// How long a tool waits for the client to answer a server->client
    /// request before failing with -32001 (0 = wait forever). The TS SDK
    /// default is 60 s.
    #[arg(long, default_value_t = 60)]
    request_timeout_secs: u64,
    /// HTTP/2's `SETTINGS_MAX_CONCURRENT_STREAMS` per connection (hyper's default: 200).
    #[arg(long)]
    h2_max_streams: Option<u32>,
    /// Speak HTTP/1.1 only (no h2c), like most Node and Python servers.
    #[arg(long)]
    http1_only: bool,
}

/// How connections are served: HTTP/1.1 and h2c (prior knowledge), unless told otherwise.
#[derive(Clone, Copy)]
struct Protocols {
    h2_max_streams: Option<u32>,
    http1_only: bool,
}

#[tokio::main]
async fn main() -> io::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();

    let listener = TcpListener::bind(&cli.listen).await?;
    let addr = listener.local_addr()?;
    {
        // Tests parse the port from this line, so it must be flushed at once.
        let mut out = io::stdout().lock();
        writeln!(out, "listening on http://{addr}/mcp")?;
        out.flush()?;
    }

    let timeout =
        (cli.request_timeout_secs > 0).then(|| Duration::from_secs(cli.request_timeout_secs));
    let app = Arc::new(App::new(timeout));
    let protocols = Protocols {
        h2_max_streams: cli.h2_max_streams,
        http1_only: cli.http1_only,
    };
    tokio::select! {
        () = accept_loop(listener, app, protocols) => Ok(()),
        result = tokio::signal::ctrl_c() => result,
    }
}

async fn accept_loop(listener: TcpListener, app: Arc<App>, protocols: Protocols) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                // Like Node's HTTP server: without it, the SSE body written after the
                // headers waits for a delayed ACK (~40 ms on Linux).
                let _ = stream.set_nodelay(true);
                app.stats().connections_accepted += 1;
                tokio::spawn(serve_connection(stream, app.clone(), protocols));
            }
            Err(err) => {
                // E.g. EMFILE: back off briefly instead of spinning.
                tracing::warn!(%err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_connection(stream: TcpStream, app: Arc<App>, protocols: Protocols) {
    let service = service_fn(move |req| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(route(&app, req).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    if protocols.http1_only {
        builder = builder.http1_only();
    }
    if let Some(max) = protocols.h2_max_streams {
        builder.http2().max_concurrent_streams(max);
    }
    if let Err(err) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%err, "connection ended with an error");
    }
}

// ---------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------

type Body = UnsyncBoxBody<Bytes, io::Error>;
type SseFrame = Result<Frame<Bytes>, io::Error>;
/// A client's answer to a server->client request: `Ok(result)` or `Err(error object)`.
type ClientReply = Result<Value, Value>;

struct App {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    stats: Mutex<Stats>,
    request_timeout: Option<Duration>,
}

#[derive(Default)]
struct Stats {
    initialize_count: u64,
    /// Key `"<sessionId>:<requestId>"`; string ids are used verbatim.
    responses_received: BTreeMap<String, u64>,
    cancelled_received: Vec<Value>,
    calls_started: u64,
    calls_in_flight: u64,
    connections_accepted: u64,
    /// `POST /mcp` requests by HTTP version ("HTTP/1.1", "HTTP/2.0").
    posts_by_version: BTreeMap<String, u64>,
    /// The `Authorization` bytes of the last 64 requests that had one, oldest first.
    authorizations_seen: std::collections::VecDeque<Vec<u8>>,
}

impl App {
    fn new(request_timeout: Option<Duration>) -> Self {
        Self {
            sessions: Mutex::default(),
            stats: Mutex::default(),
            request_timeout,
        }
    }

    fn stats(&self) -> MutexGuard<'_, Stats> {
        lock(&self.stats)
    }

    /// Resolves the `Mcp-Session-Id` header like the TS SDK: missing -> 400,
    /// unknown -> 404.
    fn session_for(&self, headers: &HeaderMap) -> Result<Arc<Session>, HttpError> {
        let id = match session_header(headers)? {
            Some(id) => id,
            None => {
                return Err(HttpError::new(
                    StatusCode::BAD_REQUEST,
                    TRANSPORT_ERROR,
                    "Bad Request: Mcp-Session-Id header is required",
                ));
            }
        };
        lock(&self.sessions)
            .get(&id)
            .cloned()
            .ok_or_else(session_not_found)
    }

    fn remove_session(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).remove(id)
    }

    /// Counts a `tools/call`; the guard keeps `callsInFlight` honest even when
    /// the call is cancelled (its future is dropped).
    fn call_started(self: &Arc<Self>) -> CallGuard {
        let mut stats = self.stats();
        stats.calls_started += 1;
        stats.calls_in_flight += 1;
        CallGuard { app: self.clone() }
    }
}

struct CallGuard {
    app: Arc<App>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut stats = self.app.stats();
        stats.calls_in_flight = stats.calls_in_flight.saturating_sub(1);
    }
}

/// A lock that survives poisoning: the data are plain counters and maps that
/// stay consistent even if some other task panicked mid-update.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Session {
    id: String,
    /// What the client declared at initialize (elicitation, sampling, roots...).
    client_capabilities: Value,
    /// The `Authorization` header of the initialize request, if any.
    authorization: Option<String>,
    /// SSE event ids, unique across all streams of the session.
    next_event_id: AtomicU64,
    /// Ids of server->client requests: 0, 1, 2... like server-everything.
    next_request_id: AtomicI64,
    pending: Mutex<HashMap<i64, oneshot::Sender<ClientReply>>>,
    /// In-flight client requests by JSON-encoded id (so `1` and `"1"` differ).
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    /// The sender of the standalone GET stream, if one is open.
    standalone: Mutex<Option<mpsc::UnboundedSender<SseFrame>>>,
    closed: CancellationToken,
}

impl Session {
    fn new(client_capabilities: Value, authorization: Option<String>) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            client_capabilities,
            authorization,
            next_event_id: AtomicU64::new(1),
            next_request_id: AtomicI64::new(0),
            pending: Mutex::default(),
            in_flight: Mutex::default(),
            standalone: Mutex::default(),
            closed: CancellationToken::new(),
        }
    }

    fn has_capability(&self, name: &str) -> bool {
        self.client_capabilities
            .get(name)
            .is_some_and(|value| !value.is_null())
    }

    fn next_event_id(&self) -> u64 {
        self.next_event_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers an in-flight request; `None` if its id is already in flight.
    fn begin_request(&self, key: &str) -> Option<CancellationToken> {
        let mut in_flight = lock(&self.in_flight);
        if in_flight.contains_key(key) {
            return None;
        }
        let token = self.closed.child_token();
        in_flight.insert(key.to_owned(), token.clone());
        Some(token)
    }

    fn end_request(&self, key: &str) {
        lock(&self.in_flight).remove(key);
    }

    fn cancel_request(&self, key: &str) -> bool {
        match lock(&self.in_flight).get(key) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    fn register_pending(self: &Arc<Self>) -> PendingRequest {
        let id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        PendingRequest {
            session: self.clone(),
            id,
            reply: rx,
        }
    }

    /// Hands a client response to the waiting tool; false if nobody waits.
    fn resolve_pending(&self, id: &Value, reply: ClientReply) -> bool {
        let waiter = id.as_i64().and_then(|id| lock(&self.pending).remove(&id));
        waiter.is_some_and(|tx| tx.send(reply).is_ok())
    }

    /// At most one standalone stream, like the TS SDK (409 otherwise); a
    /// stream whose client has gone away no longer counts.
    fn claim_standalone(&self, tx: mpsc::UnboundedSender<SseFrame>) -> bool {
        let mut slot = lock(&self.standalone);
        if slot.as_ref().is_some_and(|open| !open.is_closed()) {
            return false;
        }
        *slot = Some(tx);
        true
    }

    /// Ends everything: in-flight calls stop without a response, all streams end.
    fn close(&self) {
        self.closed.cancel();
        lock(&self.standalone).take();
        lock(&self.pending).clear();
    }
}

/// A server->client request awaiting its response; dropping it (tool done,
/// cancelled or timed out) forgets the id so a late answer counts as unknown.
struct PendingRequest {
    session: Arc<Session>,
    id: i64,
    reply: oneshot::Receiver<ClientReply>,
}

impl Drop for PendingRequest {
    fn drop(&mut self) {
        lock(&self.session.pending).remove(&self.id);
    }
}

// ---------------------------------------------------------------------------
// SSE
// ---------------------------------------------------------------------------

/// Write side of one SSE response body. The body ends when every clone is
/// dropped, so a POST stream ends right after its last response is sent.
#[derive(Clone)]
struct SseSink {
    session: Arc<Session>,
    tx: mpsc::UnboundedSender<SseFrame>,
}

impl SseSink {
    fn open(session: &Arc<Session>) -> (Self, Body) {
        let (tx, body) = sse_channel();
        let sink = Self {
            session: session.clone(),
            tx,
        };
        (sink, body)
    }

    /// Writes one JSON-RPC message as an SSE event; false if the client is gone.
    fn send(&self, message: &Value) -> bool {
        let id = self.session.next_event_id();
        let event = format!("id: {id}\nevent: message\ndata: {message}\n\n");
        self.tx.send(Ok(Frame::data(Bytes::from(event)))).is_ok()
    }

    /// Fails the body so hyper tears the connection down mid-stream: the
    /// client sees a truncated response instead of a clean end.
    fn abort(&self) {
        let err = io::Error::new(io::ErrorKind::ConnectionAborted, "drop_connection tool");
        let _ = self.tx.send(Err(err));
    }
}

/// An SSE body fed by the returned sender, with a `: keepalive` comment every
/// `KEEP_ALIVE_EVERY`; it ends once every sender is dropped.
///
/// The keep-alive timer lives in the body, so it goes with the stream. It used to be a
/// task per stream that slept 15 s before it noticed the stream had ended: each short
/// POST left ~4 KB behind for those 15 s (its task, its timer and the channel it held),
/// and a benchmark's session grew by hundreds of MB.
fn sse_channel() -> (mpsc::UnboundedSender<SseFrame>, Body) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut keep_alive = tokio::time::interval_at(
        tokio::time::Instant::now() + KEEP_ALIVE_EVERY,
        KEEP_ALIVE_EVERY,
    );
    // After a stall (a client not reading), one comment, not one per missed period.
    keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stream = futures_util::stream::poll_fn(move |cx| {
        // Messages first; `None` (every sender gone) ends the stream.
        if let Poll::Ready(frame) = rx.poll_recv(cx) {
            return Poll::Ready(frame);
        }
        keep_alive
            .poll_tick(cx)
            .map(|_| Some(Ok(Frame::data(Bytes::from_static(b": keepalive\n\n")))))
    });
    (tx, StreamBody::new(stream).boxed_unsync())
}

fn sse_response(body: Body, session_id: &str) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Ok(value) = HeaderValue::from_str(session_id) {
        headers.insert(SESSION_HEADER, value);
    }
    response
}

// ---------------------------------------------------------------------------
// HTTP routing and errors
// ---------------------------------------------------------------------------

/// A rejection answered before any stream starts: an HTTP status plus a
/// JSON-RPC error body (id null unless the failing request is known).
struct HttpError {
    status: StatusCode,
    code: i64,
    message: String,
    id: Value,
}

impl HttpError {
    fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            id: Value::Null,
        }
    }

    fn into_response(self) -> Response<Body> {
        let body = json!({
            "jsonrpc": "2.0",
            "error": {"code": self.code, "message": self.message},
            "id": self.id,
        });
        json_response(self.status, &body)
    }
}

fn session_not_found() -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        SESSION_NOT_FOUND,
        "Session not found",
    )
}

type HttpResult = Result<Response<Body>, HttpError>;

async fn route(app: &Arc<App>, req: Request<Incoming>) -> Response<Body> {
    if let Some(auth) = req.headers().get(header::AUTHORIZATION) {
        let mut stats = app.stats();
        if stats.authorizations_seen.len() == 64 {
            stats.authorizations_seen.pop_front();
        }
        stats
            .authorizations_seen
            .push_back(auth.as_bytes().to_vec());
    }
    let result = match (req.uri().path(), req.method()) {
        ("/mcp", &Method::POST) => {
            *app.stats()
                .posts_by_version
                .entry(format!("{:?}", req.version()))
                .or_default() += 1;
            handle_post(app, req).await
        }
        ("/mcp", &Method::GET) => handle_get(app, req.headers()),
        ("/mcp", &Method::DELETE) => handle_delete(app, req.headers()),
        ("/mcp", _) => Ok(method_not_allowed()),
        ("/stats", &Method::GET) => Ok(json_response(StatusCode::OK, &stats_json(app))),
        _ => Ok(text_response(StatusCode::NOT_FOUND, "not found")),
    };
    result.unwrap_or_else(HttpError::into_response)
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(full_body(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn text_response(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(full_body(text));
    *response.status_mut() = status;
    response
}

fn empty_response(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    response
}

fn full_body(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn method_not_allowed() -> Response<Body> {
    let mut response = HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        TRANSPORT_ERROR,
        "Method not allowed.",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
    response
}

/// All values of a header joined, so repeated headers are not missed.
fn header_text(headers: &HeaderMap, name: impl header::AsHeaderName) -> String {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(", ")
}

fn session_header(headers: &HeaderMap) -> Result<Option<String>, HttpError> {
    let mut values = headers.get_all(SESSION_HEADER).iter();
    let (Some(first), None) = (values.next(), values.next()) else {
        if !headers.contains_key(SESSION_HEADER) {
            return Ok(None);
        }
        return Err(HttpError::new(
            StatusCode::BAD_REQUEST,
            TRANSPORT_ERROR,
            "Bad Request: Mcp-Session-Id header must be a single value",
        ));
    };
    // A non-ASCII id cannot be one we issued.
    first
        .to_str()
        .map(|id| Some(id.to_owned()))
        .map_err(|_| session_not_found())
}

fn check_protocol_version(headers: &HeaderMap) -> Result<(), HttpError> {
    let Some(value) = headers.get(VERSION_HEADER) else {
        return Ok(());
    };
    let version = value.to_str().unwrap_or("<non-ASCII>");
    if SUPPORTED_PROTOCOL_VERSIONS.contains(&version) {
        return Ok(());
    }
    Err(HttpError::new(
        StatusCode::BAD_REQUEST,
        TRANSPORT_ERROR,
        format!(
            "Bad Request: Unsupported protocol version: {version} (supported versions: {})",
            SUPPORTED_PROTOCOL_VERSIONS.join(", ")
        ),
    ))
}

fn check_post_headers(headers: &HeaderMap) -> Result<(), HttpError> {
    let accept = header_text(headers, header::ACCEPT);
    if !accept.contains("application/json") || !accept.contains("text/event-stream") {
        return Err(HttpError::new(
            StatusCode::NOT_ACCEPTABLE,
            TRANSPORT_ERROR,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        ));
    }
    // Compare the media type's essence: `application/json; charset=utf-8` is fine.
    let content_type = header_text(headers, header::CONTENT_TYPE);
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(HttpError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            TRANSPORT_ERROR,
            "Unsupported Media Type: Content-Type must be application/json",
        ));
    }
    Ok(())
}

async fn read_body(body: Incoming) -> Result<Bytes, HttpError> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<LengthLimitError>() => Err(HttpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            TRANSPORT_ERROR,
            format!("Payload Too Large: Request body must not exceed {MAX_BODY_BYTES} bytes"),
        )),
        Err(err) => Err(HttpError::new(
            StatusCode::BAD_REQUEST,
            PARSE_ERROR,
            format!("Parse error: could not read the request body: {err}"),
        )),
    }
}

// ---------------------------------------------------------------------------
// JSON-RPC messages
// ---------------------------------------------------------------------------

enum Message {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: Value,
        reply: ClientReply,
    },
}

impl Message {
    fn is_initialize(&self) -> bool {
        matches!(self, Message::Request { method, .. } if method == "initialize")
    }
}

/// Parses a POST body: one message or a batch array. Invalid JSON -> -32700,
/// valid JSON that is not JSON-RPC -> -32600 (both HTTP 400).
fn parse_body(body: &[u8]) -> Result<Vec<Message>, HttpError> {
    let value: Value = serde_json::from_slice(body).map_err(|err| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            PARSE_ERROR,
            format!("Parse error: {err}"),
        )
    })?;
    let items = match value {
        Value::Array(items) if items.is_empty() => {
            return Err(invalid_request("Invalid Request: empty batch"));
        }
        Value::Array(items) if items.len() > MAX_BATCH => {
            return Err(invalid_request(format!(
                "Invalid Request: Batch must not exceed {MAX_BATCH} messages"
            )));
        }
        Value::Array(items) => items,
        single => vec![single],
    };
    items
        .into_iter()
        .map(|item| {
            classify(item).map_err(|why| invalid_request(format!("Invalid Request: {why}")))
        })
        .collect()
}

fn invalid_request(message: impl Into<String>) -> HttpError {
    HttpError::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, message)
}

fn classify(value: Value) -> Result<Message, &'static str> {
    let Value::Object(mut object) = value else {
        return Err("a JSON-RPC message must be an object");
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("\"jsonrpc\" must be \"2.0\"");
    }
    let id = object.remove("id");
    if let Some(method) = object.remove("method") {
        let Value::String(method) = method else {
            return Err("\"method\" must be a string");
        };
        let params = match object.remove("params") {
            None => json!({}),
            Some(params @ Value::Object(_)) => params,
            Some(_) => return Err("\"params\" must be an object"),
        };
        return match id {
            None => Ok(Message::Notification { method, params }),
            Some(id) if is_request_id(&id) => Ok(Message::Request { id, method, params }),
            Some(_) => Err("a request \"id\" must be a string or an integer"),
        };
    }
    let Some(id) = id else {
        return Err("neither a request, a notification nor a response");
    };
    let reply = match (object.remove("result"), object.remove("error")) {
        (Some(result), None) => Ok(result),
        (None, Some(error @ Value::Object(_))) => Err(error),
        _ => return Err("a response needs exactly one of \"result\" or an \"error\" object"),
    };
    Ok(Message::Response { id, reply })
}

fn is_request_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// Key of the in-flight map: JSON text, so `1` and `"1"` stay distinct.
fn request_key(id: &Value) -> String {
    id.to_string()
}

/// How `/stats` spells a request id: strings verbatim, anything else as JSON.
fn id_label(id: &Value) -> String {
    match id {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// A JSON-RPC error a handler answers with.
struct RpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

fn invalid_params(message: impl Into<String>) -> RpcError {
    RpcError::new(INVALID_PARAMS, message)
}

fn internal_error(message: impl Into<String>) -> RpcError {
    RpcError::new(INTERNAL_ERROR, message)
}

/// The client answered a server->client request with a JSON-RPC error: the
/// tool fails with -32603 that quotes it (the original is kept in `data`).
fn client_error(method: &str, id: i64, error: Value) -> RpcError {
    let code = error
        .get("code")
        .map_or_else(|| "?".to_owned(), Value::to_string);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    internal_error(format!(
        "client answered {method} (id {id}) with JSON-RPC error {code}: {message}"
    ))
    .with_data(json!({"method": method, "clientError": error}))
}

/// How a request handler can end besides with a result.
enum Failure {
    Rpc(RpcError),
    /// Abort the stream without any response (the `drop_connection` tool).
    DropConnection,
}

impl From<RpcError> for Failure {
    fn from(error: RpcError) -> Self {
        Failure::Rpc(error)
    }
}

type Outcome = Result<Value, Failure>;

// ---------------------------------------------------------------------------
// POST /mcp
// ---------------------------------------------------------------------------

async fn handle_post(app: &Arc<App>, req: Request<Incoming>) -> HttpResult {
    let (parts, body) = req.into_parts();
    check_post_headers(&parts.headers)?;
    let messages = parse_body(&read_body(body).await?)?;
    if messages.iter().any(Message::is_initialize) {
        return initialize(app, &parts.headers, messages);
    }

    let session = app.session_for(&parts.headers)?;
    check_protocol_version(&parts.headers)?;

    let mut requests = Vec::new();
    for message in messages {
        match message {
            Message::Request { id, method, params } => requests.push((id, method, params)),
            Message::Notification { method, params } => {
                handle_notification(app, &session, &method, &params);
            }
            Message::Response { id, reply } => route_client_response(app, &session, &id, reply),
        }
    }
    if requests.is_empty() {
        return Ok(empty_response(StatusCode::ACCEPTED));
    }

    let (sink, body) = SseSink::open(&session);
    for (id, method, params) in requests {
        start_request(app, &sink, id, method, params);
    }
    Ok(sse_response(body, &session.id))
}

/// `initialize` without a session header creates a session; it must be the
/// only message of its POST (TS SDK rule).
fn initialize(app: &Arc<App>, headers: &HeaderMap, mut messages: Vec<Message>) -> HttpResult {
    if messages.len() > 1 {
        return Err(invalid_request(
            "Invalid Request: Only one initialization request is allowed",
        ));
    }
    if let Some(id) = session_header(headers)? {
        let known = lock(&app.sessions).contains_key(&id);
        return Err(if known {
            invalid_request("Invalid Request: Server already initialized")
        } else {
            session_not_found()
        });
    }
    let Some(Message::Request { id, params, .. }) = messages.pop() else {
        return Err(invalid_request(
            "Invalid Request: expected an initialize request",
        ));
    };
    let Some(requested) = params.get("protocolVersion").and_then(Value::as_str) else {
        let mut error = HttpError::new(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            "Invalid params: initialize needs params.protocolVersion (a string)",
        );
        error.id = id;
        return Err(error);
    };
    // Version negotiation: echo a supported version, else offer the latest.
    let version = if SUPPORTED_PROTOCOL_VERSIONS.contains(&requested) {
        requested
    } else {
        LATEST_PROTOCOL_VERSION
    };

    let capabilities = params
        .get("capabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let authorization = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let session = Arc::new(Session::new(capabilities, authorization));
    lock(&app.sessions).insert(session.id.clone(), session.clone());
    app.stats().initialize_count += 1;
    tracing::info!(session = %session.id, version, "session initialized");

    let result = json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}, "logging": {}, "prompts": {}, "resources": {}},
        "serverInfo": {"name": "plain-server", "version": "0.1.0"},
    });
    let (sink, body) = SseSink::open(&session);
    sink.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    Ok(sse_response(body, &session.id))
}

fn handle_notification(app: &App, session: &Session, method: &str, params: &Value) {
    // Other notifications (initialized, roots/list_changed, ...) need no action.
    if method != "notifications/cancelled" {
        return;
    }
    let request_id = params.get("requestId").cloned().unwrap_or(Value::Null);
    app.stats().cancelled_received.push(request_id.clone());
    let found = session.cancel_request(&request_key(&request_id));
    tracing::info!(session = %session.id, %request_id, found, "cancellation received");
}

/// Counts every client response (tests assert exactly-once delivery), then
/// wakes the tool waiting for it, if any.
fn route_client_response(app: &App, session: &Session, id: &Value, reply: ClientReply) {
    let key = format!("{}:{}", session.id, id_label(id));
    *app.stats().responses_received.entry(key).or_default() += 1;
    if !session.resolve_pending(id, reply) {
        tracing::warn!(session = %session.id, %id, "response for an unknown request id");
    }
}

// ---------------------------------------------------------------------------
// GET and DELETE /mcp, GET /stats
// ---------------------------------------------------------------------------

fn handle_get(app: &App, headers: &HeaderMap) -> HttpResult {
    if !header_text(headers, header::ACCEPT).contains("text/event-stream") {
        return Err(HttpError::new(
            StatusCode::NOT_ACCEPTABLE,
            TRANSPORT_ERROR,
            "Not Acceptable: Client must accept text/event-stream",
        ));
    }
    let session = app.session_for(headers)?;
    check_protocol_version(headers)?;

    // The slot holds the only sender: closing the session ends the stream.
    let (tx, body) = sse_channel();
    if !session.claim_standalone(tx) {
        return Err(HttpError::new(
            StatusCode::CONFLICT,
            TRANSPORT_ERROR,
            "Conflict: Only one SSE stream is allowed per session",
        ));
    }
    Ok(sse_response(body, &session.id))
}

fn handle_delete(app: &App, headers: &HeaderMap) -> HttpResult {
    let session = app.session_for(headers)?;
    check_protocol_version(headers)?;
    if let Some(session) = app.remove_session(&session.id) {
        session.close();
    }
    Ok(empty_response(StatusCode::OK))
}

fn stats_json(app: &App) -> Value {
    let sessions = lock(&app.sessions).len();
    let stats = app.stats();
    json!({
        "sessions": sessions,
        "initializeCount": stats.initialize_count,
        "responsesReceived": stats.responses_received,
        "cancelledReceived": stats.cancelled_received,
        "callsStarted": stats.calls_started,
        "callsInFlight": stats.calls_in_flight,
        "connectionsAccepted": stats.connections_accepted,
        "postsByVersion": stats.posts_by_version,
        "authorizationsSeen": stats.authorizations_seen,
    })
}

// ---------------------------------------------------------------------------
// Request handling
// ---------------------------------------------------------------------------

/// Everything a handler needs: where to write, and who asked.
struct RequestCtx {
    app: Arc<App>,
    sink: SseSink,
    progress_token: Option<Value>,
}

impl RequestCtx {
    fn session(&self) -> &Arc<Session> {
        &self.sink.session
    }

    fn progress(&self, progress: u64, total: u64, message: String) {
        if let Some(token) = &self.progress_token {
            self.sink.send(&notification(
                "notifications/progress",
                json!({"progressToken": token, "progress": progress, "total": total, "message": message}),
            ));
        }
    }

    /// A log message on the request's stream.
    fn log(&self, level: &str, data: &str) {
        self.sink.send(&notification(
            "notifications/message",
            json!({"level": level, "logger": "plain-server", "data": data}),
        ));
    }

    fn require_capability(&self, capability: &str, tool: &str) -> Result<(), RpcError> {
        if self.session().has_capability(capability) {
            return Ok(());
        }
        Err(invalid_params(format!(
            "Client does not support {capability}: the {tool} tool needs the client to \
             declare the '{capability}' capability at initialize"
        )))
    }

    /// Sends a server->client request on this call's stream and waits for the
    /// client's response (POSTed separately and routed here by id).
    async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let mut pending = self.session().register_pending();
        let id = pending.id;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if !self.sink.send(&message) {
            return Err(internal_error(format!(
                "cannot send {method}: the SSE stream of this call is closed"
            )));
        }
        let reply = match self.app.request_timeout {
            None => (&mut pending.reply).await,
            Some(limit) => match tokio::time::timeout(limit, &mut pending.reply).await {
                Ok(reply) => reply,
                Err(_) => return Err(self.timed_out(method, id, limit)),
            },
        };
        match reply {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(client_error(method, id, error)),
            Err(_) => Err(internal_error(format!(
                "session closed while waiting for the answer to {method}"
            ))),
        }
    }

    /// Like the TS SDK: tell the client to stop, then fail with -32001.
    fn timed_out(&self, method: &str, id: i64, limit: Duration) -> RpcError {
        self.sink.send(&notification(
            "notifications/cancelled",
            json!({"requestId": id, "reason": "Request timed out"}),
        ));
        RpcError::new(
            REQUEST_TIMEOUT,
            format!("Request timed out: no answer to {method} (id {id}) within {limit:?}"),
        )
    }

    /// Writes the handler's outcome; a cancelled request (`None`) gets no
    /// response, like the TS SDK, and its stream ends when the sink drops.
    fn deliver(&self, id: &Value, outcome: Option<Outcome>) {
        let message = match outcome {
            None => return,
            Some(Err(Failure::DropConnection)) => return self.sink.abort(),
            Some(Ok(result)) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Some(Err(Failure::Rpc(error))) => {
                json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
            }
        };
        self.sink.send(&message);
    }
}

fn start_request(app: &Arc<App>, sink: &SseSink, id: Value, method: String, params: Value) {
    let session = sink.session.clone();
    let key = request_key(&id);
    // Registered before the POST returns, so a quick cancel is never missed.
    let Some(cancelled) = session.begin_request(&key) else {
        let error = RpcError::new(
            INVALID_REQUEST,
            format!("Invalid Request: request id {key} is already in flight"),
        );
        sink.send(&json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()}));
        return;
    };
    let ctx = RequestCtx {
        app: app.clone(),
        sink: sink.clone(),
        progress_token: progress_token(&params),
    };
    tokio::spawn(async move {
        let outcome = tokio::select! {
            biased;
            () = cancelled.cancelled() => None,
            outcome = dispatch(&ctx, &method, &params) => Some(outcome),
        };
        session.end_request(&key);
        ctx.deliver(&id, outcome);
    });
}

fn progress_token(params: &Value) -> Option<Value> {
    params
        .pointer("/_meta/progressToken")
        .filter(|token| is_request_id(token))
        .cloned()
}

async fn dispatch(ctx: &RequestCtx, method: &str, params: &Value) -> Outcome {
    match method {
        "ping" | "logging/setLevel" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tool_definitions()})),
        "tools/call" => call_tool(ctx, params).await,
        "prompts/list" => Ok(json!({"prompts": [{
            "name": "greeting",
            "description": "Asks the user's name via elicitation/create, then writes a greeting prompt.",
        }]})),
        "prompts/get" => greeting_prompt(ctx, params).await,
        "resources/list" => Ok(json!({"resources": [{
            "uri": GREETING_URI,
            "name": "greeting",
            "description": "A greeting for the user, whose name it asks via elicitation/create.",
            "mimeType": "text/plain",
        }]})),
        "resources/read" => greeting_resource(ctx, params).await,
        _ => Err(RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method}")).into()),
    }
}

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

fn tool_definitions() -> Value {
    let no_args = json!({"type": "object", "properties": {}});
    json!([
        {
            "name": "echo",
            "description": "Echoes `text`; structuredContent.echo is the whole arguments object.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
            "outputSchema": {
                "type": "object",
                "properties": {"echo": {"type": "object"}},
                "required": ["echo"],
            },
        },
        {
            "name": "wait_then_ask",
            "description": "Waits `ms` milliseconds, then asks the client's name (elicitation) and greets it.",
            "inputSchema": {
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0}},
                "required": ["ms"],
            },
        },
        {
            "name": "slow_echo",
            "description": "Waits `ms` milliseconds without a word, then answers as echo does (a tool with an outputSchema that takes long).",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "ms": {"type": "integer", "minimum": 0}},
                "required": ["text", "ms"],
            },
            "outputSchema": {
                "type": "object",
                "properties": {"echo": {"type": "object"}},
                "required": ["echo"],
            },
        },
        {
            "name": "sleep",
            "description": "Sleeps `ms` milliseconds, sending `steps` (default 5) progress notifications; with `log: true` also a log message (info) per step and one (warning) at the end.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "ms": {"type": "integer", "minimum": 0},
                    "steps": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_STEPS},
                    "log": {"type": "boolean"},
                },
                "required": ["ms"],
            },
        },
        {
            "name": "lookup",
            "description": "Looks `key` up: takes `ms` milliseconds (progress as `sleep`), then answers `found <key>` (with ` for <Authorization>` when the session was opened with one). Read-only, so a gateway may run it again.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "ms": {"type": "integer", "minimum": 0},
                },
                "required": ["key", "ms"],
            },
            "annotations": {"readOnlyHint": true},
        },
        {
            "name": "ask_name",
            "description": "Asks the user's name via elicitation/create.",
            "inputSchema": no_args,
        },
        {
            "name": "ask_verbatim",
            "description": "Reports `status` as a progress message, then asks `message` via elicitation/create, word for word (for showing untrusted text).",
            "inputSchema": {
                "type": "object",
                "properties": {"status": {"type": "string"}, "message": {"type": "string"}},
                "required": ["status", "message"],
            },
        },
        {
            "name": "test_tool_with_task",
            "description": "Asks the user's name via elicitation/create, then takes `delay_ms` (default 2000) to greet them: the conformance suite's tasks-mrtr-composition fixture.",
            "inputSchema": {
                "type": "object",
                "properties": {"delay_ms": {"type": "integer", "minimum": 0}},
            },
        },
        {
            "name": "two_questions",
            "description": "Sends two elicitation/create requests at once and joins the answers.",
            "inputSchema": no_args,
        },
        {
            "name": "sample",
            "description": "Asks the client's model via sampling/createMessage.",
            "inputSchema": {
                "type": "object",
                "properties": {"prompt": {"type": "string"}},
            },
        },
        {
            "name": "list_roots",
            "description": "Returns the client's roots (roots/list) as JSON text.",
            "inputSchema": no_args,
        },
        {
            "name": "tool_error",
            "description": "Always returns a tool error result (isError: true).",
            "inputSchema": no_args,
        },
        {
            "name": "protocol_error",
            "description": "Always fails with a JSON-RPC error (-32603).",
            "inputSchema": no_args,
        },
        {
            "name": "drop_connection",
            "description": "Sends one event, then aborts the connection without a response.",
            "inputSchema": no_args,
        },
        // The official conformance suite's task fixtures.
        {
            "name": "greet",
            "description": "Conformance fixture: answers Hello, {name}! at once.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
        {
            "name": "slow_compute",
            "description": "Conformance fixture: sleeps `seconds`, then answers with `label`.",
            "inputSchema": {"type": "object", "properties": {
                "seconds": {"type": "number", "minimum": 0}, "label": {"type": "string"}}},
        },
        {
            "name": "confirm_delete",
            "description": "Conformance fixture: asks to confirm deleting `filename` (elicitation), then answers.",
            "inputSchema": {"type": "object", "properties": {"filename": {"type": "string"}}},
        },
        {
            "name": "failing_job",
            "description": "Conformance fixture: a tool execution error (isError: true).",
            "inputSchema": no_args,
        },
        {
            "name": "protocol_error_job",
            "description": "Conformance fixture: a JSON-RPC error after about a second.",
            "inputSchema": no_args,
        },
        {
            "name": "multi_input",
            "description": "Conformance fixture: asks two questions at once (name, confirm), then answers.",
            "inputSchema": no_args,
        },
    ])
}

async fn call_tool(ctx: &RequestCtx, params: &Value) -> Outcome {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params("tools/call needs params.name (a string)"))?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(args @ Value::Object(_)) => args.clone(),
        Some(_) => return Err(invalid_params("params.arguments must be an object").into()),
    };
    let _counted = ctx.app.call_started();
    match name {
        "echo" => echo(&args),
        "wait_then_ask" => {
            let ms = args.get("ms").and_then(Value::as_u64).ok_or_else(|| {
                invalid_params("wait_then_ask needs arguments.ms (a non-negative integer)")
            })?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ask_name(ctx).await
        }
        "slow_echo" => {
            let ms = args.get("ms").and_then(Value::as_u64).ok_or_else(|| {
                invalid_params("slow_echo needs arguments.ms (a non-negative integer)")
            })?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            echo(&args)
        }
        "sleep" => sleep(ctx, &args).await,
        "lookup" => lookup(ctx, &args).await,
        "ask_name" => ask_name(ctx).await,
        "ask_verbatim" => ask_verbatim(ctx, &args).await,
        "test_tool_with_task" => slow_greeting(ctx, &args).await,
        "two_questions" => two_questions(ctx).await,
        "sample" => sample(ctx, &args).await,
        "list_roots" => list_roots(ctx).await,
        "tool_error" => Ok(json!({
            "content": [{"type": "text", "text": "this tool always fails"}],
            "isError": true,
        })),
        "protocol_error" => Err(RpcError::new(
            INTERNAL_ERROR,
            "protocol_error tool: deliberate JSON-RPC error",
        )
        .with_data(json!({"tool": "protocol_error"}))
        .into()),
        "drop_connection" => drop_connection(ctx).await,
        "greet" | "slow_compute" | "confirm_delete" | "failing_job" | "protocol_error_job"
        | "multi_input" => conformance_tool(ctx, name, &args).await,
        other => Err(invalid_params(format!("Tool {other} not found")).into()),
    }
}

fn text_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}

fn echo(args: &Value) -> Outcome {
    let text = args
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params("echo needs arguments.text (a string)"))?;
    let mut result = text_result(text);
    result["structuredContent"] = json!({"echo": args});
    Ok(result)
}

async fn lookup(ctx: &RequestCtx, args: &Value) -> Outcome {
    let key = args
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params("lookup needs arguments.key (a string)"))?;
    sleep(ctx, args).await?;
    Ok(text_result(match &ctx.session().authorization {
        Some(authorization) => format!("found {key} for {authorization}"),
        None => format!("found {key}"),
    }))
}

async fn sleep(ctx: &RequestCtx, args: &Value) -> Outcome {
    let ms = args
        .get("ms")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid_params("sleep needs arguments.ms (a non-negative integer)"))?;
    let steps = match args.get("steps") {
        None | Some(Value::Null) => 5,
        Some(steps) => steps
            .as_u64()
            .filter(|steps| *steps <= MAX_SLEEP_STEPS)
            .ok_or_else(|| {
                invalid_params(format!(
                    "arguments.steps must be an integer in 0..={MAX_SLEEP_STEPS}"
                ))
            })?,
    };
    let total = Duration::from_millis(ms);
    if steps == 0 {
        tokio::time::sleep(total).await;
    }
    let log = args.get("log").and_then(Value::as_bool).unwrap_or(false);
    // Progress is reported after each slice, so the last one means "done".
    for step in 1..=steps {
        tokio::time::sleep(total / steps as u32).await;
        ctx.progress(step, steps, format!("step {step} of {steps}"));
        if log {
            ctx.log("info", &format!("slept step {step} of {steps}"));
        }
    }
    if log {
        ctx.log("warning", "woke up");
    }
    Ok(text_result(format!("slept {ms} ms")))
}

/// The `action` of an elicitation result (accept, decline or cancel).
fn elicitation_action(result: &Value) -> Result<&str, RpcError> {
    result
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| internal_error("elicitation/create result has no string \"action\""))
}

fn form_request(message: &str, field: &str) -> Value {
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {field: {"type": "string"}},
            "required": [field],
        },
    })
}

/// Asks one question; returns the action and, on accept, the answer.
async fn elicit(
    ctx: &RequestCtx,
    message: &str,
    field: &str,
) -> Result<(String, Option<String>), RpcError> {
    let result = ctx
        .request("elicitation/create", form_request(message, field))
        .await?;
    let action = elicitation_action(&result)?.to_owned();
    if action != "accept" {
        return Ok((action, None));
    }
    let answer = result
        .pointer(&format!("/content/{field}"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            internal_error(format!(
                "accepted elicitation has no string content.{field}"
            ))
        })?;
    Ok((action, Some(answer.to_owned())))
}

const GREETING_URI: &str = "greeting://me";

/// The name the user gives, or a placeholder when they do not.
async fn asked_name(ctx: &RequestCtx, what: &str) -> Result<String, Failure> {
    ctx.require_capability("elicitation", what)?;
    Ok(match elicit(ctx, "What is your name?", "name").await? {
        (_, Some(name)) => name,
        (action, None) => format!("nobody ({action})"),
    })
}

/// `prompts/get` of `greeting`: asks the name, then writes the prompt.
async fn greeting_prompt(ctx: &RequestCtx, params: &Value) -> Outcome {
    if params.get("name").and_then(Value::as_str) != Some("greeting") {
        return Err(invalid_params("unknown prompt: this server has only \"greeting\"").into());
    }
    let name = asked_name(ctx, "the greeting prompt").await?;
    Ok(json!({"messages": [{
        "role": "user",
        "content": {"type": "text", "text": format!("Write a greeting for {name}.")},
    }]}))
}

/// `resources/read` of `greeting://me`: asks the name, then reads the greeting.
async fn greeting_resource(ctx: &RequestCtx, params: &Value) -> Outcome {
    if params.get("uri").and_then(Value::as_str) != Some(GREETING_URI) {
        return Err(invalid_params(format!(
            "unknown resource: this server has only {GREETING_URI}"
        ))
        .into());
    }
    let name = asked_name(ctx, "the greeting resource").await?;
    Ok(json!({"contents": [{
        "uri": GREETING_URI,
        "mimeType": "text/plain",
        "text": format!("Hello, {name}!"),
    }]}))
}

async fn ask_name(ctx: &RequestCtx) -> Outcome {
    ctx.require_capability("elicitation", "ask_name")?;
    let text = match elicit(ctx, "What is your name?", "name").await? {
        (_, Some(name)) => format!("Hello, {name}!"),
        (action, None) => format!("No name given ({action})"),
    };
    Ok(text_result(text))
}

async fn ask_verbatim(ctx: &RequestCtx, args: &Value) -> Outcome {
    ctx.require_capability("elicitation", "ask_verbatim")?;
    let text = |key: &str| {
        args.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params(format!("ask_verbatim needs arguments.{key} (a string)")))
    };
    let (status, message) = (text("status")?, text("message")?);
    ctx.progress(1, 2, status.to_owned());
    let answer = match elicit(ctx, message, "name").await? {
        (_, Some(name)) => format!("Hello, {name}!"),
        (action, None) => format!("No answer ({action})"),
    };
    Ok(text_result(answer))
}

/// The official conformance suite's fixtures (`@modelcontextprotocol/conformance`, task
/// scenarios): their names, arguments and behaviour are the suite's.
async fn conformance_tool(ctx: &RequestCtx, name: &str, args: &Value) -> Outcome {
    match name {
        "greet" => {
            let who = args.get("name").and_then(Value::as_str).unwrap_or("world");
            Ok(text_result(format!("Hello, {who}!")))
        }
        "slow_compute" => {
            let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0);
            tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 3600.0))).await;
            let label = args.get("label").and_then(Value::as_str).unwrap_or("done");
            Ok(text_result(format!("computed {label}")))
        }
        "confirm_delete" => {
            ctx.require_capability("elicitation", name)?;
            let file = args.get("filename").and_then(Value::as_str).unwrap_or("?");
            let answer = ask_any(ctx, &format!("Delete {file}?"), "confirm", "boolean").await?;
            let confirmed = answer.get("confirm").and_then(Value::as_bool) == Some(true);
            Ok(text_result(if confirmed {
                format!("deleted {file}")
            } else {
                format!("kept {file}")
            }))
        }
        "failing_job" => Ok(json!({
            "content": [{"type": "text", "text": "failing_job always fails"}],
            "isError": true,
        })),
        "protocol_error_job" => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(RpcError::new(
                INTERNAL_ERROR,
                "protocol_error_job: deliberate JSON-RPC error",
            )
            .into())
        }
        _ => {
            ctx.require_capability("elicitation", name)?;
            let (who, sure) = future::try_join(
                ask_any(ctx, "Your name?", "name", "string"),
                ask_any(ctx, "Are you sure?", "confirm", "boolean"),
            )
            .await?;
            Ok(text_result(format!(
                "{} ({})",
                who.get("name").and_then(Value::as_str).unwrap_or("nobody"),
                sure.get("confirm")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            )))
        }
    }
}

/// Asks one question whose answer `field` has JSON type `kind`; the accepted content
/// (empty when declined or cancelled).
async fn ask_any(
    ctx: &RequestCtx,
    message: &str,
    field: &str,
    kind: &str,
) -> Result<Value, RpcError> {
    let params = json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": kind}}, "required": [field]},
    });
    let result = ctx.request("elicitation/create", params).await?;
    Ok(match elicitation_action(&result)? {
        "accept" => result.get("content").cloned().unwrap_or_else(|| json!({})),
        _ => json!({}),
    })
}

/// `ask_name`, slowly: the answer comes `delay_ms` after the name.
async fn slow_greeting(ctx: &RequestCtx, args: &Value) -> Outcome {
    let delay = args.get("delay_ms").and_then(Value::as_u64).unwrap_or(2000);
    let greeting = ask_name(ctx).await?;
    tokio::time::sleep(Duration::from_millis(delay)).await;
    Ok(greeting)
}

async fn two_questions(ctx: &RequestCtx) -> Outcome {
    ctx.require_capability("elicitation", "two_questions")?;
    // try_join polls both before either waits, so both requests are in flight at once.
    let (first, second) = future::try_join(
        elicit(ctx, "First?", "answer"),
        elicit(ctx, "Second?", "answer"),
    )
    .await?;
    // A declined or cancelled question reads as "(decline)" / "(cancel)".
    let answer = |(action, answer): (String, Option<String>)| {
        answer.unwrap_or_else(|| format!("({action})"))
    };
    Ok(text_result(format!(
        "{} and {}",
        answer(first),
        answer(second)
    )))
}

async fn sample(ctx: &RequestCtx, args: &Value) -> Outcome {
    ctx.require_capability("sampling", "sample")?;
    let prompt = args
        .get("prompt")
        .and_then(Value::as_str)
        .unwrap_or("Say hi");
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": 100,
    });
    let result = ctx.request("sampling/createMessage", params).await?;
    Ok(text_result(format!(
        "model said: {}",
        sampled_text(&result)
    )))
}

/// `content` may be one block or (2025-11-25) an array; prefer the first text.
fn sampled_text(result: &Value) -> String {
    let content = result.get("content").unwrap_or(&Value::Null);
    let blocks = match content {
        Value::Array(blocks) => blocks.iter().collect(),
        block => vec![block],
    };
    blocks
        .iter()
        .find_map(|block| block.get("text").and_then(Value::as_str))
        .map_or_else(|| content.to_string(), str::to_owned)
}

async fn list_roots(ctx: &RequestCtx) -> Outcome {
    ctx.require_capability("roots", "list_roots")?;
    let result = ctx.request("roots/list", json!({})).await?;
    let roots = result
        .get("roots")
        .filter(|roots| roots.is_array())
        .ok_or_else(|| internal_error("roots/list result has no \"roots\" array"))?;
    Ok(text_result(roots.to_string()))
}

async fn drop_connection(ctx: &RequestCtx) -> Outcome {
    let message = "about to drop the connection";
    match &ctx.progress_token {
        Some(_) => ctx.progress(1, 2, message.to_owned()),
        None => {
            ctx.sink.send(&notification(
                "notifications/message",
                json!({"level": "info", "logger": "plain-server", "data": message}),
            ));
        }
    }
    // Let hyper flush that event before the abort tears the connection down.
    tokio::time::sleep(Duration::from_millis(100)).await;
    Err(Failure::DropConnection)
}
