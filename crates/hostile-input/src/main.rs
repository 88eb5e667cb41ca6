//! The hostile-input campaign (issue #20): the gateway in front of the 2025-11-25 fixture
//! (`plain_server` of `crates/fixture-servers`) on loopback gets `--requests` malformed
//! or mutated requests from `--concurrency` connections, and every answer is checked.
//!
//! What it sends, by class (weights per 10,000 in `CLASSES`):
//! - over an HTTP/1.1 client (hyper): random bytes; 2026-07-28 requests (`_meta`,
//!   `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) with bytes flipped, inserted,
//!   deleted, duplicated or cut off, or with members retyped or removed; the same with
//!   wrong, missing, duplicate, invalid-UTF-8, oversized or too many headers; bad
//!   `Content-Type`; wrong methods and paths; mutated 2025-11-25 `initialize`; arbitrary
//!   task ids; deep nesting; huge strings; bodies over `--max-body-bytes`; dribbled bodies;
//! - over raw TCP: garbage bytes, broken HTTP/1.1 framing, requests cut off by a
//!   half-close (or an abort), and heads dribbled byte by byte.
//!
//! Every answer must be a well-formed HTTP response (the raw cases may also see the
//! connection closed without one); a JSON body must be a JSON-RPC response (an error
//! for 4xx), an SSE body a stream of JSON-RPC messages. Some classes expect more (random
//! bytes: 400 with -32700 or -32600; oversized: 413; unknown task ids: -32602). The
//! gateway's RSS is read after a warm-up, at its peak (`VmHWM`) and after a quiet period;
//! it must still run and its log must hold no panic. Exit status 1 if any check failed.
//!
//! Every request is a function of `--seed` and its index: `--replay N` sends request N
//! alone and prints it and the answer. `--spray N` then measures what N bridged calls
//! with an `Authorization` each leave behind (docs/security.md, "Findings").
//!
//! ```text
//! cargo run --release -p hostile-input -- --requests 1000000
//! ```
//!
//! The gateway binary and the fixture are built with cargo in this program's profile
//! (release above); the gateway's log and the failing requests go to
//! `target/tmp/hostile_input/`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use mcp_task_gateway::protocol::headers::encode_value;
use serde_json::{Value, json};
use test_support::{Proc, spawn_announcing};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MODERN: &str = "2026-07-28";
const SESSION: &str = "2025-11-25";
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// Longest wait for one answer; an answer later than this is a failure.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// Failures kept with their request for the report (all are counted).
const KEPT_FAILURES: usize = 20;

#[derive(Parser, Debug)]
#[command(
    name = "hostile-input",
    about = "Malformed and mutated requests against the gateway"
)]
struct Args {
    /// Requests to send after the warm-up.
    #[arg(long, default_value_t = 1_000_000)]
    requests: u64,
    /// Connections sending at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Requests before the RSS baseline is read (drawn like the others, not counted).
    #[arg(long, default_value_t = 20_000)]
    warmup: u64,
    /// Seed of every request's bytes.
    #[arg(long, default_value_t = 20)]
    seed: u64,
    /// Seconds without traffic before the final RSS is read.
    #[arg(long, default_value_t = 30)]
    quiet_secs: u64,
    /// The gateway's --max-body-bytes (the oversized class sends more).
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    max_body_bytes: usize,
    /// How far above its baseline the RSS may end, in MiB.
    #[arg(long, default_value_t = 32)]
    rss_slack_mib: u64,
    /// Send only request N of the campaign, print it and the answer.
    #[arg(long)]
    replay: Option<u64>,
    /// After the campaign, this many bridged `tools/list` calls, each with an
    /// `Authorization` of its own (0: none): each opens an upstream session, and the
    /// probe shows whether the gateway ever lets them go.
    #[arg(long, default_value_t = 0)]
    spray: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("hostile-input: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<bool, String> {
    let gateway_bin = gateway_binary()?;
    let (mut upstream, upstream_url) =
        test_support::bench::fixture_server(&gateway_bin, "plain_server");
    let log = log_path()?;
    let (mut gateway, url) = start_gateway(&gateway_bin, &upstream_url, &args, &log)?;
    let addr = socket_addr(&url)?;
    let context = Arc::new(Context::new(addr, args.seed, args.max_body_bytes));
    if let Some(index) = args.replay {
        replay(context, index).await;
        return Ok(true);
    }
    eprintln!(
        "gateway {url} (pid {}), log {}",
        gateway.pid(),
        log.display()
    );

    let warm_started = Instant::now();
    let warmup = campaign(&context, WARMUP_BASE, args.warmup, args.concurrency, None).await;
    eprintln!(
        "warm-up: {} requests in {:.1} s",
        args.warmup,
        warm_started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = gateway.pid();
    let baseline = Memory::read(pid)?;

    let started = Instant::now();
    let progress = Progress::start(pid, args.requests);
    let tally = campaign(
        &context,
        0,
        args.requests,
        args.concurrency,
        Some(progress.sent.clone()),
    )
    .await;
    let duration = started.elapsed();
    let sampled_peak = progress.stop().await;
    eprintln!(
        "campaign done in {:.1} s; quiet for {} s",
        duration.as_secs_f64(),
        args.quiet_secs
    );
    tokio::time::sleep(Duration::from_secs(args.quiet_secs)).await;

    let processes = (&mut gateway, &mut upstream);
    let checks = final_checks(processes, addr, baseline, sampled_peak, &args, log).await?;
    let spray = if args.spray > 0 {
        Some(spray(&context, pid, args.spray, args.concurrency, args.quiet_secs).await?)
    } else {
        None
    };
    let report = Report {
        args: &args,
        warmup: &warmup,
        tally: &tally,
        duration,
        checks: &checks,
        spray: spray.as_ref(),
    };
    println!("{}", report.markdown());
    save_failures(&tally)?;
    gateway.kill();
    upstream.kill();
    let spray_passed = spray.as_ref().is_none_or(Spray::passed);
    Ok(tally.failures == 0 && warmup.failures == 0 && checks.passed() && spray_passed)
}

/// The state the campaign left the gateway in: memory against the baseline, both
/// processes alive, `/healthz`, and panics in the log.
async fn final_checks(
    (gateway, upstream): (&mut Proc, &mut Proc),
    addr: SocketAddr,
    baseline: Memory,
    sampled_peak: Peak,
    args: &Args,
    log: PathBuf,
) -> Result<Checks, String> {
    let end = Memory::read(gateway.pid()).ok();
    let log_text = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    Ok(Checks {
        baseline,
        end,
        sampled_peak,
        slack_kib: args.rss_slack_mib * 1024,
        gateway_alive: matches!(gateway.child.try_wait(), Ok(None)),
        upstream_alive: matches!(upstream.child.try_wait(), Ok(None)),
        health: health(addr).await,
        panics: log_text.matches("panicked").count(),
        log_lines: log_text.lines().count(),
        log,
    })
}

/// Warm-up requests are drawn from their own part of the index space.
const WARMUP_BASE: u64 = 1 << 62;

/// The gateway binary, built by cargo in this program's profile directory
/// (`target/<profile>`, where cargo put this program).
fn gateway_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let profile_dir = exe.parent().ok_or("own path has no directory")?;
    Ok(test_support::build::cargo_build(
        profile_dir,
        "mcp-task-gateway",
        "mcp-task-gateway",
    ))
}

/// `target/tmp/hostile_input/gateway.log`: cargo's scratch directory for tests and
/// benches (`CARGO_TARGET_TMPDIR`), where the campaign wrote when it was a bench.
fn log_path() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("own path is not target/<profile>/hostile-input")?;
    let dir = target.join("tmp").join("hostile_input");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir.join("gateway.log"))
}

/// The gateway with its stderr in `log`, so a panic anywhere in it is found afterwards.
/// Tasks live 5 s: the few mutations that stay valid calls must not look like a leak.
fn start_gateway(
    binary: &Path,
    upstream: &str,
    args: &Args,
    log: &Path,
) -> Result<(Proc, String), String> {
    let file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut command = Command::new(binary);
    command
        .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
        .args(["--drain-timeout-ms", "0", "--default-ttl-ms", "5000"])
        .args(["--max-body-bytes", &args.max_body_bytes.to_string()])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::from(file));
    Ok(spawn_announcing(
        "mcp-task-gateway",
        command,
        Duration::from_secs(30),
    ))
}

fn socket_addr(url: &str) -> Result<SocketAddr, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let authority = uri
        .authority()
        .ok_or_else(|| format!("{url}: no authority"))?;
    authority
        .as_str()
        .parse()
        .map_err(|e| format!("{url}: {e}"))
}

// ---------------------------------------------------------------------------------------
// Running the requests.

/// Sends requests `base..base + count` from `concurrency` workers; their tallies merged.
async fn campaign(
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

struct Worker {
    context: Arc<Context>,
    connection: Option<SendRequest<ReqBody>>,
    /// The last request the kept connection answered, named in a failure on it: the two
    /// together reproduce a connection that ended between requests.
    previous: Option<String>,
    tally: Tally,
}

impl Worker {
    fn new(context: Arc<Context>) -> Self {
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
    async fn send_http(&mut self, http: &HttpCase) -> Outcome {
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

type ReqBody = UnsyncBoxBody<Bytes, Infallible>;
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

async fn connect(addr: SocketAddr) -> std::io::Result<SendRequest<ReqBody>> {
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
async fn send_raw(addr: SocketAddr, raw: &RawCase) -> Outcome {
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

// ---------------------------------------------------------------------------------------
// Parsing raw HTTP/1.1 responses.

/// Every response in `bytes`, which must hold whole responses and nothing else.
fn parse_responses(mut bytes: &[u8], head_request: bool) -> Result<Vec<Answer>, String> {
    let mut answers = Vec::new();
    while !bytes.is_empty() {
        let (answer, rest) = parse_response(bytes, head_request)?;
        answers.push(answer);
        bytes = rest;
    }
    Ok(answers)
}

fn parse_response(bytes: &[u8], head_request: bool) -> Result<(Answer, &[u8]), String> {
    let end = find(bytes, b"\r\n\r\n").ok_or("no end of the response head")?;
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| "a head that is not text")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = parse_status_line(status_line)?;
    let mut content_type = None;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("header line without a colon: {line:?}"))?;
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(format!("bad header name {name:?}"));
        }
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-type" => content_type = Some(value.to_owned()),
            "content-length" => {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| format!("bad content-length {value:?}"))?,
                );
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let rest = &bytes[end + 4..];
    let bodiless = head_request || status < 200 || status == 204 || status == 304;
    let (body, rest) = if bodiless {
        (Vec::new(), rest)
    } else if chunked {
        dechunk(rest)?
    } else if let Some(length) = length {
        if rest.len() < length {
            return Err(format!("body of {} bytes, {length} announced", rest.len()));
        }
        (rest[..length].to_vec(), &rest[length..])
    } else {
        (rest.to_vec(), &rest[rest.len()..])
    };
    let answer = Answer {
        status,
        content_type,
        body: Bytes::from(body),
    };
    Ok((answer, rest))
}

fn parse_status_line(line: &str) -> Result<u16, String> {
    let rest = line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))
        .ok_or_else(|| format!("bad status line {line:?}"))?;
    let code = rest.get(..3).ok_or("short status line")?;
    let valid = code.bytes().all(|b| b.is_ascii_digit())
        && matches!(rest.as_bytes().get(3), None | Some(b' '));
    if !valid {
        return Err(format!("bad status line {line:?}"));
    }
    code.parse().map_err(|_| format!("bad status {code:?}"))
}

fn dechunk(mut bytes: &[u8]) -> Result<(Vec<u8>, &[u8]), String> {
    let mut body = Vec::new();
    loop {
        let line_end = find(bytes, b"\r\n").ok_or("chunk size line not ended")?;
        let size_text =
            std::str::from_utf8(&bytes[..line_end]).map_err(|_| "chunk size not text")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            // No trailers from the gateway: the empty line ends the body.
            let after = bytes
                .strip_prefix(b"\r\n")
                .ok_or("chunked body not ended")?;
            return Ok((body, after));
        }
        if bytes.len() < size + 2 || &bytes[size..size + 2] != b"\r\n" {
            return Err("chunk shorter than its size".into());
        }
        body.extend_from_slice(&bytes[..size]);
        bytes = &bytes[size + 2..];
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

// ---------------------------------------------------------------------------------------
// What came back, and whether it is acceptable.

struct Answer {
    status: u16,
    content_type: Option<String>,
    body: Bytes,
}

enum Outcome {
    Responses(Vec<Answer>),
    /// The connection ended without a byte of response (reset or closed).
    Closed(String),
    /// A response started but its body did not arrive whole.
    BrokenBody(String),
    /// Bytes that are not HTTP/1.1 responses, and the bytes.
    Malformed(String, Vec<u8>),
    H2Frames,
    /// The client dropped the connection on purpose; nothing to read.
    Aborted,
    TimedOut,
    ClientError(String),
}

/// What the checks made of one outcome: the JSON-RPC codes seen, or why it failed.
struct Verdict {
    rpc: Vec<String>,
    failure: Option<String>,
}

fn judge(case: &Case, outcome: &Outcome) -> Verdict {
    let mut rpc = Vec::new();
    let failure = match outcome {
        Outcome::Responses(answers) => answers
            .iter()
            .find_map(|answer| check_answer(case, answer, &mut rpc).err()),
        Outcome::Closed(why) if !case.may_close => {
            Some(format!("closed without a response: {why}"))
        }
        Outcome::Closed(_) | Outcome::Aborted | Outcome::H2Frames => None,
        Outcome::BrokenBody(why) => Some(format!("response body broken: {why}")),
        Outcome::Malformed(why, _) => Some(format!("malformed HTTP response: {why}")),
        Outcome::TimedOut => Some(format!("no answer within {ANSWER_TIMEOUT:?}")),
        Outcome::ClientError(why) => Some(format!("client error: {why}")),
    };
    Verdict { rpc, failure }
}

fn check_answer(case: &Case, answer: &Answer, rpc: &mut Vec<String>) -> Result<(), String> {
    if case.is_head() {
        // No body, whatever the headers say.
        return case.expect.check(answer.status, &[]);
    }
    let media = answer
        .content_type
        .as_deref()
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    let status = answer.status;
    let codes = match media.as_deref() {
        Some("application/json") if case.path_is_mcp() => {
            let value: Value = serde_json::from_slice(&answer.body)
                .map_err(|e| format!("{status} with a JSON body that does not parse: {e}"))?;
            let code = check_rpc_response(&value)?;
            if status >= 400 && code.is_none() {
                return Err(format!("{status} with a JSON-RPC result"));
            }
            vec![code]
        }
        Some("text/event-stream") => check_sse(&answer.body)?,
        _ => Vec::new(),
    };
    for code in &codes {
        rpc.push(code.map_or_else(|| "result".to_owned(), |c| c.to_string()));
    }
    case.expect.check(status, &codes)
}

/// A JSON-RPC response: `Some(code)` for an error, `None` for a result.
fn check_rpc_response(value: &Value) -> Result<Option<i64>, String> {
    let object = value
        .as_object()
        .ok_or("a JSON body that is not an object")?;
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(format!("no \"jsonrpc\": \"2.0\" in {}", clip(value)));
    }
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "jsonrpc" | "id" | "result" | "error"))
    {
        return Err(format!("member {extra:?} in a response: {}", clip(value)));
    }
    let id = object.get("id").ok_or("a response without \"id\"")?;
    if !(id.is_string() || id.is_i64() || id.is_u64() || id.is_null()) {
        return Err(format!("bad response id {id}"));
    }
    match (object.get("result"), object.get("error")) {
        (Some(_), None) if !id.is_null() => Ok(None),
        (None, Some(error)) => check_error_object(error).map(Some),
        _ => Err(format!(
            "not exactly one of result and error: {}",
            clip(value)
        )),
    }
}

fn check_error_object(error: &Value) -> Result<i64, String> {
    let object = error.as_object().ok_or("\"error\" is not an object")?;
    let code = object
        .get("code")
        .and_then(Value::as_i64)
        .ok_or_else(|| format!("error without an integer code: {}", clip(error)))?;
    if !object.get("message").is_some_and(Value::is_string) {
        return Err(format!("error without a message: {}", clip(error)));
    }
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "code" | "message" | "data"))
    {
        return Err(format!("member {extra:?} in an error object"));
    }
    Ok(code)
}

/// An SSE body: each event's data a JSON-RPC message; the responses' codes.
fn check_sse(body: &[u8]) -> Result<Vec<Option<i64>>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "an SSE body that is not UTF-8")?;
    let mut codes = Vec::new();
    for event in text.replace("\r\n", "\n").split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&data.join("\n"))
            .map_err(|e| format!("SSE data that is not JSON: {e}"))?;
        if value.get("method").is_some() {
            if value.get("jsonrpc") != Some(&json!("2.0")) {
                return Err(format!("SSE message without jsonrpc: {}", clip(&value)));
            }
        } else {
            codes.push(check_rpc_response(&value)?);
        }
    }
    if codes.is_empty() {
        return Err("an SSE stream that ended without a response".into());
    }
    Ok(codes)
}

fn clip(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// What a class promises beyond well-formedness.
#[derive(Clone, Copy)]
enum Expect {
    Anything,
    /// Not JSON-RPC at all (random bytes, nesting past the limit): 400 and one of these.
    ParseOrInvalid,
    /// A body over the limit.
    TooLarge,
    /// A task id no task has, with matching headers.
    NoSuchTask,
    /// Some 4xx: the request is refused.
    Refused,
}

impl Expect {
    fn check(self, status: u16, codes: &[Option<i64>]) -> Result<(), String> {
        let ok = match self {
            Expect::Anything => true,
            Expect::ParseOrInvalid => status == 400 && matches!(codes, [Some(-32700 | -32600)]),
            Expect::TooLarge => status == 413,
            Expect::NoSuchTask => status == 200 && matches!(codes, [Some(-32602)]),
            Expect::Refused => (400..500).contains(&status),
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "expected {}, got HTTP {status} with {codes:?}",
                self.describe()
            ))
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Expect::Anything => "anything well-formed",
            Expect::ParseOrInvalid => "400 with -32700 or -32600",
            Expect::TooLarge => "413",
            Expect::NoSuchTask => "200 with -32602",
            Expect::Refused => "a 4xx",
        }
    }
}

// ---------------------------------------------------------------------------------------
// Generating requests.

/// splitmix64: every request is a pure function of the seed and its index.
struct Rng(u64);

impl Rng {
    fn for_case(seed: u64, index: u64) -> Self {
        let mut rng = Rng(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        rng.next_u64();
        rng
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Sizes spread evenly over orders of magnitude.
    fn log_size(&mut self, low: usize, high: usize) -> usize {
        let (low, high) = ((low.max(1)) as f64, high as f64);
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (low * (high / low).powf(unit)) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// Text with what trips parsers: quotes, escapes, controls, non-ASCII, lone `%`.
    fn text(&mut self, n: usize) -> String {
        const PIECES: &[&str] = &[
            "a",
            "Z",
            "0",
            " ",
            "\"",
            "\\",
            "/",
            "\t",
            "\n",
            "\u{0}",
            "\u{7f}",
            "é",
            "世",
            "🦀",
            "\u{feff}",
            "\u{202e}",
            "%",
            "%00",
            "=?base64?",
            "?=",
            "{",
            "]",
            ",",
        ];
        (0..n).map(|_| *self.pick(PIECES)).collect()
    }
}

/// What every generated request needs to know.
struct Context {
    addr: SocketAddr,
    seed: u64,
    max_body_bytes: usize,
    /// Bytes to slice oversized bodies from, made once.
    filler: Bytes,
}

impl Context {
    fn new(addr: SocketAddr, seed: u64, max_body_bytes: usize) -> Self {
        Self {
            addr,
            seed,
            max_body_bytes,
            filler: Bytes::from(vec![b'x'; max_body_bytes + 128 * 1024]),
        }
    }

    fn host(&self) -> String {
        self.addr.to_string()
    }
}

/// One request: its class, its bytes, and what its answer must be.
struct Case {
    class: &'static str,
    wire: Wire,
    expect: Expect,
    /// The connection may end without a response (broken framing, cut-off requests,
    /// bodies the gateway stops reading).
    may_close: bool,
}

impl Case {
    fn http(class: &'static str, http: HttpCase) -> Self {
        Self {
            class,
            wire: Wire::Http(http),
            expect: Expect::Anything,
            may_close: false,
        }
    }

    fn raw(class: &'static str, raw: RawCase) -> Self {
        Self {
            class,
            wire: Wire::Raw(raw),
            expect: Expect::Anything,
            may_close: true,
        }
    }

    fn expecting(mut self, expect: Expect) -> Self {
        self.expect = expect;
        self
    }

    fn is_head(&self) -> bool {
        match &self.wire {
            Wire::Http(http) => http.method == Method::HEAD,
            Wire::Raw(raw) => raw.head_request,
        }
    }

    /// JSON answers elsewhere (`/readyz`) are not JSON-RPC.
    fn path_is_mcp(&self) -> bool {
        match &self.wire {
            Wire::Http(http) => http.path.starts_with("/mcp"),
            Wire::Raw(_) => true,
        }
    }

    /// The bytes as they go on the wire (an HTTP case as HTTP/1.1 text), to reproduce it.
    fn render(&self) -> Vec<u8> {
        match &self.wire {
            Wire::Raw(raw) => raw.bytes.clone(),
            Wire::Http(http) => http.render(),
        }
    }
}

enum Wire {
    Http(HttpCase),
    Raw(RawCase),
}

struct HttpCase {
    method: Method,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    /// Send the body in pieces of this size with this pause between them.
    dribble: Option<(usize, Duration)>,
    /// Send the body with chunked encoding instead of a Content-Length.
    chunked: bool,
}

impl HttpCase {
    fn post(context: &Context, body: Vec<u8>) -> Self {
        let mut case = Self {
            method: Method::POST,
            path: "/mcp".into(),
            headers: Vec::new(),
            body: Bytes::from(body),
            dribble: None,
            chunked: false,
        };
        case.header("host", context.host().as_bytes());
        case.header("content-type", b"application/json");
        case.header("accept", b"application/json, text/event-stream");
        case
    }

    fn header(&mut self, name: &str, value: &[u8]) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            self.headers.push((name, value));
        }
    }

    fn remove(&mut self, name: &str) {
        self.headers.retain(|(n, _)| n.as_str() != name);
    }

    fn request(&self) -> Result<Request<ReqBody>, http::Error> {
        let mut builder = Request::builder()
            .method(self.method.clone())
            .uri(self.path.as_str());
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        if !self.chunked && self.dribble.is_some() {
            builder = builder.header("content-length", self.body.len());
        }
        builder.body(self.body())
    }

    /// A whole body gets a Content-Length from hyper; a dribbled or chunked one is a
    /// stream of frames.
    fn body(&self) -> ReqBody {
        let stream = match (self.dribble, self.chunked) {
            (None, false) => return Full::new(self.body.clone()).boxed_unsync(),
            (None, true) => (self.body.len().max(1), Duration::ZERO),
            (Some(dribble), _) => dribble,
        };
        let pieces: Vec<Bytes> = self
            .body
            .chunks(stream.0.max(1))
            .map(|piece| self.body.slice_ref(piece))
            .collect();
        let pause = stream.1;
        let frames =
            futures_util::stream::unfold(pieces.into_iter(), move |mut pieces| async move {
                let piece = pieces.next()?;
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                Some((Ok::<_, Infallible>(Frame::data(piece)), pieces))
            });
        StreamBody::new(frames).boxed_unsync()
    }

    fn render(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.path).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if self.chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        } else if !self.body.is_empty() || self.method == Method::POST {
            out.extend_from_slice(format!("content-length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

struct RawCase {
    bytes: Vec<u8>,
    end: End,
    dribble: Option<(usize, Duration)>,
    /// Starts with the HTTP/2 preface: the answer is frames, not HTTP/1.1.
    h2: bool,
    head_request: bool,
}

impl RawCase {
    fn new(bytes: Vec<u8>, end: End) -> Self {
        let h2 = bytes.starts_with(b"PRI * HTTP/2.0");
        let head_request = bytes.starts_with(b"HEAD ");
        Self {
            bytes,
            end,
            dribble: None,
            h2,
            head_request,
        }
    }
}

#[derive(Clone, Copy)]
enum End {
    /// Shut down the write half: the gateway sees the end of the request stream.
    HalfClose,
    /// Reset the connection without reading (SO_LINGER 0).
    Abort,
    /// Wait a moment for the answer (the bytes ask for `Connection: close`), then shut
    /// down the write half for requests the gateway still waits on.
    Linger,
}

type Generator = fn(&Context, &mut Rng) -> Case;

/// The classes and their weights per 10,000 requests.
const CLASSES: &[(&str, u32, Generator)] = &[
    ("random bytes", 1200, random_bytes),
    ("mutated 2026-07-28 request", 2400, mutated_modern),
    ("retyped 2026-07-28 request", 900, retyped_modern),
    ("header mutations", 1500, header_mutations),
    ("bad Content-Type", 400, bad_content_type),
    ("wrong method or path", 600, wrong_method_or_path),
    ("mutated 2025-11-25 initialize", 600, mutated_initialize),
    ("arbitrary task ids", 600, task_ids),
    ("deep nesting", 200, deep_nesting),
    ("huge strings", 20, huge_strings),
    ("oversized body", 5, oversized),
    ("slow body", 10, slow_body),
    ("slow head (raw)", 5, slow_head),
    ("half-closed or aborted (raw)", 310, half_closed),
    ("garbage on the socket (raw)", 800, raw_garbage),
    ("broken HTTP/1.1 framing (raw)", 450, broken_framing),
];

fn generate(context: &Context, index: u64) -> Case {
    let mut rng = Rng::for_case(context.seed, index);
    let total: u32 = CLASSES.iter().map(|c| c.1).sum();
    let mut roll = (rng.next_u64() % u64::from(total)) as u32;
    for (_, weight, generator) in CLASSES {
        if roll < *weight {
            return generator(context, &mut rng);
        }
        roll -= weight;
    }
    random_bytes(context, &mut rng)
}

/// A valid 2026-07-28 request, its method and the value its `Mcp-Name` mirrors.
struct Modern {
    body: Value,
    method: &'static str,
    name: Option<String>,
}

fn modern(rng: &mut Rng) -> Modern {
    let task_id = uuid_like(rng);
    let (method, params, name): (&'static str, Value, Option<String>) = match rng.below(12) {
        0..=2 => {
            let length = rng.below(40);
            let text = rng.text(length);
            (
                "tools/call",
                json!({"name": "echo", "arguments": {"text": text}}),
                Some("echo".into()),
            )
        }
        3 => (
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
            Some("no_such_tool".into()),
        ),
        4 => ("tools/list", json!({}), None),
        5 => ("tasks/get", json!({"taskId": task_id}), Some(task_id)),
        6 => ("tasks/cancel", json!({"taskId": task_id}), Some(task_id)),
        7 => (
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": {"input-0": {"action": "accept", "content": {}}}}),
            Some(task_id),
        ),
        8 => ("server/discover", json!({}), None),
        9 => ("ping", json!({}), None),
        10 => (
            "resources/read",
            json!({"uri": "file:///etc/hostname"}),
            Some("file:///etc/hostname".into()),
        ),
        _ => (
            "prompts/get",
            json!({"name": "greeting"}),
            Some("greeting".into()),
        ),
    };
    let mut params = params;
    // Only the tasks extension: elicitation, sampling and roots key upstream sessions,
    // which the campaign must not multiply by accident (docs/security.md).
    let capabilities = if rng.chance(60) {
        json!({"extensions": {TASKS_EXTENSION: {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "hostile_input", "version": "0"},
    });
    let id = if rng.chance(50) {
        json!(rng.next_u64() >> 12)
    } else {
        json!(format!("r-{}", rng.next_u64()))
    };
    Modern {
        body: json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        method,
        name,
    }
}

fn uuid_like(rng: &mut Rng) -> String {
    let bytes = rng.bytes(16);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The standard headers of a modern request, as a correct client sends them.
fn modern_case(context: &Context, modern: &Modern, body: Vec<u8>) -> HttpCase {
    let mut case = HttpCase::post(context, body);
    case.header("mcp-protocol-version", MODERN.as_bytes());
    case.header("mcp-method", modern.method.as_bytes());
    if let Some(name) = &modern.name {
        case.header("mcp-name", encode_value(name).as_bytes());
    }
    case
}

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

fn random_bytes(context: &Context, rng: &mut Rng) -> Case {
    let n = rng.log_size(1, 64 * 1024);
    let mut body = match rng.below(4) {
        0 => rng.text(n).into_bytes(),
        _ => rng.bytes(n),
    };
    if rng.chance(30) {
        body.insert(0, b'{');
    }
    if rng.chance(5) {
        body.clear();
    }
    Case::http("random bytes", HttpCase::post(context, body)).expecting(Expect::ParseOrInvalid)
}

/// Byte-level damage: flips, insertions, deletions, duplicated runs, truncation.
fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    const STRUCTURAL: &[u8] = b"{}[]\",:\\ 0-.eEtfnu\x00\xff\xc3\x80";
    for _ in 0..1 + rng.below(4) {
        let len = bytes.len();
        let at = rng.below(len.max(1));
        let byte = if rng.chance(60) {
            *rng.pick(STRUCTURAL)
        } else {
            rng.next_u64() as u8
        };
        match rng.below(5) {
            0 if len > 0 => bytes[at] = byte,
            1 => bytes.insert(at.min(len), byte),
            2 if len > 0 => {
                bytes.remove(at);
            }
            3 => bytes.truncate(at),
            _ if len > 0 => {
                let end = (at + 1 + rng.below(24)).min(len);
                let copy = bytes[at..end].to_vec();
                bytes.splice(end..end, copy);
            }
            _ => {}
        }
    }
}

fn mutated_modern(context: &Context, rng: &mut Rng) -> Case {
    let modern = modern(rng);
    let mut body = to_bytes(&modern.body);
    mutate(rng, &mut body);
    Case::http(
        "mutated 2026-07-28 request",
        modern_case(context, &modern, body),
    )
}

/// Values a member may be replaced with.
fn junk(rng: &mut Rng) -> Value {
    match rng.below(14) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(1.5e308),
        4 => json!(u64::MAX),
        5 => json!(""),
        6 => json!(rng.text(64)),
        7 => json!([]),
        8 => json!({}),
        9 => json!({"nested": {"deeper": [1, {"x": null}]}}),
        10 => json!(format!("mtg1.{}.{}", rng.text(8), rng.text(8))),
        11 => json!("subscriptions/ignored"),
        12 => json!(i64::MIN),
        _ => json!(rng.text(2048)),
    }
}

/// Member-level damage: a member retyped or removed, or a duplicate key appended.
fn retyped_modern(context: &Context, rng: &mut Rng) -> Case {
    const PATHS: &[&[&str]] = &[
        &["jsonrpc"],
        &["id"],
        &["method"],
        &["params"],
        &["params", "_meta"],
        &["params", "_meta", "io.modelcontextprotocol/protocolVersion"],
        &[
            "params",
            "_meta",
            "io.modelcontextprotocol/clientCapabilities",
        ],
        &[
            "params",
            "_meta",
            "io.modelcontextprotocol/clientCapabilities",
            "extensions",
        ],
        &["params", "_meta", "progressToken"],
        &["params", "_meta", "io.modelcontextprotocol/logLevel"],
        &["params", "_meta", "traceparent"],
        &["params", "name"],
        &["params", "arguments"],
        &["params", "taskId"],
        &["params", "inputResponses"],
        &["params", "requestState"],
        &["params", "task"],
    ];
    let modern = modern(rng);
    let mut body = modern.body.clone();
    let path = *rng.pick(PATHS);
    let remove = rng.chance(25);
    let value = junk(rng);
    set_path(&mut body, path, if remove { None } else { Some(value) });
    let mut bytes = to_bytes(&body);
    if rng.chance(15) {
        // A second "method" or "id": JSON objects with duplicate keys.
        let key = *rng.pick(&["method", "id", "params", "jsonrpc"]);
        let extra = format!(",\"{key}\":{}", junk(rng));
        bytes.pop();
        bytes.extend_from_slice(extra.as_bytes());
        bytes.push(b'}');
    }
    Case::http(
        "retyped 2026-07-28 request",
        modern_case(context, &modern, bytes),
    )
}

fn set_path(value: &mut Value, path: &[&str], new: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = value;
    for key in parents {
        if !node.get(*key).is_some_and(Value::is_object) {
            node[*key] = json!({});
        }
        node = &mut node[*key];
    }
    let Some(object) = node.as_object_mut() else {
        return;
    };
    match new {
        Some(new) => {
            object.insert((*last).to_owned(), new);
        }
        None => {
            object.remove(*last);
        }
    }
}

fn header_mutations(context: &Context, rng: &mut Rng) -> Case {
    let modern = modern(rng);
    let mut case = modern_case(context, &modern, to_bytes(&modern.body));
    let mut expect = Expect::Anything;
    for _ in 0..1 + rng.below(2) {
        if let Some(e) = mutate_headers(context, rng, &mut case) {
            expect = e;
        }
    }
    // A head over hyper's limits (100 headers, 400 KiB) is refused with 431 while the
    // client may still be writing it: the connection can end before the answer is read.
    let head: usize = case
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    let may_close = case.headers.len() > 100 || head > 64 * 1024;
    let mut case = Case::http("header mutations", case).expecting(expect);
    case.may_close = may_close;
    case
}

/// One header change; what the answer must then be, when that is certain.
fn mutate_headers(context: &Context, rng: &mut Rng, case: &mut HttpCase) -> Option<Expect> {
    const STANDARD: &[&str] = &["mcp-method", "mcp-name", "mcp-protocol-version"];
    let standard = *rng.pick(STANDARD);
    match rng.below(18) {
        0 => case.remove(standard),
        1 => {
            case.remove(standard);
            case.header(standard, rng.text(12).trim().as_bytes());
        }
        2 => {
            // A second copy, different from the first.
            case.header(standard, b"tools/list");
        }
        3 => {
            case.remove("mcp-name");
            case.header("mcp-name", format!("=?base64?{}?=", rng.text(8)).as_bytes());
        }
        4 => {
            let mut invalid = b"\xff\xfe".to_vec();
            invalid.extend(rng.bytes(6).into_iter().map(|b| b | 0x80));
            let name = *rng.pick(&[
                standard,
                "authorization",
                "mcp-session-id",
                "content-type",
                "traceparent",
                "origin",
            ]);
            if name == "authorization" {
                // Fixed, like every credential here: each distinct one is an upstream
                // session (measured by --spray instead).
                invalid = b"Bearer \xff\xfe".to_vec();
            }
            case.remove(name);
            case.header(name, &invalid);
        }
        5 => {
            // Values up to 1 MiB; hyper refuses heads over its buffer with 431.
            let size = rng.log_size(1024, 1024 * 1024);
            let name = *rng.pick(&["mcp-name", "x-junk", "cookie"]);
            case.header(name, &vec![b'a'; size]);
        }
        6 => {
            for i in 0..rng.log_size(20, 2000) {
                case.header(&format!("x-junk-{i}"), b"1");
            }
        }
        7 => {
            case.remove("mcp-protocol-version");
            let version = *rng.pick(&[
                "2030-01-01",
                "",
                " 2026-07-28 ",
                "2025-11-25",
                "2026-07-28, 2025-11-25",
                "1",
            ]);
            case.header("mcp-protocol-version", version.as_bytes());
        }
        8 => {
            case.header("origin", b"http://evil.example");
            return Some(Expect::Refused);
        }
        9 => {
            let origin = rng.text(10);
            case.header("origin", origin.trim().as_bytes());
        }
        10 => case.header("mcp-session-id", format!("{:x}", rng.next_u64()).as_bytes()),
        11 => case.header(
            "mcp-session-id",
            format!("mtg-t.{}", rng.text(6)).trim().as_bytes(),
        ),
        12 => {
            // A small fixed set of credentials: each distinct one is an upstream session.
            let token = *rng.pick(&["Bearer a", "Bearer b", "Basic Zm9vOmJhcg==", ""]);
            case.header("authorization", token.as_bytes());
        }
        13 => case.header(
            &format!("mcp-param-{}", rng.below(4)),
            rng.text(10).trim().as_bytes(),
        ),
        14 => {
            let parent = format!(
                "00-{:032x}-{:016x}-{:02x}",
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64() as u8
            );
            let value = if rng.chance(50) { parent } else { rng.text(40) };
            case.header("traceparent", value.trim().as_bytes());
            case.header("tracestate", rng.text(20).trim().as_bytes());
        }
        15 => {
            case.remove("accept");
            if rng.chance(50) {
                case.header("accept", rng.text(16).trim().as_bytes());
            }
        }
        16 => {
            case.remove("host");
            if rng.chance(50) {
                case.header(
                    "host",
                    format!("{}:{}", rng.text(8).trim(), context.addr.port()).as_bytes(),
                );
            }
        }
        _ => case.header("expect", b"100-continue"),
    }
    None
}

fn bad_content_type(context: &Context, rng: &mut Rng) -> Case {
    const TYPES: &[&[u8]] = &[
        b"text/plain",
        b"application/x-www-form-urlencoded",
        b"multipart/form-data; boundary=x",
        b"application/json; charset=utf-16",
        b"application/json, application/json",
        b"*/*",
        b"",
        b"\xff\xfe\xfd",
        b"application/jsonx",
    ];
    let modern = modern(rng);
    let mut case = modern_case(context, &modern, to_bytes(&modern.body));
    case.remove("content-type");
    match rng.below(TYPES.len() + 2) {
        n if n < TYPES.len() => case.header("content-type", TYPES[n]),
        n if n == TYPES.len() => {}
        _ => case.header("content-type", &vec![b'j'; 8192]),
    }
    Case::http("bad Content-Type", case)
}

fn wrong_method_or_path(context: &Context, rng: &mut Rng) -> Case {
    const METHODS: &[&str] = &[
        "GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "BREW", "post", "POST",
    ];
    const PATHS: &[&str] = &[
        "/",
        "/mcp/",
        "/MCP",
        "/mcp?x=1",
        "/healthz",
        "/readyz",
        "/mcp/../mcp",
        "/%2e%2e/mcp",
        "/mcp%00",
        "/admin/tasks",
        "/metrics",
        "/mcp;a=b",
        "/mcp?%ff%00",
    ];
    let modern = modern(rng);
    let body = if rng.chance(50) {
        to_bytes(&modern.body)
    } else {
        Vec::new()
    };
    let mut case = modern_case(context, &modern, body);
    let method = *rng.pick(METHODS);
    case.method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
    case.path = if rng.chance(3) {
        format!("/{}", "a".repeat(rng.log_size(100, 60_000)))
    } else {
        (*rng.pick(PATHS)).to_owned()
    };
    if case.method == Method::POST && case.path == "/mcp" {
        case.path = "/mcp/".into();
    }
    if rng.chance(20) {
        case.header("mcp-session-id", format!("{:x}", rng.next_u64()).as_bytes());
    }
    Case::http("wrong method or path", case)
}

fn mutated_initialize(context: &Context, rng: &mut Rng) -> Case {
    let capabilities = match rng.below(3) {
        0 => json!({}),
        1 => json!({"tasks": {"requests": {"tools": {"call": {}}}}}),
        _ => json!({"elicitation": {}, "roots": {"listChanged": true}}),
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": rng.below(1000),
        "method": "initialize",
        "params": {
            "protocolVersion": SESSION,
            "capabilities": capabilities,
            "clientInfo": {"name": "hostile_input", "version": "0"},
        }
    });
    let mut bytes = to_bytes(&body);
    // One in ten stays valid: a session opened upstream, as a real client would.
    if !rng.chance(10) {
        mutate(rng, &mut bytes);
    }
    let mut case = HttpCase::post(context, bytes);
    if rng.chance(50) {
        case.header("mcp-protocol-version", SESSION.as_bytes());
    }
    Case::http("mutated 2025-11-25 initialize", case)
}

/// Arbitrary strings as task ids, with the headers right: no task has them.
fn task_ids(context: &Context, rng: &mut Rng) -> Case {
    let task_id = match rng.below(8) {
        0 => String::new(),
        1 => {
            let length = rng.log_size(1, 64);
            rng.text(length)
        }
        2 => "a".repeat(rng.log_size(1024, 96 * 1024)),
        3 => "../../../etc/passwd".into(),
        4 => format!("=?base64?{}?=", rng.text(6)),
        5 => format!("{}\u{0}{}", uuid_like(rng), rng.text(3)),
        6 => format!("{{{}}}", uuid_like(rng)),
        _ => uuid_like(rng),
    };
    let method = *rng.pick(&["tasks/get", "tasks/cancel", "tasks/update"]);
    let mut params = json!({"taskId": task_id, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
    }});
    if method == "tasks/update" {
        params["inputResponses"] = json!({"input-0": {"action": "decline"}});
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let modern = Modern {
        body,
        method,
        name: Some(task_id),
    };
    let case = modern_case(context, &modern, to_bytes(&modern.body));
    Case::http("arbitrary task ids", case).expecting(Expect::NoSuchTask)
}

fn deep_nesting(context: &Context, rng: &mut Rng) -> Case {
    let depth = rng.log_size(100, 400_000);
    let (open, close) = *rng.pick(&[("[", "]"), ("{\"a\":", "}")]);
    let nested = format!(
        "{}1{}",
        open.repeat(depth),
        if rng.chance(80) {
            close.repeat(depth)
        } else {
            String::new()
        }
    );
    let body = match rng.below(2) {
        0 => nested,
        _ => format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":{nested}}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        ),
    };
    let mut case = HttpCase::post(context, body.into_bytes());
    case.header("mcp-protocol-version", MODERN.as_bytes());
    case.header("mcp-method", b"tools/call");
    // Past serde_json's 128 levels nothing parses.
    let expect = if depth > 130 {
        Expect::ParseOrInvalid
    } else {
        Expect::Anything
    };
    Case::http("deep nesting", case).expecting(expect)
}

/// Strings of 16 KiB to 3.5 MiB, under the body limit, where a name, id or text goes.
fn huge_strings(context: &Context, rng: &mut Rng) -> Case {
    let size = rng
        .log_size(16 * 1024, 3584 * 1024)
        .min(context.max_body_bytes.saturating_sub(4096));
    let huge = if rng.chance(20) {
        "é".repeat(size / 2)
    } else {
        "x".repeat(size)
    };
    let mut modern = modern(rng);
    match rng.below(4) {
        0 => modern.body["method"] = json!(huge),
        1 => modern.body["id"] = json!(huge),
        2 => modern.body["params"]["_meta"][huge.as_str()] = json!(1),
        _ => {
            modern.body["params"]["name"] = json!("echo");
            modern.body["params"]["arguments"] = json!({"text": huge});
            modern.method = "tools/call";
            modern.name = Some("echo".into());
        }
    }
    let case = modern_case(context, &modern, to_bytes(&modern.body));
    Case::http("huge strings", case)
}

fn oversized(context: &Context, rng: &mut Rng) -> Case {
    let size = context.max_body_bytes + 1 + rng.below(64 * 1024);
    let mut case = HttpCase::post(context, Vec::new());
    case.body = context.filler.slice(..size.min(context.filler.len()));
    case.chunked = rng.chance(50);
    let mut case = Case::http("oversized body", case).expecting(Expect::TooLarge);
    // The gateway answers 413 before reading the rest; the client may see the
    // connection end while it still writes.
    case.may_close = true;
    case
}

fn slow_body(context: &Context, rng: &mut Rng) -> Case {
    let modern = modern(rng);
    let mut body = to_bytes(&modern.body);
    if rng.chance(50) {
        mutate(rng, &mut body);
    }
    let mut case = modern_case(context, &modern, body);
    let chunk = 1 + rng.below(32);
    let pause = Duration::from_millis(2 + rng.below(20) as u64);
    case.dribble = Some((chunk, pause));
    Case::http("slow body", case)
}

/// A whole request whose head and body arrive a few bytes at a time.
fn slow_head(context: &Context, rng: &mut Rng) -> Case {
    let modern = modern(rng);
    let mut http = modern_case(context, &modern, to_bytes(&modern.body));
    http.header("connection", b"close");
    let mut raw = RawCase::new(http.render(), End::Linger);
    raw.dribble = Some((
        8 + rng.below(64),
        Duration::from_millis(2 + rng.below(10) as u64),
    ));
    Case::raw("slow head (raw)", raw)
}

/// A request cut off in its head or body, then the write half shut (or the connection
/// reset).
fn half_closed(context: &Context, rng: &mut Rng) -> Case {
    let modern = modern(rng);
    let http = modern_case(context, &modern, to_bytes(&modern.body));
    let mut bytes = http.render();
    if rng.chance(30) {
        // Promise far more than is sent.
        let text =
            String::from_utf8_lossy(&bytes).replacen("content-length: ", "content-length: 9", 1);
        bytes = text.into_bytes();
    }
    let cut = rng.below(bytes.len());
    bytes.truncate(cut);
    let end = if rng.chance(20) {
        End::Abort
    } else {
        End::HalfClose
    };
    Case::raw("half-closed or aborted (raw)", RawCase::new(bytes, end))
}

fn raw_garbage(_context: &Context, rng: &mut Rng) -> Case {
    let n = rng.log_size(1, 16 * 1024);
    let mut bytes = match rng.below(5) {
        0 => b"POST /mcp HTTP/1.1\r\n".to_vec(),
        1 => b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        2 => b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec(),
        _ => Vec::new(),
    };
    if rng.chance(50) {
        bytes.extend(rng.bytes(n));
    } else {
        bytes.extend(rng.text(n).into_bytes());
    }
    Case::raw(
        "garbage on the socket (raw)",
        RawCase::new(bytes, End::HalfClose),
    )
}

/// Requests a strict HTTP/1.1 parser must refuse, or read in exactly one way.
fn broken_framing(context: &Context, rng: &mut Rng) -> Case {
    let modern = modern(rng);
    let body = String::from_utf8(to_bytes(&modern.body)).unwrap_or_default();
    let n = body.len();
    let host = context.host();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nMcp-Method: {}\r\nMCP-Protocol-Version: {MODERN}\r\n",
        modern.method
    );
    let text = match rng.below(20) {
        0 => format!(
            "{head}Content-Length: {n}\r\nContent-Length: {}\r\n\r\n{body}",
            n + 5
        ),
        1 => format!(
            "{head}Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n\r\n{n:x}\r\n{body}\r\n0\r\n\r\n"
        ),
        2 => format!("{head}Transfer-Encoding: chunked\r\n\r\nzz\r\n{body}\r\n0\r\n\r\n"),
        3 => format!(
            "{head}Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n{body}\r\n0\r\n\r\n"
        ),
        4 => format!(
            "{head}Transfer-Encoding: chunked\r\n\r\n{n:x};{}\r\n{body}\r\n0\r\n\r\n",
            "e".repeat(rng.log_size(1, 100_000))
        ),
        5 => format!("{head}Content-Length: -1\r\n\r\n{body}"),
        6 => format!("{head}Content-Length: 1e3\r\n\r\n{body}"),
        7 => format!("{head}Content-Length: {n}\r\n\r\n{body}").replace("\r\n", "\n"),
        8 => format!("{head}Broken header line\r\nContent-Length: {n}\r\n\r\n{body}"),
        9 => format!("{head}Content-Length : {n}\r\n\r\n{body}"),
        10 => format!("{head}X-Folded: a\r\n b\r\nContent-Length: {n}\r\n\r\n{body}"),
        11 => format!("{head}X-Nul: a\0b\r\nContent-Length: {n}\r\n\r\n{body}"),
        12 => format!("POST /mcp HTTP/9.9\r\nHost: {host}\r\nContent-Length: {n}\r\n\r\n{body}"),
        13 => format!(
            "POST http://evil.example/mcp HTTP/1.1\r\nHost: evil.example\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n{body}"
        ),
        14 => format!(
            "POST /{} HTTP/1.1\r\nHost: {host}\r\n\r\n",
            "p".repeat(rng.log_size(1000, 200_000))
        ),
        15 => format!("{head}Content-Length: {n}\r\nConnection: close\r\n\r\n{body}")
            .replacen("POST", "post", 1),
        16 => format!(
            "{head}Content-Length: {n}\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings, close\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n{body}"
        ),
        17 => format!(
            "{head}Content-Length: {n}\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n{body}"
        ),
        18 => {
            // Pipelined: two whole requests, then the end.
            let one = format!("{head}Content-Length: {n}\r\n\r\n{body}");
            format!("{one}{one}")
        }
        _ => format!("POST /mcp HTTP/1.0\r\nContent-Length: {n}\r\n\r\n{body}"),
    };
    Case::raw(
        "broken HTTP/1.1 framing (raw)",
        RawCase::new(text.into_bytes(), End::Linger),
    )
}

// ---------------------------------------------------------------------------------------
// Counting.

#[derive(Default)]
struct ClassTally {
    sent: u64,
    answered: u64,
    closed: u64,
    failures: u64,
}

struct Failure {
    class: &'static str,
    index: u64,
    reason: String,
    request: Vec<u8>,
}

#[derive(Default)]
struct Tally {
    classes: BTreeMap<&'static str, ClassTally>,
    statuses: BTreeMap<u16, u64>,
    rpc: BTreeMap<String, u64>,
    failures: u64,
    kept: Vec<Failure>,
    slowest: Duration,
}

impl Tally {
    fn record(
        &mut self,
        case: &Case,
        index: u64,
        outcome: &Outcome,
        verdict: Verdict,
        took: Duration,
    ) {
        let class = self.classes.entry(case.class).or_default();
        class.sent += 1;
        match outcome {
            Outcome::Responses(answers) => {
                class.answered += 1;
                for answer in answers {
                    *self.statuses.entry(answer.status).or_default() += 1;
                }
            }
            Outcome::Closed(_) | Outcome::Aborted | Outcome::H2Frames => class.closed += 1,
            _ => {}
        }
        for code in verdict.rpc {
            *self.rpc.entry(code).or_default() += 1;
        }
        self.slowest = self.slowest.max(took);
        if let Some(reason) = verdict.failure {
            class.failures += 1;
            self.failures += 1;
            self.keep(Failure {
                class: case.class,
                index,
                reason,
                request: case.render(),
            });
        }
    }

    fn keep(&mut self, failure: Failure) {
        if self.kept.len() < KEPT_FAILURES {
            self.kept.push(failure);
        }
    }

    fn merge(&mut self, other: Tally) {
        for (name, theirs) in other.classes {
            let mine = self.classes.entry(name).or_default();
            mine.sent += theirs.sent;
            mine.answered += theirs.answered;
            mine.closed += theirs.closed;
            mine.failures += theirs.failures;
        }
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        for (code, n) in other.rpc {
            *self.rpc.entry(code).or_default() += n;
        }
        self.failures += other.failures;
        self.slowest = self.slowest.max(other.slowest);
        for failure in other.kept {
            self.keep(failure);
        }
    }

    fn sent(&self) -> u64 {
        self.classes.values().map(|c| c.sent).sum()
    }
}

/// The failing requests' bytes, one file each, next to the gateway's log.
fn save_failures(tally: &Tally) -> Result<(), String> {
    let dir = log_path()?.with_file_name("failures");
    for failure in &tally.kept {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let file = dir.join(format!("request-{}.bin", failure.index));
        std::fs::write(&file, &failure.request).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The gateway process.

/// Resident memory and open descriptors of a process, from /proc.
#[derive(Clone, Copy)]
struct Memory {
    rss_kib: u64,
    hwm_kib: u64,
    fds: usize,
}

impl Memory {
    fn read(pid: u32) -> Result<Self, String> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("reading /proc/{pid}/status: {e}"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|entries| entries.count())
            .unwrap_or(0);
        Ok(Self {
            rss_kib: field("VmRSS:")?,
            hwm_kib: field("VmHWM:")?,
            fds,
        })
    }
}

/// Prints progress every 10 s and samples the gateway's memory and descriptors.
struct Progress {
    sent: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Peak>,
}

#[derive(Default, Clone, Copy)]
struct Peak {
    rss_kib: u64,
    fds: usize,
}

impl Progress {
    fn start(pid: u32, total: u64) -> Self {
        let sent = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (sent_seen, done_seen) = (sent.clone(), done.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut peak = Peak::default();
            let mut last_print = Instant::now();
            while !done_seen.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let Ok(memory) = Memory::read(pid) else {
                    continue;
                };
                peak.rss_kib = peak.rss_kib.max(memory.rss_kib);
                peak.fds = peak.fds.max(memory.fds);
                if last_print.elapsed() >= Duration::from_secs(10) {
                    last_print = Instant::now();
                    let n = sent_seen.load(Ordering::Relaxed);
                    eprintln!(
                        "{n}/{total} sent, {:.0} req/s, RSS {} MiB, {} fds",
                        n as f64 / started.elapsed().as_secs_f64(),
                        memory.rss_kib / 1024,
                        memory.fds
                    );
                }
            }
            peak
        });
        Self { sent, done, task }
    }

    async fn stop(self) -> Peak {
        self.done.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

async fn health(addr: SocketAddr) -> bool {
    let Ok(mut sender) = connect(addr).await else {
        return false;
    };
    let request = Request::get("/healthz")
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()).boxed_unsync());
    let Ok(request) = request else { return false };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), sender.send_request(request)).await,
        Ok(Ok(response)) if response.status() == 200
    )
}

struct Checks {
    baseline: Memory,
    end: Option<Memory>,
    sampled_peak: Peak,
    slack_kib: u64,
    gateway_alive: bool,
    upstream_alive: bool,
    health: bool,
    panics: usize,
    log_lines: usize,
    log: PathBuf,
}

impl Checks {
    /// The RSS may end above its baseline by the slack or a tenth of the baseline.
    fn rss_returned(&self) -> bool {
        let allowed = self.slack_kib.max(self.baseline.rss_kib / 10);
        self.end
            .is_some_and(|end| end.rss_kib <= self.baseline.rss_kib + allowed)
    }

    fn passed(&self) -> bool {
        self.rss_returned() && self.gateway_alive && self.health && self.panics == 0
    }
}

// ---------------------------------------------------------------------------------------
// The report.

struct Report<'a> {
    args: &'a Args,
    warmup: &'a Tally,
    tally: &'a Tally,
    duration: Duration,
    checks: &'a Checks,
    spray: Option<&'a Spray>,
}

impl Report<'_> {
    fn markdown(&self) -> String {
        let mut out = String::new();
        self.summary(&mut out);
        self.classes(&mut out);
        self.statuses(&mut out);
        if let Some(spray) = self.spray {
            spray.markdown(&mut out);
        }
        self.failures(&mut out);
        out
    }

    fn summary(&self, out: &mut String) {
        let c = self.checks;
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        let mark = |ok: bool| if ok { "✅" } else { "❌" };
        let sent = self.tally.sent();
        let _ = writeln!(out, "## Hostile input campaign\n");
        let _ = writeln!(out, "| measure | value | check |\n|---|---:|:---:|");
        let rows: Vec<(String, String, String)> = vec![
            (
                "requests (after a warm-up of {w})".replace("{w}", &self.warmup.sent().to_string()),
                sent.to_string(),
                mark(sent >= self.args.requests).into(),
            ),
            (
                "concurrency (connections)".into(),
                self.args.concurrency.to_string(),
                String::new(),
            ),
            ("seed".into(), self.args.seed.to_string(), String::new()),
            (
                "duration".into(),
                format!("{:.1} s", self.duration.as_secs_f64()),
                String::new(),
            ),
            (
                "throughput".into(),
                format!("{:.0} req/s", sent as f64 / self.duration.as_secs_f64()),
                String::new(),
            ),
            (
                "slowest answer".into(),
                format!("{:.2} s", self.tally.slowest.as_secs_f64()),
                String::new(),
            ),
            (
                "failed checks (campaign + warm-up)".into(),
                format!("{} + {}", self.tally.failures, self.warmup.failures),
                mark(self.tally.failures + self.warmup.failures == 0).into(),
            ),
            (
                "gateway RSS, baseline after warm-up".into(),
                mib(c.baseline.rss_kib),
                String::new(),
            ),
            (
                "gateway RSS, peak (VmHWM)".into(),
                format!(
                    "{} (sampled: {})",
                    mib(c.end.map_or(c.baseline.hwm_kib, |e| e.hwm_kib)),
                    mib(c.sampled_peak.rss_kib)
                ),
                String::new(),
            ),
            (
                format!("gateway RSS, end ({} s quiet)", self.args.quiet_secs),
                c.end.map_or("gone".into(), |e| mib(e.rss_kib)),
                mark(c.rss_returned()).into(),
            ),
            (
                "gateway open fds, baseline / peak / end".into(),
                format!(
                    "{} / {} / {}",
                    c.baseline.fds,
                    c.sampled_peak.fds,
                    c.end.map_or(0, |e| e.fds)
                ),
                String::new(),
            ),
            (
                "gateway alive, /healthz 200".into(),
                format!("{} / {}", c.gateway_alive, c.health),
                mark(c.gateway_alive && c.health).into(),
            ),
            (
                "upstream fixture alive".into(),
                c.upstream_alive.to_string(),
                String::new(),
            ),
            (
                "\"panicked\" in the gateway's log".into(),
                format!(
                    "{} ({} log lines, {})",
                    c.panics,
                    c.log_lines,
                    c.log.display()
                ),
                mark(c.panics == 0).into(),
            ),
        ];
        for (measure, value, check) in rows {
            let _ = writeln!(out, "| {measure} | {value} | {check} |");
        }
    }

    fn classes(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n| class | sent | HTTP answers | closed without answer | failed |\n|---|---:|---:|---:|---:|"
        );
        for (name, class) in &self.tally.classes {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} |",
                class.sent, class.answered, class.closed, class.failures
            );
        }
    }

    fn statuses(&self, out: &mut String) {
        let _ = writeln!(out, "\n| HTTP status | responses |\n|---|---:|");
        for (status, n) in &self.tally.statuses {
            let _ = writeln!(out, "| {status} | {n} |");
        }
        let _ = writeln!(out, "\n| JSON-RPC outcome | responses |\n|---|---:|");
        for (code, n) in &self.tally.rpc {
            let _ = writeln!(out, "| {code} | {n} |");
        }
    }

    fn failures(&self, out: &mut String) {
        let kept = self.tally.kept.iter().chain(&self.warmup.kept);
        for failure in kept {
            let _ = writeln!(
                out,
                "\n**failure** request {} ({}): {}\n\n```\n{}\n```",
                failure.index,
                failure.class,
                failure.reason,
                escape(&failure.request, 600)
            );
        }
    }
}

/// Bytes as readable text: printable ASCII as it is, the rest escaped.
fn escape(bytes: &[u8], limit: usize) -> String {
    let mut out: String = bytes
        .iter()
        .take(limit)
        .flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect();
    if bytes.len() > limit {
        let _ = write!(out, "… ({} bytes)", bytes.len());
    }
    out
}

async fn replay(context: Arc<Context>, index: u64) {
    let case = generate(&context, index);
    println!(
        "request {index} ({}):\n{}\n",
        case.class,
        escape(&case.render(), 4000)
    );
    let mut worker = Worker::new(context.clone());
    let outcome = match &case.wire {
        Wire::Http(http) => worker.send_http(http).await,
        Wire::Raw(raw) => send_raw(context.addr, raw).await,
    };
    match &outcome {
        Outcome::Responses(answers) => {
            for answer in answers {
                println!(
                    "HTTP {} {:?}\n{}",
                    answer.status,
                    answer.content_type,
                    escape(&answer.body, 4000)
                );
            }
        }
        Outcome::Malformed(why, bytes) => println!("malformed: {why}\n{}", escape(bytes, 4000)),
        Outcome::Closed(why) => println!("closed: {why}"),
        Outcome::BrokenBody(why) => println!("broken body: {why}"),
        Outcome::H2Frames => println!("HTTP/2 frames"),
        Outcome::Aborted => println!("aborted by the client"),
        Outcome::TimedOut => println!("timed out"),
        Outcome::ClientError(why) => println!("client error: {why}"),
    }
    let verdict = judge(&case, &outcome);
    println!(
        "verdict: {}",
        verdict.failure.unwrap_or_else(|| "ok".into())
    );
}

// ---------------------------------------------------------------------------------------
// The upstream-sessions probe.

/// `MAX_SESSIONS` in `src/upstream/session_http.rs`.
const UPSTREAM_SESSIONS_BOUND: usize = 1024;

/// What `--spray` saw: the gateway before, right after, and after a quiet period.
struct Spray {
    calls: u64,
    tally: Tally,
    before: Memory,
    after: Memory,
    quiet: Memory,
    quiet_secs: u64,
}

/// Bridged calls with an `Authorization` each: `Spray-<i>`.
async fn spray(
    context: &Arc<Context>,
    pid: u32,
    calls: u64,
    concurrency: usize,
    quiet_secs: u64,
) -> Result<Spray, String> {
    let before = Memory::read(pid)?;
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (context, next) = (context.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut worker = Worker::new(context.clone());
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= calls {
                    return worker.tally;
                }
                let case = spray_case(&context, index);
                let started = Instant::now();
                let outcome = match &case.wire {
                    Wire::Http(http) => worker.send_http(http).await,
                    Wire::Raw(raw) => send_raw(context.addr, raw).await,
                };
                let verdict = judge(&case, &outcome);
                worker
                    .tally
                    .record(&case, index, &outcome, verdict, started.elapsed());
            }
        }));
    }
    let mut tally = Tally::default();
    for worker in workers {
        tally.merge(
            worker
                .await
                .map_err(|e| format!("a spray worker died: {e}"))?,
        );
    }
    let after = Memory::read(pid)?;
    tokio::time::sleep(Duration::from_secs(quiet_secs)).await;
    Ok(Spray {
        calls,
        tally,
        before,
        after,
        quiet: Memory::read(pid)?,
        quiet_secs,
    })
}

fn spray_case(context: &Context, index: u64) -> Case {
    let modern = Modern {
        body: json!({"jsonrpc": "2.0", "id": index, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }}}),
        method: "tools/list",
        name: None,
    };
    let mut http = modern_case(context, &modern, to_bytes(&modern.body));
    http.header("authorization", format!("Bearer spray-{index}").as_bytes());
    Case::http("credential spray", http)
}

impl Spray {
    /// Descriptors bounded: the gateway keeps at most 1,024 upstream sessions of its own
    /// (one descriptor each; idle ones close after 5 minutes), so however many
    /// credentials come, they stay within that and 64 more of where they were.
    fn passed(&self) -> bool {
        let bound = self.before.fds + UPSTREAM_SESSIONS_BOUND + 64;
        self.tally.failures == 0 && self.after.fds <= bound && self.quiet.fds <= bound
    }

    fn markdown(&self, out: &mut String) {
        let mib = |m: &Memory| format!("{:.1} MiB", m.rss_kib as f64 / 1024.0);
        let mark = if self.passed() { "✅" } else { "❌" };
        let _ = writeln!(
            out,
            "\n### Upstream sessions: {} bridged calls, each with its own Authorization\n",
            self.calls
        );
        let _ = writeln!(
            out,
            "| | before | after the calls | after {} s quiet | check |\n|---|---:|---:|---:|:---:|",
            self.quiet_secs
        );
        let _ = writeln!(
            out,
            "| gateway open fds | {} | {} | {} | {mark} |",
            self.before.fds, self.after.fds, self.quiet.fds
        );
        let _ = writeln!(
            out,
            "| gateway RSS | {} | {} | {} | |",
            mib(&self.before),
            mib(&self.after),
            mib(&self.quiet)
        );
        let _ = writeln!(out, "| failed calls | | {} | | |", self.tally.failures);
    }
}
