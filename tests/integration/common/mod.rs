//! Shared helpers for the integration tests: real processes (the gateway binary, the
//! fixture server, server-everything) on free loopback ports, and a small 2026-07-28
//! client. Every wait polls against a deadline; nothing sleeps to synchronise.
#![allow(dead_code)]

pub mod admin;
pub mod browser;
pub mod session;
pub mod stdio;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
pub use test_support::{DEADLINE, Proc, free_port};

pub mod mrtr;

pub const STATELESS: &str = "2026-07-28";
pub const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Spawns `command` and waits for its `listening on URL` line; stderr as the caller set
/// it (inherited by default).
pub fn spawn_announcing(name: &str, command: Command) -> (Proc, String) {
    test_support::spawn_announcing(name, command, DEADLINE)
}

/// Waits until something listens on the loopback `port`.
pub fn wait_for_port(port: u16) {
    test_support::wait_for_port(port, DEADLINE).unwrap_or_else(|e| panic!("{e}"));
}

/// The fixture upstream `plain_server` (`crates/fixture-servers`), once per process.
pub fn plain_server_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| fixture_binary("plain_server"))
}

/// The fixture server `name` of `crates/fixture-servers`, built in the tests' profile when
/// missing or stale (cargo builds only this package's targets for its tests); its path.
fn fixture_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test binary>
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    test_support::build::fixture(profile_dir, name)
}

/// Starts the fixture `plain_server`; returns it and its `/mcp` URL.
pub fn start_plain_server() -> (Proc, String) {
    start_plain_server_at("127.0.0.1:0")
}

/// Starts the fixture `plain_server` on `listen` (e.g. again on the port of one stopped).
pub fn start_plain_server_at(listen: &str) -> (Proc, String) {
    let mut command = Command::new(plain_server_binary());
    command.args(["--listen", listen]);
    spawn_announcing("plain_server", command)
}

/// Starts the pinned `@modelcontextprotocol/server-everything` over Streamable HTTP.
pub fn start_everything() -> (Proc, String) {
    let tests = repo_root().join("tests");
    let entry = tests.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.exists(),
        "run `npm ci` in tests/ first ({} is missing)",
        entry.display()
    );
    let port = free_port();
    let mut command = Command::new("node");
    command
        .arg(&entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .current_dir(&tests)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let proc = Proc::spawn(command, "server-everything").expect("node");
    wait_for_port(port);
    (proc, format!("http://127.0.0.1:{port}/mcp"))
}

/// Starts the gateway binary in front of `upstream`; returns it and its `/mcp` URL.
pub fn start_gateway(upstream: &str, extra: &[&str]) -> (Proc, String) {
    start_gateway_with_env(upstream, extra, &[])
}

/// Starts the gateway with extra environment variables.
pub fn start_gateway_with_env(
    upstream: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Proc, String) {
    let mut command = gateway_command(&["--upstream", upstream], extra, "warn");
    command.envs(env.iter().copied());
    spawn_announcing("mcp-task-gateway", command)
}

/// The gateway binary on a free port with `upstream` and `extra` flags; its log level
/// is `RUST_LOG`, else `log_level`.
pub fn gateway_command(upstream: &[&str], extra: &[&str], log_level: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-task-gateway"));
    let log = std::env::var("RUST_LOG").unwrap_or_else(|_| log_level.to_owned());
    command
        .args(["--listen", "127.0.0.1:0"])
        .args(upstream)
        .args(extra)
        .env("RUST_LOG", log);
    command
}

/// A 2026-07-28 client written for the tests: sets `_meta` and the standard headers.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
    pub capabilities: Value,
    pub authorization: Option<String>,
}

pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    pub fn result(&self) -> &Value {
        assert!(
            self.body.get("error").is_none(),
            "unexpected error: {}",
            self.body
        );
        &self.body["result"]
    }

    pub fn error_code(&self) -> i64 {
        self.body["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("not an error: {}", self.body))
    }
}

impl Reply {
    /// Asserts that the error's message mentions `text`.
    pub fn assert_message_mentions(&self, text: &str) {
        let message = self.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(text), "no {text:?} in {}", self.body);
    }
}

/// A task's `statusMessage` (empty when it has none).
pub fn status_message(task: &Value) -> &str {
    task["statusMessage"].as_str().unwrap_or_default()
}

impl Client {
    /// A client that declares the tasks extension, elicitation, sampling and roots.
    pub fn with_tasks(url: &str) -> Self {
        Self::new(
            url,
            json!({"extensions": {TASKS_EXT: {}}, "elicitation": {"form": {}}, "sampling": {}, "roots": {}}),
        )
    }

    pub fn new(url: &str, capabilities: Value) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            capabilities,
            authorization: None,
        }
    }

    pub fn params(&self, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "gateway-tests", "version": "0"},
        });
        params
    }

    /// Sends a request with correct headers.
    pub async fn request(&self, method: &str, params: Value) -> Reply {
        self.try_request(method, params)
            .await
            .expect("gateway reachable")
    }

    /// Like [`Client::request`], but `None` when the gateway could not be reached.
    pub async fn try_request(&self, method: &str, params: Value) -> Option<Reply> {
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str().map(str::to_owned),
            "resources/read" => params["uri"].as_str().map(str::to_owned),
            m if m.starts_with("tasks/") => params["taskId"].as_str().map(str::to_owned),
            _ => None,
        };
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": self.params(params)});
        let mut headers = vec![("mcp-method", method.to_owned())];
        if let Some(name) = name {
            headers.push(("mcp-name", name));
        }
        self.try_send_raw(serde_json::to_vec(&body).unwrap(), &headers)
            .await
    }

    pub async fn send_raw(&self, body: Vec<u8>, headers: &[(&str, String)]) -> Reply {
        self.try_send_raw(body, headers)
            .await
            .expect("gateway reachable")
    }

    async fn try_send_raw(&self, body: Vec<u8>, headers: &[(&str, String)]) -> Option<Reply> {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if !headers
            .iter()
            .any(|(name, _)| *name == "mcp-protocol-version")
        {
            request = request.header("mcp-protocol-version", STATELESS);
        }
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if let Some(auth) = &self.authorization {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text}));
        Some(Reply { status, body })
    }

    /// Opens `subscriptions/listen` (JSON-RPC id `id`) with `notifications` as its
    /// filter: the SSE stream, or the reply when the gateway refused.
    pub async fn listen(&self, id: u64, notifications: Value) -> Result<mrtr::SseMessages, Reply> {
        let params = self.params(json!({ "notifications": notifications }));
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params});
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", STATELESS)
            .header("mcp-method", "subscriptions/listen")
            .json(&body);
        if let Some(auth) = &self.authorization {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.expect("gateway reachable");
        let is_sse = response
            .headers()
            .get("content-type")
            .is_some_and(|ct| ct.to_str().unwrap_or("").starts_with("text/event-stream"));
        if is_sse {
            return Ok(mrtr::SseMessages::of(response));
        }
        let status = response.status().as_u16();
        let body = response.json().await.unwrap_or_else(|_| json!({}));
        Err(Reply { status, body })
    }

    pub async fn call_tool(&self, name: &str, arguments: Value) -> Reply {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// An MRTR retry of a tool call: the same call with `inputResponses` and the
    /// `requestState` as the client got it.
    pub async fn retry_tool(
        &self,
        name: &str,
        arguments: Value,
        input_responses: Value,
        request_state: &Value,
    ) -> Reply {
        let params = json!({
            "name": name,
            "arguments": arguments,
            "inputResponses": input_responses,
            "requestState": request_state,
        });
        self.request("tools/call", params).await
    }

    /// Starts server-everything's `trigger-long-running-operation` for `seconds` (a step
    /// a second) and waits for its first progress; returns the task id.
    pub async fn start_reporting_operation(&self, seconds: u32) -> String {
        let arguments = json!({"duration": seconds, "steps": seconds});
        let task_id = self
            .start_task("trigger-long-running-operation", arguments)
            .await;
        self.poll_until(&task_id, |t| t["statusMessage"].is_string())
            .await;
        task_id
    }

    /// Calls a tool and expects a `CreateTaskResult`; returns the task id.
    pub async fn start_task(&self, name: &str, arguments: Value) -> String {
        let reply = self.call_tool(name, arguments).await;
        let result = reply.result();
        assert_eq!(result["resultType"], "task", "expected a task: {result}");
        result["taskId"].as_str().unwrap().to_owned()
    }

    pub async fn get_task(&self, task_id: &str) -> Value {
        let reply = self.request("tasks/get", json!({"taskId": task_id})).await;
        reply.result().clone()
    }

    /// Polls `tasks/get` until `done` holds, failing after the deadline.
    pub async fn poll_until(&self, task_id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let task = self.get_task(task_id).await;
            if done(&task) {
                return task;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "task never reached the expected state: {task}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn wait_status(&self, task_id: &str, status: &str) -> Value {
        self.poll_until(task_id, |t| t["status"] == status).await
    }

    pub async fn update(&self, task_id: &str, responses: Value) -> Reply {
        self.request(
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": responses}),
        )
        .await
    }

    pub async fn cancel(&self, task_id: &str) -> Reply {
        self.request("tasks/cancel", json!({"taskId": task_id}))
            .await
    }
}

/// The text of the first content block of a tool result.
/// The gateway's acknowledgement of `tasks/update` and `tasks/cancel`: empty, naming the
/// gateway as the server that made it.
pub fn gateway_ack() -> Value {
    json!({
        "resultType": "complete",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mcp-task-gateway", "version": env!("CARGO_PKG_VERSION")}},
    })
}

pub fn first_text(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {result}"))
}

/// The fixture upstream's counters (`plain_server`, `GET /stats`).
pub async fn upstream_stats(upstream_url: &str) -> Value {
    let url = upstream_url.replace("/mcp", "/stats");
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// How many answers to its server-to-client requests the fixture received, per request.
pub fn responses_received(stats: &Value) -> Vec<u64> {
    stats["responsesReceived"]
        .as_object()
        .expect("responsesReceived")
        .values()
        .map(|v| v.as_u64().expect("a count"))
        .collect()
}

/// The gateway's Prometheus page, from `--metrics-listen 127.0.0.1:PORT`.
pub async fn scrape_metrics(port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of one sample line, e.g. `mtg_tasks_created_total` or
/// `mtg_tasks_finished_total{status="completed"}`.
pub fn metric_sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// The one outstanding input request of a task, as (key, request).
pub fn only_input_request(task: &Value) -> (String, Value) {
    let requests = task["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{task}");
    let (key, request) = requests.iter().next().unwrap();
    (key.clone(), request.clone())
}

/// Waits for the process to exit (after a signal); its status.
pub fn wait_exit(proc: &mut Proc) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = proc.child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < DEADLINE, "the process did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `kill -TERM`: a graceful stop.
pub fn sigterm(proc: &Proc) {
    let status = Command::new("kill")
        .args(["-TERM", &proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The instance that owns the task, as the store says.
pub fn owner_of(redis: &test_support::RedisServer, task_id: &str) -> String {
    let mut conn = redis.connection();
    redis::cmd("HGET")
        .arg(task_key(&mut conn, task_id))
        .arg("owner")
        .query(&mut conn)
        .unwrap()
}

/// The task ids in the owner's index of `instance` (`*`: of every instance), whatever the
/// store namespace of the gateways (`mtg:<ns>:owned:{<instance>}`).
pub fn owner_index(conn: &mut redis::Connection, instance: &str) -> Vec<String> {
    let indexes: Vec<String> = redis::cmd("KEYS")
        .arg(format!("mtg:*:owned:{{{instance}}}"))
        .query(conn)
        .unwrap();
    let mut members = Vec::new();
    for index in indexes {
        let more: Vec<String> = redis::cmd("SMEMBERS").arg(index).query(conn).unwrap();
        members.extend(more);
    }
    members
}

/// A task's hash in a test's own Redis, whatever the store namespace of the gateway that
/// made it (`mtg:<ns>:{<taskId>}`).
pub fn task_key(conn: &mut redis::Connection, task_id: &str) -> String {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("mtg:*{{{task_id}}}"))
        .query(conn)
        .unwrap();
    assert_eq!(keys.len(), 1, "one key for task {task_id}: {keys:?}");
    keys.pop().unwrap()
}

/// Polls `probe` until it returns `Some`, failing after the deadline.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
