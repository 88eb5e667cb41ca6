//! The rmcp crate (3.x), an independent SEP-2663 client, drives tasks through the
//! gateway: create → input_required → update → completed, and a cancel.

use std::time::{Duration, Instant};

use crate::common::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, GetTaskParams, Implementation, InputRequest, InputResponses,
    JsonObject, ProtocolVersion, TaskPayload, UpdateTaskParams,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::json;

pub(crate) async fn connect(url: &str) -> RunningService<RoleClient, ClientConfig> {
    let capabilities = ClientCapabilities::builder()
        .enable_extensions()
        .enable_elicitation_with(
            ElicitationCapability::new().with_form(FormElicitationCapability::new()),
        )
        .enable_tasks()
        .build();
    let config = ClientConfig::new(
        capabilities,
        Implementation::new("rmcp-gateway-test", "0.1.0"),
    )
    .with_protocol_version(ProtocolVersion::V_2026_07_28);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    tokio::time::timeout(DEADLINE, config.serve_with_lifecycle(transport, lifecycle))
        .await
        .expect("connect in time")
        .expect("rmcp accepts the gateway's server/discover")
}

pub(crate) fn args(value: serde_json::Value) -> JsonObject {
    serde_json::from_value(value).unwrap()
}

pub(crate) async fn start(
    client: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    arguments: serde_json::Value,
) -> String {
    let call = CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments));
    match client.call_tool_once(call).await.expect("tools/call") {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("expected a task, got {other:?}"),
    }
}

pub(crate) async fn poll_payload(
    client: &RunningService<RoleClient, ClientConfig>,
    task_id: &str,
    done: impl Fn(&TaskPayload) -> bool,
) -> TaskPayload {
    let start = Instant::now();
    loop {
        let got = client
            .get_task(GetTaskParams::new(task_id.to_owned()))
            .await
            .expect("tasks/get");
        if done(&got.task.payload) {
            return got.task.payload;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "task stuck: {:?}",
            got.task.payload
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn rmcp_drives_an_elicitation_task_to_completion() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = connect(&url).await;

    let task_id = start(&client, "ask_name", json!({})).await;
    let payload = poll_payload(&client, &task_id, |p| {
        matches!(p, TaskPayload::InputRequired { .. })
    })
    .await;
    let TaskPayload::InputRequired { input_requests } = payload else {
        unreachable!()
    };
    assert_eq!(input_requests.len(), 1);
    let (key, request) = input_requests.iter().next().unwrap();
    assert!(
        matches!(request, InputRequest::Elicitation(_)),
        "{request:?}"
    );

    let mut responses = InputResponses::new();
    let answer =
        ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Ferris"}));
    responses.insert(key.clone(), serde_json::to_value(answer).unwrap());
    client
        .update_task(UpdateTaskParams::new(task_id.clone(), responses))
        .await
        .expect("tasks/update");

    let payload = poll_payload(&client, &task_id, |p| {
        matches!(p, TaskPayload::Completed { .. })
    })
    .await;
    let TaskPayload::Completed { result } = payload else {
        unreachable!()
    };
    let result: CallToolResult = serde_json::from_value(serde_json::Value::Object(result)).unwrap();
    let text = serde_json::to_value(&result.content).unwrap();
    assert_eq!(text[0]["text"], "Hello, Ferris!");
}

#[tokio::test]
async fn rmcp_cancels_a_running_task() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = connect(&url).await;

    let task_id = start(&client, "sleep", json!({"ms": 60000})).await;
    client
        .cancel_task(CancelTaskParams::new(task_id.clone()))
        .await
        .expect("tasks/cancel");
    poll_payload(&client, &task_id, |p| matches!(p, TaskPayload::Cancelled)).await;
}

#[tokio::test]
async fn rmcp_reads_inline_results_and_failed_tasks() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--tool-policy", "echo=forbidden"]);
    let client = connect(&url).await;

    let call = CallToolRequestParams::new("echo").with_arguments(args(json!({"text": "inline"})));
    match client.call_tool_once(call).await.expect("tools/call") {
        CallToolResponse::Complete(result) => {
            assert_eq!(
                serde_json::to_value(&result.content).unwrap()[0]["text"],
                "inline"
            );
        }
        other => panic!("expected an inline result, got {other:?}"),
    }

    let task_id = start(&client, "protocol_error", json!({})).await;
    let payload = poll_payload(&client, &task_id, |p| {
        matches!(p, TaskPayload::Failed { .. })
    })
    .await;
    let TaskPayload::Failed { error } = payload else {
        unreachable!()
    };
    assert_eq!(serde_json::to_value(&error).unwrap()["code"], -32603);
}
