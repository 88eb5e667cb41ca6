//! Progress keep-alive (`--progress-keepalive-ms`): a call whose client asked for
//! progress hears some whenever the period passed without any, with values that only
//! increase, so a host whose idle timer resets on progress keeps a live call.

use serde_json::{Value, json};

use crate::bridged_clients::python_client;
use crate::common::stdio::{everything_cmd, start_stdio_gateway};
use crate::common::*;
use crate::session_tasks::{line, ts_client_with};

/// The TypeScript SDK 1.x client with a 8 s timeout that resets on progress, calling a
/// tool that reports progress every 10 s (server-everything over stdio, sessions served
/// by the gateway).
fn ts_call_with_an_8_s_timer(keepalive_ms: &str) -> Vec<Value> {
    let gateway = start_stdio_gateway(
        &everything_cmd(),
        &["--progress-keepalive-ms", keepalive_ms],
    );
    ts_client_with(json!({"url": gateway.url, "noTasks": true, "steps": [
        {"do": "callToolWithOptions", "name": "trigger-long-running-operation",
         "arguments": {"duration": 20, "steps": 2},
         "timeout": 8000, "resetTimeoutOnProgress": true},
    ]}))
}

#[test]
fn a_host_whose_timer_resets_on_progress_keeps_a_quiet_call() {
    let lines = ts_call_with_an_8_s_timer("3000");
    let result = &line(&lines, "result")["result"];
    assert!(
        first_text(result).contains("Long running operation completed"),
        "{lines:#?}"
    );
    let progress: Vec<&Value> = lines.iter().filter_map(|l| l.get("progress")).collect();
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().expect("a value"))
        .collect();
    assert!(
        values.windows(2).all(|pair| pair[0] < pair[1]),
        "progress must increase: {values:?}"
    );
    let kept: Vec<_> = progress
        .iter()
        .filter(|p| {
            p["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("still running"))
        })
        .collect();
    assert!(
        kept.len() >= 3,
        "keep-alives every 3 s of 20: {progress:#?}"
    );
    assert!(
        progress.len() > kept.len(),
        "the upstream's own progress came in between: {progress:#?}"
    );
}

#[test]
fn without_keepalive_the_same_host_gives_up() {
    let lines = ts_call_with_an_8_s_timer("0");
    let error = &line(&lines, "error")["error"];
    assert_eq!(error["code"], -32001, "{lines:#?}");
}

/// A 2026-07-28 client (the Python SDK) whose call the gateway forwards on SSE hears the
/// keep-alives under its own token.
#[tokio::test]
async fn a_forwarded_call_of_a_2026_client_hears_keepalives() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--progress-keepalive-ms", "1000"]);
    let seen = tokio::task::spawn_blocking(move || {
        python_client(
            &url,
            "sleep",
            json!({"ms": 3500, "steps": 1}),
            &["--progress"],
        )
    })
    .await
    .expect("client ran");
    let progress = seen["progress"].as_array().expect("progress");
    let kept = progress
        .iter()
        .filter(|p| {
            p[2].as_str()
                .is_some_and(|m| m.starts_with("still running"))
        })
        .count();
    assert!(kept >= 2, "{seen}");
    let values: Vec<f64> = progress.iter().map(|p| p[0].as_f64().unwrap()).collect();
    assert!(
        values.windows(2).all(|pair| pair[0] < pair[1]),
        "{values:?}"
    );
    assert!(first_text(&seen["result"]).contains("slept"), "{seen}");
}

/// The same host through a session passed through to a 2025-xx HTTP upstream (the
/// fixture `plain_server`), whose SSE answer the gateway watches for the token.
#[test]
fn a_host_whose_timer_resets_on_progress_keeps_a_quiet_pass_through_call() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--progress-keepalive-ms", "3000"]);
    let lines = ts_client_with(json!({"url": url, "noTasks": true, "steps": [
        {"do": "callToolWithOptions", "name": "sleep", "arguments": {"ms": 20000, "steps": 2},
         "timeout": 8000, "resetTimeoutOnProgress": true},
    ]}));
    let result = &line(&lines, "result")["result"];
    assert_eq!(first_text(result), "slept 20000 ms", "{lines:#?}");
    let progress: Vec<&Value> = lines.iter().filter_map(|l| l.get("progress")).collect();
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().expect("a value"))
        .collect();
    assert!(
        values.windows(2).all(|pair| pair[0] < pair[1]),
        "progress must increase: {values:?}"
    );
    let kept = progress
        .iter()
        .filter(|p| {
            p["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("still running"))
        })
        .count();
    assert!(kept >= 3, "keep-alives every 3 s of 20: {progress:#?}");
    assert!(
        progress.len() > kept,
        "the upstream's own progress came in between: {progress:#?}"
    );
}

#[test]
fn without_keepalive_the_same_pass_through_host_gives_up() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--progress-keepalive-ms", "0"]);
    let lines = ts_client_with(json!({"url": url, "noTasks": true, "steps": [
        {"do": "callToolWithOptions", "name": "sleep", "arguments": {"ms": 20000, "steps": 2},
         "timeout": 8000, "resetTimeoutOnProgress": true},
    ]}));
    let error = &line(&lines, "error")["error"];
    assert_eq!(error["code"], -32001, "{lines:#?}");
}

/// A JSON-response upstream (the TypeScript SDK's `enableJsonResponse`) passed through:
/// a call with a progress token becomes an SSE stream of keep-alives and then the
/// upstream's answer; one without stays the upstream's JSON body.
#[tokio::test]
async fn a_json_answer_of_a_pass_through_call_with_a_token_becomes_a_kept_alive_stream() {
    use crate::common::session::{SessionClient, read_messages};
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/stop_probe_server.mjs");
    let mut command = std::process::Command::new("node");
    command.arg(script).args(["--mode", "json"]);
    let (_upstream, upstream_url) = spawn_announcing("stop_probe_server", command);
    let (_gateway, url) = start_gateway(&upstream_url, &["--progress-keepalive-ms", "1000"]);
    let mut session = SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;

    let call = |id: u64, token: Option<&str>| {
        let mut params = json!({"name": "sleep", "arguments": {"ms": 3500}});
        if let Some(token) = token {
            params["_meta"] = json!({"progressToken": token});
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    let response = session.post(call(1, Some("k-1"))).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let messages = read_messages(response).await;
    let progress: Vec<f64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .inspect(|m| assert_eq!(m["params"]["progressToken"], "k-1", "{m}"))
        .map(|m| m["params"]["progress"].as_f64().expect("a value"))
        .collect();
    assert!(progress.len() >= 2, "{messages:#?}");
    assert!(progress.windows(2).all(|p| p[0] < p[1]), "{progress:?}");
    let last = messages.last().expect("the answer");
    assert_eq!(last["id"], 1, "{messages:#?}");
    assert_eq!(first_text(&last["result"]), "slept 3500 ms", "{last}");

    let plain = session.post(call(2, None)).await;
    assert!(
        plain.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"),
        "{:?}",
        plain.headers()
    );
}
