//! One MRTR round, side by side (`harness = false`): a 2026-07-28 client calls a tool,
//! gets an `InputRequiredResult`, and retries with the answer and the `requestState`.
//!
//! - **native**: a 2026-07-28 server asks and answers the round itself
//!   (`confirm_delete`): the Python SDK fixture (`tests/fixtures/mrtr_server.py`) and the
//!   rmcp one (`mrtr_server` of `crates/fixture-servers`);
//! - **gateway, held call**: the gateway in front of the 2025-11-25 fixture
//!   (`plain_server`): the fixture's elicitation is held as a hidden task and the
//!   retry resumes it (`ask_name`);
//! - **gateway, 2026 upstream**: the gateway in front of the Python fixture, which passes
//!   the upstream's own round through.
//!
//! Each variant runs `--rounds` rounds one after another on one connection, after a
//! warm-up; the report gives p50/p90/p99 of a whole round (both requests) and the ratios
//! to the two native servers.
//!
//! ```text
//! cargo bench --bench mrtr_round -- --rounds 300
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use test_support::{Proc, spawn_announcing};

const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Parser, Debug)]
#[command(
    name = "mrtr_round",
    about = "One MRTR round: native against through the gateway"
)]
struct Args {
    /// Measured rounds of each variant.
    #[arg(long, default_value_t = 300)]
    rounds: usize,
    /// Rounds before measuring.
    #[arg(long, default_value_t = 30)]
    warmup: usize,
    /// Optional name filter, as `cargo bench NAME` passes it.
    filter: Option<String>,
}

fn main() {
    let Some(raw) = test_support::bench::bench_args() else {
        return;
    };
    let args = Args::parse_from(raw);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(&args));
}

async fn run(args: &Args) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let (_python, python_url) = python_fixture(&root);
    let (_rmcp, rmcp_url) = fixture_server("mrtr_server");
    let (_plain, plain_url) = fixture_server("plain_server");
    let (_held_gateway, held_url) = gateway(&plain_url);
    let (_pass_gateway, pass_url) = gateway(&python_url);
    let client = reqwest::Client::new();

    let variants = [
        (
            "native, Python SDK server",
            python_url.as_str(),
            Tool::ConfirmDelete,
        ),
        (
            "native, rmcp server",
            rmcp_url.as_str(),
            Tool::ConfirmDelete,
        ),
        (
            "gateway, held call (2025-11-25 upstream)",
            held_url.as_str(),
            Tool::AskName,
        ),
        (
            "gateway, the Python server's own round",
            pass_url.as_str(),
            Tool::ConfirmDelete,
        ),
    ];
    let mut natives: Vec<f64> = Vec::new();
    println!(
        "| variant | rounds | p50 ms | p90 ms | p99 ms | p50 / Python native | p50 / rmcp native |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, url, tool) in variants {
        for _ in 0..args.warmup {
            one_round(&client, url, tool).await;
        }
        let mut times: Vec<f64> = Vec::with_capacity(args.rounds);
        for _ in 0..args.rounds {
            let start = Instant::now();
            one_round(&client, url, tool).await;
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
        let p50 = at(0.5);
        if natives.len() < 2 {
            natives.push(p50);
        }
        let ratio =
            |native: Option<&f64>| native.map_or("—".into(), |n| format!("×{:.2}", p50 / n));
        println!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} | {} | {} |",
            times.len(),
            p50,
            at(0.9),
            at(0.99),
            ratio(natives.first()),
            ratio(natives.get(1)),
        );
    }
}

#[derive(Clone, Copy)]
enum Tool {
    /// The Python fixture's one-round tool.
    ConfirmDelete,
    /// The 2025-11-25 fixture's elicitation.
    AskName,
}

impl Tool {
    fn call(self) -> (&'static str, Value) {
        match self {
            Tool::ConfirmDelete => ("confirm_delete", json!({"path": "/bench"})),
            Tool::AskName => ("ask_name", json!({})),
        }
    }

    fn answer(self, key: &str) -> Value {
        let content = match self {
            Tool::ConfirmDelete => json!({"confirm": true}),
            Tool::AskName => json!({"name": "Ada"}),
        };
        json!({ key: {"action": "accept", "content": content} })
    }
}

/// Call, then the retry with the answer; panics unless the round ends with a result.
async fn one_round(client: &reqwest::Client, url: &str, tool: Tool) {
    let (name, arguments) = tool.call();
    let asked = post(
        client,
        url,
        name,
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    let asked = &asked["result"];
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let key = asked["inputRequests"]
        .as_object()
        .and_then(|requests| requests.keys().next())
        .expect("an input request")
        .clone();
    let retry = json!({
        "name": name,
        "arguments": arguments,
        "inputResponses": tool.answer(&key),
        "requestState": asked["requestState"],
    });
    let done = post(client, url, name, retry).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
}

async fn post(client: &reqwest::Client, url: &str, tool: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "mrtr-bench", "version": "0"},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .json(&body)
        .send()
        .await
        .expect("reachable")
        .json()
        .await
        .expect("a JSON answer")
}

fn python_fixture(root: &Path) -> (Proc, String) {
    let venv = root.join("tests/.venv/bin/python");
    assert!(
        venv.exists(),
        "the Python test peers are missing: run scripts/test.sh once (it builds tests/.venv)"
    );
    let mut command = Command::new(venv);
    command
        .arg(root.join("tests/fixtures/mrtr_server.py"))
        .args(["--port", "0"]);
    spawn_announcing("mrtr_server.py", command, DEADLINE)
}

fn fixture_server(name: &str) -> (Proc, String) {
    test_support::bench::fixture_server(Path::new(env!("CARGO_BIN_EXE_mcp-task-gateway")), name)
}

fn gateway(upstream: &str) -> (Proc, String) {
    test_support::bench::gateway(
        Path::new(env!("CARGO_BIN_EXE_mcp-task-gateway")),
        upstream,
        &[],
    )
}
