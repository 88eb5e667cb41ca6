//! Processes the benchmarks start: the release build of an example, and the gateway
//! binary with its logs quiet. The benches pass the gateway's path (`CARGO_BIN_EXE_…`
//! exists only in their own crate).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::{Proc, spawn_announcing};

const DEADLINE: Duration = Duration::from_secs(30);

/// `examples/<name>.rs` built in the profile next to `gateway` (built if missing),
/// started on a free port; it and its URL.
pub fn example(gateway: &Path, name: &str) -> (Proc, String) {
    let fixture = gateway
        .parent()
        .expect("target/<profile>")
        .join("examples")
        .join(name);
    if !fixture.exists() {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--example", name])
            .current_dir(manifest)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the example {name} failed");
    }
    let mut command = Command::new(fixture);
    command
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "error");
    spawn_announcing(name, command, DEADLINE)
}

/// The gateway in front of `upstream` on a free port, with `flags`; it and its URL.
pub fn gateway(gateway: &Path, upstream: &str, flags: &[String]) -> (Proc, String) {
    let mut command = Command::new(gateway);
    command
        .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
        .args(["--drain-timeout-ms", "0"])
        .args(flags)
        .env("RUST_LOG", "error");
    spawn_announcing("mcp-task-gateway", command, DEADLINE)
}

/// The command line of a `harness = false` bench run as a bench, without cargo's
/// `--bench`; `None` when `cargo test --benches` runs it in test mode (or lists it),
/// where these benches do nothing.
pub fn bench_args() -> Option<Vec<String>> {
    let raw: Vec<String> = std::env::args().collect();
    if raw.iter().any(|a| a == "--list") || !raw.iter().any(|a| a == "--bench") {
        return None;
    }
    Some(raw.into_iter().filter(|a| a != "--bench").collect())
}
