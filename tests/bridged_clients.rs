//! 2026-07-28 clients without the tasks extension, whose calls the gateway bridges to a
//! 2025-xx upstream: the call's progress and log messages reach them on the POST's SSE
//! stream before the result, and closing that stream cancels the call upstream. The
//! independent client is the Python SDK's (`mcp` 2.x, tests/requirements.txt).

mod common;

use std::process::Command;

use common::mrtr::python;
use common::session::read_messages;
use common::stdio::{everything_cmd, start_stdio_gateway};
use common::*;
use serde_json::{Value, json};

/// Runs tests/fixtures/python_client.py against `url`; what it saw, as JSON.
fn python_client(url: &str, tool: &str, arguments: Value, flags: &[&str]) -> Value {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python_client.py");
    let output = Command::new(python())
        .arg(script)
        .args([url, tool, &arguments.to_string()])
        .args(flags)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the client prints JSON")
}

fn progress_messages(seen: &Value) -> Vec<String> {
    seen["progress"]
        .as_array()
        .expect("progress")
        .iter()
        .map(|p| p[2].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn the_python_client_hears_progress_and_logs_at_its_level() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let arguments = json!({"ms": 300, "steps": 3, "log": true});
    let seen = python_client(
        &url,
        "sleep",
        arguments.clone(),
        &["--progress", "--log-level", "warning"],
    );
    assert_eq!(seen["protocolVersion"], "2026-07-28");
    assert_eq!(seen["result"]["content"][0]["text"], "slept 300 ms");
    assert_eq!(
        progress_messages(&seen),
        ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    );
    // Only at or above the level it opted in to.
    assert_eq!(seen["logs"], json!([["warning", "woke up"]]));

    // Without an opt-in, no log message reaches it (the upstream sends them all).
    let quiet = python_client(&url, "sleep", arguments, &["--progress"]);
    assert_eq!(quiet["logs"], json!([]));
    assert_eq!(progress_messages(&quiet).len(), 3);
}

fn long_operation_reports_progress(url: &str) {
    let seen = python_client(
        url,
        "trigger-long-running-operation",
        json!({"duration": 2, "steps": 2}),
        &["--progress"],
    );
    let text = seen["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("completed"), "{seen}");
    assert_eq!(seen["progress"].as_array().map(Vec::len), Some(2), "{seen}");
}

#[test]
fn server_everything_over_http_reports_progress_to_the_python_client() {
    let (_upstream, upstream_url) = start_everything();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    long_operation_reports_progress(&url);
}

#[test]
fn server_everything_over_stdio_reports_progress_to_the_python_client() {
    let gateway = start_stdio_gateway(&everything_cmd(), &[]);
    long_operation_reports_progress(&gateway.url);
}

/// A bridged `tools/call` of the fixture's `sleep`, as a client without the extension
/// sends it; `token` asks for progress.
async fn post_sleep(client: &Client, ms: u64, token: Option<&str>) -> reqwest::Response {
    let mut params = client.params(json!({"name": "sleep", "arguments": {"ms": ms, "steps": 2}}));
    if let Some(token) = token {
        params["_meta"]["progressToken"] = json!(token);
    }
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params});
    client
        .http
        .post(&client.url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "sleep")
        .json(&body)
        .send()
        .await
        .expect("gateway reachable")
}

#[tokio::test]
async fn progress_comes_before_the_result_and_only_when_asked_for() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = Client::new(&url, json!({}));

    let streamed = post_sleep(&client, 200, Some("tok-1")).await;
    assert_eq!(streamed.headers()["content-type"], "text/event-stream");
    let messages = read_messages(streamed).await;
    let (last, notifications) = messages.split_last().expect("messages");
    assert_eq!(notifications.len(), 2, "{messages:?}");
    for progress in notifications {
        assert_eq!(progress["method"], "notifications/progress");
        assert_eq!(progress["params"]["progressToken"], "tok-1");
    }
    assert_eq!(last["id"], 5);
    assert_eq!(last["result"]["resultType"], "complete");

    let plain = post_sleep(&client, 10, None).await;
    assert_eq!(plain.headers()["content-type"], "application/json");
    let answer: Value = plain.json().await.expect("JSON");
    assert_eq!(answer["result"]["content"][0]["text"], "slept 10 ms");
}

#[tokio::test]
async fn closing_the_stream_cancels_the_call_upstream() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = Client::new(&url, json!({}));
    let streamed = post_sleep(&client, 30_000, Some("tok-2")).await;
    assert_eq!(streamed.status(), 200);
    eventually("the call to reach the upstream", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["callsInFlight"] == 1).then_some(())
    })
    .await;
    drop(streamed);
    let stats = eventually("the upstream to see the cancellation", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["cancelledReceived"]
            .as_array()
            .is_some_and(|c| !c.is_empty()))
        .then_some(stats)
    })
    .await;
    assert_eq!(stats["callsInFlight"], 0, "{stats}");
}
