//! 2026-07-28 upstreams that ask for input with MRTR: the Python `mcp` SDK server
//! (`tests/fixtures/mrtr_server.py`) and the rmcp one (`examples/mrtr_server.rs`). Both
//! have the same tools and a `GET /stats` counting the tool calls they received.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::{Proc, example_binary, repo_root, spawn_announcing};

/// Which SDK the upstream is written with.
#[derive(Debug, Clone, Copy)]
pub enum MrtrUpstream {
    Python,
    Rmcp,
}

impl MrtrUpstream {
    /// Starts the server; returns it and its `/mcp` URL.
    pub fn start(self) -> (Proc, String) {
        match self {
            Self::Python => {
                let mut command = Command::new(python());
                command.arg(repo_root().join("tests/fixtures/mrtr_server.py"));
                spawn_announcing("mrtr_server.py", command)
            }
            Self::Rmcp => {
                static BIN: OnceLock<PathBuf> = OnceLock::new();
                let bin = BIN.get_or_init(|| example_binary("mrtr_server"));
                let mut command = Command::new(bin);
                command.args(["--listen", "127.0.0.1:0"]);
                spawn_announcing("mrtr_server", command)
            }
        }
    }
}

/// The test venv's python (scripts/test.sh builds it from tests/requirements.txt).
fn python() -> PathBuf {
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
