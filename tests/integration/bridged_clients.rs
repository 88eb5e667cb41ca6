//! 2026-07-28 clients without the tasks extension, whose calls the gateway bridges to a
//! 2025-xx upstream: the call's progress and log messages reach them on the POST's SSE
//! stream before the result, and closing that stream cancels the call upstream. The
//! independent client is the Python SDK's (`mcp` 2.x, tests/requirements.txt).

use std::process::Command;

use crate::common;
use crate::common::mrtr::python;
use crate::common::session::read_messages;
use crate::common::stdio::{everything_cmd, start_stdio_gateway};
use crate::common::*;
use serde_json::{Value, json};

/// Runs tests/fixtures/python_client.py against `url`; what it saw, as JSON.
pub(crate) fn python_client(url: &str, tool: &str, arguments: Value, flags: &[&str]) -> Value {
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

// ---------------------------------------------------------------------------
// Held calls: the upstream asks for input, the client answers by retrying (MRTR).
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_python_client_answers_a_held_call_in_rounds() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    // With a progress token the first answer is an SSE stream that ends with the round.
    let named = python_client(
        &url,
        "ask_name",
        json!({}),
        &["--elicit", r#"{"name": "Ada"}"#, "--progress"],
    );
    assert_eq!(
        named["result"]["content"][0]["text"], "Hello, Ada!",
        "{named}"
    );
    assert_eq!(named["asked"], json!(["elicitation/create"]));

    let two = python_client(
        &url,
        "two_questions",
        json!({}),
        &["--elicit", r#"{"answer": "yes"}"#],
    );
    assert_eq!(two["asked"].as_array().map(Vec::len), Some(2), "{two}");
    assert_eq!(two["result"]["isError"], false, "{two}");

    let sampled = python_client(
        &url,
        "sample",
        json!({"prompt": "hi"}),
        &["--sample", "hello there"],
    );
    assert_eq!(
        sampled["result"]["content"][0]["text"], "model said: hello there",
        "{sampled}"
    );
    // Each answer reached the upstream once.
    let stats = upstream_stats(&upstream_url).await;
    assert!(
        responses_received(&stats).iter().all(|count| *count == 1),
        "{stats}"
    );
}

fn everything_asks(url: &str) {
    let elicited = python_client(
        url,
        "trigger-elicitation-request",
        json!({}),
        &["--elicit", r#"{"name": "Grace Hopper", "check": true}"#],
    );
    assert!(
        elicited["result"].to_string().contains("Grace Hopper"),
        "{elicited}"
    );
    let sampled = python_client(
        url,
        "trigger-sampling-request",
        json!({"prompt": "Say hi"}),
        &["--sample", "hi from the client"],
    );
    assert!(
        sampled["result"].to_string().contains("hi from the client"),
        "{sampled}"
    );
}

#[test]
fn server_everything_over_http_asks_the_python_client() {
    let (_upstream, upstream_url) = start_everything();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    everything_asks(&url);
}

#[test]
fn server_everything_over_stdio_asks_the_python_client() {
    let gateway = start_stdio_gateway(&everything_cmd(), &[]);
    everything_asks(&gateway.url);
}

/// A client without the tasks extension that can be asked for elicitation.
fn asking_client(url: &str) -> Client {
    Client::new(url, json!({"elicitation": {"form": {}}}))
}

/// Calls `ask_name`; the `InputRequiredResult` the gateway answers with.
async fn held_ask_name(client: &Client) -> Value {
    let asked = client.call_tool("ask_name", json!({})).await;
    let asked = asked.result().clone();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert_eq!(
        asked["inputRequests"]["input-0"]["method"], "elicitation/create",
        "{asked}"
    );
    asked
}

async fn answer_name(client: &Client, asked: &Value, name: &str) -> Reply {
    let answer = json!({"input-0": {"action": "accept", "content": {"name": name}}});
    client
        .retry_tool("ask_name", json!({}), answer, &asked["requestState"])
        .await
}

/// Two questions the upstream sends at once: each is shown once and answered once, in
/// one round when both arrived before the gateway answered, else in two.
#[tokio::test]
async fn questions_asked_together_are_each_answered_once() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = asking_client(&url);
    let mut reply = client.call_tool("two_questions", json!({})).await;
    let mut shown: Vec<String> = Vec::new();
    while reply.result()["resultType"] == "input_required" {
        let round = reply.result().clone();
        let keys: Vec<String> = round["inputRequests"]
            .as_object()
            .map(|requests| requests.keys().cloned().collect())
            .unwrap_or_default();
        assert!(
            keys.iter().all(|key| !shown.contains(key)),
            "a key shown twice: {round}"
        );
        let answers: serde_json::Map<String, Value> = keys
            .iter()
            .map(|key| {
                (
                    key.clone(),
                    json!({"action": "accept", "content": {"answer": "yes"}}),
                )
            })
            .collect();
        shown.extend(keys);
        reply = client
            .retry_tool(
                "two_questions",
                json!({}),
                Value::Object(answers),
                &round["requestState"],
            )
            .await;
    }
    assert_eq!(reply.result()["resultType"], "complete", "{}", reply.body);
    assert_eq!(shown, ["input-0", "input-1"]);
    assert_eq!(
        responses_received(&upstream_stats(&upstream_url).await),
        [1, 1]
    );
}

#[tokio::test]
async fn forged_foreign_and_replayed_states_are_refused_and_answer_nothing() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let mut alice = asking_client(&url);
    alice.authorization = Some("Bearer alice".into());
    let asked = held_ask_name(&alice).await;
    let state = asked["requestState"].as_str().expect("a state").to_owned();

    // Tampered: one character of the payload changed.
    let mut forged = state.clone().into_bytes();
    forged[8] = if forged[8] == b'A' { b'B' } else { b'A' };
    let forged = json!(String::from_utf8(forged).expect("ASCII"));
    let answer = json!({"input-0": {"action": "accept", "content": {"name": "Eve"}}});
    let reply = alice
        .retry_tool("ask_name", json!({}), answer.clone(), &forged)
        .await;
    assert_eq!(reply.error_code(), -32602, "{}", reply.body);
    // Someone else's.
    let mut mallory = asking_client(&url);
    mallory.authorization = Some("Bearer mallory".into());
    let reply = mallory
        .retry_tool("ask_name", json!({}), answer.clone(), &json!(state))
        .await;
    assert_eq!(reply.error_code(), -32602, "{}", reply.body);
    reply.assert_message_mentions("not issued by this gateway for this caller");
    // Issued for another request.
    let reply = alice
        .retry_tool("ask_name", json!({"extra": 1}), answer, &json!(state))
        .await;
    assert_eq!(reply.error_code(), -32602, "{}", reply.body);
    assert!(
        responses_received(&upstream_stats(&upstream_url).await).is_empty(),
        "a refused state answered the upstream"
    );

    let done = answer_name(&alice, &asked, "Ada").await;
    assert_eq!(first_text(done.result()), "Hello, Ada!");
    // Replayed: the call is over.
    let replay = answer_name(&alice, &asked, "Ada").await;
    assert_eq!(replay.error_code(), -32602, "{}", replay.body);
    assert_eq!(
        responses_received(&upstream_stats(&upstream_url).await),
        [1],
        "each answer goes upstream once"
    );
}

#[tokio::test]
async fn an_abandoned_call_is_cancelled_upstream_and_a_late_retry_refused() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--input-wait-timeout-ms", "300"]);
    let client = asking_client(&url);
    let asked = held_ask_name(&client).await;
    eventually("the upstream to see the call cancelled", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["cancelledReceived"]
            .as_array()
            .is_some_and(|c| !c.is_empty()))
        .then_some(())
    })
    .await;
    let late = answer_name(&client, &asked, "Ada").await;
    assert_eq!(late.error_code(), -32602, "{}", late.body);
    late.assert_message_mentions("expired");
}

#[tokio::test]
async fn a_held_call_whose_upstream_dies_fails_clearly() {
    let (mut upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = asking_client(&url);
    let asked = held_ask_name(&client).await;
    upstream.kill();
    let reply = eventually("the held call to fail", || async {
        let reply = answer_name(&client, &asked, "Ada").await;
        (reply.body.get("error").is_some()).then_some(reply)
    })
    .await;
    assert_eq!(reply.error_code(), -32603, "{}", reply.body);
    reply.assert_message_mentions("upstream");
}

#[tokio::test]
async fn the_retry_may_reach_another_instance_sharing_the_key() {
    let redis = test_support::RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let key = "a-secret-of-at-least-thirty-two-bytes!";
    let shared = ["--redis", &redis.url(), "--request-state-key", key];
    let (_a, url_a) = start_gateway(&upstream_url, &shared);
    let (_b, url_b) = start_gateway(&upstream_url, &shared);
    let asked = held_ask_name(&asking_client(&url_a)).await;
    let done = answer_name(&asking_client(&url_b), &asked, "Bo").await;
    assert_eq!(first_text(done.result()), "Hello, Bo!");
    assert_eq!(
        responses_received(&upstream_stats(&upstream_url).await),
        [1]
    );
}

/// `prompts/get` and `resources/read` are held like `tools/call`: the fixture's
/// `greeting` prompt and `greeting://me` resource ask the user's name.
#[tokio::test]
async fn prompts_and_resources_that_ask_are_held_too() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = asking_client(&url);
    let answer = json!({"input-0": {"action": "accept", "content": {"name": "Ada"}}});
    for (method, params) in [
        ("prompts/get", json!({"name": "greeting"})),
        ("resources/read", json!({"uri": "greeting://me"})),
    ] {
        let asked = client.request(method, params.clone()).await;
        let asked = asked.result().clone();
        assert_eq!(asked["resultType"], "input_required", "{method}: {asked}");
        let mut retry = params;
        retry["inputResponses"] = answer.clone();
        retry["requestState"] = asked["requestState"].clone();
        let done = client.request(method, retry).await;
        let done = done.result();
        assert_eq!(done["resultType"], "complete", "{method}: {done}");
        assert!(done.to_string().contains("Ada"), "{method}: {done}");
        if method == "resources/read" {
            // Completed for the 2026 schema like any bridged read.
            assert_eq!(done["cacheScope"], "private", "{done}");
        }
    }
}

/// The Python SDK's `Client.listen` through the gateway: the 2026-07-28 upstream's
/// tool-list changes are acknowledged and relayed on the gateway's listen stream.
#[test]
fn the_python_client_listens_through_the_gateway_to_the_upstreams_notifications() {
    let (_upstream, upstream_url) = common::mrtr::MrtrUpstream::Rmcp.start();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let seen = python_client(&url, "echo", json!({"text": "hi"}), &["--listen-tools"]);
    assert_eq!(
        seen["listen"]["honored"]["toolsListChanged"], true,
        "{seen}"
    );
    assert_eq!(seen["listen"]["event"], "ToolsListChanged", "{seen}");
}
