//! Binaries of the workspace that a test or a benchmark starts but cargo does not build
//! for it: the fixture servers of `crates/fixture-servers` (`plain_server`,
//! `mrtr_server`), and the gateway for a program outside the gateway's package. Each is
//! built with cargo into the caller's own profile directory (`target/<profile>`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The package of the fixture servers.
const FIXTURE_PACKAGE: &str = "fixture-servers";

/// The workspace root: this crate lives in `crates/test-support`.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `crates/fixture-servers/src/bin/<name>.rs` built in `profile_dir`, rebuilt when missing
/// or older than the crate's sources or `Cargo.lock`; the binary's path. Checking the
/// times first keeps the hundreds of test processes from running cargo each.
pub fn fixture(profile_dir: &Path, name: &str) -> PathBuf {
    let binary = profile_dir.join(name);
    let root = workspace_root();
    let mut sources = vec![root.join("Cargo.lock")];
    collect_files(&root.join("crates").join(FIXTURE_PACKAGE), &mut sources);
    let built = modified(&binary);
    let fresh = built.is_some_and(|built| sources.iter().all(|s| modified(s) <= Some(built)));
    if !fresh {
        cargo_build(profile_dir, FIXTURE_PACKAGE, name);
    }
    binary
}

/// Runs `cargo build -p <package> --bin <name>` for the profile of `profile_dir` (so into
/// it) and checks that the binary is there; its path.
pub fn cargo_build(profile_dir: &Path, package: &str, name: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    // Cargo gives tests and benches their package's CARGO_PKG_*/CARGO_MANIFEST_*
    // variables; ring's build script tracks some, so passing them on would rebuild half
    // the dependency tree here, then again in the next plain `cargo build`.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
            "CARGO_TARGET_TMPDIR",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix))
        {
            command.env_remove(key.as_ref());
        }
    }
    let target_dir = profile_dir.parent().expect("target/<profile>");
    command
        .args(["build", "-p", package, "--bin", name])
        .args(profile_args(profile_dir))
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(workspace_root());
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cargo build -p {package} --bin {name}: {e}"));
    assert!(status.success(), "building {name} (-p {package}) failed");
    let binary = profile_dir.join(name);
    assert!(binary.exists(), "{name} not found at {}", binary.display());
    binary
}

/// Cargo's flags for the profile whose output directory is `profile_dir`: `debug` is
/// the dev profile's, `release` the release (and bench) profile's, any other its own.
fn profile_args(profile_dir: &Path) -> Vec<String> {
    let dir = profile_dir
        .file_name()
        .and_then(|name| name.to_str())
        .expect("target/<profile>");
    let profile = match dir {
        "debug" => "dev",
        other => other,
    };
    vec!["--profile".into(), profile.into()]
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Every file under `dir`, recursively.
fn collect_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, into);
        } else {
            into.push(path);
        }
    }
}
