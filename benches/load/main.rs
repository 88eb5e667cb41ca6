//! End-to-end load harness (`harness = false`): real processes on loopback, HTTP/1.1
//! keep-alive load over a fixed number of connections, latency percentiles, requests
//! per second and the CPU time the gateway spends per request.
//!
//! ```text
//! cargo build --release -p mcp-task-gateway -p fixture-servers --bins
//! cargo bench --bench load -- --help
//! cargo bench --bench load -- --scenarios a,b --duration 10 --concurrency 32
//! ```
//!
//! It starts the fixture upstream (`plain_server` of `crates/fixture-servers`, release
//! build), its own `redis-server` on a free port when a scenario needs one, and the
//! gateway binary, each on 127.0.0.1 only, and kills them (by PID) when done. The load generator is one
//! single-threaded tokio runtime with one hyper HTTP/1.1 connection per concurrent
//! client. See docs/benchmarks.md for the scenarios and the figures.

// A bench is a program of measurement, like the tests: its steps may run past the 80
// lines the library's functions keep to.
#![allow(clippy::too_many_lines)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::floor::scenario_floor;
use crate::plot::{draw_plot, sweep_from_jsonl};
use crate::processes::{Binaries, raise_fd_limit};
use crate::readings::machine_description;
use crate::report::Report;
use crate::scenarios::{
    scenario_a, scenario_b, scenario_c, scenario_d, scenario_e, scenario_f, scenario_g, scenario_h,
    scenario_i, scenario_m, sweep,
};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) const MODERN: &str = "2026-07-28";
pub(crate) const LEGACY: &str = "2025-11-25";
pub(crate) const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";
/// Distinct request ids per shared legacy session (more than any connection count).
pub(crate) const LEGACY_IDS: u64 = 4096;
pub(crate) const ANNOUNCE_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Parser, Debug, Clone)]
#[command(
    name = "load",
    about = "End-to-end load harness of mcp-task-gateway (cargo bench --bench load -- ...)"
)]
pub(crate) struct Args {
    /// Scenarios, comma-separated: a (pass-through overhead), b (CreateTaskResult),
    /// c (tasks/get), d (create -> poll -> completed), e (10k tasks in flight),
    /// f (another proxy in front of a stdio server), g (deferred calls in flight against
    /// tasks), h (progress keep-alive CPU), i (/mcp/NAME with many named upstreams
    /// against a single-upstream gateway), m (memory per in-flight task: stores × 1 and
    /// 64 connections; not run by default), sweep (latency vs concurrency plot), floor
    /// (issues #31 and #47's figures against their goals, from a's, c's and m's loads, in
    /// alternating runs; not run by default).
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d,e,f,g,h,i,sweep")]
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
    /// Quiet streamed calls held open in scenario h (each takes two of the gateway's file
    /// descriptors: the client's connection and the upstream's).
    #[arg(long, default_value_t = 5000)]
    streams: usize,
    /// Tasks held in flight in scenario e.
    #[arg(long, default_value_t = 10_000)]
    in_flight: usize,
    /// Measured runs of each side of scenario e; its p99 ratio compares their medians,
    /// since one run's p99 swings with the scheduling of a shared 2-core machine.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    e_rounds: u64,
    /// Named upstreams of scenario i's second gateway (all with the one fixture's URL).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=999))]
    named_upstreams: u64,
    /// Measured runs of each side of scenario i, alternating; its ratios compare medians.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    i_rounds: u64,
    /// Measured runs of each side of scenario floor, alternating; its figures are medians.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=20))]
    floor_rounds: u64,
    /// Scenario b calls `sleep` for this long instead of `echo`: no task ends within the
    /// run, so the creates are measured without the finishes (keep runs short: each
    /// task holds an upstream connection). 0 = `echo`.
    #[arg(long, default_value_t = 0)]
    b_sleep_ms: u64,
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
    /// A Rust MCP proxy for scenario floor's fourth side: the `mcp-proxy` crate's binary
    /// (`cargo install --locked mcp-proxy --version 0.6.0`); without it, one on the PATH,
    /// else that side is left out.
    #[arg(long, env = "LOAD_RUST_PROXY")]
    rust_proxy: Option<PathBuf>,
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

pub(crate) fn wanted(args: &Args, scenario: &str) -> bool {
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
    if wanted(args, "g") {
        scenario_g(args, &bins, report).await;
    }
    if wanted(args, "h") {
        scenario_h(args, &bins, report).await;
    }
    if wanted(args, "i") {
        scenario_i(args, &bins, report).await;
    }
    if wanted(args, "m") {
        scenario_m(args, &bins, report, redis_ok).await;
    }
    if wanted(args, "floor") {
        scenario_floor(args, &bins, report, redis_ok).await;
    }
    if wanted(args, "sweep") {
        sweep(args, &bins, report).await;
    }
}

mod driver;
mod floor;
mod peer;
mod plot;
mod processes;
mod readings;
mod report;
mod rounds;
mod scenarios;
mod workloads;
