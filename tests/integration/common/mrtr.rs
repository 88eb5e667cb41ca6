//! 2026-07-28 upstreams that ask for input with MRTR: the Python `mcp` SDK server
//! (`tests/fixtures/mrtr_server.py`) and the rmcp one (`mrtr_server` of
//! `crates/fixture-servers`). Both have the same tools and a `GET /stats` counting the
//! tool calls they received.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::{Proc, fixture_binary, repo_root, spawn_announcing};

/// Which SDK the upstream is written with.
#[derive(Debug, Clone, Copy)]
pub enum MrtrUpstream {
    Python,
    Rmcp,
}

impl MrtrUpstream {
    /// Starts the server on a free port; returns it and its `/mcp` URL.
    pub fn start(self) -> (Proc, String) {
        self.start_on(0)
    }

    /// Starts the server on `port` (0: any free one).
    pub fn start_on(self, port: u16) -> (Proc, String) {
        match self {
            Self::Python => {
                let mut command = Command::new(python());
                command
                    .arg(repo_root().join("tests/fixtures/mrtr_server.py"))
                    .args(["--port", &port.to_string()]);
                spawn_announcing("mrtr_server.py", command)
            }
            Self::Rmcp => {
                static BIN: OnceLock<PathBuf> = OnceLock::new();
                let bin = BIN.get_or_init(|| fixture_binary("mrtr_server"));
                let mut command = Command::new(bin);
                command.args(["--listen", &format!("127.0.0.1:{port}")]);
                spawn_announcing("mrtr_server", command)
            }
        }
    }
}

/// The test venv's python (scripts/test.sh builds it from tests/requirements.txt).
pub fn python() -> PathBuf {
    let venv = repo_root().join("tests/.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// How many calls of `tool` reached the upstream's tool code.
pub async fn upstream_calls(upstream_url: &str, tool: &str) -> u64 {
    let stats_url = upstream_url.replace("/mcp", "/stats");
    let stats: Value = reqwest::get(&stats_url)
        .await
        .expect("upstream reachable")
        .json()
        .await
        .expect("stats are JSON");
    stats["calls"][tool].as_u64().unwrap_or(0)
}

/// A 2025-11-25 (session) client written for the tests: `initialize`, `Mcp-Session-Id`
/// on every request, and SSE answers read message by message.
pub struct BridgedSession {
    http: reqwest::Client,
    url: String,
    pub session_id: String,
}

/// Messages of one SSE response, read as they come.
pub struct SseMessages {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl SseMessages {
    /// The messages of an SSE response, as they come.
    pub fn of(response: reqwest::Response) -> Self {
        SseMessages {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next JSON-RPC message; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        use futures_util::StreamExt;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(&data).expect("SSE data is JSON"));
            }
            let chunk = tokio::time::timeout(super::DEADLINE, self.body.next())
                .await
                .expect("the SSE stream went silent")?;
            self.buffer.push_str(&String::from_utf8_lossy(
                &chunk.expect("SSE stream readable"),
            ));
        }
    }
}

impl BridgedSession {
    pub async fn initialize(url: &str, capabilities: Value) -> (Self, Value) {
        let http = reqwest::Client::new();
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": {"name": "legacy-test-client", "version": "0"},
            }
        });
        let response = http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .expect("gateway reachable");
        assert_eq!(response.status(), 200);
        let session_id = response
            .headers()
            .get("mcp-session-id")
            .expect("a session id")
            .to_str()
            .unwrap()
            .to_owned();
        let result: Value = response.json().await.unwrap();
        let session = Self {
            http,
            url: url.to_owned(),
            session_id,
        };
        let status = session
            .post(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .status();
        assert_eq!(status, 202);
        (session, result)
    }

    pub async fn post(&self, body: Value) -> reqwest::Response {
        self.http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &self.session_id)
            .json(&body)
            .send()
            .await
            .expect("gateway reachable")
    }

    /// Sends a request and reads its answer, JSON or SSE alike, as a message stream.
    pub async fn request(&self, id: u64, method: &str, params: Value) -> SseMessages {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.post(body).await;
        assert_eq!(response.status(), 200, "{method}");
        let is_sse = response
            .headers()
            .get("content-type")
            .is_some_and(|ct| ct.to_str().unwrap_or("").starts_with("text/event-stream"));
        if is_sse {
            SseMessages {
                body: Box::pin(response.bytes_stream()),
                buffer: String::new(),
            }
        } else {
            let text = response.text().await.unwrap();
            SseMessages {
                body: Box::pin(futures_util::stream::empty()),
                buffer: format!("data: {text}\n\n"),
            }
        }
    }

    /// Answers a server-to-client request.
    pub async fn respond(&self, id: &Value, result: Value) {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result});
        assert_eq!(self.post(body).await.status(), 202);
    }

    pub async fn delete(&self) -> u16 {
        self.http
            .delete(&self.url)
            .header("mcp-session-id", &self.session_id)
            .send()
            .await
            .expect("gateway reachable")
            .status()
            .as_u16()
    }
}

/// Each flow `async fn NAME(upstream: MrtrUpstream)` as a test per upstream:
/// `python_upstream::NAME` and `rmcp_upstream::NAME`.
#[macro_export]
macro_rules! over_both_upstreams {
    ($($flow:ident),* $(,)?) => {
        mod python_upstream {
            $(#[tokio::test]
            async fn $flow() {
                super::$flow($crate::common::mrtr::MrtrUpstream::Python).await;
            })*
        }
        mod rmcp_upstream {
            $(#[tokio::test]
            async fn $flow() {
                super::$flow($crate::common::mrtr::MrtrUpstream::Rmcp).await;
            })*
        }
    };
}
