//! Creating a task, side by side (`harness = false`): the 2026-07-28 create path
//! (`tools/call` with the tasks extension → `CreateTaskResult`) against the 2025-11-25
//! one (a session that declared `capabilities.tasks` sends `tools/call` with
//! `params.task`), on the same gateway, the same store and the same upstream
//! (`plain_server` of `crates/fixture-servers`, tool `echo`), once with the memory store and once with Redis.
//!
//! For each path, on a gateway of its own: `--requests` creates one after another on one
//! keep-alive connection (p50/p90/p99), then `--concurrency` connections creating at once
//! for `--seconds` (creates per second). `--rounds` alternates the paths; the report gives
//! the 2025 / 2026 ratios of each round.
//!
//! ```text
//! cargo bench --bench task_create -- --requests 2000 --concurrency 16 --seconds 5
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use test_support::{Proc, RedisServer};

#[derive(Parser, Debug)]
#[command(
    name = "task_create",
    about = "2025-11-25 against 2026-07-28 task creation"
)]
struct Args {
    /// Creates one after another, per path and store.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Creates before measuring.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Connections creating at once in the throughput phase.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Length of the throughput phase.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Both paths on one gateway per round, the second after the first's tasks (tens of
    /// thousands in the memory store): how a gateway holding many tasks answers.
    #[arg(long)]
    shared_gateway: bool,
    /// Rounds of both paths, each path on a fresh gateway, one after the other.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Only this path (`2025` or `2026`), e.g. to profile one; both by default.
    #[arg(long)]
    only: Option<String>,
    /// Optional store filter (`memory`, `redis`), as `cargo bench NAME` passes it.
    filter: Option<String>,
}

fn main() {
    let Some((args, runtime)) = test_support::bench::start::<Args>() else {
        return;
    };
    runtime.block_on(run(&args));
}

#[derive(Clone, Copy, PartialEq)]
enum Path {
    Stateless,
    Session,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Stateless => "2026-07-28 (extension)",
            Path::Session => "2025-11-25 (session, params.task)",
        }
    }
}

/// One client of one path: what it sends and how.
#[derive(Clone)]
struct Creator {
    http: reqwest::Client,
    url: String,
    path: Path,
    session: Option<String>,
}

impl Creator {
    async fn new(url: &str, path: Path) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .expect("a client");
        let mut creator = Self {
            http,
            url: url.to_owned(),
            path,
            session: None,
        };
        if path == Path::Session {
            creator.open_session().await;
        }
        creator
    }

    async fn open_session(&mut self) {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tasks": {"list": {}, "cancel": {}}},
            "clientInfo": {"name": "create-bench", "version": "0"}}});
        let response = self.post(&init).await;
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("a session id")
            .to_owned();
        assert!(
            session.starts_with("mtg-t."),
            "not a task session: {session}"
        );
        let _ = response.bytes().await;
        self.session = Some(session);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let _ = self.post(&initialized).await.bytes().await;
    }

    async fn post(&self, body: &Value) -> reqwest::Response {
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .json(body);
        request = match self.path {
            Path::Stateless => request
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "echo"),
            Path::Session => request.header("mcp-protocol-version", "2025-11-25"),
        };
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        request.send().await.expect("gateway reachable")
    }

    /// One create; panics unless a task was created.
    async fn create(&self) {
        let mut params = json!({"name": "echo", "arguments": {"text": "bench"}});
        match self.path {
            Path::Stateless => {
                params["_meta"] = json!({
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                    "io.modelcontextprotocol/clientInfo": {"name": "create-bench", "version": "0"},
                });
            }
            Path::Session => params["task"] = json!({}),
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let answer: Value = self.post(&body).await.json().await.expect("a JSON answer");
        let created = match self.path {
            Path::Stateless => answer["result"]["resultType"] == "task",
            Path::Session => answer["result"]["task"]["status"].is_string(),
        };
        assert!(created, "no task created: {answer}");
    }
}

struct Reading {
    p50: f64,
    p90: f64,
    p99: f64,
    per_second: f64,
}

async fn measure(args: &Args, url: &str, path: Path) -> Reading {
    let creator = Creator::new(url, path).await;
    for _ in 0..args.warmup {
        creator.create().await;
    }
    let mut times = Vec::with_capacity(args.requests);
    for _ in 0..args.requests {
        let start = Instant::now();
        creator.create().await;
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];

    let mut creators = Vec::new();
    for _ in 0..args.concurrency {
        creators.push(Creator::new(url, path).await);
    }
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let workers: Vec<_> = creators
        .into_iter()
        .map(|creator| {
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < until {
                    creator.create().await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0u64;
    for worker in workers {
        total += worker.await.expect("a worker");
    }
    Reading {
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        per_second: total as f64 / started.elapsed().as_secs_f64(),
    }
}

async fn run(args: &Args) {
    let (_upstream, upstream_url) = fixture_server("plain_server");
    let redis = RedisServer::start();
    let stores: [(&str, Vec<String>); 2] = [
        ("memory", vec![]),
        ("redis", vec!["--redis".into(), redis.url()]),
    ];
    println!(
        "| store | round | path | p50 ms | p90 ms | p99 ms | creates/s ({} conns) | p50 2025/2026 | creates/s 2025/2026 |",
        args.concurrency
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
    let wanted = |year: &str| args.only.as_deref().is_none_or(|only| only == year);
    for (store, flags) in stores {
        if args.filter.as_deref().is_some_and(|f| !store.contains(f)) {
            continue;
        }
        for round in 1..=args.rounds {
            // A fresh gateway per path: the tasks one path made (tens of thousands in the
            // throughput phase) must not weigh on the other's figures.
            let shared = args.shared_gateway.then(|| gateway(&upstream_url, &flags));
            let measured = |path: Path| {
                let flags = flags.clone();
                let upstream_url = upstream_url.clone();
                let shared_url = shared.as_ref().map(|(_, url)| url.clone());
                async move {
                    if let Some(url) = shared_url {
                        return measure(args, &url, path).await;
                    }
                    let (gateway, url) = gateway(&upstream_url, &flags);
                    eprintln!(
                        "gateway ({store}, {}) pid {}",
                        path.name(),
                        gateway.child.id()
                    );
                    measure(args, &url, path).await
                }
            };
            let modern = if wanted("2026") {
                Some(measured(Path::Stateless).await)
            } else {
                None
            };
            let session = if wanted("2025") {
                Some(measured(Path::Session).await)
            } else {
                None
            };
            for (path, reading) in [(Path::Stateless, &modern), (Path::Session, &session)] {
                let Some(reading) = reading else { continue };
                let ratios = match (&modern, path) {
                    (Some(modern), Path::Session) => format!(
                        "×{:.2} | ×{:.2}",
                        reading.p50 / modern.p50,
                        reading.per_second / modern.per_second
                    ),
                    _ => "— | —".into(),
                };
                println!(
                    "| {store} | {round} | {} | {:.3} | {:.3} | {:.3} | {:.0} | {ratios} |",
                    path.name(),
                    reading.p50,
                    reading.p90,
                    reading.p99,
                    reading.per_second,
                );
            }
        }
    }
}

fn fixture_server(name: &str) -> (Proc, String) {
    test_support::bench::fixture_server(
        std::path::Path::new(env!("CARGO_BIN_EXE_mcp-task-gateway")),
        name,
    )
}

fn gateway(upstream: &str, flags: &[String]) -> (Proc, String) {
    test_support::bench::gateway(
        std::path::Path::new(env!("CARGO_BIN_EXE_mcp-task-gateway")),
        upstream,
        flags,
    )
}
