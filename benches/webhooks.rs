//! Webhooks (`harness = false`), against a receiver in this process (axum, answering 204):
//!
//! 1. What a subscription costs a task: 2026-07-28 task creations (tool `echo` of
//!    `plain_server`, which completes at once, so every create is also a completion
//!    and, with a subscription, writes `task.created` and `task.completed` to the
//!    outbox in the same step), one after another (p50) and from `--concurrency`
//!    connections for `--seconds` (creates/s), on a gateway without and one with a
//!    subscription, side by side (ratio), in memory and on Redis.
//! 2. How fast one instance delivers: `--events` completed tasks' events left pending in
//!    Redis by a gateway whose receiver was down, made due at once, then delivered by a
//!    fresh instance to the local receiver (events/s). Before that, Redis's `MEMORY
//!    USAGE` of the outbox keys per pending event (the sizing of docs/webhooks.md).
//!
//! ```text
//! cargo bench --bench webhooks -- --requests 1000 --concurrency 16 --seconds 5 --events 5000
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use test_support::{Proc, RedisServer};

#[derive(Parser, Debug)]
#[command(
    name = "webhooks",
    about = "what a webhook subscription costs, and delivery speed"
)]
struct Args {
    /// Creates one after another, per gateway.
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Events left pending, then delivered by one instance.
    #[arg(long, default_value_t = 5000)]
    events: usize,
    /// Optional filter (`memory`, `redis`, `delivery`), as `cargo bench NAME` passes it.
    filter: Option<String>,
}

fn main() {
    let Some((args, runtime)) = test_support::bench::start::<Args>() else {
        return;
    };
    runtime.block_on(run(&args));
}

/// The receiver: counts the POSTs it answers 204, or answers 503 while `down`.
async fn receiver() -> (SocketAddr, Arc<AtomicU64>, Arc<AtomicBool>) {
    let count = Arc::new(AtomicU64::new(0));
    let down = Arc::new(AtomicBool::new(false));
    let (counted, is_down) = (count.clone(), down.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let (counted, is_down) = (counted.clone(), is_down.clone());
            async move {
                if is_down.load(Ordering::Relaxed) {
                    return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                }
                counted.fetch_add(1, Ordering::Relaxed);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, count, down)
}

fn secret_file() -> String {
    let path = std::env::temp_dir().join(format!("mtg-bench-secret-{}", std::process::id()));
    std::fs::write(&path, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    path.to_str().unwrap().to_owned()
}

/// A config file subscribing `url` to `task.created` and `task.completed`.
fn config_file(url: &str) -> String {
    let path = std::env::temp_dir().join(format!("mtg-bench-hooks-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        format!(
            "[[webhooks]]\nurl = \"{url}\"\nsecret-file = \"{}\"\nevents = [\"task.created\", \"task.completed\"]\n",
            secret_file()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

struct Creator {
    http: reqwest::Client,
    url: String,
}

impl Creator {
    fn new(url: &str) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        Self {
            http,
            url: url.to_owned(),
        }
    }

    async fn create(&self) {
        let params = json!({
            "name": "echo",
            "arguments": {"text": "bench"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "webhook-bench", "version": "0"},
            },
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let answer: Value = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "echo")
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .expect("a JSON answer");
        assert_eq!(answer["result"]["resultType"], "task", "{answer}");
    }
}

struct Reading {
    p50: f64,
    per_second: f64,
}

async fn measure(args: &Args, url: &str) -> Reading {
    let creator = Creator::new(url);
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
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (done, creator) = (done.clone(), Creator::new(url));
            tokio::spawn(async move {
                while Instant::now() < until {
                    creator.create().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    for worker in workers {
        worker.await.unwrap();
    }
    Reading {
        p50: times[times.len() / 2],
        per_second: done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64(),
    }
}

fn gateway(upstream: &str, flags: &[String]) -> (Proc, String) {
    test_support::bench::gateway(
        std::path::Path::new(env!("CARGO_BIN_EXE_mcp-task-gateway")),
        upstream,
        flags,
    )
}

async fn overhead(args: &Args, store: &str, upstream: &str, redis: Option<&RedisServer>) {
    let (addr, received, _) = receiver().await;
    let hook = format!("http://{addr}/hook");
    let mut base = vec!["--webhook-allow-private".to_owned()];
    if let Some(redis) = redis {
        base.extend(["--redis".to_owned(), redis.url()]);
    }
    for round in 1..=args.rounds {
        let (none_proc, none_url) = gateway(upstream, &base);
        let none = measure(args, &none_url).await;
        drop(none_proc);
        let mut with = base.clone();
        with.extend(["--config".to_owned(), config_file(&hook)]);
        let (one_proc, one_url) = gateway(upstream, &with);
        let one = measure(args, &one_url).await;
        drop(one_proc);
        println!(
            "| {store} | {round} | {:.3} | {:.3} | ×{:.2} | {:.0} | {:.0} | ×{:.2} | {} |",
            none.p50,
            one.p50,
            one.p50 / none.p50,
            none.per_second,
            one.per_second,
            one.per_second / none.per_second,
            received.load(Ordering::Relaxed),
        );
    }
}

/// Every `mtg:*:outbox:*` key's `MEMORY USAGE`, and the pending count (`ages`).
fn outbox_bytes(conn: &mut redis::Connection) -> (u64, u64) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("mtg:*:outbox:*")
        .query(conn)
        .unwrap();
    let mut bytes = 0;
    let mut pending = 0;
    for key in &keys {
        let used: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0)
            .query(conn)
            .unwrap();
        bytes += used.unwrap_or(0);
        if key.ends_with(":ages") {
            pending += redis::cmd("ZCARD").arg(key).query::<u64>(conn).unwrap();
        }
    }
    (bytes, pending)
}

async fn delivery(args: &Args, upstream: &str) {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let (addr, received, down) = receiver().await;
    let hook = format!("http://{addr}/hook");
    let config = config_file(&hook);
    let flags = |retry_first: &str| {
        vec![
            "--redis".to_owned(),
            redis.url(),
            "--config".to_owned(),
            config.clone(),
            "--webhook-allow-private".to_owned(),
            "--webhook-retry-first-ms".to_owned(),
            retry_first.to_owned(),
        ]
    };
    // The receiver is down for the first gateway: its events wait in Redis (retried in
    // an hour).
    down.store(true, Ordering::Relaxed);
    {
        let (_proc, url) = gateway(upstream, &flags("3600000"));
        let creators: Vec<_> = (0..args.concurrency)
            .map(|n| {
                let creator = Creator::new(&url);
                let share = args.events / 2 / args.concurrency
                    + usize::from(n < args.events / 2 % args.concurrency);
                tokio::spawn(async move {
                    for _ in 0..share {
                        creator.create().await;
                    }
                })
            })
            .collect();
        for creator in creators {
            creator.await.unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while outbox_bytes(&mut conn).1 < (args.events / 2 * 2) as u64 && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (bytes, pending) = outbox_bytes(&mut conn);
    println!(
        "outbox: {pending} pending events, {bytes} bytes of outbox keys: {:.0} bytes per pending event",
        bytes as f64 / pending.max(1) as f64
    );
    // Every head due now, for a fresh instance to deliver.
    let dues: Vec<String> = redis::cmd("KEYS")
        .arg("mtg:*:outbox:*:due")
        .query(&mut conn)
        .unwrap();
    for due in &dues {
        let tasks: Vec<String> = redis::cmd("ZRANGE")
            .arg(due)
            .arg(0)
            .arg(-1)
            .query(&mut conn)
            .unwrap();
        for chunk in tasks.chunks(1000) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(due);
            for task in chunk {
                cmd.arg(0).arg(task);
            }
            let _: u64 = cmd.query(&mut conn).unwrap();
        }
    }
    down.store(false, Ordering::Relaxed);
    let started = Instant::now();
    let (_proc, _url) = gateway(upstream, &flags("5000"));
    let deadline = started + Duration::from_secs(300);
    while received.load(Ordering::Relaxed) < pending && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "delivery: {} of {pending} events in {seconds:.2} s: {:.0} events/s (one instance, one subscription)",
        received.load(Ordering::Relaxed),
        received.load(Ordering::Relaxed) as f64 / seconds
    );
}

async fn run(args: &Args) {
    let wanted = |name: &str| args.filter.as_deref().is_none_or(|f| name.contains(f));
    let (_upstream, upstream) = test_support::bench::fixture_server(
        std::path::Path::new(env!("CARGO_BIN_EXE_mcp-task-gateway")),
        "plain_server",
    );
    println!(
        "| store | round | p50 ms, none | p50 ms, one | ratio | creates/s, none | creates/s, one | ratio | events received |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    if wanted("memory") {
        overhead(args, "memory", &upstream, None).await;
    }
    if wanted("redis") {
        let redis = RedisServer::start();
        overhead(args, "redis", &upstream, Some(&redis)).await;
    }
    if wanted("delivery") {
        delivery(args, &upstream).await;
    }
}
