//! Every stop reaches the upstream, whatever it answers with: a client's cancel, an
//! operator's cancel, a session client's cancel, TTL expiry, the upstream timeout and
//! the drain at SIGTERM, each against a JSON-response upstream (the TypeScript SDK's
//! `enableJsonResponse`, whose head arrives only when the call ends), an SSE upstream,
//! a stdio upstream and a 2026-07-28 upstream (the Python SDK, also JSON-response).
//! The upstream must hear of each stop within 2 s and hold no request open, and the
//! principal's one running slot (`--max-running-tasks-per-principal 1`) must be free
//! for the next call.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::session::{SessionClient, read_messages};
use crate::common::*;
use serde_json::{Value, json};

/// How soon after a stop the upstream must have heard of it.
const PROMPTLY: Duration = Duration::from_secs(2);
const ADMIN_TOKEN: &str = "stops-admin-token-0123456789";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Json,
    Sse,
    Stdio,
    /// 2026-07-28: closing the request's stream is the cancel.
    Stateless,
}

/// The upstream under test and how the gateway reaches it.
struct Upstream {
    kind: Kind,
    _proc: Option<Proc>,
    gateway_args: Vec<String>,
    stats_url: String,
    /// Where a stdio server leaves its last stats when it ends.
    stats_file: Option<PathBuf>,
}

fn probe_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stop_probe_server.mjs")
}

impl Upstream {
    fn start(kind: Kind) -> Self {
        let http = |mode: &str| {
            let mut command = Command::new("node");
            command
                .arg(probe_script())
                .args(["--mode", mode])
                .stdin(Stdio::null());
            spawn_announcing("stop_probe_server", command)
        };
        let mut stats_file = None;
        let (proc, gateway_args, stats_url) = match kind {
            Kind::Json | Kind::Sse => {
                let (proc, url) = http(if kind == Kind::Json { "json" } else { "sse" });
                let stats = url.replace("/mcp", "/stats");
                (Some(proc), vec!["--upstream".into(), url], stats)
            }
            Kind::Stdio => {
                // The gateway starts it; its stats come on a port of their own.
                let port = free_port();
                let file = std::env::temp_dir().join(format!("mtg-stops-{port}.json"));
                let _ = std::fs::remove_file(&file);
                stats_file = Some(file.clone());
                let cmd = format!(
                    "node {} --mode stdio --stats-port {port} --stats-file {}",
                    probe_script().display(),
                    file.display()
                );
                let args = vec![
                    "--upstream-cmd".into(),
                    cmd,
                    "--upstream-pool".into(),
                    "1".into(),
                ];
                (None, args, format!("http://127.0.0.1:{port}/stats"))
            }
            Kind::Stateless => {
                // The SDK's SSE mode holds the head back while the handler sends nothing,
                // and cancels the handler when the stream closes.
                let mut command = Command::new(mrtr::python());
                command
                    .arg(
                        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                            .join("tests/fixtures/mrtr_server.py"),
                    )
                    .arg("--sse");
                let (proc, url) = spawn_announcing("mrtr_server.py", command);
                let stats = url.replace("/mcp", "/stats");
                (Some(proc), vec!["--upstream".into(), url], stats)
            }
        };
        Self {
            kind,
            _proc: proc,
            gateway_args,
            stats_url,
            stats_file,
        }
    }

    /// The upstream's counts; a stdio server's last ones once it ended.
    async fn stats(&self) -> Option<Value> {
        if let Ok(response) = reqwest::get(&self.stats_url).await {
            return response.json().await.ok();
        }
        let file = std::fs::read(self.stats_file.as_ref()?).ok()?;
        serde_json::from_slice(&file).ok()
    }

    /// Waits until the `n`th `sleep` call runs upstream.
    async fn wait_started(&self, n: u64) {
        eventually(&format!("call {n} running upstream"), || async {
            let stats = self.stats().await?;
            (stats["callsStarted"].as_u64()? >= n && stats["callsInFlight"] == 1).then_some(())
        })
        .await;
    }

    /// Checks, within [`PROMPTLY`] of `since`, that the upstream heard the `n`th stop:
    /// the call was cancelled (`notifications/cancelled`, or on 2026-07-28 a closed
    /// stream), no call runs, and no request is left open.
    async fn assert_stopped(&self, n: u64, since: Instant, what: &str) {
        let deadline = since + PROMPTLY;
        loop {
            let stats = self.stats().await.unwrap_or_default();
            let heard = match self.kind {
                Kind::Stateless => stats["abortedCalls"].as_u64() == Some(n),
                _ => stats["cancelledReceived"].as_array().map(Vec::len) == Some(n as usize),
            };
            let idle = stats["callsInFlight"] == 0;
            // The Python fixture does not count HTTP requests; its aborted handler is
            // the sign that the gateway closed the request.
            let closed = stats
                .get("openRequests")
                .is_none_or(|open| open.as_u64() == Some(0));
            if heard && idle && closed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{:?} upstream, {what}: not stopped within {PROMPTLY:?}: {stats}",
                self.kind
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn token_file() -> tempfile_path::TempPath {
    tempfile_path::write(&format!("{ADMIN_TOKEN}\n"))
}

/// A tiny owned temp file, removed on drop (the tests need no crate for this).
mod tempfile_path {
    pub struct TempPath(pub std::path::PathBuf);

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    pub fn write(contents: &str) -> TempPath {
        let path = std::env::temp_dir().join(format!("mtg-stops-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, contents).unwrap();
        TempPath(path)
    }
}

/// The gateway in front of `upstream`, with the admin API and one running task per
/// principal; returns it, its URL and the admin URL.
fn start_gateway_for(upstream: &Upstream, extra: &[&str]) -> (Proc, String, String) {
    let admin_port = free_port();
    let admin_listen = format!("127.0.0.1:{admin_port}");
    let token = token_file();
    let mut flags = vec![
        "--metrics-listen",
        &admin_listen,
        "--admin-token-file",
        token.0.to_str().unwrap(),
        "--max-running-tasks-per-principal",
        "1",
    ];
    flags.extend_from_slice(extra);
    let upstream_args: Vec<&str> = upstream.gateway_args.iter().map(String::as_str).collect();
    let command = gateway_command(&upstream_args, &flags, "warn");
    let (proc, url) = spawn_announcing("mcp-task-gateway", command);
    (proc, url, format!("http://{admin_listen}"))
}

/// Starts a 60 s `sleep` as a task once the principal's running slot is free (the
/// previous stop must free it promptly too); returns its id.
async fn start_sleep(client: &Client) -> String {
    let since = Instant::now();
    loop {
        let reply = client.call_tool("sleep", json!({"ms": 60000})).await;
        if reply.body.get("error").is_none() {
            let result = reply.result();
            assert_eq!(result["resultType"], "task", "{result}");
            return result["taskId"].as_str().unwrap().to_owned();
        }
        assert_eq!(reply.error_code(), -31429, "{}", reply.body);
        assert!(
            since.elapsed() < PROMPTLY,
            "the last stop did not free the running slot: {}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A 2025-11-25 session client that declared tasks.
async fn session_client(url: &str) -> SessionClient {
    let mut client = SessionClient::new(url);
    client
        .initialize("2025-11-25", json!({"tasks": {"list": {}, "cancel": {}}}))
        .await;
    client
}

async fn session_request(client: &SessionClient, id: u64, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let response = client.post(body).await;
    assert_eq!(response.status(), 200, "{method}");
    read_messages(response)
        .await
        .into_iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {method}"))
}

/// A session client's task-augmented `sleep`, once the running slot is free.
async fn start_session_sleep(client: &SessionClient, id: u64, task: Value) -> String {
    let since = Instant::now();
    loop {
        let params = json!({"name": "sleep", "arguments": {"ms": 60000}, "task": task});
        let answer = session_request(client, id, "tools/call", params).await;
        if let Some(task_id) = answer["result"]["task"]["taskId"].as_str() {
            return task_id.to_owned();
        }
        assert_eq!(answer["error"]["code"], -31429, "{answer}");
        assert!(since.elapsed() < PROMPTLY, "slot not freed: {answer}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn every_stop_reaches_the_upstream(kind: Kind) {
    let upstream = Upstream::start(kind);
    let (mut gateway, url, admin) = start_gateway_for(&upstream, &["--drain-timeout-ms", "300"]);
    let client = Client::with_tasks(&url);
    let mut n = 0;

    // A client's tasks/cancel.
    let task = start_sleep(&client).await;
    n += 1;
    upstream.wait_started(n).await;
    let since = Instant::now();
    assert_eq!(client.cancel(&task).await.result(), &gateway_ack());
    upstream.assert_stopped(n, since, "client cancel").await;
    assert_eq!(client.get_task(&task).await["status"], "cancelled");

    // An operator's cancel.
    let task = start_sleep(&client).await;
    n += 1;
    upstream.wait_started(n).await;
    let since = Instant::now();
    let cancel_url = format!("{admin}/admin/tasks/{task}/cancel");
    let (status, cancelled) = admin::request("POST", &cancel_url, ADMIN_TOKEN).await;
    assert_eq!(status, 200, "{cancelled}");
    upstream.assert_stopped(n, since, "admin cancel").await;
    let seen = client.get_task(&task).await;
    assert_eq!(seen["status"], "cancelled", "{seen}");
    assert_eq!(status_message(&seen), "cancelled by an operator");

    // A 2025-11-25 session client's tasks/cancel.
    let session = session_client(&url).await;
    let task = start_session_sleep(&session, 10, json!({})).await;
    n += 1;
    upstream.wait_started(n).await;
    let since = Instant::now();
    let answer = session_request(&session, 11, "tasks/cancel", json!({"taskId": task})).await;
    assert_eq!(answer["result"]["status"], "cancelled", "{answer}");
    upstream
        .assert_stopped(n, since, "session client cancel")
        .await;

    // TTL expiry: the shortest TTL a session client can have (1 s).
    let task = start_session_sleep(&session, 12, json!({"ttl": 1000})).await;
    let created = Instant::now();
    n += 1;
    upstream.wait_started(n).await;
    upstream
        .assert_stopped(n, created + Duration::from_secs(1), "TTL expiry")
        .await;
    let gone = session_request(&session, 13, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");

    // A call forwarded without a task (no extension declared) whose client hangs up,
    // asking for progress (an SSE answer) or not (one JSON body).
    for progress in [false, true] {
        let plain = Client::new(&url, json!({}));
        let mut params = plain.params(json!({"name": "sleep", "arguments": {"ms": 60000}}));
        if progress {
            params["_meta"]["progressToken"] = json!("p-1");
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let headers = [
            ("mcp-method", "tools/call".to_owned()),
            ("mcp-name", "sleep".to_owned()),
        ];
        let waiting = tokio::spawn(async move {
            plain
                .send_raw(serde_json::to_vec(&body).unwrap(), &headers)
                .await
        });
        n += 1;
        upstream.wait_started(n).await;
        let since = Instant::now();
        waiting.abort();
        upstream
            .assert_stopped(n, since, "bridged call's client hung up")
            .await;
    }

    // The gateway's upstream timeout (a gateway and, for stdio, an upstream of its own:
    // counts start again).
    let timed = Upstream::start(kind);
    let (_timing, timing_url, _) = start_gateway_for(&timed, &["--upstream-timeout-ms", "1000"]);
    let timing_client = Client::with_tasks(&timing_url);
    // The limit counts from the call: the upstream must be up (a stdio server starts
    // with the gateway, and the call would wait for it).
    eventually("the upstream lists its tools", || async {
        let listed = timing_client.request("tools/list", json!({})).await;
        listed.body["result"]["tools"].is_array().then_some(())
    })
    .await;
    let task = start_sleep(&timing_client).await;
    let created = Instant::now();
    timed.wait_started(1).await;
    timed
        .assert_stopped(1, created + Duration::from_secs(1), "upstream timeout")
        .await;
    let failed = timing_client.wait_status(&task, "failed").await;
    assert!(
        status_message(&failed).contains("did not answer within 1000 ms"),
        "{failed}"
    );

    // The drain at SIGTERM: the running call is stopped upstream, and the gateway exits.
    let _task = start_sleep(&client).await;
    n += 1;
    upstream.wait_started(n).await;
    let since = Instant::now() + Duration::from_millis(300);
    sigterm(&gateway);
    upstream.assert_stopped(n, since, "SIGTERM drain").await;
    assert!(wait_exit(&mut gateway).success());
}

#[tokio::test]
async fn every_stop_reaches_a_json_response_upstream() {
    every_stop_reaches_the_upstream(Kind::Json).await;
}

#[tokio::test]
async fn every_stop_reaches_an_sse_upstream() {
    every_stop_reaches_the_upstream(Kind::Sse).await;
}

#[tokio::test]
async fn every_stop_reaches_a_stdio_upstream() {
    every_stop_reaches_the_upstream(Kind::Stdio).await;
}

#[tokio::test]
async fn every_stop_reaches_a_2026_upstream() {
    every_stop_reaches_the_upstream(Kind::Stateless).await;
}

/// Deferred results (`--defer-after-ms`): `cancel_task` of a deferred call reaches an
/// upstream that answers with one JSON body (no response head yet to close), and so does
/// a client that closes a deferrable call's SSE stream within the budget.
#[tokio::test]
async fn stops_of_deferred_calls_reach_a_json_response_upstream() {
    let upstream = Upstream::start(Kind::Json);
    let (_gateway, url, _admin) = start_gateway_for(&upstream, &["--defer-after-ms", "300"]);
    let client = Client::new(&url, json!({"elicitation": {"form": {}}}));

    let deferred = client.call_tool("sleep", json!({"ms": 60000})).await;
    let task_id = deferred.result()["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not deferred: {}", deferred.body))
        .to_owned();
    let since = Instant::now();
    let cancelled = client
        .call_tool("cancel_task", json!({"taskId": task_id}))
        .await;
    assert_eq!(cancelled.result()["isError"], false, "{}", cancelled.body);
    upstream.assert_stopped(1, since, "cancel_task").await;

    // A call that asked for progress is streamed; the client leaves before the budget.
    // A gateway of its own with a long budget: under load, seeing the call upstream can
    // take longer than 300 ms, and a call deferred by then rightly runs on as a task.
    let (_gateway, url, _admin) = start_gateway_for(&upstream, &["--defer-after-ms", "30000"]);
    let client = Client::new(&url, json!({"elicitation": {"form": {}}}));
    let mut params = client.params(json!({"name": "sleep", "arguments": {"ms": 60000}}));
    params["_meta"]["progressToken"] = json!("p");
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params});
    let response = client
        .http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "sleep")
        .body(body.to_string())
        .send()
        .await
        .expect("gateway reachable");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    eventually("the call to run upstream", || async {
        let stats = upstream.stats().await.unwrap_or_default();
        (stats["callsInFlight"] == 1).then_some(())
    })
    .await;
    let since = Instant::now();
    drop(response);
    upstream.assert_stopped(2, since, "closed stream").await;
}

/// A pass-through session client's plain call (no tasks declared), `--defer-after-ms`:
/// `cancel_task` of its deferred call, the client closing the call's request within the
/// budget, and the deferred task's TTL each reach the upstream.
async fn stops_of_deferred_pass_through_calls_reach_the_upstream(kind: Kind) {
    let upstream = Upstream::start(kind);
    let flags = ["--defer-after-ms", "1500", "--default-ttl-ms", "4000"];
    let (_gateway, url, _admin) = start_gateway_for(&upstream, &flags);
    let mut session = SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;
    let sleep = json!({"name": "sleep", "arguments": {"ms": 60000}});

    // cancel_task of the deferred call.
    let first = session_request(&session, 1, "tools/call", sleep.clone()).await;
    let task_id = first["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not deferred: {first}"))
        .to_owned();
    upstream.wait_started(1).await;
    let since = Instant::now();
    let cancel = json!({"name": "cancel_task", "arguments": {"taskId": task_id}});
    let cancelled = session_request(&session, 2, "tools/call", cancel).await;
    assert_eq!(cancelled["result"]["isError"], false, "{cancelled}");
    upstream.assert_stopped(1, since, "cancel_task").await;

    // The client closes the call's request before the budget passed.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": sleep});
    let waiting = {
        let session = session.clone();
        tokio::spawn(async move { read_messages(session.post(body).await).await })
    };
    upstream.wait_started(2).await;
    let since = Instant::now();
    waiting.abort();
    upstream.assert_stopped(2, since, "closed request").await;

    // The deferred call's task expires (a TTL of 4 s from its deferral).
    let started = Instant::now() + Duration::from_millis(1500);
    let deferred = session_request(&session, 4, "tools/call", sleep.clone()).await;
    assert!(
        deferred["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"].is_string(),
        "{deferred}"
    );
    upstream.wait_started(3).await;
    upstream
        .assert_stopped(3, started + Duration::from_secs(4), "TTL expiry")
        .await;
}

#[tokio::test]
async fn stops_of_deferred_pass_through_calls_reach_a_json_response_upstream() {
    stops_of_deferred_pass_through_calls_reach_the_upstream(Kind::Json).await;
}

#[tokio::test]
async fn stops_of_deferred_pass_through_calls_reach_an_sse_upstream() {
    stops_of_deferred_pass_through_calls_reach_the_upstream(Kind::Sse).await;
}
