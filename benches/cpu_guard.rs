//! The CPU guard: instructions the gateway executes for its hot paths, counted by
//! valgrind's callgrind through gungraun. Counts do not depend on how busy the machine
//! is, so CI compares them with `benches/cpu_guard.baseline.json` and fails on growth
//! (`scripts/cpu_guard.py`, docs/benchmarks.md "The CPU guard").
//!
//! Each benchmark runs the gateway in this process on one current-thread runtime (the
//! production runtime, `--worker-threads 1`) in front of the fixture `plain_server`, a
//! separate process that is not traced. The client, a bare hyper HTTP/1.1 connection,
//! runs on the same thread, so every instruction of a request is on the one thread
//! callgrind counts, from the client's write to its read of the answer. Start-up and a
//! warm-up are in the setup, which is not counted.
//!
//! The allocator is the system's, not the binary's jemalloc: jemalloc's cache upkeep
//! varied by up to 3 % between identical runs, glibc's malloc does the same work each time.
//!
//! Run: `python3 scripts/cpu_guard.py` (builds in the dev profile, CI's build).

use std::hint::black_box;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gungraun::{
    LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main as gungraun_main,
};
use http::{HeaderMap, HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use mcp_task_gateway::config::Config;
use serde_json::{Value, json};
use test_support::{Proc, free_port, spawn_announcing};
use tokio::runtime::Runtime;
use tokio::task::LocalSet;

/// Requests per benchmark: enough that one stray wake-up is noise far below the 5 % limit.
const CALLS: usize = 100;
/// Requests of the same kind made in the setup, so pools and caches are warm.
const WARM_UP: usize = 10;
const DEADLINE: Duration = Duration::from_secs(60);
const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

/// The gateway and the upstream, a client connection to the gateway, and the requests
/// the benchmark sends on it.
struct Rig {
    runtime: Runtime,
    local: LocalSet,
    _upstream: Proc,
    sender: SendRequest<Full<Bytes>>,
    requests: Vec<(HeaderMap, Bytes)>,
}

impl Rig {
    fn start() -> Self {
        let (upstream, upstream_url) = spawn_announcing(
            "plain_server",
            plain_server_command(),
            test_support::DEADLINE,
        );
        let listen: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let config = Config::from_args([
            "mcp-task-gateway",
            "--listen",
            &listen.to_string(),
            "--upstream",
            &upstream_url,
            "--worker-threads",
            "1",
            "--drain-timeout-ms",
            "0",
        ])
        .expect("gateway flags");
        let runtime =
            mcp_task_gateway::worker_runtime(Duration::ZERO).expect("the gateway's runtime");
        let local = LocalSet::new();
        local.spawn_local(async move {
            if let Err(e) = mcp_task_gateway::run(config).await {
                panic!("gateway stopped: {e}");
            }
        });
        let sender = local.block_on(&runtime, connect(listen));
        Self {
            runtime,
            local,
            _upstream: upstream,
            sender,
            requests: Vec::new(),
        }
    }

    /// Sends one request and reads its whole answer; the answer's body.
    fn send(&mut self, headers: &HeaderMap, body: &Bytes) -> (HeaderMap, Bytes) {
        let Self {
            runtime,
            local,
            sender,
            ..
        } = self;
        local.block_on(runtime, send(sender, headers, body))
    }

    /// Sends every prepared request `rounds` times over.
    fn run(&mut self, rounds: usize) {
        let Self {
            runtime,
            local,
            sender,
            requests,
            ..
        } = self;
        local.block_on(runtime, async {
            for _ in 0..rounds {
                for (headers, body) in requests.iter() {
                    black_box(send(sender, headers, body).await);
                }
            }
        });
    }

    /// Prepares `requests` and sends them `WARM_UP` times, checking each answer.
    fn with_requests(mut self, requests: Vec<(HeaderMap, Bytes)>, expect: &str) -> Self {
        for _ in 0..WARM_UP {
            for (headers, body) in &requests {
                let (_, answer) = self.send(headers, body);
                let text = String::from_utf8_lossy(&answer);
                assert!(text.contains(expect), "expected {expect} in {text}");
            }
        }
        self.requests = requests;
        self
    }
}

fn plain_server_command() -> Command {
    let exe = std::env::current_exe().expect("the bench's path");
    // target/<profile>/deps/<bench binary>
    let profile_dir = exe.ancestors().nth(2).expect("target/<profile>");
    let binary: PathBuf = profile_dir.join("plain_server");
    assert!(
        binary.exists(),
        "{} is missing: `cargo build -p fixture-servers --bins` first (scripts/cpu_guard.py does)",
        binary.display()
    );
    let mut command = Command::new(binary);
    command.args(["--listen", "127.0.0.1:0"]);
    command
}

async fn connect(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let started = Instant::now();
    let stream = loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(stream) => break stream,
            Err(e) if started.elapsed() > DEADLINE => panic!("the gateway never listened: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    };
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let io = hyper_util::rt::TokioIo::new(stream);
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("HTTP/1.1 handshake");
    tokio::task::spawn_local(connection);
    sender
}

async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    headers: &HeaderMap,
    body: &Bytes,
) -> (HeaderMap, Bytes) {
    let mut request = Request::post("/mcp")
        .header(http::header::HOST, "127.0.0.1")
        .body(Full::new(body.clone()))
        .expect("request");
    request.headers_mut().extend(headers.clone());
    sender.ready().await.expect("connection ready");
    let response = sender.send_request(request).await.expect("an answer");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("the answer's body").to_bytes();
    (parts.headers, body)
}

fn headers(version: Option<&'static str>, method: &str, name: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    if let Some(version) = version {
        headers.insert("mcp-protocol-version", HeaderValue::from_static(version));
    }
    if version == Some(MODERN) {
        headers.insert("mcp-method", HeaderValue::from_str(method).expect("ASCII"));
        if let Some(name) = name {
            headers.insert("mcp-name", HeaderValue::from_str(name).expect("ASCII"));
        }
    }
    headers
}

/// A 2026-07-28 request; `tasks` declares the tasks extension.
fn modern(method: &str, mut params: Value, name: &str, tasks: bool) -> (HeaderMap, Bytes) {
    let extensions = if tasks {
        json!({"io.modelcontextprotocol/tasks": {}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
        "io.modelcontextprotocol/clientInfo": {"name": "cpu-guard", "version": "0"},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    (
        headers(Some(MODERN), method, Some(name)),
        Bytes::from(body.to_string()),
    )
}

fn echo_params() -> Value {
    json!({"name": "echo", "arguments": {"text": "hi"}})
}

/// A 2025-11-25 session's `tools/call` of `echo`: bytes passed through to the upstream.
fn setup_pass_through() -> Rig {
    let mut rig = Rig::start();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "cpu-guard", "version": "0"},
    }});
    let (answer_headers, _) = rig.send(&headers(None, "", None), &Bytes::from(init.to_string()));
    let mut session = headers(Some(LEGACY), "", None);
    let id = answer_headers
        .get("mcp-session-id")
        .expect("the upstream opened a session")
        .clone();
    session.insert("mcp-session-id", id);
    rig.send(
        &session,
        &Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
    );
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": echo_params()});
    rig.with_requests(vec![(session, Bytes::from(call.to_string()))], "\"result\"")
}

/// A 2026-07-28 `tools/call` without the tasks extension: answered inline.
fn setup_bridged() -> Rig {
    let call = modern("tools/call", echo_params(), "echo", false);
    Rig::start().with_requests(vec![call], "\"result\"")
}

/// A 2026-07-28 `tools/call` with the tasks extension on the memory store: the
/// `CreateTaskResult`, and the runner sending the call upstream. `sleep` holds each call
/// there, so no task ends inside the count and every count has the same work.
fn setup_task_create() -> Rig {
    let sleep = json!({"name": "sleep", "arguments": {"ms": 600_000, "steps": 0}});
    let create = modern("tools/call", sleep, "sleep", true);
    Rig::start().with_requests(vec![create], "\"taskId\"")
}

/// `tasks/get` of a completed task on the memory store.
fn setup_tasks_get() -> Rig {
    let mut rig = Rig::start();
    let (headers, body) = modern("tools/call", echo_params(), "echo", true);
    let (_, created) = rig.send(&headers, &body);
    let created: Value = serde_json::from_slice(&created).expect("JSON");
    let task_id = created["result"]["taskId"]
        .as_str()
        .expect("a CreateTaskResult")
        .to_owned();
    let get = modern("tasks/get", json!({"taskId": task_id}), &task_id, true);
    let started = Instant::now();
    loop {
        let (_, answer) = rig.send(&get.0, &get.1);
        if String::from_utf8_lossy(&answer).contains("\"completed\"") {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the echo task never completed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    rig.with_requests(vec![get], "\"completed\"")
}

#[library_benchmark]
#[bench::pass_through(setup = setup_pass_through)]
#[bench::bridged(setup = setup_bridged)]
#[bench::task_create(setup = setup_task_create)]
#[bench::tasks_get(setup = setup_tasks_get)]
fn hot_path(mut rig: Rig) -> Rig {
    rig.run(CALLS);
    rig
}

library_benchmark_group!(name = gateway; benchmarks = hot_path);

gungraun_main!(
    config = LibraryBenchmarkConfig::default()
        // The upstream runs natively: only this process's requests are counted.
        .valgrind_args(["--trace-children=no"]);
    library_benchmark_groups = gateway
);
