//! Helpers for gateways in front of stdio upstreams: starting one with its log kept for
//! assertions, finding the processes it started, and the commands of the test peers.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{DEADLINE, Proc, gateway_command, spawn_announcing};
use test_support::children_of;

/// A gateway whose stderr (its log) is kept, and echoed for failing tests.
pub struct StdioGateway {
    pub proc: Proc,
    pub url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl StdioGateway {
    /// The gateway's log lines so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits for a log line containing every one of `parts`.
    pub fn wait_for_log(&self, parts: &[&str]) -> String {
        let start = Instant::now();
        loop {
            if let Some(line) = self
                .log()
                .into_iter()
                .find(|line| parts.iter().all(|p| line.contains(p)))
            {
                return line;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no log line with {parts:?} within {DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The processes the gateway started (its direct children), by PID.
    pub fn children(&self) -> Vec<u32> {
        children_of(self.proc.pid())
    }

    /// Waits until the gateway runs exactly `count` upstream processes.
    pub fn wait_children(&self, count: usize) -> Vec<u32> {
        let start = Instant::now();
        loop {
            let children = self.children();
            if children.len() == count {
                return children;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "expected {count} upstream processes, found {children:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET /readyz`: the status code and the body.
    pub async fn readyz(&self) -> (u16, String) {
        let url = self.url.replace("/mcp", "/readyz");
        let response = reqwest::get(url).await.expect("gateway reachable");
        (response.status().as_u16(), response.text().await.unwrap())
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The stdio command line of the pinned server-everything.
pub fn everything_cmd() -> String {
    let entry = repo_root()
        .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.exists(),
        "run `npm ci` in tests/ first ({} is missing)",
        entry.display()
    );
    format!("node '{}' stdio", entry.display())
}

/// The stdio command line of `tests/fixtures/junk_stdio_server.py` with `args`.
pub fn junk_server_cmd(args: &str) -> String {
    let script = repo_root().join("tests/fixtures/junk_stdio_server.py");
    format!("python3 '{}' {args}", script.display())
}

/// Starts the gateway with `--upstream-cmd command` and `extra` flags; returns once it
/// listens (the upstream may still be starting).
pub fn start_stdio_gateway(command: &str, extra: &[&str]) -> StdioGateway {
    let mut gateway = gateway_command(&["--upstream-cmd", command], extra, "info");
    gateway.env("NO_COLOR", "1").stderr(Stdio::piped());
    let (mut proc, url) = spawn_announcing("mcp-task-gateway", gateway);
    let log = Arc::new(Mutex::new(Vec::new()));
    let stderr = proc.child.stderr.take().expect("stderr is piped");
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            eprintln!("[gateway] {line}");
            kept.lock().unwrap().push(line);
        }
    });
    StdioGateway { proc, url, log }
}

/// Sends SIGKILL to one process, by PID.
pub fn kill_pid(pid: u32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -9 {pid} failed");
}
