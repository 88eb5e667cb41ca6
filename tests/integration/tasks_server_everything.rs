//! Tasks in front of the third-party `@modelcontextprotocol/server-everything` (pinned in
//! tests/package-lock.json), a 2025-11-25 server: every scenario written once and run
//! over both of its transports, Streamable HTTP and stdio (the gateway starts it).

use crate::common::stdio::{everything_cmd, start_stdio_gateway};
use crate::common::*;
use serde_json::json;

#[derive(Clone, Copy)]
enum Transport {
    Http,
    Stdio,
}

/// The processes of one scenario (killed when dropped) and a client of the gateway.
struct Setup {
    _processes: Box<dyn std::any::Any>,
    client: Client,
}

fn setup(transport: Transport) -> Setup {
    match transport {
        Transport::Http => {
            let (upstream, upstream_url) = start_everything();
            let (gateway, url) = start_gateway(&upstream_url, &[]);
            Setup {
                _processes: Box::new((upstream, gateway)),
                client: Client::with_tasks(&url),
            }
        }
        Transport::Stdio => {
            let gateway = start_stdio_gateway(&everything_cmd(), &[]);
            let client = Client::with_tasks(&gateway.url);
            Setup {
                _processes: Box::new(gateway),
                client,
            }
        }
    }
}

async fn echo_runs_as_a_task(client: &Client) {
    let task_id = client
        .start_task("echo", json!({"message": "hello everything"}))
        .await;
    let done = client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&done["result"]), "Echo: hello everything");
}

async fn long_running_operation_reports_progress(client: &Client) {
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

async fn elicitation_answered_with_tasks_update_completes(client: &Client) {
    let task_id = client
        .start_task("trigger-elicitation-request", json!({}))
        .await;
    let waiting = client.wait_status(&task_id, "input_required").await;
    let (key, request) = only_input_request(&waiting);
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

async fn sampling_answered_with_tasks_update_completes(client: &Client) {
    let task_id = client
        .start_task("trigger-sampling-request", json!({"prompt": "Say hi"}))
        .await;
    let waiting = client.wait_status(&task_id, "input_required").await;
    let (key, request) = only_input_request(&waiting);
    assert_eq!(request["method"], "sampling/createMessage");
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "hi there"}, "model": "fake-model", "stopReason": "endTurn"});
    client
        .update(&task_id, json!({key.as_str(): answer}))
        .await
        .result();
    let done = client.wait_status(&task_id, "completed").await;
    assert!(first_text(&done["result"]).contains("hi there"), "{done}");
}

/// server-everything never answers a cancelled call; the gateway ends the task itself,
/// and the upstream keeps serving.
async fn cancel(client: &Client, task_id: &str) {
    client.cancel(task_id).await.result();
    client.wait_status(task_id, "cancelled").await;
    let next = client
        .start_task("echo", json!({"message": "after cancel"}))
        .await;
    let done = client.wait_status(&next, "completed").await;
    assert_eq!(first_text(&done["result"]), "Echo: after cancel");
}

async fn cancel_right_after_the_start(client: &Client) {
    let operation = json!({"duration": 60, "steps": 60});
    let task_id = client
        .start_task("trigger-long-running-operation", operation)
        .await;
    cancel(client, &task_id).await;
}

async fn cancel_while_the_operation_reports_progress(client: &Client) {
    let task_id = client.start_reporting_operation(60).await;
    cancel(client, &task_id).await;
}

async fn discover_does_not_leak_the_2025_tasks_capability(client: &Client) {
    let discover = client.request("server/discover", json!({})).await;
    let capabilities = &discover.result()["capabilities"];
    assert!(capabilities.get("tasks").is_none(), "{capabilities}");
    assert_eq!(capabilities["extensions"][TASKS_EXT], json!({}));
    let tools = client.request("tools/list", json!({})).await;
    for tool in tools.result()["tools"].as_array().unwrap() {
        assert!(tool.get("execution").is_none(), "{tool}");
    }
}

/// Each scenario as a test per transport: `http::NAME` and `stdio::NAME`.
macro_rules! over_both_transports {
    ($($scenario:ident),* $(,)?) => {
        mod http {
            $(#[tokio::test]
            async fn $scenario() {
                let setup = super::setup(super::Transport::Http);
                super::$scenario(&setup.client).await;
            })*
        }
        mod stdio {
            $(#[tokio::test]
            async fn $scenario() {
                let setup = super::setup(super::Transport::Stdio);
                super::$scenario(&setup.client).await;
            })*
        }
    };
}

over_both_transports!(
    echo_runs_as_a_task,
    long_running_operation_reports_progress,
    elicitation_answered_with_tasks_update_completes,
    sampling_answered_with_tasks_update_completes,
    cancel_right_after_the_start,
    cancel_while_the_operation_reports_progress,
    discover_does_not_leak_the_2025_tasks_capability,
);
