//! `subscriptions/listen` at scale (`harness = false`): two gateways on one Redis, A
//! running the tasks and B holding the listeners.
//!
//! 1. Latency, with no other listener: a task on A asks for input; a listener on B
//!    follows it; the bench answers with `tasks/update` on A and times the arrival of
//!    the `notifications/tasks` (status `working`) on B. Beside it, what polling
//!    `tasks/get` every `pollIntervalMs` would take on average (half the interval).
//! 2. `--streams` listeners opened on B, each following one long task on A: the time to
//!    open them, and B's resident memory per stream (VmRSS before and after).
//! 3. The latency of step 1 again, with those streams open.
//!
//! ```text
//! cargo bench --bench listen_streams -- --streams 10000 --rounds 200
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use serde_json::{Value, json};
use test_support::RedisServer;
use tokio::sync::Semaphore;

#[derive(Parser, Debug)]
#[command(name = "listen_streams", about = "subscriptions/listen at scale")]
struct Args {
    /// Listen streams held open on instance B.
    #[arg(long, default_value_t = 10_000)]
    streams: usize,
    /// Latency samples (tasks answered) per phase.
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// Streams being opened at once.
    #[arg(long, default_value_t = 100)]
    open_concurrency: usize,
    /// Open the streams over HTTP/2 (prior knowledge), 150 to a connection, instead of
    /// one HTTP/1.1 connection each: what a stream costs without its connection.
    #[arg(long)]
    http2: bool,
}

fn main() {
    let Some((args, runtime)) = test_support::bench::start::<Args>() else {
        return;
    };
    runtime.block_on(run(&args));
}

async fn run(args: &Args) {
    let gateway_bin = Path::new(env!("CARGO_BIN_EXE_mcp-task-gateway"));
    let redis = RedisServer::start();
    let (_upstream, upstream_url) =
        test_support::bench::fixture_server(gateway_bin, "plain_server");
    let flags = |id: &str| {
        vec![
            "--redis".to_owned(),
            redis.url(),
            "--instance-id".to_owned(),
            id.to_owned(),
        ]
    };
    let (_a, url_a) = test_support::bench::gateway(gateway_bin, &upstream_url, &flags("a"));
    let (b, url_b) = test_support::bench::gateway(gateway_bin, &upstream_url, &flags("b"));
    let client = Client::new();

    let quiet = latency(&client, &url_a, &url_b, args.rounds).await;
    report("notification latency, no other listener", &quiet);

    let holder = client
        .start_task(&url_a, "sleep", json!({"ms": 3_600_000}))
        .await;
    let before = rss_kib(b.pid());
    let started = Instant::now();
    let streams = open_streams(
        &url_b,
        &holder,
        args.streams,
        args.open_concurrency,
        args.http2,
    )
    .await;
    let opening = started.elapsed();
    let after = rss_kib(b.pid());
    println!(
        "{} listen streams ({}) open on B in {:.2} s; B's RSS {} KiB -> {} KiB: {:.2} KiB per stream",
        streams.len(),
        if args.http2 {
            "HTTP/2, 150 per connection"
        } else {
            "HTTP/1.1, a connection each"
        },
        opening.as_secs_f64(),
        before,
        after,
        (after.saturating_sub(before)) as f64 / streams.len() as f64,
    );

    let busy = latency(&client, &url_a, &url_b, args.rounds).await;
    report(
        &format!(
            "notification latency, {} other listeners open",
            streams.len()
        ),
        &busy,
    );
    println!(
        "polling tasks/get instead: {} ms on average (half of pollIntervalMs {})",
        POLL_INTERVAL_MS / 2,
        POLL_INTERVAL_MS
    );
    drop(streams);
}

/// The gateway's default `pollIntervalMs`.
const POLL_INTERVAL_MS: u64 = 1000;

/// Per round: a task on A waits for input, a listener on B follows it, `tasks/update`
/// on A answers; the time from sending the update to the `working` notification on B.
async fn latency(client: &Client, url_a: &str, url_b: &str, rounds: usize) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let task_id = client
            .start_task(url_a, "test_tool_with_task", json!({"delay_ms": 50}))
            .await;
        let key = client.wait_for_input(url_a, &task_id).await;
        let mut stream = Listener::open_with(&reqwest::Client::new(), url_b, &task_id).await;
        assert_eq!(stream.next_task().await["status"], "input_required");
        let answer = json!({key: {"action": "accept", "content": {"name": "bench"}}});
        let sent = Instant::now();
        client.update(url_a, &task_id, answer).await;
        let heard = stream.next_task().await;
        samples.push(sent.elapsed());
        assert_eq!(heard["status"], "working", "{heard}");
    }
    samples
}

fn report(what: &str, samples: &[Duration]) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: n={} p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        sorted.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(at(1.0)),
    );
}

/// Opens `count` listeners on `url` following `task_id`, read up to their first
/// notification; they stay open while the result is kept. Over HTTP/1.1 each has a
/// connection of its own; over HTTP/2, 150 share one (the gateway allows 200 streams).
async fn open_streams(
    url: &str,
    task_id: &str,
    count: usize,
    concurrency: usize,
    http2: bool,
) -> Vec<Listener> {
    const PER_H2_CONNECTION: usize = 150;
    let shared: Vec<reqwest::Client> = match http2 {
        true => (0..count.div_ceil(PER_H2_CONNECTION))
            .map(|_| {
                reqwest::Client::builder()
                    .http2_prior_knowledge()
                    .build()
                    .expect("a client")
            })
            .collect(),
        false => Vec::new(),
    };
    let gate = Arc::new(Semaphore::new(concurrency));
    let opening: Vec<_> = (0..count)
        .map(|n| {
            let gate = gate.clone();
            let (url, task_id) = (url.to_owned(), task_id.to_owned());
            // A client per stream over HTTP/1.1: its own connection.
            let http = match http2 {
                true => shared[n / PER_H2_CONNECTION].clone(),
                false => reqwest::Client::new(),
            };
            tokio::spawn(async move {
                let _turn = gate.acquire().await.expect("the gate stays open");
                let mut listener = Listener::open_with(&http, &url, &task_id).await;
                assert_eq!(listener.next_task().await["status"], "working");
                listener
            })
        })
        .collect();
    let mut streams = Vec::with_capacity(count);
    for listener in opening {
        streams.push(listener.await.expect("a listener opened"));
    }
    streams
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc readable");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

const META: &str = "_meta";

fn params(fields: Value) -> Value {
    let mut params = fields;
    params[META] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}},
            "elicitation": {"form": {}},
        },
    });
    params
}

fn post(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> reqwest::RequestBuilder {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("authorization", "Bearer bench")
        .json(&body);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    request
}

/// The 2026-07-28 requests the bench makes, on one keep-alive connection pool.
struct Client {
    http: reqwest::Client,
}

impl Client {
    fn new() -> Self {
        Self {
            http: reqwest::Client::new(),
        }
    }

    async fn call(&self, url: &str, method: &str, name: &str, fields: Value) -> Value {
        let response = post(&self.http, url, method, Some(name), params(fields))
            .send()
            .await
            .expect("the gateway answers");
        let body: Value = response.json().await.expect("a JSON answer");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{method} failed: {body}"))
    }

    async fn start_task(&self, url: &str, tool: &str, arguments: Value) -> String {
        let created = self
            .call(
                url,
                "tools/call",
                tool,
                json!({"name": tool, "arguments": arguments}),
            )
            .await;
        created["taskId"].as_str().expect("a task").to_owned()
    }

    /// Polls until the task asks for input; the key of its question.
    async fn wait_for_input(&self, url: &str, task_id: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let task = self
                .call(url, "tasks/get", task_id, json!({"taskId": task_id}))
                .await;
            if let Some(requests) = task["inputRequests"].as_object() {
                return requests.keys().next().expect("one request").clone();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("task {task_id} never asked for input");
    }

    async fn update(&self, url: &str, task_id: &str, responses: Value) {
        self.call(
            url,
            "tasks/update",
            task_id,
            json!({"taskId": task_id, "inputResponses": responses}),
        )
        .await;
    }
}

type Bytes = futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>;

/// One open `subscriptions/listen` stream, on a connection of its own.
struct Listener {
    body: Bytes,
    buffer: String,
}

impl Listener {
    async fn open_with(http: &reqwest::Client, url: &str, task_id: &str) -> Self {
        let response = post(
            http,
            url,
            "subscriptions/listen",
            None,
            params(json!({"notifications": {"taskIds": [task_id]}})),
        )
        .send()
        .await
        .expect("the gateway answers");
        let mut listener = Self {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
        };
        let ack = listener.next().await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        listener
    }

    /// The next `notifications/tasks`' params.
    async fn next_task(&mut self) -> Value {
        let message = self.next().await;
        assert_eq!(message["method"], "notifications/tasks", "{message}");
        message["params"].clone()
    }

    async fn next(&mut self) -> Value {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data: "))
                    .collect();
                if !data.is_empty() {
                    return serde_json::from_str(&data).expect("JSON in the event");
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.body.next())
                .await
                .expect("an event within 30 s")
                .expect("the stream stays open")
                .expect("readable");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}
