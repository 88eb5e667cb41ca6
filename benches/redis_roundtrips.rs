//! Redis round trips per task lifecycle (create → 10 polls → complete), counted by
//! Redis itself: `INFO commandstats` (commands) and `total_reads_processed` (requests
//! read from clients: a pipeline arrives as one read, so this counts round trips).
//! Starts its own redis-server, the fixture upstream and one gateway.
//!
//! Run: `cargo bench --bench redis_roundtrips`. Prints a Markdown table.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use test_support::bench::RedisCounters;
use test_support::{RedisServer, spawn_announcing};

const DEADLINE: Duration = Duration::from_secs(60);
const POLLS: usize = 10;

/// `plain_server` of `crates/fixture-servers`, in this bench's profile.
fn fixture_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<bench binary>
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    test_support::build::fixture(profile_dir, "plain_server")
}

struct Gateway {
    http: reqwest::Client,
    url: String,
}

impl Gateway {
    async fn request(&self, method: &str, params: Value, name: &str) -> Value {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let reply: Value = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", name)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(reply.get("error").is_none(), "{reply}");
        reply["result"].clone()
    }

    async fn start_sleep(&self, ms: u64) -> String {
        let created = self
            .request(
                "tools/call",
                json!({"name": "sleep", "arguments": {"ms": ms, "steps": 0}}),
                "sleep",
            )
            .await;
        created["taskId"].as_str().unwrap().to_owned()
    }

    async fn get(&self, task_id: &str) -> Value {
        self.request("tasks/get", json!({"taskId": task_id}), task_id)
            .await
    }
}

fn row(phase: &str, commands: &BTreeMap<String, u64>, reads: u64) -> String {
    let list = commands
        .iter()
        .map(|(name, calls)| format!("{name} ×{calls}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("| {phase} | {reads} | {list} |")
}

#[tokio::main]
async fn main() {
    // Started and waited for until it answers PING.
    let redis = RedisServer::start();
    let redis_url = redis.url();
    let mut counters = RedisCounters::new(redis.connection());

    let mut fixture = Command::new(fixture_binary());
    fixture.args(["--listen", "127.0.0.1:0"]);
    let (_fixture, upstream) = spawn_announcing("plain_server", fixture, DEADLINE);
    let mut gateway = Command::new(env!("CARGO_BIN_EXE_mcp-task-gateway"));
    gateway
        .args(["--listen", "127.0.0.1:0", "--upstream", &upstream])
        .args(["--redis", &redis_url, "--instance-id", "bench"])
        // Leases renew every lease/4: long enough that none falls inside a phase.
        .args(["--lease-timeout-ms", "600000"])
        .env("RUST_LOG", "warn");
    let (_gateway, url) = spawn_announcing("mcp-task-gateway", gateway, DEADLINE);
    let gw = Gateway {
        http: reqwest::Client::new(),
        url,
    };

    let mut rows = Vec::new();
    // The first task after Redis started: scripts are loaded on first use.
    counters.reset();
    let cold = gw.start_sleep(0).await;
    // The runner's final write is the only SREM of a lifecycle.
    counters.wait_for("SREM", 1);
    let (commands, reads) = counters.read();
    rows.push(row(
        "first task after start (create + complete; scripts loaded, lease taken, wake-ups subscribed)",
        &commands,
        reads,
    ));
    assert_eq!(gw.get(&cold).await["status"], "completed");

    counters.reset();
    let task = gw.start_sleep(1500).await;
    let (create, create_reads, create_bytes) = counters.read_with_bytes();
    rows.push(row(
        "create (`tools/call` → CreateTaskResult)",
        &create,
        create_reads,
    ));

    counters.reset();
    for _ in 0..POLLS {
        assert_eq!(gw.get(&task).await["status"], "working");
    }
    let (polls, poll_reads) = counters.read();
    rows.push(row(
        &format!("{POLLS} polls (`tasks/get`)"),
        &polls,
        poll_reads,
    ));

    counters.reset();
    counters.wait_for("SREM", 1);
    let (complete, complete_reads, complete_bytes) = counters.read_with_bytes();
    rows.push(row(
        "complete (runner records the result)",
        &complete,
        complete_reads,
    ));
    assert_eq!(gw.get(&task).await["status"], "completed");

    println!("| phase | round trips (reads) | commands |");
    println!("|---|---|---|");
    for row in &rows {
        println!("{row}");
    }
    println!(
        "\nper poll: {:.1} round trips; create + complete: {} round trips",
        poll_reads as f64 / POLLS as f64,
        create_reads + complete_reads
    );
    println!(
        "bytes written to Redis: create {create_bytes}, complete {complete_bytes} \
         (`total_net_input_bytes`, less the bench's own)"
    );
}
