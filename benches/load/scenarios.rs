//! The scenarios a to h and the latency-vs-concurrency sweep: which processes run, which
//! load goes where, and which rows and ratios the report gets.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Args;
use serde_json::json;

use crate::driver::Pids;
use crate::driver::Target;
use crate::driver::load;
use crate::plot::Series;
use crate::plot::draw_plot;
use crate::processes::Binaries;
use crate::processes::stores;
use crate::processes::{Redis, Store};
use crate::readings::cpu_seconds;
use crate::readings::open_fds;
use crate::readings::rss_kib;
use crate::report::Report;
use crate::rounds::{Medians, Side, alternate, list_ms, median};
use crate::workloads::Expect;
use crate::workloads::Workload;
use crate::workloads::create_completed_tasks;
use crate::workloads::create_many;
use crate::workloads::fixture_stats;
use crate::workloads::legacy_echo_requests;
use crate::workloads::legacy_requests;
use crate::workloads::modern_request;
use crate::workloads::tasks_get_workload;
use crate::workloads::wait_in_flight;
use test_support::Proc;

/// a. `tools/call` of the instant tool: straight to the upstream, through the gateway as a
/// legacy session (byte pass-through), and as a 2026-07-28 client without the tasks
/// extension (bridged inline).
pub(crate) async fn scenario_a(args: &Args, bins: &Binaries, report: &mut Report) {
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
pub(crate) async fn scenario_b(args: &Args, bins: &Binaries, report: &mut Report, redis_ok: bool) {
    report.section("b. tools/call with the tasks extension -> CreateTaskResult");
    let call = match args.b_sleep_ms {
        0 => json!({"name": "echo", "arguments": {"text": "hi"}}),
        ms => json!({"name": "sleep", "arguments": {"ms": ms, "steps": 0}}),
    };
    let create = Workload::fixed(
        vec![modern_request("tools/call", call, true)],
        Expect::Contains(br#""resultType":"task""#),
    );
    for conns in [1, args.concurrency] {
        for store in stores(redis_ok) {
            let (fixture, fixture_url) = bins.fixture();
            let redis = store.start(args);
            let (gateway, gateway_url) = bins.gateway(&fixture_url, &redis.flags());
            let target = Target::parse(&gateway_url);
            let pids = Pids::new(Some(&gateway), Some(&fixture)).with_redis(redis.pid());
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
pub(crate) async fn scenario_c(args: &Args, bins: &Binaries, report: &mut Report, redis_ok: bool) {
    report.section("c. tasks/get on completed tasks");
    for store in stores(redis_ok) {
        let polled = PolledGateway::start(args, bins, store).await;
        for conns in [1, args.concurrency] {
            let stats = load(args, &polled.target, &polled.gets, conns, &polled.pids()).await;
            report.row("c", &polled.label(), conns, &stats);
        }
    }
}

/// Scenario c's gateway: a fresh fixture, Redis for that store, and a gateway holding
/// `--tasks` completed echo tasks, with the `tasks/get` load that polls them.
pub(crate) struct PolledGateway {
    // Stopped in this order when dropped.
    gateway: Proc,
    fixture: Proc,
    redis: Redis,
    store: Store,
    pub(crate) target: Target,
    pub(crate) gets: Workload,
}

impl PolledGateway {
    pub(crate) async fn start(args: &Args, bins: &Binaries, store: Store) -> Self {
        let (fixture, fixture_url) = bins.fixture();
        let redis = store.start(args);
        let (gateway, gateway_url) = bins.gateway(&fixture_url, &redis.flags());
        let target = Target::parse(&gateway_url);
        let ids = create_completed_tasks(&target, args.tasks).await;
        let gets = tasks_get_workload(&ids);
        Self {
            gateway,
            fixture,
            redis,
            store,
            target,
            gets,
        }
    }

    pub(crate) fn label(&self) -> String {
        format!("tasks/get, {} store", self.store.name())
    }

    pub(crate) fn pids(&self) -> Pids {
        Pids::new(Some(&self.gateway), Some(&self.fixture)).with_redis(self.redis.pid())
    }
}

/// d. The whole life of an instant task: create, poll `tasks/get` until `completed`.
pub(crate) async fn scenario_d(args: &Args, bins: &Binaries, report: &mut Report) {
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
pub(crate) async fn scenario_e(args: &Args, bins: &Binaries, report: &mut Report) {
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
pub(crate) async fn e_rounds(
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

/// f. The same pass-through load through another proxy in front of a stdio server
/// (server-everything), against the gateway with `--upstream-cmd`.
pub(crate) async fn scenario_f(args: &Args, bins: &Binaries, report: &mut Report) {
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
pub(crate) async fn sweep(args: &Args, bins: &Binaries, report: &mut Report) {
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

/// g. `--in-flight` calls of a 2026-07-28 client without the tasks extension, deferred
/// (`--defer-after-ms 100`) while the upstream works 120 s, against as many tasks of a
/// client with the extension: the gateway's RSS per call in flight, side by side. A
/// deferred call is a task of its caller, so the two should cost the same.
pub(crate) async fn scenario_g(args: &Args, bins: &Binaries, report: &mut Report) {
    report.section(&format!(
        "g. {} deferred calls in flight against as many tasks (sleep 120 s upstream)",
        args.in_flight
    ));
    const WARM: usize = 100;
    let sleeping = json!({"name": "sleep", "arguments": {"ms": 120_000, "steps": 0}});
    let sides: [(&str, bool, Vec<String>); 2] = [
        ("tasks (tasks extension)", true, Vec::new()),
        (
            "deferred calls (no extension, --defer-after-ms 100)",
            false,
            vec!["--defer-after-ms".into(), "100".into()],
        ),
    ];
    let mut per_call = Vec::new();
    for (label, extension, flags) in sides {
        let (fixture, fixture_url) = bins.fixture();
        let (gateway, gateway_url) = bins.gateway(&fixture_url, &flags);
        let target = Target::parse(&gateway_url);
        let upstream = Target::parse(&fixture_url);
        let request = modern_request("tools/call", sleeping.clone(), extension);
        // The first calls grow pools and caches that every later call shares.
        create_many(&target, &request, WARM, 16).await;
        wait_in_flight(&upstream, WARM as u64, Duration::from_secs(30)).await;
        let rss_before = rss_kib(gateway.pid());
        let started = Instant::now();
        create_many(&target, &request, args.in_flight, 64).await;
        let total = (WARM + args.in_flight) as u64;
        let waiting = wait_in_flight(&upstream, total, Duration::from_secs(90))
            .await
            .saturating_sub(WARM as u64);
        let rss_after = rss_kib(gateway.pid());
        let per = rss_after.saturating_sub(rss_before) as f64 * 1024.0 / waiting.max(1) as f64;
        report.note(&format!(
            "{label}: {waiting} in flight after {:.1} s; gateway VmRSS {rss_before} -> {rss_after} KiB: \
             {:.1} KB ({:.2} KiB) per call in flight",
            started.elapsed().as_secs_f64(),
            per / 1000.0,
            per / 1024.0
        ));
        per_call.push(per);
        drop(gateway);
        drop(fixture);
    }
    if let [task, deferred] = per_call[..] {
        report.note(&format!(
            "memory per deferred call / per task: ×{:.2}",
            deferred / task.max(1.0)
        ));
    }
}

/// m. Memory per in-flight task (issue #31): [`memory_per_task`] for each store (memory,
/// Redis) and each number of client connections (1 and 64).
pub(crate) async fn scenario_m(args: &Args, bins: &Binaries, report: &mut Report, redis_ok: bool) {
    report.section(&format!(
        "m. memory per in-flight task: {} tasks (sleep 600 s upstream), per store and client connections",
        args.in_flight
    ));
    for store in stores(redis_ok) {
        for conns in MEMORY_CONNS {
            memory_per_task(args, bins, store, conns, report).await;
        }
    }
}

/// The client connection counts over which scenario m creates its tasks.
pub(crate) const MEMORY_CONNS: [usize; 2] = [1, 64];

/// A fresh gateway on `store` and fixture, 100 warm-up tasks, then `--in-flight` tasks of
/// `sleep` (600 s, no progress) created over `conns` connections: the gateway's VmRSS
/// before and after, divided by the calls the upstream then held, in bytes (also a note
/// and a record of the report).
pub(crate) async fn memory_per_task(
    args: &Args,
    bins: &Binaries,
    store: Store,
    conns: usize,
    report: &mut Report,
) -> f64 {
    const WARM: usize = 100;
    let sleeping = json!({"name": "sleep", "arguments": {"ms": 600_000, "steps": 0}});
    let (fixture, fixture_url) = bins.fixture();
    let redis = store.start(args);
    let (gateway, gateway_url) = bins.gateway(&fixture_url, &redis.flags());
    let target = Target::parse(&gateway_url);
    let upstream = Target::parse(&fixture_url);
    let request = modern_request("tools/call", sleeping, true);
    // The first tasks grow pools and caches that every later one shares.
    create_many(&target, &request, WARM, conns.min(16)).await;
    wait_in_flight(&upstream, WARM as u64, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_kib(gateway.pid());
    let started = Instant::now();
    let created = create_many(&target, &request, args.in_flight, conns).await;
    let total = (WARM + args.in_flight) as u64;
    let waiting = wait_in_flight(&upstream, total, Duration::from_secs(120))
        .await
        .saturating_sub(WARM as u64);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = rss_kib(gateway.pid());
    let per = rss_after.saturating_sub(rss_before) as f64 * 1024.0 / waiting.max(1) as f64;
    report.note(&format!(
        "{} store, {conns} conn(s): created {created}, {waiting} in flight after {:.1} s; \
         gateway VmRSS {rss_before} -> {rss_after} KiB: {:.1} KB ({:.2} KiB) per task",
        store.name(),
        started.elapsed().as_secs_f64(),
        per / 1000.0,
        per / 1024.0
    ));
    report.record_extra(json!({
        "scenario": "m", "store": store.name(), "conns": conns, "in_flight": waiting,
        "rss_before_kib": rss_before, "rss_after_kib": rss_after, "bytes_per_task": per,
    }));
    // The fixture first: a gateway under a heap profiler (`--gateway-wrap`) then sees its
    // calls end as lost streams, not a storm of cancels on new connections. Their failures
    // still outgrow the waiting calls (run 32): for the heap with every task in flight,
    // wrap with `benches/dhat_snapshot.sh`, which has the profile written before this.
    drop(fixture);
    drop((gateway, redis));
    per
}

/// h. `--streams` quiet calls answered on SSE (a 2026-07-28 client that asked for
/// progress; `sleep` 120 s, no progress of the upstream's), with
/// `--progress-keepalive-ms 1000` against keep-alive off: the gateway's CPU while they
/// wait, side by side, and what one keep-alive costs.
pub(crate) async fn scenario_h(args: &Args, bins: &Binaries, report: &mut Report) {
    report.section(&format!(
        "h. {} quiet streamed calls, progress keep-alive every 1 s against off",
        args.streams
    ));
    const WINDOW: Duration = Duration::from_secs(10);
    let mut measured = Vec::new();
    for (label, period) in [("keep-alive off", "0"), ("keep-alive every 1 s", "1000")] {
        let (fixture, fixture_url) = bins.fixture();
        let flags = vec!["--progress-keepalive-ms".to_owned(), period.to_owned()];
        let (gateway, gateway_url) = bins.gateway(&fixture_url, &flags);
        let target = Arc::new(Target::parse(&gateway_url));
        let upstream = Target::parse(&fixture_url);
        let mut request = modern_request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 120_000, "steps": 0}}),
            false,
        );
        let mut body: serde_json::Value =
            serde_json::from_slice(&request.body).expect("the request's JSON");
        body["params"]["_meta"]["progressToken"] = json!("keepalive-bench");
        request.body = serde_json::to_vec(&body).expect("JSON").into();
        let request = Arc::new(request);
        let frames = Arc::new(AtomicU64::new(0));
        let mut streams = Vec::with_capacity(args.streams);
        for _ in 0..args.streams {
            let (target, request, frames) = (target.clone(), request.clone(), frames.clone());
            streams.push(tokio::spawn(async move {
                let _ = hold_stream(&target, &request, &frames).await;
            }));
        }
        let waiting = wait_in_flight(&upstream, args.streams as u64, Duration::from_secs(90)).await;
        let (cpu_before, frames_before) =
            (cpu_seconds(gateway.pid()), frames.load(Ordering::Relaxed));
        tokio::time::sleep(WINDOW).await;
        let (cpu_after, frames_after) =
            (cpu_seconds(gateway.pid()), frames.load(Ordering::Relaxed));
        let cpu = cpu_after
            .zip(cpu_before)
            .map_or(0.0, |(after, before)| after - before);
        let frames_per_s = (frames_after - frames_before) as f64 / WINDOW.as_secs_f64();
        report.note(&format!(
            "{label}: {waiting} streams waiting; gateway CPU {:.1} % of one core over {} s; \
             {frames_per_s:.0} frames/s reached the clients",
            cpu / WINDOW.as_secs_f64() * 100.0,
            WINDOW.as_secs()
        ));
        measured.push((cpu, frames_per_s));
        streams.iter().for_each(tokio::task::JoinHandle::abort);
        drop(gateway);
        drop(fixture);
    }
    if let [(cpu_off, _), (cpu_on, frames_on)] = measured[..] {
        let keepalives = frames_on * WINDOW.as_secs_f64();
        report.note(&format!(
            "one keep-alive costs {:.1} µs of gateway CPU ({:.2} s more over {} keep-alives)",
            (cpu_on - cpu_off) / keepalives.max(1.0) * 1e6,
            cpu_on - cpu_off,
            keepalives as u64
        ));
    }
}

/// Sends `request` and reads its SSE answer, counting frames, until it ends.
async fn hold_stream(
    target: &Target,
    request: &crate::workloads::Req,
    frames: &AtomicU64,
) -> Result<(), crate::BoxError> {
    use http_body_util::BodyExt;
    let mut conn = target.connect().await?;
    conn.ready().await?;
    let mut builder = http::Request::builder()
        .method(http::Method::POST)
        .uri(target.path.as_str())
        .header(http::header::HOST, target.host.clone());
    if let Some(headers) = builder.headers_mut() {
        headers.extend(request.headers.clone());
    }
    let response = conn
        .send_request(builder.body(http_body_util::Full::new(request.body.clone()))?)
        .await?;
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        if frame?.is_data() {
            frames.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// i. Named upstreams (#30): pass-through and task creation through `/mcp/NAME` of a
/// gateway with `--named-upstreams` of them configured (`--upstream NAME=URL`, each the
/// same fixture's URL), against `/mcp` of a single-upstream gateway in front of the same
/// fixture. Both gateways run for the whole scenario, so each side's measurement has the
/// other's idle background; the sides alternate (ABBA), `--i-rounds` times each, at 1 and
/// 16 connections, and the notes compare the medians of the rounds.
pub(crate) async fn scenario_i(args: &Args, bins: &Binaries, report: &mut Report) {
    let count = args.named_upstreams as usize;
    report.section(&format!(
        "i. {count} named upstreams against one: /mcp/NAME against /mcp"
    ));
    if !bins.gateway_supports("NAME=URL") {
        report.note("skipped: this gateway has no named upstreams (--upstream NAME=URL)");
        return;
    }
    let (fixture, fixture_url) = bins.fixture();
    let (single, single_url) = bins.gateway(&fixture_url, &[]);
    let names: Vec<String> = (0..count).map(|i| format!("up-{i:03}")).collect();
    let extra: Vec<String> = names[1..]
        .iter()
        .flat_map(|name| ["--upstream".to_owned(), format!("{name}={fixture_url}")])
        .collect();
    let started = Instant::now();
    let (named, named_url) = bins.gateway(&format!("{}={fixture_url}", names[0]), &extra);
    let named_start_s = started.elapsed().as_secs_f64();
    // The middle name: not the first or the last of anything.
    let chosen = &names[count / 2];
    let sides = [
        ("single upstream, /mcp", Target::parse(&single_url), &single),
        (
            "named, /mcp/NAME",
            Target::parse(&format!("{named_url}/{chosen}")),
            &named,
        ),
    ];
    report.note(&format!(
        "one plain_server behind both gateways; the named gateway has {count} names \
         (up-000 … up-{:03}), all with its URL, and the load goes to /mcp/{chosen}; it announced \
         itself {named_start_s:.2} s after it was started",
        count - 1
    ));
    const IDLE: Duration = Duration::from_secs(3);
    let idle_before = sides
        .each_ref()
        .map(|(_, _, gateway)| cpu_seconds(gateway.pid()));
    tokio::time::sleep(IDLE).await;
    let idle_after = sides
        .each_ref()
        .map(|(_, _, gateway)| cpu_seconds(gateway.pid()));
    for (i, (label, _, gateway)) in sides.iter().enumerate() {
        let idle = idle_after[i]
            .zip(idle_before[i])
            .map_or(f64::NAN, |(after, before)| after - before);
        report.note(&format!(
            "{label}: VmRSS {} KiB before the load; CPU while idle {:.2} % of one core over {} s",
            rss_kib(gateway.pid()),
            idle / IDLE.as_secs_f64() * 100.0,
            IDLE.as_secs()
        ));
    }

    let create = Workload::fixed(
        vec![modern_request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
            true,
        )],
        Expect::Contains(br#""resultType":"task""#),
    );
    let mut passthrough = Vec::new();
    for (_, target, _) in &sides {
        passthrough.push(legacy_echo_requests(target).await);
    }
    let workloads: [(&str, [&Workload; 2]); 2] = [
        (
            "pass-through (2025-11-25 session)",
            [&passthrough[0], &passthrough[1]],
        ),
        ("create task (2026-07-28, tasks ext.)", [&create, &create]),
    ];
    for conns in [1, 16] {
        for (what, [single_load, named_load]) in &workloads {
            let [single_side, named_side] =
                [(0, *single_load), (1, *named_load)].map(|(i, workload)| {
                    let (label, target, gateway) = &sides[i];
                    Side {
                        label: format!("{what}, {label}"),
                        target,
                        workload,
                        pids: Pids::new(Some(gateway), Some(&fixture)),
                    }
                });
            let runs = alternate(
                args,
                "i",
                [&single_side, &named_side],
                conns,
                args.i_rounds,
                report,
            )
            .await;
            let [single_m, named_m] = runs.each_ref().map(|runs| Medians::of(runs));
            report.note(&format!(
                "{what} at {conns} conns, medians of {} runs, named / single: {}",
                args.i_rounds,
                named_m.against(&single_m),
            ));
            report.record_extra(json!({
                "scenario": "i", "workload": what, "conns": conns, "rounds": args.i_rounds,
                "named_upstreams": count,
                "single": single_m.json(),
                "named": named_m.json(),
            }));
        }
    }
    for (label, _, gateway) in &sides {
        report.note(&format!(
            "{label}: VmRSS {} KiB after the load",
            rss_kib(gateway.pid())
        ));
    }
    drop((named, single, fixture));
}
