//! `--max-task-requests-per-second`: a caller polling faster than its rate gets HTTP 429
//! with `Retry-After` and error -31430; other callers are not slowed; once the wait is
//! over the caller is served again. Both task dialects are limited.

use crate::common::session::SessionClient;
use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn a_polling_storm_is_slowed_per_caller() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--max-task-requests-per-second", "5"]);
    let mut stormy = Client::with_tasks(&url);
    stormy.authorization = Some("Bearer stormy".into());
    let mut calm = Client::with_tasks(&url);
    calm.authorization = Some("Bearer calm".into());
    let task_id = stormy.start_task("sleep", json!({"ms": 60000})).await;
    let calm_task = calm.start_task("sleep", json!({"ms": 60000})).await;

    let mut refused = None;
    for _ in 0..20 {
        let reply = stormy
            .request("tasks/get", json!({"taskId": task_id}))
            .await;
        if reply.status == 429 {
            refused = Some(reply);
            break;
        }
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let refused = refused.expect("20 tasks/get in a row were all served at 5 a second");
    assert_eq!(refused.error_code(), -31430);
    refused.assert_message_mentions("at most 5 a second");
    assert!(
        refused.body["error"]["data"]["retryAfterMs"]
            .as_u64()
            .unwrap()
            <= 1000
    );

    // Another caller is not slowed by the storm.
    let reply = calm
        .request("tasks/get", json!({"taskId": calm_task}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Retry-After on the HTTP response, in whole seconds.
    let response = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tasks/get")
        .header("mcp-name", &task_id)
        .header("authorization", "Bearer stormy")
        .json(&json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/get",
                      "params": stormy.params(json!({"taskId": task_id}))}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    // After the wait, served again.
    eventually("the caller to be served again", || async {
        let reply = stormy
            .request("tasks/get", json!({"taskId": task_id}))
            .await;
        (reply.status == 200).then_some(())
    })
    .await;
    stormy.cancel(&task_id).await;
    calm.cancel(&calm_task).await;
}

#[tokio::test]
async fn session_clients_are_limited_too() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--max-task-requests-per-second", "3"]);
    let mut client = SessionClient::new(&url).with_authorization("Bearer session-storm");
    client
        .initialize("2025-11-25", json!({"tasks": {"list": {}, "cancel": {}}}))
        .await;
    let mut statuses = Vec::new();
    for n in 0..12 {
        let response = client
            .post(json!({"jsonrpc": "2.0", "id": n + 10, "method": "tasks/list", "params": {}}))
            .await;
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            assert!(response.headers().contains_key("retry-after"));
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], -31430, "{body}");
            assert_eq!(body["id"], n + 10);
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    assert!(
        statuses.len() >= 4,
        "refused before its burst: {statuses:?}"
    );
}
