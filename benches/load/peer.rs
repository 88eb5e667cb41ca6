//! A Rust MCP proxy that a user might put in front of the same fixture instead of the
//! gateway: the `mcp-proxy` crate (tower-mcp), installed by hand (docs/benchmarks.md,
//! run 28). Scenario floor measures it beside the byte relay when it is found.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use test_support::{Proc, free_port, wait_for_port};

use crate::ANNOUNCE_DEADLINE;

/// The version measured in run 28, the one the docs' install line pins.
pub(crate) const RUST_PROXY: &str = "mcp-proxy 0.6.0 (Rust)";
/// The proxy namespaces each backend's tools as `BACKEND/TOOL`.
pub(crate) const ECHO_THROUGH_IT: &str = "fixture/echo";

/// `--rust-proxy` (or `LOAD_RUST_PROXY`), else an `mcp-proxy` on the PATH if it is this
/// crate's: the npm and PyPI packages of the same name are other programs.
pub(crate) fn locate(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = given {
        return Some(path.to_owned());
    }
    let help = Command::new("mcp-proxy").arg("--help").output().ok()?;
    String::from_utf8_lossy(&help.stdout)
        .contains("--from-mcp-json")
        .then(|| PathBuf::from("mcp-proxy"))
}

/// Starts `bin` in front of `upstream` with one HTTP backend and the log level the
/// gateway runs with here (error). Its config and output are kept in `dir` for a reader
/// of the run.
pub(crate) fn start(bin: &Path, upstream: &str, dir: &Path) -> Result<(Proc, String), String> {
    let port = free_port();
    let config = dir.join("mcp-proxy.toml");
    std::fs::write(&config, config_text(port, upstream))
        .map_err(|e| format!("{}: {e}", config.display()))?;
    let log = std::fs::File::create(dir.join("mcp-proxy.log")).map_err(|e| e.to_string())?;
    let mut command = Command::new(bin);
    command
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        // Its logs go to stdout.
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    let proc = Proc::spawn(command, "mcp-proxy").map_err(|e| format!("{}: {e}", bin.display()))?;
    // It connects to its backends before it listens: an open port means it is ready.
    wait_for_port(port, ANNOUNCE_DEADLINE)?;
    // Its MCP endpoint is the root path.
    Ok((proc, format!("http://127.0.0.1:{port}/")))
}

fn config_text(port: u16, upstream: &str) -> String {
    format!(
        r#"[proxy]
name = "load"

[proxy.listen]
host = "127.0.0.1"
port = {port}

[[backends]]
name = "fixture"
transport = "http"
url = "{upstream}"

[observability]
log_level = "error"
"#
    )
}
