//! Scenario `floor`: the figures of issues #31 and #47 in one run, each against its
//! latest goal.
//!
//! - pass-through p99 against direct (scenario a's loads), at 1 and 16 connections, in
//!   `--floor-rounds` alternating runs a side of one fixture and one gateway, beside a
//!   byte relay and a Rust MCP proxy when they are installed; with the byte relay, the
//!   goal is its own ratio (#47), else ×1.5 (#31); and throughput at 16 connections
//!   against direct's (#47);
//! - `tasks/get` on completed tasks (scenario c's gateways) at 16 connections, the Redis
//!   store against the memory store, alternating the same way, and `/healthz` on the same
//!   gateway: what this harness and machine reach with no MCP work at all;
//! - memory per in-flight task (scenario m), both stores, 1 and 64 connections.
//!
//! It ends with one table: each figure, its ratio against direct or the memory store, its
//! goal, and whether the goal is met. The gateway runs with its defaults, as a user would
//! start it, so the figures follow whatever the defaults are.

use bytes::Bytes;
use serde_json::json;

use test_support::Proc;

use crate::Args;
use crate::driver::{Pids, Target, load};
use crate::peer;
use crate::processes::{Binaries, Store, stores};
use crate::report::Report;
use crate::rounds::{Medians, Side, alternate, alternate_sides};
use crate::scenarios::{MEMORY_CONNS, PolledGateway, memory_per_task};
use crate::workloads::{
    Expect, Req, Workload, base_headers, legacy_echo_requests, legacy_requests,
};

/// The issues' goals: #31's p99 over direct where no byte relay runs beside (#47's is
/// the byte relay's own ratio), #47's throughput at [`MANY`] connections and memory.
const P99_OVER_DIRECT: f64 = 1.5;
const THROUGHPUT_OF_DIRECT: f64 = 0.7;
const REDIS_TASKS_GET_PER_S: f64 = 60_000.0;
const BYTES_PER_TASK: f64 = 6_000.0;
/// The issue states its pass-through and `tasks/get` figures at 16 connections.
const MANY: usize = 16;

/// One line of the closing table.
struct Figure {
    what: String,
    measured: String,
    /// The ratio and what it is against, if the figure has one.
    ratio: Option<(f64, &'static str)>,
    goal: String,
    met: bool,
}

pub(crate) async fn scenario_floor(
    args: &Args,
    bins: &Binaries,
    report: &mut Report,
    redis_ok: bool,
) {
    report.section(&format!(
        "floor: issues #31 and #47's figures against their goals ({} alternating runs a side)",
        args.floor_rounds
    ));
    let mut figures = pass_through_tail(args, bins, report).await;
    if redis_ok {
        figures.push(tasks_get_on_redis(args, bins, report).await);
    } else {
        report.note(
            "tasks/get on Redis skipped: no Redis (--no-redis, or the gateway has no --redis)",
        );
    }
    figures.extend(memory_per_in_flight_task(args, bins, report, redis_ok).await);
    goal_table(report, &figures);
}

/// Scenario a's direct and pass-through loads, alternating on one fixture and gateway,
/// with a byte relay (`socat`) in front of the same fixture as a third side if it is
/// installed: the floor of any proxy's latency, so that the gateway's ratio can be read
/// against what no proxy can go below on this machine. A Rust MCP proxy (`--rust-proxy`)
/// is a fourth side if found: what a user could run instead of the gateway.
async fn pass_through_tail(args: &Args, bins: &Binaries, report: &mut Report) -> Vec<Figure> {
    let (fixture, fixture_url) = bins.fixture();
    let (gateway, gateway_url) = bins.gateway(&fixture_url, &[]);
    let relay = bins.byte_relay(&fixture_url);
    if relay.is_none() {
        report.note("no byte relay row: socat is not installed");
    }
    let rust_proxy = start_rust_proxy(args, &fixture_url, report);
    let (upstream, through) = (Target::parse(&fixture_url), Target::parse(&gateway_url));
    let relayed = relay.as_ref().map(|(_, url)| Target::parse(url));
    let peer = rust_proxy.as_ref().map(|(_, url)| Target::parse(url));
    let pids = Pids::new(Some(&gateway), Some(&fixture));
    let (direct_load, proxied_load) = (
        legacy_echo_requests(&upstream).await,
        legacy_echo_requests(&through).await,
    );
    let relay_load = match &relayed {
        Some(target) => Some(legacy_echo_requests(target).await),
        None => None,
    };
    let echo = json!({"name": peer::ECHO_THROUGH_IT, "arguments": {"text": "hi"}});
    let peer_load = match &peer {
        Some(target) => Some(legacy_requests(target, "tools/call", echo).await),
        None => None,
    };
    let direct = Side {
        label: "direct (legacy session)".into(),
        target: &upstream,
        workload: &direct_load,
        // No gateway on this side: its CPU column stays empty rather than the idle
        // gateway's background.
        pids: Pids::new(None, Some(&fixture)),
    };
    let proxied = Side {
        label: "gateway legacy pass-through".into(),
        target: &through,
        workload: &proxied_load,
        pids,
    };
    let relay_side = relayed
        .as_ref()
        .zip(relay_load.as_ref())
        .map(|(target, workload)| Side {
            label: "byte relay (socat)".into(),
            target,
            workload,
            // socat forks a child per connection, whose CPU its own PID does not count.
            pids: Pids::new(None, Some(&fixture)),
        });
    let peer_side = peer
        .as_ref()
        .zip(peer_load.as_ref())
        .zip(rust_proxy.as_ref())
        .map(|((target, workload), (proc, _))| Side {
            label: format!("{} (legacy session)", peer::RUST_PROXY),
            target,
            workload,
            // Its CPU goes in the other proxy's column, as scenario f's proxies' does.
            pids: Pids::new(None, Some(&fixture)).with_other(proc),
        });
    let mut figures = Vec::new();
    let mut compared = Vec::new();
    for conns in [1, MANY] {
        let mut sides = vec![&direct, &proxied];
        let relay_at = relay_side.as_ref().map(|side| {
            sides.push(side);
            sides.len() - 1
        });
        let peer_at = peer_side.as_ref().map(|side| {
            sides.push(side);
            sides.len() - 1
        });
        let runs = alternate_sides(args, "floor", &sides, conns, args.floor_rounds, report).await;
        let medians: Vec<Medians> = runs.iter().map(|runs| Medians::of(runs)).collect();
        let (direct_m, proxied_m) = (medians[0], medians[1]);
        let relay_m = relay_at.map(|at| medians[at]);
        let peer_m = peer_at.map(|at| medians[at]);
        report.note(&format!(
            "pass-through / direct at {conns} conn(s), medians of {} runs: {}",
            args.floor_rounds,
            proxied_m.against(&direct_m)
        ));
        if let Some(relay_m) = &relay_m {
            report.note(&format!(
                "byte relay / direct at {conns} conn(s), medians of {} runs: {}",
                args.floor_rounds,
                relay_m.against(&direct_m)
            ));
        }
        if let Some(peer_m) = &peer_m {
            report.note(&format!(
                "{} / direct at {conns} conn(s), medians of {} runs: {}; its CPU {:.1} µs/req",
                peer::RUST_PROXY,
                args.floor_rounds,
                peer_m.against(&direct_m),
                peer_m.other_cpu_us,
            ));
        }
        report.record_extra(json!({
            "scenario": "floor", "figure": "pass-through", "conns": conns,
            "rounds": args.floor_rounds, "direct": direct_m.json(), "pass_through": proxied_m.json(),
            "byte_relay": relay_m.as_ref().map(Medians::json),
            "rust_proxy": peer_m.as_ref().map(Medians::json),
        }));
        compared.push(Compared {
            conns,
            direct: direct_m,
            gateway: proxied_m,
            relay: relay_m,
            peer: peer_m,
        });
        let ratio = proxied_m.p99_ms / direct_m.p99_ms;
        let relay_ratio = relay_m.map(|relay_m| relay_m.p99_ms / direct_m.p99_ms);
        let floor = relay_m.map_or_else(String::new, |relay_m| {
            format!(
                "; a byte relay: p99 ×{:.2}, p50 ×{:.2}",
                relay_m.p99_ms / direct_m.p99_ms,
                relay_m.p50_ms / direct_m.p50_ms
            )
        });
        let (goal, limit) = match relay_ratio {
            Some(relay) => (format!("≤ the byte relay's ×{relay:.2} (#47)"), relay),
            None => (
                format!("≤ ×{P99_OVER_DIRECT} direct (#31)"),
                P99_OVER_DIRECT,
            ),
        };
        let throughput = proxied_m.req_per_s / direct_m.req_per_s;
        figures.push(Figure {
            what: format!("pass-through p99, {conns} connection(s)"),
            measured: format!(
                "{:.3} vs {:.3} ms (p50 ×{:.2}, req/s ×{throughput:.2}{floor})",
                proxied_m.p99_ms,
                direct_m.p99_ms,
                proxied_m.p50_ms / direct_m.p50_ms,
            ),
            ratio: Some((ratio, "direct")),
            goal,
            met: ratio <= limit,
        });
        if conns == MANY {
            figures.push(Figure {
                what: format!("pass-through req/s, {conns} connections"),
                measured: format!(
                    "{:.0} vs {:.0} req/s",
                    proxied_m.req_per_s, direct_m.req_per_s
                ),
                ratio: Some((throughput, "direct")),
                goal: format!("≥ ×{THROUGHPUT_OF_DIRECT} direct (#47)"),
                met: throughput >= THROUGHPUT_OF_DIRECT,
            });
        }
    }
    drop((rust_proxy, relay, gateway, fixture));
    side_by_side(report, &compared);
    figures
}

/// The Rust proxy of `--rust-proxy`, or a note of why there is no such side.
fn start_rust_proxy(args: &Args, upstream: &str, report: &mut Report) -> Option<(Proc, String)> {
    let Some(bin) = peer::locate(args.rust_proxy.as_deref()) else {
        report.note("no Rust MCP proxy row: no --rust-proxy, and no mcp-proxy (Rust) on the PATH");
        return None;
    };
    match peer::start(&bin, upstream, &args.out_dir) {
        Ok(started) => Some(started),
        Err(e) => {
            report.note(&format!(
                "no Rust MCP proxy row: {} did not start: {e}",
                bin.display()
            ));
            None
        }
    }
}

/// One connection count's medians of the pass-through sides.
struct Compared {
    conns: usize,
    direct: Medians,
    gateway: Medians,
    relay: Option<Medians>,
    peer: Option<Medians>,
}

/// The pass-through sides in one table, each against direct in the same run: on a shared
/// machine only the ratios of one run compare.
fn side_by_side(report: &mut Report, compared: &[Compared]) {
    report.flush_notes();
    report.table_open = false;
    report.out("");
    report.out("### pass-through sides against direct (medians)");
    report.out("");
    report.out(
        "| side | conns | p50 ms | p99 ms | req/s | p50 ×direct | p99 ×direct | req/s ×direct \
         | proxy CPU µs/req |",
    );
    report.out("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for c in compared {
        let rows = [
            Some(("direct", c.direct, f64::NAN)),
            Some(("gateway", c.gateway, c.gateway.gateway_cpu_us)),
            // socat's CPU is its children's, not measured.
            c.relay.map(|m| ("byte relay (socat)", m, f64::NAN)),
            c.peer.map(|m| (peer::RUST_PROXY, m, m.other_cpu_us)),
        ];
        for (side, m, cpu) in rows.into_iter().flatten() {
            let cpu = if cpu.is_nan() {
                "—".to_owned()
            } else {
                format!("{cpu:.1}")
            };
            report.out(&format!(
                "| {side} | {} | {:.3} | {:.3} | {:.0} | ×{:.2} | ×{:.2} | ×{:.2} | {cpu} |",
                c.conns,
                m.p50_ms,
                m.p99_ms,
                m.req_per_s,
                m.p50_ms / c.direct.p50_ms,
                m.p99_ms / c.direct.p99_ms,
                m.req_per_s / c.direct.req_per_s,
            ));
        }
    }
}

/// Scenario c's gateways, one per store, both running; their `tasks/get` loads alternate.
async fn tasks_get_on_redis(args: &Args, bins: &Binaries, report: &mut Report) -> Figure {
    let memory = PolledGateway::start(args, bins, Store::Memory).await;
    let redis = PolledGateway::start(args, bins, Store::Redis).await;
    let [memory_side, redis_side] = [&memory, &redis].map(|polled| Side {
        label: polled.label(),
        target: &polled.target,
        workload: &polled.gets,
        pids: polled.pids(),
    });
    let runs = alternate(
        args,
        "floor",
        [&memory_side, &redis_side],
        MANY,
        args.floor_rounds,
        report,
    )
    .await;
    let [memory_m, redis_m] = runs.each_ref().map(|runs| Medians::of(runs));
    report.note(&format!(
        "tasks/get at {MANY} conns, medians of {} runs, Redis / memory store: {}",
        args.floor_rounds,
        redis_m.against(&memory_m)
    ));
    let ceiling = http_ceiling(args, &redis, report).await;
    report.note(&format!(
        "/healthz on the Redis store's gateway at {MANY} conns, medians of {} runs: {:.0} req/s, \
         gateway CPU {:.1} µs/req, load generator CPU {:.1} µs/req; tasks/get on Redis reaches \
         ×{:.2} of it",
        args.floor_rounds,
        ceiling.req_per_s,
        ceiling.gateway_cpu_us,
        ceiling.load_generator_cpu_us,
        redis_m.req_per_s / ceiling.req_per_s,
    ));
    report.record_extra(json!({
        "scenario": "floor", "figure": "tasks/get", "conns": MANY, "rounds": args.floor_rounds,
        "memory": memory_m.json(), "redis": redis_m.json(), "healthz": ceiling.json(),
    }));
    Figure {
        what: format!("tasks/get on Redis, {MANY} connections"),
        measured: format!(
            "{:.0} req/s (memory store {:.0}; /healthz on the same gateway {:.0})",
            redis_m.req_per_s, memory_m.req_per_s, ceiling.req_per_s
        ),
        ratio: Some((redis_m.req_per_s / memory_m.req_per_s, "memory store")),
        goal: format!("≥ {REDIS_TASKS_GET_PER_S:.0} req/s"),
        met: redis_m.req_per_s >= REDIS_TASKS_GET_PER_S,
    }
}

/// What this harness reaches against the gateway when the request does no MCP work at
/// all (`/healthz`: HTTP in and out, no JSON): no `tasks/get` can be served faster on
/// this machine, so it says how much of a shortfall is the gateway's and how much the
/// machine's.
async fn http_ceiling(args: &Args, polled: &PolledGateway, report: &mut Report) -> Medians {
    let target = Target {
        path: "/healthz".to_owned(),
        ..polled.target.clone()
    };
    let healthz = Workload::fixed(
        vec![Req {
            headers: base_headers(),
            body: Bytes::new(),
        }],
        Expect::Contains(b"ok"),
    );
    let mut runs = Vec::new();
    for round in 1..=args.floor_rounds {
        let stats = load(args, &target, &healthz, MANY, &polled.pids()).await;
        report.row(
            "floor",
            &format!("/healthz, Redis store's gateway (run {round})"),
            MANY,
            &stats,
        );
        runs.push(stats);
    }
    Medians::of(&runs)
}

/// Scenario m's measurement for each store and connection count; Redis against the memory
/// store at the same count.
async fn memory_per_in_flight_task(
    args: &Args,
    bins: &Binaries,
    report: &mut Report,
    redis_ok: bool,
) -> Vec<Figure> {
    let mut memory_store = Vec::new();
    let mut figures = Vec::new();
    for store in stores(redis_ok) {
        for (i, conns) in MEMORY_CONNS.into_iter().enumerate() {
            let bytes = memory_per_task(args, bins, store, conns, report).await;
            let ratio = match store {
                Store::Memory => {
                    memory_store.push(bytes);
                    None
                }
                Store::Redis => Some((bytes / memory_store[i], "memory store")),
            };
            figures.push(Figure {
                what: format!(
                    "memory per in-flight task, {} store, {conns} connection(s)",
                    store.name()
                ),
                measured: format!(
                    "{:.1} KB ({:.2} KiB) at {} tasks",
                    bytes / 1000.0,
                    bytes / 1024.0,
                    args.in_flight
                ),
                ratio,
                goal: format!("≤ {:.0} KB (#47)", BYTES_PER_TASK / 1000.0),
                met: bytes <= BYTES_PER_TASK,
            });
        }
    }
    figures
}

fn goal_table(report: &mut Report, figures: &[Figure]) {
    // The runs' notes first, then the table that sums them up.
    report.flush_notes();
    report.table_open = false;
    report.out("");
    report.out("### issues #31 and #47's figures against their goals");
    report.out("");
    report.out("| figure | measured | ratio | goal | status |");
    report.out("|---|---|---|---|---|");
    for figure in figures {
        let ratio = figure
            .ratio
            .map_or_else(|| "—".to_owned(), |(r, of)| format!("×{r:.2} of {of}"));
        let status = if figure.met { "met" } else { "not met" };
        report.out(&format!(
            "| {} | {} | {ratio} | {} | {status} |",
            figure.what, figure.measured, figure.goal
        ));
        report.record_extra(json!({
            "scenario": "floor", "goal": figure.what, "measured": figure.measured,
            "ratio": figure.ratio.map(|(r, _)| r), "target": figure.goal, "met": figure.met,
        }));
    }
}
