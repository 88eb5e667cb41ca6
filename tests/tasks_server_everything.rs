//! Tasks in front of the third-party `@modelcontextprotocol/server-everything` (pinned in
//! tests/package-lock.json), a 2025-11-25 stateful Streamable HTTP server.

mod common;

use common::*;
use serde_json::json;

fn setup() -> (Proc, Proc, Client) {
    let (upstream, upstream_url) = start_everything();
    let (gateway, url) = start_gateway(&upstream_url, &[]);
    (upstream, gateway, Client::with_tasks(&url))
}

#[tokio::test]
async fn echo_runs_as_a_task() {
    let (_upstream, _gateway, client) = setup();
    let task_id = client
        .start_task("echo", json!({"message": "hello everything"}))
        .await;
    let done = client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&done["result"]), "Echo: hello everything");
}

#[tokio::test]
async fn long_running_operation_reports_progress() {
    let (_upstream, _gateway, client) = setup();
    let task_id = client
        .start_task(
            "trigger-long-running-operation",
            json!({"duration": 2, "steps": 4}),
        )
        .await;
    let working = client
        .poll_until(&task_id, |t| t["statusMessage"].is_string())
        .await;
    assert!(
        working["statusMessage"].as_str().unwrap().contains("of 4"),
        "{working}"
    );
    let done = client.wait_status(&task_id, "completed").await;
    assert!(
        first_text(&done["result"]).contains("Long running operation completed"),
        "{done}"
    );
}

#[tokio::test]
async fn elicitation_answered_with_tasks_update_completes() {
    let (_upstream, _gateway, client) = setup();
    let task_id = client
        .start_task("trigger-elicitation-request", json!({}))
        .await;
    let waiting = client.wait_status(&task_id, "input_required").await;
    let (key, request) = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert!(request["params"]["requestedSchema"]["properties"]["name"].is_object());
    let answer = json!({key.as_str(): {"action": "accept", "content": {"name": "Ada Lovelace", "check": true}}});
    client.update(&task_id, answer).await.result();
    let done = client.wait_status(&task_id, "completed").await;
    let texts = done["result"]["content"].to_string();
    assert!(
        texts.contains("User provided the requested information"),
        "{done}"
    );
    assert!(texts.contains("Ada Lovelace"), "{done}");
}

#[tokio::test]
async fn sampling_answered_with_tasks_update_completes() {
    let (_upstream, _gateway, client) = setup();
    let task_id = client
        .start_task("trigger-sampling-request", json!({"prompt": "Say hi"}))
        .await;
    let waiting = client.wait_status(&task_id, "input_required").await;
    let (key, request) = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(request["method"], "sampling/createMessage");
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "hi there"}, "model": "fake-model", "stopReason": "endTurn"});
    client
        .update(&task_id, json!({key.as_str(): answer}))
        .await
        .result();
    let done = client.wait_status(&task_id, "completed").await;
    assert!(first_text(&done["result"]).contains("hi there"), "{done}");
}

#[tokio::test]
async fn cancel_ends_a_long_running_operation() {
    let (_upstream, _gateway, client) = setup();
    let task_id = client
        .start_task(
            "trigger-long-running-operation",
            json!({"duration": 60, "steps": 60}),
        )
        .await;
    client.cancel(&task_id).await.result();
    // server-everything never answers a cancelled call; the gateway ends the task itself.
    client.wait_status(&task_id, "cancelled").await;
    let next = client
        .start_task("echo", json!({"message": "after cancel"}))
        .await;
    client.wait_status(&next, "completed").await;
}

#[tokio::test]
async fn discover_does_not_leak_the_legacy_tasks_capability() {
    let (_upstream, _gateway, client) = setup();
    let discover = client.request("server/discover", json!({})).await;
    let capabilities = &discover.result()["capabilities"];
    assert!(capabilities.get("tasks").is_none(), "{capabilities}");
    assert_eq!(capabilities["extensions"][TASKS_EXT], json!({}));
    let tools = client.request("tools/list", json!({})).await;
    for tool in tools.result()["tools"].as_array().unwrap() {
        assert!(tool.get("execution").is_none(), "{tool}");
    }
}
