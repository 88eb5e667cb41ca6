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
