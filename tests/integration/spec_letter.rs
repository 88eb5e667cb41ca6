//! The letter of 2026-07-28 and the tasks extension at their edges: the exact code and
//! HTTP status of each refusal, TTLs no client could use, results that name the gateway,
//! and work nobody can read any more stopped upstream.

use crate::common;
use crate::common::*;
use serde_json::{Value, json};

fn setup(extra: &[&str]) -> (Proc, String, Proc, Client) {
    let (upstream, upstream_url) = start_plain_server();
    let (gateway, url) = start_gateway(&upstream_url, extra);
    (upstream, upstream_url, gateway, Client::with_tasks(&url))
}

#[tokio::test]
async fn the_tasks_prefix_is_the_extensions_and_never_reaches_the_upstream() {
    let (_u, _url, _g, client) = setup(&[]);
    for method in ["tasks/list", "tasks/result", "tasks/delete"] {
        let reply = client.request(method, json!({"taskId": "x"})).await;
        assert_eq!(reply.error_code(), -32601, "{method}: {}", reply.body);
        // The upstream's own -32601 would say "Method not found".
        reply.assert_message_mentions("not a method of the tasks extension");
    }
}

#[tokio::test]
async fn an_update_must_carry_input_responses() {
    let (_u, _url, _g, client) = setup(&[]);
    let task_id = client.start_task("ask_name", json!({})).await;
    let reply = client
        .request("tasks/update", json!({"taskId": task_id}))
        .await;
    assert_eq!(reply.error_code(), -32602, "{}", reply.body);
    reply.assert_message_mentions("inputResponses");
}

#[tokio::test]
async fn params_that_are_not_an_object_are_an_invalid_request() {
    let (_u, _url, _g, client) = setup(&[]);
    for params in [json!([1, 2]), json!("text"), json!(7)] {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": params});
        let reply = client
            .send_raw(
                serde_json::to_vec(&body).unwrap(),
                &[("mcp-method", "tools/list".into())],
            )
            .await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (400, -32600),
            "{params}"
        );
        reply.assert_message_mentions("\"params\" must be an object");
    }
}

#[tokio::test]
async fn an_unsupported_version_is_told_what_its_form_of_request_accepts() {
    let (_u, _url, _g, client) = setup(&[]);
    let mut params = client.params(json!({}));
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2030-01-01");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
    let stateless = client
        .send_raw(
            serde_json::to_vec(&body).unwrap(),
            &[("mcp-protocol-version", "2030-01-01".into())],
        )
        .await;
    assert_eq!((stateless.status, stateless.error_code()), (400, -32022));
    assert_eq!(
        stateless.body["error"]["data"]["supported"],
        json!([STATELESS])
    );

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let session = client
        .send_raw(
            serde_json::to_vec(&body).unwrap(),
            &[("mcp-protocol-version", "1999-01-01".into())],
        )
        .await;
    assert_eq!((session.status, session.error_code()), (400, -32022));
    assert_eq!(
        session.body["error"]["data"]["supported"],
        json!(["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"])
    );
}

#[tokio::test]
async fn the_gateways_own_results_name_it() {
    let (_u, _url, _g, client) = setup(&[]);
    let created = client.call_tool("echo", json!({"text": "hi"})).await;
    let task_id = created.result()["taskId"].as_str().unwrap().to_owned();
    let got = client.wait_status(&task_id, "completed").await;
    let cancelled = client.cancel(&task_id).await;
    for (what, result) in [
        ("CreateTaskResult", created.result().clone()),
        ("tasks/get", got),
        ("tasks/cancel", cancelled.result().clone()),
    ] {
        let info = &result["_meta"]["io.modelcontextprotocol/serverInfo"];
        assert_eq!(info["name"], "mcp-task-gateway", "{what}: {result}");
        assert_eq!(info["version"], env!("CARGO_PKG_VERSION"), "{what}");
    }
}

#[tokio::test]
async fn a_completed_task_keeps_no_progress_text() {
    let (_u, _url, _g, client) = setup(&[]);
    let task_id = client
        .start_task("sleep", json!({"ms": 600, "steps": 3}))
        .await;
    let reporting = client
        .poll_until(&task_id, |t| t["statusMessage"].is_string())
        .await;
    assert!(status_message(&reporting).contains("of 3"), "{reporting}");
    let done = client.wait_status(&task_id, "completed").await;
    assert!(done.get("statusMessage").is_none(), "{done}");
}

#[tokio::test]
async fn a_task_that_expires_while_its_call_runs_is_cancelled_upstream() {
    let (_u, upstream_url, _g, client) =
        setup(&["--default-ttl-ms", "1500", "--poll-interval-ms", "500"]);
    let task_id = client.start_task("sleep", json!({"ms": 60000})).await;
    eventually("the upstream hears notifications/cancelled", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["cancelledReceived"].as_array()?.len() == 1 && stats["callsInFlight"] == 0)
            .then_some(())
    })
    .await;
    let gone = client
        .request("tasks/get", json!({"taskId": task_id}))
        .await;
    assert_eq!(gone.error_code(), -32602, "{}", gone.body);
}

#[test]
fn a_ttl_no_client_could_use_is_refused_at_start() {
    let (_upstream, upstream_url) = start_plain_server();
    let cases: [(&[&str], &str); 3] = [
        (&["--default-ttl-ms", "0"], "--default-ttl-ms"),
        (&["--max-ttl-ms", "10"], "--max-ttl-ms"),
        (
            &["--default-ttl-ms", "2000", "--poll-interval-ms", "5000"],
            "expire before a client's first poll",
        ),
    ];
    for (flags, says) in cases {
        let refused = gateway_command(&["--upstream", &upstream_url], flags, "warn")
            .output()
            .unwrap();
        assert_eq!(refused.status.code(), Some(2), "{flags:?}");
        let stderr = String::from_utf8(refused.stderr).unwrap();
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
}

/// A session client asking for a TTL shorter than anyone could read gets the shortest
/// usable one.
#[tokio::test]
async fn a_session_clients_tiny_ttl_is_raised() {
    use common::session::SessionClient;
    let (_u, _url, _g, client) = setup(&[]);
    let mut session = SessionClient::new(&client.url);
    session
        .initialize("2025-11-25", json!({"tasks": {"list": {}, "cancel": {}}}))
        .await;
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 5000}, "task": {"ttl": 1}}});
    let answer: Value = common::session::read_messages(session.post(body).await)
        .await
        .into_iter()
        .find(|m| m.get("id") == Some(&json!(2)))
        .expect("an answer");
    assert_eq!(answer["result"]["task"]["ttl"], 1000, "{answer}");
}

/// Sends `tools/call` of `sleep` for 60 s and hangs up after 300 ms, as a client whose
/// user gave up does.
async fn call_and_hang_up(client: &Client) {
    let params = client.params(json!({"name": "sleep", "arguments": {"ms": 60000}}));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let sent = client
        .http
        .post(&client.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", STATELESS)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "sleep")
        .timeout(std::time::Duration::from_millis(300))
        .json(&body)
        .send()
        .await;
    assert!(sent.is_err(), "the call cannot have finished: {sent:?}");
}

async fn upstream_hears_the_cancel(upstream_url: &str) {
    eventually("the upstream hears notifications/cancelled", || async {
        let stats = upstream_stats(upstream_url).await;
        (stats["cancelledReceived"].as_array()?.len() == 1 && stats["callsInFlight"] == 0)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_client_that_hangs_up_on_a_bridged_call_cancels_it() {
    let (_u, upstream_url, _g, client) = setup(&[]);
    let without_tasks = Client::new(&client.url, json!({}));
    call_and_hang_up(&without_tasks).await;
    upstream_hears_the_cancel(&upstream_url).await;
}

#[tokio::test]
async fn a_client_that_hangs_up_within_the_promotion_budget_cancels_the_task() {
    let (_u, upstream_url, _g, client) = setup(&[
        "--promote-after-ms",
        "5000",
        "--max-running-tasks-per-principal",
        "1",
    ]);
    call_and_hang_up(&client).await;
    upstream_hears_the_cancel(&upstream_url).await;
    // Its running slot is free again: the caller may start another.
    let next = client.call_tool("echo", json!({"text": "again"})).await;
    assert!(next.body.get("error").is_none(), "{}", next.body);
}
