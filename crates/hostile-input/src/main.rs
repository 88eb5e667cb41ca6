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
//!   issue #43's header values beyond ASCII and contradictory revision signals
//!   (`revisions.rs`), in a real pass-through session opened before the campaign;
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
//! `--class NAME` draws only the classes whose name holds NAME (e.g. `header bytes`).
//! `--gateway-arg=--upstream-http2` puts the gateway's own calls on the HTTP/2 pool;
//! `--redis` keeps its tasks in a redis-server of the run's own.
//!
//! The gateway binary and the fixture are built with cargo in this program's profile
//! (release above); the gateway's log and the failing requests go to
//! `target/tmp/hostile_input/`.

mod campaign;
mod case;
mod classes;
mod gateway;
mod http1;
mod report;
mod revisions;
mod spray;
mod tally;
mod verdict;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use test_support::{Proc, spawn_announcing};

use crate::campaign::campaign;
use crate::case::Context;
use crate::gateway::{Checks, Memory, Peak, Progress, health};
use crate::report::{Report, replay};
use crate::spray::{Spray, spray};
use crate::tally::save_failures;

pub(crate) const STATELESS: &str = "2026-07-28";
pub(crate) const SESSION: &str = "2025-11-25";
pub(crate) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// Longest wait for one answer; an answer later than this is a failure.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// Failures kept with their request for the report (all are counted).
pub(crate) const KEPT_FAILURES: usize = 20;

#[derive(Parser, Debug)]
#[command(
    name = "hostile-input",
    about = "Malformed and mutated requests against the gateway"
)]
pub(crate) struct Args {
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
    /// A flag for the gateway (repeat for more), e.g. `--gateway-arg=--upstream-http2`
    /// to send its own calls over the HTTP/2 pool.
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    gateway_args: Vec<String>,
    /// Keep the gateway's tasks in a redis-server of the run's own instead of memory.
    #[arg(long)]
    redis: bool,
    /// Draw only the classes whose name holds this (e.g. `header bytes`), by their
    /// weights among themselves; the same seed then draws other requests.
    #[arg(long)]
    class: Option<String>,
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
    if classes::drawn(args.class.as_deref()).next().is_none() {
        return Err(format!("no class name holds {:?}", args.class));
    }
    let gateway_bin = gateway_binary()?;
    let (mut upstream, upstream_url) =
        test_support::bench::fixture_server(&gateway_bin, "plain_server");
    let log = log_path()?;
    let redis = args.redis.then(test_support::RedisServer::start);
    let mut extra = args.gateway_args.clone();
    if let Some(redis) = &redis {
        extra.extend(["--redis".to_owned(), redis.url()]);
    }
    let (mut gateway, url) = start_gateway(&gateway_bin, &upstream_url, &args, &extra, &log)?;
    let addr = socket_addr(&url)?;
    let mut context = Context::new(addr, args.seed, args.max_body_bytes);
    context.session = open_session(addr).await;
    context.class = args.class.clone();
    eprintln!(
        "gateway flags {extra:?}; pass-through session {:?}",
        context.session.as_deref()
    );
    let context = Arc::new(context);
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
pub(crate) fn log_path() -> Result<PathBuf, String> {
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
    extra: &[String],
    log: &Path,
) -> Result<(Proc, String), String> {
    let file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut command = Command::new(binary);
    command
        .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
        .args(["--drain-timeout-ms", "0", "--default-ttl-ms", "5000"])
        .args(["--max-body-bytes", &args.max_body_bytes.to_string()])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::from(file));
    Ok(spawn_announcing(
        "mcp-task-gateway",
        command,
        Duration::from_secs(30),
    ))
}

/// A 2025-11-25 session opened through the gateway (pass-through to the fixture): its
/// `Mcp-Session-Id`.
async fn open_session(addr: SocketAddr) -> Option<String> {
    use http_body_util::BodyExt;
    let mut sender = campaign::connect(addr).await.ok()?;
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": SESSION, "capabilities": {},
        "clientInfo": {"name": "hostile_input", "version": "0"}}});
    let request = http::Request::post("/mcp")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", SESSION)
        .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())).boxed_unsync())
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    let id = response
        .headers()
        .get("mcp-session-id")?
        .to_str()
        .ok()?
        .to_owned();
    let _ = response.into_body().collect().await;
    Some(id)
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
