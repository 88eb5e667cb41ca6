//! End-to-end load harness (`harness = false`): real processes on loopback, HTTP/1.1
//! keep-alive load over a fixed number of connections, latency percentiles, requests
//! per second and the CPU time the gateway spends per request.
//!
//! ```text
//! cargo build --release --examples --bins
//! cargo bench --bench load -- --help
//! cargo bench --bench load -- --scenarios a,b --duration 10 --concurrency 32
//! ```
//!
//! It starts the fixture upstream (`examples/plain_server`, release build), its own
//! `redis-server` on a free port when a scenario needs one, and the gateway binary, each
//! on 127.0.0.1 only, and kills them (by PID) when done. The load generator is one
//! single-threaded tokio runtime with one hyper HTTP/1.1 connection per concurrent
//! client. See BENCHMARKS.md for the scenarios and the figures.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";
/// Distinct request ids per shared legacy session (more than any connection count).
const LEGACY_IDS: u64 = 4096;
const ANNOUNCE_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Parser, Debug, Clone)]
#[command(
    name = "load",
    about = "End-to-end load harness of mcp-task-gateway (cargo bench --bench load -- ...)"
)]
struct Args {
    /// Scenarios, comma-separated: a (pass-through overhead), b (CreateTaskResult),
    /// c (tasks/get), d (create -> poll -> completed), e (10k tasks in flight),
    /// f (another proxy in front of a stdio server), sweep (latency vs concurrency plot).
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d,e,f,sweep")]
    scenarios: Vec<String>,
    /// Measured seconds of each run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of load before each measured window (not counted).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Connections of the throughput runs (the latency runs use 1).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Connection counts of the latency-vs-concurrency sweep.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    sweep: Vec<usize>,
    /// Measured seconds of each sweep point.
    #[arg(long, default_value_t = 3.0)]
    sweep_duration: f64,
    /// Upper bound on the requests of one run (warm-up included).
    #[arg(long, default_value_t = 2_000_000)]
    max_requests: u64,
    /// Tasks held in flight in scenario e.
    #[arg(long, default_value_t = 10_000)]
    in_flight: usize,
    /// Measured runs of each side of scenario e; its p99 ratio compares their medians,
    /// since one run's p99 swings with the scheduling of a shared 2-core machine.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    e_rounds: u64,
    /// Completed tasks that scenario c polls, round robin.
    #[arg(long, default_value_t = 1000)]
    tasks: usize,
    /// Where results.md and results.jsonl are written.
    #[arg(long, default_value = "target/bench-load")]
    out_dir: PathBuf,
    /// The latency-vs-concurrency plot (PNG); default: OUT_DIR/latency_vs_concurrency.png.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// The redis-server binary (scenarios b and c with Redis).
    #[arg(long, default_value = "redis-server")]
    redis_server: String,
    /// Skip the Redis variants even when the gateway supports --redis.
    #[arg(long)]
    no_redis: bool,
    /// The other proxies of scenario f, comma-separated: mcp-proxy, supergateway (npm,
    /// pinned in benches/peers; `npm ci --prefix benches/peers`).
    #[arg(long, value_delimiter = ',', default_value = "mcp-proxy,supergateway")]
    other_proxy: Vec<String>,
    /// Another gateway binary to measure (e.g. a copy built before a change), instead of
    /// the one this bench was built with.
    #[arg(long)]
    gateway_bin: Option<PathBuf>,
    /// Extra environment for the gateway, KEY=VALUE (repeatable), e.g.
    /// TOKIO_WORKER_THREADS=1.
    #[arg(long)]
    gateway_env: Vec<String>,
    /// A command the gateway is run under, e.g. "valgrind --tool=massif" (split on
    /// whitespace).
    #[arg(long)]
    gateway_wrap: Option<String>,
    /// Only draw the plot again from a results.jsonl of an earlier run (no load).
    #[arg(long)]
    replot: Option<PathBuf>,
    /// Optional name filter, as `cargo bench NAME` passes it; runs matching scenarios.
    filter: Option<String>,
}

fn main() {
    let raw: Vec<String> = std::env::args().collect();
    // `cargo test --benches` and nextest run bench targets in test mode (no `--bench`);
    // this harness only runs as a benchmark.
    if raw.iter().any(|a| a == "--list") {
        return;
    }
    if !raw.iter().any(|a| a == "--bench") {
        println!("load harness: not run in test mode; use `cargo bench --bench load`");
        return;
    }
    let args = Args::parse_from(raw.into_iter().filter(|a| a != "--bench"));
    if let Some(results) = &args.replot {
        let path = args
            .plot
            .clone()
            .unwrap_or_else(|| args.out_dir.join("latency_vs_concurrency.png"));
        let series = sweep_from_jsonl(results);
        match draw_plot(&path, &series) {
            Ok(()) => println!("plot written to {}", path.display()),
            Err(e) => eprintln!("no plot: {e}"),
        }
        return;
    }
    raise_fd_limit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut report = Report::new(&args.out_dir);
    report.header(&machine_description());
    runtime.block_on(run(&args, &mut report));
    report.finish();
}

fn wanted(args: &Args, scenario: &str) -> bool {
    let listed = args.scenarios.iter().any(|s| s == scenario);
    let filtered = args.filter.as_deref().is_none_or(|f| scenario.contains(f));
    listed && filtered
}

async fn run(args: &Args, report: &mut Report) {
    let bins = Binaries::locate(args);
    let redis_ok = !args.no_redis && bins.gateway_supports("--redis");
    if wanted(args, "a") {
        scenario_a(args, &bins, report).await;
    }
    if wanted(args, "b") {
        scenario_b(args, &bins, report, redis_ok).await;
    }
    if wanted(args, "c") {
        scenario_c(args, &bins, report, redis_ok).await;
    }
    if wanted(args, "d") {
        scenario_d(args, &bins, report).await;
    }
    if wanted(args, "e") {
        scenario_e(args, &bins, report).await;
    }
    if wanted(args, "f") {
        scenario_f(args, &bins, report).await;
    }
    if wanted(args, "sweep") {
        sweep(args, &bins, report).await;
    }
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

/// a. `tools/call` of the instant tool: straight to the upstream, through the gateway as a
/// legacy session (byte pass-through), and as a 2026-07-28 client without the tasks
/// extension (bridged inline).
async fn scenario_a(args: &Args, bins: &Binaries, report: &mut Report) {
    report.section("a. pass-through overhead: tools/call echo");
    for conns in [1, args.concurrency] {
        let (fixture, fixture_url) = bins.fixture();
        let (gateway, gateway_url) = bins.gateway(&fixture_url, &[]);
        let upstream = Target::parse(&fixture_url);
        let through = Target::parse(&gateway_url);
        let pids = Pids::new(Some(&gateway), Some(&fixture));

        let direct = legacy_echo_requests(&upstream).await;
        let stats = load(args, &upstream, &direct, conns, &pids).await;
        report.row("a", "direct (legacy session)", conns, &stats);
        let direct_stats = stats;

        let proxied = legacy_echo_requests(&through).await;
        let stats = load(args, &through, &proxied, conns, &pids).await;
        report.row("a", "gateway legacy pass-through", conns, &stats);
        report.compare(
            "gateway legacy pass-through / direct",
            &stats,
            &direct_stats,
        );

        let bridged = Workload::fixed(
            vec![modern_request(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "hi"}}),
                false,
            )],
            Expect::Contains(br#""result""#),
        );
        let stats = load(args, &through, &bridged, conns, &pids).await;
        report.row(
            "a",
            "gateway 2026 client, no tasks (bridged)",
            conns,
            &stats,
        );
        report.compare("gateway bridged / direct", &stats, &direct_stats);
        drop((gateway, fixture));
    }
}

/// b. `tools/call` with the tasks extension, answered with `CreateTaskResult`.
async fn scenario_b(args: &Args, bins: &Binaries, report: &mut Report, redis_ok: bool) {
    report.section("b. tools/call with the tasks extension -> CreateTaskResult");
    let create = Workload::fixed(
        vec![modern_request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
            true,
        )],
        Expect::Contains(br#""resultType":"task""#),
    );
    for conns in [1, args.concurrency] {
        for store in stores(redis_ok) {
            let (fixture, fixture_url) = bins.fixture();
            let redis = store.start(args);
            let (gateway, gateway_url) = bins.gateway(&fixture_url, &redis.flags());
            let target = Target::parse(&gateway_url);
            let pids = Pids::new(Some(&gateway), Some(&fixture)).with_redis(redis.proc());
            let stats = load(args, &target, &create, conns, &pids).await;
            report.row(
                "b",
                &format!("create task, {} store", store.name()),
                conns,
                &stats,
            );
            drop((gateway, fixture, redis));
        }
    }
}

/// c. `tasks/get` on completed tasks, round robin over `--tasks` of them.
async fn scenario_c(args: &Args, bins: &Binaries, report: &mut Report, redis_ok: bool) {
    report.section("c. tasks/get on completed tasks");
    for store in stores(redis_ok) {
        let (fixture, fixture_url) = bins.fixture();
        let redis = store.start(args);
        let (gateway, gateway_url) = bins.gateway(&fixture_url, &redis.flags());
        let target = Target::parse(&gateway_url);
        let pids = Pids::new(Some(&gateway), Some(&fixture)).with_redis(redis.proc());
        let ids = create_completed_tasks(&target, args.tasks).await;
        let gets = tasks_get_workload(&ids);
        for conns in [1, args.concurrency] {
            let stats = load(args, &target, &gets, conns, &pids).await;
            report.row(
                "c",
                &format!("tasks/get, {} store", store.name()),
                conns,
                &stats,
            );
        }
        drop((gateway, fixture, redis));
    }
}

/// d. The whole life of an instant task: create, poll `tasks/get` until `completed`.
async fn scenario_d(args: &Args, bins: &Binaries, report: &mut Report) {
    report.section("d. lifecycle: create -> poll -> completed (echo)");
    let (fixture, fixture_url) = bins.fixture();
    let (gateway, gateway_url) = bins.gateway(&fixture_url, &[]);
    let target = Target::parse(&gateway_url);
    let pids = Pids::new(Some(&gateway), Some(&fixture));
    let lifecycle = Workload::Lifecycle {
        create: modern_request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
            true,
        ),
    };
    for conns in [1, args.concurrency] {
        let stats = load(args, &target, &lifecycle, conns, &pids).await;
        report.row("d", "lifecycle, memory store", conns, &stats);
    }
    drop((gateway, fixture));
}

/// e. `--in-flight` tasks waiting on a 60 s upstream call: RSS per task and tasks/get p99
/// while they wait, against the same measurement on an idle gateway.
async fn scenario_e(args: &Args, bins: &Binaries, report: &mut Report) {
    report.section(&format!(
        "e. {} tasks in flight (sleep 60 s upstream)",
        args.in_flight
    ));
    let (fixture, fixture_url) = bins.fixture();
    let (gateway, gateway_url) = bins.gateway(&fixture_url, &[]);
    let target = Target::parse(&gateway_url);
    let upstream = Target::parse(&fixture_url);
    let pids = Pids::new(Some(&gateway), Some(&fixture));
    let ids = create_completed_tasks(&target, 100).await;
    let gets = tasks_get_workload(&ids);

    let idle_p99 = e_rounds(args, &target, &gets, &pids, report, "idle gateway").await;
    let rss_before = rss_kib(gateway.pid());
    let fixture_rss_before = rss_kib(fixture.pid());

    let sleeping = modern_request(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 60_000, "steps": 0}}),
        true,
    );
    let started = Instant::now();
    let created = create_many(&target, &sleeping, args.in_flight, 64).await;
    let create_secs = started.elapsed().as_secs_f64();
    let waiting = wait_in_flight(&upstream, args.in_flight as u64, Duration::from_secs(40)).await;
    let reached = started.elapsed().as_secs_f64();
    let rss_after = rss_kib(gateway.pid());
    let fixture_rss_after = rss_kib(fixture.pid());
    let fds = open_fds(gateway.pid());

    let in_flight = format!("{waiting} tasks in flight");
    let loaded_p99 = e_rounds(args, &target, &gets, &pids, report, &in_flight).await;
    let still = fixture_stats(&upstream)
        .await
        .and_then(|s| s["callsInFlight"].as_u64())
        .unwrap_or(0);
    let per_task = (rss_after.saturating_sub(rss_before)) as f64 * 1024.0 / waiting.max(1) as f64;
    report.note(&format!(
        "created {created} tasks in {create_secs:.2} s; the upstream held {waiting} calls after {reached:.2} s \
         ({still} still in flight after the tasks/get run); gateway open fds {fds}"
    ));
    report.note(&format!(
        "gateway VmRSS {} KiB idle -> {} KiB with {waiting} in flight: {:.1} KB ({:.2} KiB) per in-flight task",
        rss_before,
        rss_after,
        per_task / 1000.0,
        per_task / 1024.0
    ));
    report.note(&format!(
        "fixture VmRSS {fixture_rss_before} KiB -> {fixture_rss_after} KiB"
    ));
    let (idle_median, loaded_median) = (median(&idle_p99), median(&loaded_p99));
    report.note(&format!(
        "tasks/get p99 idle {} ms (median {idle_median:.3}), with tasks in flight {} ms (median {loaded_median:.3}): \
         ratio of the medians {:.2}",
        list_ms(&idle_p99),
        list_ms(&loaded_p99),
        loaded_median / idle_median
    ));
    report.record_extra(json!({
        "scenario": "e", "in_flight": waiting, "rss_before_kib": rss_before, "rss_after_kib": rss_after,
        "bytes_per_task": per_task, "p99_idle_ms": idle_median, "p99_loaded_ms": loaded_median,
        "p99_idle_runs_ms": idle_p99, "p99_loaded_runs_ms": loaded_p99,
    }));
    drop((gateway, fixture));
}

/// Scenario e's `tasks/get` load, `--e-rounds` times, each a row; their p99s.
async fn e_rounds(
    args: &Args,
    target: &Target,
    gets: &Workload,
    pids: &Pids,
    report: &mut Report,
    state: &str,
) -> Vec<f64> {
    let mut p99 = Vec::new();
    for round in 1..=args.e_rounds {
        let run = load(args, target, gets, args.concurrency, pids).await;
        let variant = format!("tasks/get, {state} (run {round})");
        report.row("e", &variant, args.concurrency, &run);
        p99.push(run.p(99.0));
    }
    p99
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn list_ms(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.3}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// f. The same pass-through load through another proxy in front of a stdio server
/// (server-everything), against the gateway with `--upstream-cmd`.
async fn scenario_f(args: &Args, bins: &Binaries, report: &mut Report) {
    report.section("f. another proxy in front of the same stdio server (server-everything)");
    let Some(everything) = bins.everything_entry() else {
        report.note(
            "skipped: tests/node_modules has no server-everything (run `npm ci --prefix tests`)",
        );
        return;
    };
    let supports_cmd = bins.gateway_supports("--upstream-cmd");
    let echo = json!({"name": "echo", "arguments": {"message": "hi"}});
    for conns in [1, args.concurrency] {
        // The other proxies, as a legacy (session) client would use them.
        for name in &args.other_proxy {
            match bins.other_proxy(name, &everything) {
                Some((proxy, url)) => {
                    let target = Target::parse(&url);
                    let pids = Pids::new(None, None)
                        .with_other(&proxy)
                        .with_upstream_children_of(&proxy);
                    let requests = legacy_requests(&target, "tools/call", echo.clone()).await;
                    let stats = load(args, &target, &requests, conns, &pids).await;
                    report.row("f", &format!("{name} (legacy session)"), conns, &stats);
                    drop(proxy);
                }
                None => report.note(&format!(
                    "skipped {name}: not installed (run `npm ci --prefix benches/peers`)"
                )),
            }
        }
        if !supports_cmd {
            report
                .note("gateway side skipped: this gateway has no --upstream-cmd (stdio upstreams)");
            continue;
        }
        let command = format!("node {} stdio", everything.display());
        let (gateway, url) = bins.gateway_cmd(&command);
        let target = Target::parse(&url);
        let pids = Pids::new(Some(&gateway), None).with_upstream_children_of(&gateway);
        let bridged = Workload::fixed(
            vec![modern_request("tools/call", echo.clone(), false)],
            Expect::Contains(br#""result""#),
        );
        let stats = load(args, &target, &bridged, conns, &pids).await;
        report.row(
            "f",
            "gateway --upstream-cmd (2026 client, bridged)",
            conns,
            &stats,
        );
        let legacy = legacy_requests(&target, "tools/call", echo.clone()).await;
        if legacy.is_usable() {
            let stats = load(args, &target, &legacy, conns, &pids).await;
            report.row(
                "f",
                "gateway --upstream-cmd (legacy session)",
                conns,
                &stats,
            );
        }
        drop(gateway);
    }
}

/// Latency against the number of connections, for the plot.
async fn sweep(args: &Args, bins: &Binaries, report: &mut Report) {
    report.section("sweep: latency against concurrency");
    let point = Args {
        duration: args.sweep_duration,
        ..args.clone()
    };
    let (fixture, fixture_url) = bins.fixture();
    let (gateway, gateway_url) = bins.gateway(&fixture_url, &[]);
    let upstream = Target::parse(&fixture_url);
    let through = Target::parse(&gateway_url);
    let pids = Pids::new(Some(&gateway), Some(&fixture));
    let direct = legacy_echo_requests(&upstream).await;
    let proxied = legacy_echo_requests(&through).await;
    let bridged = Workload::fixed(
        vec![modern_request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
            false,
        )],
        Expect::Contains(br#""result""#),
    );
    let ids = create_completed_tasks(&through, args.tasks).await;
    let gets = tasks_get_workload(&ids);
    let series: [(&str, &Target, &Workload); 4] = [
        ("direct to upstream (legacy)", &upstream, &direct),
        ("gateway legacy pass-through", &through, &proxied),
        ("gateway bridged (2026, no tasks)", &through, &bridged),
        ("gateway tasks/get (memory store)", &through, &gets),
    ];
    let mut plot: Vec<Series> = Vec::new();
    for (name, target, workload) in series {
        let mut points = Vec::new();
        for &conns in &args.sweep {
            let stats = load(&point, target, workload, conns, &pids).await;
            report.row("sweep", name, conns, &stats);
            points.push((conns, stats.p(50.0), stats.p(99.0)));
        }
        plot.push((name.to_owned(), points));
    }
    drop((gateway, fixture));
    let path = args
        .plot
        .clone()
        .unwrap_or_else(|| args.out_dir.join("latency_vs_concurrency.png"));
    match draw_plot(&path, &plot) {
        Ok(()) => report.note(&format!("plot written to {}", path.display())),
        Err(e) => report.note(&format!("no plot: {e}")),
    }
}

// ---------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------

/// One request the load generator sends, prebuilt.
#[derive(Clone)]
struct Req {
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Clone, Copy)]
enum Expect {
    /// HTTP 200 and the body contains these bytes.
    Contains(&'static [u8]),
}

impl Expect {
    fn ok(self, status: StatusCode, body: &[u8]) -> bool {
        match self {
            Expect::Contains(needle) => status == StatusCode::OK && contains(body, needle),
        }
    }
}

enum Workload {
    /// The requests, round robin.
    Fixed { requests: Vec<Req>, expect: Expect },
    /// `tools/call` with tasks, then `tasks/get` until the task is `completed`; one
    /// operation per lifecycle.
    Lifecycle { create: Req },
    /// Could not be set up (e.g. the server refused the session).
    Unusable(String),
}

impl Workload {
    fn fixed(requests: Vec<Req>, expect: Expect) -> Self {
        Workload::Fixed { requests, expect }
    }

    fn is_usable(&self) -> bool {
        !matches!(self, Workload::Unusable(_))
    }
}

fn base_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers
}

/// A 2026-07-28 request with `_meta` and the standard headers; `tasks` declares the
/// tasks extension.
fn modern_request(method: &str, mut params: Value, tasks: bool) -> Req {
    let capabilities = if tasks {
        json!({"extensions": {TASKS_EXT: {}}})
    } else {
        json!({})
    };
    let name = match method {
        "tools/call" => params["name"].as_str().map(str::to_owned),
        m if m.starts_with("tasks/") => params["taskId"].as_str().map(str::to_owned),
        _ => None,
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "0"},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut headers = base_headers();
    headers.insert("mcp-protocol-version", HeaderValue::from_static(MODERN));
    headers.insert(
        "mcp-method",
        HeaderValue::from_str(method).expect("ASCII method"),
    );
    if let Some(name) = name {
        headers.insert(
            "mcp-name",
            HeaderValue::from_str(&name).expect("ASCII name"),
        );
    }
    Req {
        headers,
        body: Bytes::from(serde_json::to_vec(&body).expect("JSON")),
    }
}

fn tasks_get_request(task_id: &str) -> Req {
    modern_request("tasks/get", json!({"taskId": task_id}), true)
}

fn tasks_get_workload(ids: &[String]) -> Workload {
    Workload::fixed(
        ids.iter().map(|id| tasks_get_request(id)).collect(),
        Expect::Contains(br#""status":"completed""#),
    )
}

/// A legacy session opened on `target` (initialize + initialized); the requests carry
/// its id. One session is shared by every connection.
async fn legacy_requests(target: &Target, method: &str, params: Value) -> Workload {
    let mut conn = match target.connect().await {
        Ok(conn) => conn,
        Err(e) => return Workload::Unusable(format!("connect: {e}")),
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "load", "version": "0"},
    }});
    let request = Req {
        headers: base_headers(),
        body: Bytes::from(init.to_string()),
    };
    let (status, headers, body) = match target.send_full(&mut conn, &request).await {
        Ok(answer) => answer,
        Err(e) => return Workload::Unusable(format!("initialize: {e}")),
    };
    if status != StatusCode::OK {
        return Workload::Unusable(format!(
            "initialize answered {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    let mut session = base_headers();
    session.insert("mcp-protocol-version", HeaderValue::from_static(LEGACY));
    if let Some(id) = headers.get("mcp-session-id") {
        session.insert("mcp-session-id", id.clone());
    }
    let initialized = Req {
        headers: session.clone(),
        body: Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
    };
    if let Err(e) = target.send_full(&mut conn, &initialized).await {
        return Workload::Unusable(format!("initialized: {e}"));
    }
    // Connections share the session, and a session refuses an id already in flight:
    // the requests cycle through distinct ids.
    let requests = (1..=LEGACY_IDS)
        .map(|id| {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            Req {
                headers: session.clone(),
                body: Bytes::from(body.to_string()),
            }
        })
        .collect();
    Workload::fixed(requests, Expect::Contains(br#""result""#))
}

async fn legacy_echo_requests(target: &Target) -> Workload {
    legacy_requests(
        target,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    )
    .await
}

/// Creates `count` echo tasks and waits until every one is `completed`.
async fn create_completed_tasks(target: &Target, count: usize) -> Vec<String> {
    let create = modern_request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
        true,
    );
    let mut conn = target.connect().await.expect("connect to the gateway");
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        let (_, _, body) = target
            .send_full(&mut conn, &create)
            .await
            .expect("tools/call");
        ids.push(task_id_of(&body).expect("a CreateTaskResult"));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in &ids {
        let get = tasks_get_request(id);
        loop {
            let (_, _, body) = target.send_full(&mut conn, &get).await.expect("tasks/get");
            if contains(&body, br#""status":"completed""#) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} did not complete: {}",
                String::from_utf8_lossy(&body)
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    ids
}

/// Sends `count` copies of `request` over `conns` connections; returns how many got a
/// `CreateTaskResult`.
async fn create_many(target: &Target, request: &Req, count: usize, conns: usize) -> usize {
    let left = Arc::new(AtomicUsize::new(count));
    let created = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..conns {
        let target = target.clone();
        let request = request.clone();
        let left = left.clone();
        let created = created.clone();
        handles.push(tokio::spawn(async move {
            let Ok(mut conn) = target.connect().await else {
                return;
            };
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                match target.send_full(&mut conn, &request).await {
                    Ok((_, _, body)) if contains(&body, br#""resultType":"task""#) => {
                        created.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => match target.connect().await {
                        Ok(c) => conn = c,
                        Err(_) => return,
                    },
                }
            }
        }));
    }
    for handle in handles {
        let _ = handle.await;
    }
    created.load(Ordering::Relaxed)
}

async fn fixture_stats(upstream: &Target) -> Option<Value> {
    let mut conn = upstream.connect().await.ok()?;
    let request = Request::builder()
        .method(Method::GET)
        .uri("/stats")
        .header(header::HOST, upstream.host.clone())
        .body(Full::new(Bytes::new()))
        .ok()?;
    let response = conn.send_request(request).await.ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&body).ok()
}

/// Waits until the fixture holds `count` calls (or the deadline); returns how many it holds.
async fn wait_in_flight(upstream: &Target, count: u64, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    loop {
        let now = fixture_stats(upstream)
            .await
            .and_then(|s| s["callsInFlight"].as_u64())
            .unwrap_or(0);
        if now >= count || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn task_id_of(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value["result"]["taskId"].as_str().map(str::to_owned)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------
// The load generator
// ---------------------------------------------------------------------------

#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    host: HeaderValue,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Self {
        let uri: http::Uri = url.parse().expect("a URL");
        let authority = uri.authority().expect("host:port").as_str().to_owned();
        Self {
            addr: authority.parse().expect("an IP:port"),
            host: HeaderValue::from_str(&authority).expect("ASCII"),
            path: uri.path().to_owned(),
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, BoxError> {
        let stream = tokio::net::TcpStream::connect(self.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    async fn send_full(
        &self,
        conn: &mut SendRequest<Full<Bytes>>,
        request: &Req,
    ) -> Result<(StatusCode, HeaderMap, Bytes), BoxError> {
        conn.ready().await?;
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.path.as_str())
            .header(header::HOST, self.host.clone());
        if let Some(headers) = builder.headers_mut() {
            headers.extend(request.headers.clone());
        }
        let response = conn
            .send_request(builder.body(Full::new(request.body.clone()))?)
            .await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok((parts.status, parts.headers, body))
    }
}

/// Processes whose CPU time is measured over a run.
#[derive(Clone, Copy)]
struct Pids {
    gateway: Option<u32>,
    upstream: Option<u32>,
    redis: Option<u32>,
    other: Option<u32>,
    /// The upstream is this process's descendants (a stdio server under a proxy).
    upstream_children_of: Option<u32>,
}

impl Pids {
    fn new(gateway: Option<&Proc>, upstream: Option<&Proc>) -> Self {
        Self {
            gateway: gateway.map(Proc::pid),
            upstream: upstream.map(Proc::pid),
            redis: None,
            other: None,
            upstream_children_of: None,
        }
    }

    /// The upstream is whatever `parent` runs (its stdio server).
    fn with_upstream_children_of(mut self, parent: &Proc) -> Self {
        self.upstream_children_of = Some(parent.pid());
        self
    }

    fn with_redis(mut self, redis: Option<&Proc>) -> Self {
        self.redis = redis.map(Proc::pid);
        self
    }

    fn with_other(mut self, other: &Proc) -> Self {
        self.other = Some(other.pid());
        self
    }

    fn sample(&self) -> [Option<f64>; 4] {
        let mut sample =
            [self.gateway, self.upstream, self.redis, self.other].map(|p| p.and_then(cpu_seconds));
        if let Some(parent) = self.upstream_children_of {
            sample[1] = Some(
                descendants(parent)
                    .into_iter()
                    .filter_map(cpu_seconds)
                    .sum(),
            );
        }
        sample
    }
}

struct Stats {
    conns: usize,
    /// Operations completed in the window (one per request; one per lifecycle in d).
    ops: u64,
    /// HTTP requests completed in the window.
    requests: u64,
    errors: u64,
    first_error: Option<String>,
    window: Duration,
    /// Sorted latencies of the operations, nanoseconds.
    latencies: Vec<u64>,
    /// CPU seconds over the window: gateway, upstream, redis, other proxy.
    cpu: [Option<f64>; 4],
}

impl Stats {
    fn p(&self, percentile: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((percentile / 100.0) * self.latencies.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies.len()) - 1;
        self.latencies[index] as f64 / 1e6
    }

    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.window.as_secs_f64()
    }

    fn requests_per_sec(&self) -> f64 {
        self.requests as f64 / self.window.as_secs_f64()
    }

    /// CPU microseconds per HTTP request of process `which` (0 gateway, 1 upstream,
    /// 2 redis, 3 other proxy).
    fn cpu_us_per_request(&self, which: usize) -> Option<f64> {
        self.cpu[which].map(|s| s * 1e6 / self.requests.max(1) as f64)
    }
}

/// Drives `workload` over `conns` keep-alive connections: `--warmup` seconds unmeasured,
/// then `--duration` seconds measured, bounded by `--max-requests`.
async fn load(
    args: &Args,
    target: &Target,
    workload: &Workload,
    conns: usize,
    pids: &Pids,
) -> Stats {
    if let Workload::Unusable(why) = workload {
        return Stats {
            conns,
            ops: 0,
            requests: 0,
            errors: 1,
            first_error: Some(why.clone()),
            window: Duration::from_secs(1),
            latencies: Vec::new(),
            cpu: [None; 4],
        };
    }
    let now = Instant::now();
    let start = now + Duration::from_secs_f64(args.warmup);
    let end = start + Duration::from_secs_f64(args.duration);
    let budget = Arc::new(AtomicU64::new(args.max_requests));
    let next = Arc::new(AtomicUsize::new(0));
    let shared = Arc::new(SharedWorkload::from(workload));

    let sampler = {
        let pids = *pids;
        tokio::spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let before = pids.sample();
            tokio::time::sleep_until(end.into()).await;
            let after = pids.sample();
            let mut delta = [None; 4];
            for i in 0..4 {
                if let (Some(a), Some(b)) = (after[i], before[i]) {
                    delta[i] = Some(a - b);
                }
            }
            delta
        })
    };

    let mut handles = Vec::with_capacity(conns);
    for _ in 0..conns {
        let target = target.clone();
        let budget = budget.clone();
        let next = next.clone();
        let shared = shared.clone();
        handles.push(tokio::spawn(async move {
            connection_loop(&target, &shared, &next, &budget, start, end).await
        }));
    }
    let mut totals = ConnResult::default();
    for handle in handles {
        let result = handle.await.expect("connection task");
        totals.merge(result);
    }
    let cpu = sampler.await.expect("sampler");
    totals.latencies.sort_unstable();
    let window = match totals.last_done {
        Some(last) if last < end => last.saturating_duration_since(start),
        _ => end - start,
    };
    Stats {
        conns,
        ops: totals.latencies.len() as u64,
        requests: totals.requests,
        errors: totals.errors,
        first_error: totals.first_error,
        window: window.max(Duration::from_millis(1)),
        latencies: totals.latencies,
        cpu,
    }
}

/// The workload as the connection tasks share it.
enum SharedWorkload {
    Fixed { requests: Vec<Req>, expect: Expect },
    Lifecycle { create: Req },
}

impl From<&Workload> for SharedWorkload {
    fn from(workload: &Workload) -> Self {
        match workload {
            Workload::Fixed { requests, expect } => SharedWorkload::Fixed {
                requests: requests.clone(),
                expect: *expect,
            },
            Workload::Lifecycle { create } => SharedWorkload::Lifecycle {
                create: create.clone(),
            },
            Workload::Unusable(_) => unreachable!("checked by load()"),
        }
    }
}

#[derive(Default)]
struct ConnResult {
    latencies: Vec<u64>,
    requests: u64,
    errors: u64,
    first_error: Option<String>,
    last_done: Option<Instant>,
}

impl ConnResult {
    fn merge(&mut self, other: ConnResult) {
        self.latencies.extend(other.latencies);
        self.requests += other.requests;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.last_done = match (self.last_done, other.last_done) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    fn error(&mut self, what: String, measured: bool) {
        if measured {
            self.errors += 1;
        }
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }
}

async fn connection_loop(
    target: &Target,
    workload: &SharedWorkload,
    next: &AtomicUsize,
    budget: &AtomicU64,
    start: Instant,
    end: Instant,
) -> ConnResult {
    let mut result = ConnResult::default();
    let mut conn = None;
    let take = || {
        budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    };
    while Instant::now() < end && take() {
        if conn.is_none() {
            match target.connect().await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    result.error(format!("connect: {e}"), Instant::now() >= start);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let sender = conn.as_mut().expect("connected");
        let began = Instant::now();
        let outcome = match workload {
            SharedWorkload::Fixed { requests, expect } => {
                let request = &requests[next.fetch_add(1, Ordering::Relaxed) % requests.len()];
                match target.send_full(sender, request).await {
                    Ok((status, _, body)) if expect.ok(status, &body) => Ok(1),
                    Ok((status, _, body)) => Err((
                        format!(
                            "unexpected answer {status}: {}",
                            String::from_utf8_lossy(&body[..body.len().min(300)])
                        ),
                        false,
                    )),
                    Err(e) => Err((format!("request: {e}"), true)),
                }
            }
            SharedWorkload::Lifecycle { create } => lifecycle(target, sender, create).await,
        };
        let done = Instant::now();
        let measured = began >= start && done <= end;
        match outcome {
            Ok(requests) => {
                if measured {
                    result.latencies.push((done - began).as_nanos() as u64);
                    result.requests += requests;
                    result.last_done = Some(done);
                }
            }
            Err((what, broken)) => {
                result.error(what, measured);
                if broken {
                    conn = None;
                }
            }
        }
    }
    result
}

/// One task's life: create, then `tasks/get` until `completed`. Returns the number of
/// HTTP requests it took.
async fn lifecycle(
    target: &Target,
    conn: &mut SendRequest<Full<Bytes>>,
    create: &Req,
) -> Result<u64, (String, bool)> {
    let (_, _, body) = target
        .send_full(conn, create)
        .await
        .map_err(|e| (format!("create: {e}"), true))?;
    let id = task_id_of(&body).ok_or_else(|| {
        (
            format!("not a task: {}", String::from_utf8_lossy(&body)),
            false,
        )
    })?;
    let get = tasks_get_request(&id);
    let mut requests = 1;
    for _ in 0..10_000 {
        let (_, _, body) = target
            .send_full(conn, &get)
            .await
            .map_err(|e| (format!("tasks/get: {e}"), true))?;
        requests += 1;
        if contains(&body, br#""status":"completed""#) {
            return Ok(requests);
        }
        if !contains(&body, br#""status":"working""#) {
            return Err((
                format!("unexpected task: {}", String::from_utf8_lossy(&body)),
                false,
            ));
        }
    }
    Err(("task never completed".into(), false))
}

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

/// A child process in a process group of its own, stopped with that group when dropped
/// (so a wrapper's program, npx's node or a proxy's server stops too): SIGTERM, then
/// SIGKILL after `grace` (a wrapped gateway, e.g. under valgrind, needs to exit by itself
/// to write its report).
struct Proc {
    child: Child,
    name: String,
    grace: Duration,
}

impl Proc {
    fn spawn(mut command: Command, name: &str) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        let child = command.process_group(0).spawn()?;
        Ok(Self {
            child,
            name: name.to_owned(),
            grace: Duration::ZERO,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal_group(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the process group this child leads (created at spawn).
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), signal);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.grace.is_zero() {
            self.signal_group(libc::SIGTERM);
            let deadline = Instant::now() + self.grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!(
                "{} did not stop within {:?}; killing it",
                self.name, self.grace
            );
        }
        self.signal_group(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

struct Binaries {
    root: PathBuf,
    gateway: PathBuf,
    fixture: PathBuf,
    wrap: Vec<String>,
    env: Vec<(String, String)>,
}

impl Binaries {
    /// The gateway is the bench profile's own build of the binary; the fixture is built
    /// with `cargo build --release --example plain_server` if needed.
    fn locate(args: &Args) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let built = PathBuf::from(env!("CARGO_BIN_EXE_mcp-task-gateway"));
        let profile_dir = built.parent().expect("target/<profile>").to_path_buf();
        let gateway = args.gateway_bin.clone().unwrap_or(built);
        let fixture = profile_dir.join("examples").join("plain_server");
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let fresh = match (
            modified(&fixture),
            modified(&root.join("examples/plain_server.rs")),
        ) {
            (Some(built), Some(source)) => built >= source,
            _ => false,
        };
        if !fresh {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut command = Command::new(cargo);
            // The variables `cargo bench` sets for the bench would change build-script
            // fingerprints and rebuild half the tree.
            for (name, _) in std::env::vars_os() {
                let name = name.to_string_lossy().into_owned();
                if name.starts_with("CARGO_") && name != "CARGO_HOME" && name != "CARGO_TARGET_DIR"
                {
                    command.env_remove(&name);
                }
            }
            let status = command
                .args(["build", "--release", "--example", "plain_server"])
                .current_dir(&root)
                .status()
                .expect("cargo build --release --example plain_server");
            assert!(status.success(), "building the fixture failed");
        }
        assert!(
            fixture.exists(),
            "fixture not found at {}",
            fixture.display()
        );
        let wrap = args
            .gateway_wrap
            .as_deref()
            .map(|w| w.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let env = args
            .gateway_env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self {
            root,
            gateway,
            fixture,
            wrap,
            env,
        }
    }

    /// The gateway binary, under `--gateway-wrap` if given.
    fn gateway_command(&self) -> Command {
        let mut command = match self.wrap.split_first() {
            Some((program, wrap_args)) => {
                let mut command = Command::new(program);
                command.args(wrap_args).arg(&self.gateway);
                command
            }
            None => Command::new(&self.gateway),
        };
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    fn gateway_supports(&self, flag: &str) -> bool {
        Command::new(&self.gateway)
            .arg("--help")
            .output()
            // The gateway prints its help on stderr (exit status 2).
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).contains(flag)
                    || String::from_utf8_lossy(&o.stderr).contains(flag)
            })
            .unwrap_or(false)
    }

    fn fixture(&self) -> (Proc, String) {
        let mut command = Command::new(&self.fixture);
        command.args(["--listen", "127.0.0.1:0"]);
        command.env("RUST_LOG", "error");
        spawn_announcing("plain_server", command)
    }

    fn gateway(&self, upstream: &str, extra: &[String]) -> (Proc, String) {
        let mut command = self.gateway_command();
        command
            .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
            .args(extra);
        gateway_env(&mut command);
        self.graced(spawn_announcing("mcp-task-gateway", command))
    }

    fn gateway_cmd(&self, upstream_cmd: &str) -> (Proc, String) {
        let mut command = self.gateway_command();
        command.args(["--listen", "127.0.0.1:0", "--upstream-cmd", upstream_cmd]);
        command.current_dir(self.root.join("tests"));
        gateway_env(&mut command);
        self.graced(spawn_announcing("mcp-task-gateway", command))
    }

    /// A wrapped gateway gets SIGTERM and time to exit (and write its report).
    fn graced(&self, (mut proc, url): (Proc, String)) -> (Proc, String) {
        if !self.wrap.is_empty() {
            proc.grace = Duration::from_secs(120);
        }
        (proc, url)
    }

    fn everything_entry(&self) -> Option<PathBuf> {
        let entry = self
            .root
            .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        entry.exists().then_some(entry)
    }

    /// Starts the other proxy of scenario f in front of server-everything over stdio.
    fn other_proxy(&self, which: &str, everything: &Path) -> Option<(Proc, String)> {
        let peers = self.root.join("benches/peers/node_modules");
        let port = free_port();
        let mut command = Command::new("node");
        match which {
            "mcp-proxy" => {
                let entry = peers.join("mcp-proxy/dist/bin/mcp-proxy.mjs");
                if !entry.exists() {
                    return None;
                }
                command
                    .arg(entry)
                    .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
                    .args(["--server", "stream", "--", "node"])
                    .arg(everything)
                    .arg("stdio");
            }
            "supergateway" => {
                let entry = peers.join("supergateway/dist/index.js");
                if !entry.exists() {
                    return None;
                }
                command
                    .arg(entry)
                    .args(["--stdio", &format!("node {} stdio", everything.display())])
                    .args(["--outputTransport", "streamableHttp", "--stateful"])
                    .args(["--port", &port.to_string(), "--logLevel", "none"]);
            }
            _ => return None,
        }
        command
            .current_dir(self.root.join("tests"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = Proc::spawn(command, which).ok()?;
        wait_for_port(port, ANNOUNCE_DEADLINE).ok()?;
        Some((proc, format!("http://127.0.0.1:{port}/mcp")))
    }
}

fn gateway_env(command: &mut Command) {
    command
        .args(["--drain-timeout-ms", "0"])
        .env("RUST_LOG", "error")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("MTG_LOG_FORMAT", "json");
}

#[derive(Clone, Copy)]
enum Store {
    Memory,
    Redis,
}

fn stores(redis_ok: bool) -> Vec<Store> {
    if redis_ok {
        vec![Store::Memory, Store::Redis]
    } else {
        vec![Store::Memory]
    }
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Redis => "Redis",
        }
    }

    fn start(self, args: &Args) -> Redis {
        match self {
            Store::Memory => Redis(None),
            Store::Redis => Redis(Some(start_redis(&args.redis_server))),
        }
    }
}

/// A Redis server of this run, or none for the memory store.
struct Redis(Option<(Proc, String)>);

impl Redis {
    fn flags(&self) -> Vec<String> {
        match &self.0 {
            Some((_, url)) => vec!["--redis".into(), url.clone()],
            None => Vec::new(),
        }
    }

    fn proc(&self) -> Option<&Proc> {
        self.0.as_ref().map(|(p, _)| p)
    }
}

fn start_redis(binary: &str) -> (Proc, String) {
    let port = free_port();
    let mut command = Command::new(binary);
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let proc = Proc::spawn(command, "redis-server").expect("redis-server on the PATH");
    wait_for_port(port, ANNOUNCE_DEADLINE).expect("redis-server listening");
    (proc, format!("redis://127.0.0.1:{port}"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_for_port(port: u16, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("nothing listens on port {port}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Spawns `command` and waits for its `listening on URL` line.
fn spawn_announcing(name: &str, mut command: Command) -> (Proc, String) {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut proc =
        Proc::spawn(command, name).unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    let stdout = proc.child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { return };
            if let Some(url) = line.strip_prefix("listening on ") {
                let _ = tx.send(url.trim().to_owned());
                break;
            }
        }
        for _ in lines {}
    });
    let url = rx
        .recv_timeout(ANNOUNCE_DEADLINE)
        .unwrap_or_else(|_| panic!("{name} did not announce its address"));
    (proc, url)
}

/// Children inherit the limit: 10,000 tasks in flight need 10,000 upstream sockets in
/// the gateway and as many in the fixture.
fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    #[allow(unsafe_code)]
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

// ---------------------------------------------------------------------------
// /proc readings
// ---------------------------------------------------------------------------

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks)
}

/// Every process below `pid` (a proxy may start its server through a shell).
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(next) = queue.pop() {
        for child in children(next) {
            found.push(child);
            queue.push(child);
        }
    }
    found
}

/// The direct children of a process.
fn children(pid: u32) -> Vec<u32> {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    threads
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = meminfo.lines().next().unwrap_or("").to_owned();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "machine: {cpus} CPUs, {model}; {}; load average at start: {}",
        mem.split_whitespace().collect::<Vec<_>>().join(" "),
        load.trim()
    )
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

struct Report {
    md: std::fs::File,
    jsonl: std::fs::File,
    table_open: bool,
    pending_notes: Vec<String>,
}

impl Report {
    fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("output directory");
        let md = std::fs::File::create(dir.join("results.md")).expect("results.md");
        let jsonl = std::fs::File::create(dir.join("results.jsonl")).expect("results.jsonl");
        Self {
            md,
            jsonl,
            table_open: false,
            pending_notes: Vec::new(),
        }
    }

    fn out(&mut self, line: &str) {
        println!("{line}");
        let _ = writeln!(self.md, "{line}");
    }

    fn header(&mut self, machine: &str) {
        self.out("# mcp-task-gateway load harness");
        self.out("");
        self.out(machine);
    }

    fn section(&mut self, title: &str) {
        self.flush_notes();
        self.table_open = false;
        self.out("");
        self.out(&format!("## {title}"));
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        self.out(&format!("(load average {})", load.trim()));
    }

    fn row(&mut self, scenario: &str, variant: &str, conns: usize, s: &Stats) {
        if !self.table_open {
            self.out("");
            self.out("| variant | conns | ops | ops/s | req/s | p50 ms | p90 ms | p99 ms | max ms | gateway CPU µs/req | upstream CPU µs/req | redis CPU µs/req | other proxy CPU µs/req | errors |");
            self.out("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            self.table_open = true;
        }
        let cpu = |i: usize| {
            s.cpu_us_per_request(i)
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "—".into())
        };
        let max = s
            .latencies
            .last()
            .map(|&n| n as f64 / 1e6)
            .unwrap_or(f64::NAN);
        let errors = match &s.first_error {
            Some(e) if s.errors > 0 || s.ops == 0 => format!("{} ({})", s.errors, shorten(e)),
            _ => s.errors.to_string(),
        };
        self.out(&format!(
            "| {variant} | {conns} | {} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {} | {errors} |",
            s.ops,
            s.ops_per_sec(),
            s.requests_per_sec(),
            s.p(50.0),
            s.p(90.0),
            s.p(99.0),
            max,
            cpu(0),
            cpu(1),
            cpu(2),
            cpu(3),
        ));
        let record = json!({
            "scenario": scenario, "variant": variant, "conns": s.conns, "ops": s.ops,
            "requests": s.requests, "errors": s.errors, "window_s": s.window.as_secs_f64(),
            "ops_per_s": s.ops_per_sec(), "req_per_s": s.requests_per_sec(),
            "p50_ms": s.p(50.0), "p90_ms": s.p(90.0), "p99_ms": s.p(99.0), "max_ms": max,
            "gateway_cpu_us_per_req": s.cpu_us_per_request(0),
            "upstream_cpu_us_per_req": s.cpu_us_per_request(1),
            "redis_cpu_us_per_req": s.cpu_us_per_request(2),
            "other_cpu_us_per_req": s.cpu_us_per_request(3),
        });
        let _ = writeln!(self.jsonl, "{record}");
    }

    fn compare(&mut self, what: &str, ours: &Stats, base: &Stats) {
        let line = format!(
            "{what} at {} conns: p50 {:.3} vs {:.3} ms (+{:.3} ms, ×{:.2}); p99 ×{:.2}; req/s ×{:.2}",
            ours.conns,
            ours.p(50.0),
            base.p(50.0),
            ours.p(50.0) - base.p(50.0),
            ours.p(50.0) / base.p(50.0),
            ours.p(99.0) / base.p(99.0),
            ours.requests_per_sec() / base.requests_per_sec(),
        );
        self.pending_notes.push(line);
    }

    fn note(&mut self, text: &str) {
        self.pending_notes.push(text.to_owned());
    }

    fn record_extra(&mut self, value: Value) {
        let _ = writeln!(self.jsonl, "{value}");
    }

    fn finish(&mut self) {
        self.flush_notes();
    }
}

fn shorten(text: &str) -> String {
    let one_line: String = text.replace(['\n', '|'], " ");
    one_line.chars().take(120).collect()
}

// ---------------------------------------------------------------------------
// Plot
// ---------------------------------------------------------------------------

fn load_font() -> Result<(), String> {
    use plotters::style::{FontStyle, register_font};
    let candidates = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ];
    let bytes = candidates
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .ok_or("no TrueType font found (install fonts-dejavu-core)")?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| "bad font file".to_owned())
}

/// Two panels, p50 and p99, latency (ms, log) against connections (log 2).
/// The sweep's series from the results.jsonl of a run, in the order they appear.
fn sweep_from_jsonl(path: &Path) -> Vec<Series> {
    let text = std::fs::read_to_string(path).expect("results.jsonl");
    let mut series: Vec<Series> = Vec::new();
    for row in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        if row["scenario"] != "sweep" {
            continue;
        }
        let name = row["variant"].as_str().unwrap_or("?").to_owned();
        let point = (
            row["conns"].as_u64().unwrap_or(0) as usize,
            row["p50_ms"].as_f64().unwrap_or(f64::NAN),
            row["p99_ms"].as_f64().unwrap_or(f64::NAN),
        );
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, points)) => points.push(point),
            None => series.push((name, vec![point])),
        }
    }
    series
}

/// A line of the plot: its name and (connections, p50 ms, p99 ms) points.
type Series = (String, Vec<(usize, f64, f64)>);

fn draw_plot(path: &Path, series: &[Series]) -> Result<(), String> {
    use plotters::prelude::*;
    load_font()?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    let root = BitMapBackend::new(path, (1400, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (title, body) = root.split_vertically(50);
    title
        .titled(
            "mcp-task-gateway: latency against concurrency (tools/call echo, tasks/get)",
            ("sans-serif", 24),
        )
        .map_err(|e| e.to_string())?;
    let panels = body.split_evenly((1, 2));
    let max_conns = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .max()
        .unwrap_or(64) as f64;
    let conn_ticks: Vec<f64> = series
        .first()
        .map(|(_, p)| p.iter().map(|x| x.0 as f64).collect())
        .unwrap_or_default();
    let finite = |v: f64| v.is_finite() && v > 0.0;
    let all: Vec<f64> = series
        .iter()
        .flat_map(|(_, p)| p.iter().flat_map(|x| [x.1, x.2]))
        .filter(|v| finite(*v))
        .collect();
    let y_min = all.iter().copied().fold(f64::INFINITY, f64::min).max(0.01) * 0.8;
    let y_max = all.iter().copied().fold(0.0, f64::max) * 1.25;
    let colors = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x94, 0x67, 0xbd),
    ];
    for (panel, (label, pick)) in panels
        .iter()
        .zip([("p50 latency (ms)", 0usize), ("p99 latency (ms)", 1usize)])
    {
        let mut chart = ChartBuilder::on(panel)
            .margin(16)
            .caption(label, ("sans-serif", 20))
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(
                (1f64..max_conns * 1.1)
                    .log_scale()
                    .with_key_points(conn_ticks.clone()),
                (y_min..y_max.max(y_min * 2.0)).log_scale(),
            )
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("connections (concurrent clients)")
            .y_desc(label)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.2}"))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = colors[i % colors.len()];
            let data: Vec<(f64, f64)> = points
                .iter()
                .map(|&(c, p50, p99)| (c as f64, if pick == 0 { p50 } else { p99 }))
                .filter(|(_, v)| finite(*v))
                .collect();
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(data.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// Notes are printed after the table they belong to.
impl Report {
    fn flush_notes(&mut self) {
        if self.pending_notes.is_empty() {
            return;
        }
        self.out("");
        let notes = std::mem::take(&mut self.pending_notes);
        for note in notes {
            self.out(&format!("- {note}"));
        }
    }
}
