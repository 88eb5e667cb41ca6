//! What a takeover costs (`harness = false`): instance A owns `--tasks` tasks, each in an
//! MRTR round of a 2026-07-28 upstream (`two_rounds` of `mrtr_server`, a fixture server
//! of `crates/fixture-servers`, waiting for the client's answers, so no upstream call is
//! open); A is killed (-9) and instance B takes them all over. Side by side, the same with B failing every task
//! instead (`--max-takeovers 0`: each is found, moved by the same script and failed), the
//! cost of the sweep without takeover.
//!
//! Reported per variant: the time from kill to the last task moved (lease lapse included),
//! the sweep's own duration as B logs it (`sweep_ms`), and what Redis did meanwhile by its
//! own counters: requests read (a pipeline is one read, so these are round trips) and
//! commands, both per task. B's renewals and the first look of each adopted runner at
//! its task count too.
//!
//! ```text
//! cargo bench --bench takeover_sweep -- --tasks 10000
//! ```

// A bench is a program of measurement, like the tests: its steps may run past the 80
// lines the library's functions keep to.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use serde_json::{Value, json};
use test_support::bench::RedisCounters;
use test_support::{RedisServer, spawn_announcing};

const DEADLINE: Duration = Duration::from_secs(120);
const LEASE_TIMEOUT_MS: u64 = 2000;

#[derive(Parser, Debug)]
#[command(
    name = "takeover_sweep",
    about = "The cost of taking over a lost owner's tasks"
)]
struct Args {
    /// Tasks the lost instance owns.
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// Requests in flight while the tasks are created.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Optional name filter, as `cargo bench NAME` passes it.
    filter: Option<String>,
}

fn main() {
    let Some((args, runtime)) = test_support::bench::start::<Args>() else {
        return;
    };
    runtime.block_on(run(&args));
}

async fn run(args: &Args) {
    let gateway = PathBuf::from(env!("CARGO_BIN_EXE_mcp-task-gateway"));
    let mut rows = Vec::new();
    for (label, extra) in [
        ("taken over (round kept)", vec![]),
        (
            "failed (`--max-takeovers 0`)",
            vec!["--max-takeovers".to_owned(), "0".to_owned()],
        ),
    ] {
        rows.push((label, sweep(&gateway, args, &extra).await));
    }
    println!(
        "\n{} tasks of a killed instance (lease timeout {LEASE_TIMEOUT_MS} ms)\n",
        args.tasks
    );
    println!(
        "| B | kill → last task moved | sweep (B's log) | Redis round trips | per task | commands | per task | commands by name |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (label, m) in &rows {
        let n = args.tasks as f64;
        let commands: u64 = m.commands.values().sum();
        let list = m
            .commands
            .iter()
            .map(|(name, calls)| format!("{name} ×{calls}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "| {label} | {} ms | {} ms | {} | {:.4} | {} | {:.2} | {list} |",
            m.until_moved.as_millis(),
            m.sweep_ms,
            m.reads,
            m.reads as f64 / n,
            commands,
            commands as f64 / n,
        );
    }
    let (taken, failed) = (&rows[0].1, &rows[1].1);
    println!(
        "\nsweep time, takeover / fail: ×{:.2}",
        taken.sweep_ms as f64 / failed.sweep_ms.max(1) as f64
    );
}

/// The store namespace of both gateways, so the bench can read their keys.
const NAMESPACE: &str = "bench";

struct Measured {
    until_moved: Duration,
    sweep_ms: u64,
    reads: u64,
    commands: BTreeMap<String, u64>,
}

async fn sweep(gateway: &Path, args: &Args, extra: &[String]) -> Measured {
    let redis = RedisServer::start();
    let (_upstream, upstream) = test_support::bench::fixture_server(gateway, "mrtr_server");
    let lease = LEASE_TIMEOUT_MS.to_string();
    let flags = |id: &str| {
        vec![
            "--redis".to_owned(),
            redis.url(),
            "--instance-id".to_owned(),
            id.to_owned(),
            "--lease-timeout-ms".to_owned(),
            lease.clone(),
            "--store-namespace".to_owned(),
            NAMESPACE.to_owned(),
        ]
    };
    let (mut lost, lost_url) = test_support::bench::gateway(gateway, &upstream, &flags("gw-lost"));
    let log = std::env::temp_dir().join(format!("mtg-sweep-{}.log", uuid::Uuid::new_v4()));
    let mut live = Command::new(gateway);
    live.args(["--listen", "127.0.0.1:0", "--upstream", &upstream])
        .args(flags("gw-live"))
        .args(extra)
        .args(["--log-format", "json"])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::from(
            std::fs::File::create(&log).expect("a log file"),
        ));
    let (_live, _) = spawn_announcing("mcp-task-gateway", live, Duration::from_secs(30));

    let client = reqwest::Client::new();
    let created = futures_util::stream::iter(0..args.tasks)
        .map(|_| start_two_rounds(&client, &lost_url))
        .buffer_unordered(args.concurrency)
        .collect::<Vec<String>>()
        .await;
    // Every task has recorded its round (the upstream asked at once).
    let mut redis_conn = redis.connection();
    wait_until("every task in its round", || {
        let waiting = created
            .iter()
            .filter(|id| {
                let status: Option<String> = redis::cmd("HGET")
                    .arg(format!("mtg:{NAMESPACE}:{{{id}}}"))
                    .arg("status")
                    .query(&mut redis_conn)
                    .expect("HGET");
                status.as_deref() == Some("input_required")
            })
            .count();
        waiting == created.len()
    });

    let mut counters = RedisCounters::new(redis.connection());
    counters.reset();
    let killed = time::OffsetDateTime::now_utc();
    lost.kill();
    // B logs the sweep once it is done; Redis is not polled meanwhile (it would count).
    let (logged_at, sweep_ms) = wait_for_sweep_log(&log);
    let until_moved = Duration::try_from(logged_at - killed).unwrap_or_default();
    // Then the adopted runners each look at their task once (HGETALL): wait until those
    // stop (lease renewals go on all the time, so Redis is never quiet).
    let looks = |commands: &BTreeMap<String, u64>| commands.get("HGETALL").copied();
    let mut last = counters.read();
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let now = counters.read();
        let settled = looks(&now.0) == looks(&last.0);
        last = now;
        if settled {
            break;
        }
    }
    let (commands, reads) = last;
    let moved: u64 = redis::cmd("SCARD")
        .arg(format!("mtg:{NAMESPACE}:owned:{{gw-live}}"))
        .query(&mut redis_conn)
        .expect("SCARD");
    assert_eq!(
        moved,
        args.tasks as u64 * u64::from(extra.is_empty()),
        "tasks owned by B"
    );
    let _ = std::fs::remove_file(&log);
    Measured {
        until_moved,
        sweep_ms,
        reads,
        commands,
    }
}

async fn start_two_rounds(client: &reqwest::Client, url: &str) -> String {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "two_rounds", "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {
                    "extensions": {"io.modelcontextprotocol/tasks": {}},
                    "elicitation": {"form": {}},
                },
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
            },
        },
    });
    let reply: Value = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "two_rounds")
        .json(&body)
        .send()
        .await
        .expect("the gateway answers")
        .json()
        .await
        .expect("JSON");
    reply["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {reply}"))
        .to_owned()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// When B logged its sweep of the lost instance, and the sweep's `sweep_ms`.
fn wait_for_sweep_log(log: &Path) -> (time::OffsetDateTime, u64) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let swept = text.lines().find_map(|line| {
            let entry: Value = serde_json::from_str(line).ok()?;
            let fields = entry.get("fields")?;
            (fields.get("instance")?.as_str()? == "gw-lost").then_some(())?;
            let at = time::OffsetDateTime::parse(
                entry.get("timestamp")?.as_str()?,
                &time::format_description::well_known::Rfc3339,
            )
            .ok()?;
            Some((at, fields.get("sweep_ms")?.as_u64()?))
        });
        if let Some(ms) = swept {
            return ms;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no sweep line in {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
