//! Every task flow through the gateway binary against `plain_server`, a real
//! 2025-11-25 stateful Streamable HTTP server without task support.

use crate::common::*;
use serde_json::json;

struct Setup {
    _upstream: Proc,
    upstream_url: String,
    _gateway: Proc,
    client: Client,
}

fn setup(extra: &[&str]) -> Setup {
    let (upstream, upstream_url) = start_plain_server();
    let (gateway, url) = start_gateway(&upstream_url, extra);
    Setup {
        _upstream: upstream,
        upstream_url,
        _gateway: gateway,
        client: Client::with_tasks(&url),
    }
}

#[tokio::test]
async fn echo_task_completes_with_the_upstream_result() {
    let s = setup(&[]);
    let reply = s.client.call_tool("echo", json!({"text": "hi"})).await;
    let created = reply.result();
    assert_eq!(created["resultType"], "task");
    assert_eq!(created["status"], "working");
    for field in ["taskId", "createdAt", "lastUpdatedAt"] {
        assert!(created[field].is_string(), "{field} missing: {created}");
    }
    assert!(
        created["ttlMs"].is_u64() && created["pollIntervalMs"].is_u64(),
        "{created}"
    );
    let task_id = created["taskId"].as_str().unwrap();
    assert_eq!(uuid::Uuid::parse_str(task_id).unwrap().get_version_num(), 4);

    let done = s.client.wait_status(task_id, "completed").await;
    assert_eq!(done["resultType"], "complete");
    assert_eq!(first_text(&done["result"]), "hi");
    assert_eq!(done["result"]["structuredContent"]["echo"]["text"], "hi");
    assert!(done.get("inputRequests").is_none() && done.get("error").is_none());
}

#[tokio::test]
async fn progress_becomes_status_message() {
    let s = setup(&[]);
    let task_id = s
        .client
        .start_task("sleep", json!({"ms": 1500, "steps": 5}))
        .await;
    let working = s
        .client
        .poll_until(&task_id, |t| {
            t["status"] == "working" && t["statusMessage"].is_string()
        })
        .await;
    assert!(
        working["statusMessage"].as_str().unwrap().contains("of 5"),
        "{working}"
    );
    let done = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&done["result"]), "slept 1500 ms");
}

#[tokio::test]
async fn elicitation_becomes_input_request_and_is_answered_once() {
    let s = setup(&[]);
    let task_id = s.client.start_task("ask_name", json!({})).await;
    let waiting = s.client.wait_status(&task_id, "input_required").await;
    let requests = waiting["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{waiting}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "What is your name?");

    let answer = json!({key.as_str(): {"action": "accept", "content": {"name": "Luca"}}});
    let ack = s.client.update(&task_id, answer.clone()).await;
    assert_eq!(ack.result(), &gateway_ack());
    // The same answer again is ignored: the key is no longer outstanding.
    s.client.update(&task_id, answer).await.result();

    let done = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&done["result"]), "Hello, Luca!");
    assert_eq!(
        responses_received(&upstream_stats(&s.upstream_url).await),
        vec![1]
    );
}

#[tokio::test]
async fn partial_answers_keep_the_task_waiting() {
    let s = setup(&[]);
    let task_id = s.client.start_task("two_questions", json!({})).await;
    let waiting = s
        .client
        .poll_until(&task_id, |t| {
            t["inputRequests"].as_object().is_some_and(|r| r.len() == 2)
        })
        .await;
    let mut keys: Vec<(String, String)> = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v["params"]["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    keys.sort_by(|a, b| a.1.cmp(&b.1));
    let (first, second) = (&keys[0].0, &keys[1].0);
    assert_ne!(first, second);

    s.client
        .update(&task_id, json!({first.as_str(): {"action": "accept", "content": {"answer": "one"}}, "never-issued": {}}))
        .await
        .result();
    let still = s.client.get_task(&task_id).await;
    assert_eq!(still["status"], "input_required");
    assert_eq!(
        still["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        vec![second]
    );

    s.client
        .update(
            &task_id,
            json!({second.as_str(): {"action": "accept", "content": {"answer": "two"}}}),
        )
        .await
        .result();
    let done = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&done["result"]), "one and two");
}

#[tokio::test]
async fn sampling_and_roots_become_input_requests() {
    let s = setup(&[]);
    let sample = s
        .client
        .start_task("sample", json!({"prompt": "Say hi"}))
        .await;
    let waiting = s.client.wait_status(&sample, "input_required").await;
    let (key, request) = only_input_request(&waiting);
    assert_eq!(request["method"], "sampling/createMessage");
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "hi!"}, "model": "test-model"});
    s.client
        .update(&sample, json!({key.as_str(): answer}))
        .await
        .result();
    let done = s.client.wait_status(&sample, "completed").await;
    assert_eq!(first_text(&done["result"]), "model said: hi!");

    let roots = s.client.start_task("list_roots", json!({})).await;
    let waiting = s.client.wait_status(&roots, "input_required").await;
    let (key, request) = only_input_request(&waiting);
    assert_eq!(request["method"], "roots/list");
    s.client
        .update(
            &roots,
            json!({key.as_str(): {"roots": [{"uri": "file:///work", "name": "work"}]}}),
        )
        .await
        .result();
    let done = s.client.wait_status(&roots, "completed").await;
    assert!(
        first_text(&done["result"]).contains("file:///work"),
        "{done}"
    );
}

#[tokio::test]
async fn tool_errors_complete_and_protocol_errors_fail() {
    let s = setup(&[]);
    let tool_error = s.client.start_task("tool_error", json!({})).await;
    let done = s.client.wait_status(&tool_error, "completed").await;
    assert_eq!(done["result"]["isError"], true);

    let protocol_error = s.client.start_task("protocol_error", json!({})).await;
    let failed = s.client.wait_status(&protocol_error, "failed").await;
    assert_eq!(failed["error"]["code"], -32603);
    assert_eq!(failed["error"]["data"]["tool"], "protocol_error");
    assert!(status_message(&failed).contains("deliberate"), "{failed}");
    assert!(failed.get("result").is_none());
}

#[tokio::test]
async fn a_dropped_upstream_stream_fails_the_task() {
    let s = setup(&[]);
    let task_id = s.client.start_task("drop_connection", json!({})).await;
    let failed = s.client.wait_status(&task_id, "failed").await;
    assert_eq!(failed["error"]["code"], -32603);
    let message = failed["statusMessage"].as_str().unwrap();
    assert!(message.contains("connection lost"), "{message}");
    // The gateway keeps serving.
    let next = s
        .client
        .start_task("echo", json!({"text": "still here"}))
        .await;
    s.client.wait_status(&next, "completed").await;
}

#[tokio::test]
async fn cancel_stops_the_upstream_call() {
    let s = setup(&[]);
    let task_id = s.client.start_task("sleep", json!({"ms": 60000})).await;
    // A task cancelled before its call left the gateway never reaches the upstream; this
    // one is cancelled while the call runs there.
    eventually("the sleep runs upstream", || async {
        let stats = upstream_stats(&s.upstream_url).await;
        (stats["callsInFlight"] == 1).then_some(())
    })
    .await;
    let ack = s.client.cancel(&task_id).await;
    assert_eq!(ack.result(), &gateway_ack());
    let cancelled = s.client.wait_status(&task_id, "cancelled").await;
    assert!(cancelled.get("result").is_none());
    let stats = eventually("notifications/cancelled upstream", || async {
        let stats = upstream_stats(&s.upstream_url).await;
        (!stats["cancelledReceived"].as_array().unwrap().is_empty()).then_some(stats)
    })
    .await;
    assert_eq!(stats["cancelledReceived"].as_array().unwrap().len(), 1);
    // Terminal states never change: cancel again and update are acknowledged, no change.
    s.client.cancel(&task_id).await.result();
    s.client
        .update(&task_id, json!({"input-0": {"action": "accept"}}))
        .await
        .result();
    assert_eq!(s.client.get_task(&task_id).await["status"], "cancelled");
}

#[tokio::test]
async fn update_on_a_completed_task_is_acknowledged_without_change() {
    let s = setup(&[]);
    let task_id = s.client.start_task("echo", json!({"text": "x"})).await;
    let done = s.client.wait_status(&task_id, "completed").await;
    s.client
        .update(&task_id, json!({"input-0": {"action": "accept"}}))
        .await
        .result();
    s.client.cancel(&task_id).await.result();
    assert_eq!(s.client.get_task(&task_id).await, done);
}

#[tokio::test]
async fn tasks_belong_to_their_caller() {
    let s = setup(&[]);
    let mut alice = s.client.clone();
    alice.authorization = Some("Bearer alice".into());
    let mut bob = s.client.clone();
    bob.authorization = Some("Bearer bob".into());
    let task_id = alice.start_task("echo", json!({"text": "secret"})).await;
    alice.wait_status(&task_id, "completed").await;
    let reply = bob.request("tasks/get", json!({"taskId": task_id})).await;
    assert_eq!(reply.error_code(), -32602);
    assert_eq!(bob.cancel(&task_id).await.error_code(), -32602);
}

#[tokio::test]
async fn a_caller_may_run_only_so_many_tasks_at_once() {
    let metrics_port = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let s = setup(&[
        "--max-running-tasks-per-principal",
        "2",
        "--metrics-listen",
        &metrics_addr,
    ]);
    let mut alice = s.client.clone();
    alice.authorization = Some("Bearer alice".into());
    let mut bob = s.client.clone();
    bob.authorization = Some("Bearer bob".into());
    let long = json!({"ms": 60000});
    let first = alice.start_task("sleep", long.clone()).await;
    alice.start_task("sleep", long.clone()).await;

    let refused = alice.call_tool("sleep", long.clone()).await;
    assert_eq!(refused.status, 200);
    assert_eq!(refused.error_code(), -31429, "{}", refused.body);
    assert_eq!(
        refused.body["error"]["data"],
        json!({"limit": 2, "running": 2})
    );
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("already has 2 tasks running"), "{message}");
    let metrics = scrape_metrics(metrics_port).await;
    assert_eq!(
        metric_sample(
            &metrics,
            r#"mtg_tasks_refused_total{reason="principal_limit"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    // The limit is per caller.
    bob.start_task("sleep", long.clone()).await;

    // A cancelled task's runner ends and frees its place.
    alice.cancel(&first).await.result();
    eventually("alice's place to free up", || async {
        let reply = alice.call_tool("sleep", long.clone()).await;
        (reply.body.get("result").is_some()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn calls_without_the_extension_run_inline() {
    let s = setup(&[
        "--tool-policy",
        "sleep=required",
        "--tool-policy",
        "echo=forbidden",
    ]);
    let plain = Client::new(&s.client.url, json!({}));
    let inline = plain.call_tool("tool_error", json!({})).await;
    assert_eq!(inline.result()["resultType"], "complete");
    assert_eq!(inline.result()["isError"], true);

    let required = plain.call_tool("sleep", json!({"ms": 10})).await;
    assert_eq!(required.status, 400);
    assert_eq!(required.error_code(), -32021);
    assert_eq!(
        required.body["error"]["data"]["requiredCapabilities"]["extensions"][TASKS_EXT],
        json!({})
    );

    // forbidden: inline even though the client declared the extension.
    let forbidden = s.client.call_tool("echo", json!({"text": "now"})).await;
    assert_eq!(forbidden.result()["resultType"], "complete");
    assert_eq!(first_text(forbidden.result()), "now");
}

#[tokio::test]
async fn promotion_budget_answers_fast_calls_inline() {
    let s = setup(&["--promote-after-ms", "500"]);
    let fast = s.client.call_tool("echo", json!({"text": "quick"})).await;
    assert_eq!(fast.result()["resultType"], "complete");
    assert_eq!(first_text(fast.result()), "quick");

    let slow = s.client.call_tool("sleep", json!({"ms": 3000})).await;
    assert_eq!(slow.result()["resultType"], "task");
    let task_id = slow.result()["taskId"].as_str().unwrap();
    s.client.wait_status(task_id, "completed").await;
}

#[tokio::test]
async fn upstream_timeout_fails_the_task() {
    let s = setup(&["--upstream-timeout-ms", "300"]);
    let task_id = s.client.start_task("sleep", json!({"ms": 60000})).await;
    let failed = s.client.wait_status(&task_id, "failed").await;
    assert_eq!(failed["error"]["code"], -32603);
    assert!(
        status_message(&failed).contains("within 300 ms"),
        "{failed}"
    );
}

#[tokio::test]
async fn ttl_is_capped_and_expired_tasks_are_unknown() {
    let s = setup(&["--default-ttl-ms", "600000", "--max-ttl-ms", "1000"]);
    let reply = s
        .client
        .call_tool("echo", json!({"text": "short-lived"}))
        .await;
    assert_eq!(reply.result()["ttlMs"], 1000);
    let task_id = reply.result()["taskId"].as_str().unwrap().to_owned();
    eventually("the task to expire", || async {
        let reply = s
            .client
            .request("tasks/get", json!({"taskId": task_id}))
            .await;
        (reply.body.get("error").is_some()).then_some(reply)
    })
    .await;
    let reply = s
        .client
        .request("tasks/get", json!({"taskId": task_id}))
        .await;
    assert_eq!(reply.error_code(), -32602);
}

#[tokio::test]
async fn discover_and_list_results_are_completed_for_stateless_clients() {
    let s = setup(&[]);
    let discover = s.client.request("server/discover", json!({})).await;
    let result = discover.result();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!([STATELESS]));
    assert_eq!(result["capabilities"]["extensions"][TASKS_EXT], json!({}));
    assert!(result["capabilities"]["tools"].is_object());
    assert!(
        result["ttlMs"].is_u64() && result["cacheScope"].is_string(),
        "{result}"
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "plain-server"
    );

    let tools = s.client.request("tools/list", json!({})).await;
    let result = tools.result();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "private");
    let names: Vec<&str> = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"ask_name") && names.contains(&"echo"),
        "{names:?}"
    );
}

#[tokio::test]
async fn upstream_down_at_start_fails_tasks_clearly() {
    let port = free_port();
    let (_gateway, url) = start_gateway(&format!("http://127.0.0.1:{port}/mcp"), &[]);
    let client = Client::with_tasks(&url);
    let task_id = client.start_task("echo", json!({"text": "x"})).await;
    let failed = client.wait_status(&task_id, "failed").await;
    assert_eq!(failed["error"]["code"], -32603);
    assert!(
        status_message(&failed).contains("upstream unreachable"),
        "{failed}"
    );
    let health = reqwest::get(url.replace("/mcp", "/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn upstream_lost_mid_call_fails_the_task() {
    let (mut upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = Client::with_tasks(&url);
    let task_id = client.start_task("sleep", json!({"ms": 60000})).await;
    client
        .poll_until(&task_id, |t| t["statusMessage"].is_string())
        .await;
    upstream.kill();
    let failed = client.wait_status(&task_id, "failed").await;
    assert!(status_message(&failed).contains("upstream"), "{failed}");
    let next = client.start_task("echo", json!({"text": "x"})).await;
    let failed = client.wait_status(&next, "failed").await;
    assert!(status_message(&failed).contains("unreachable"), "{failed}");
}
