//! Each client generation on a named path (`/mcp/NAME`, issue #30): rmcp 3.x with the
//! tasks extension, the TypeScript SDK 1.x session client with 2025-11-25 tasks, and the
//! Python SDK 2.x without the extension, each driven as in its own module
//! (`rmcp_client`, `session_tasks`, `bridged_clients`). Every gateway here serves two
//! named upstreams, `alpha` and `beta` (two `plain_server`s), and nothing at `/mcp`; each
//! test shows its client reached the upstream of its path (that one's call counters
//! move, the other's do not) and met that path's own settings.

use std::path::PathBuf;

use crate::bridged_clients::python_client;
use crate::common::*;
use crate::rmcp_client;
use crate::session_tasks::{line, ts_client_with};
use rmcp::model::{
    CallToolResult, ElicitResult, ElicitationAction, GetTaskParams, InputResponses, TaskPayload,
    UpdateTaskParams,
};
use serde_json::{Value, json};

/// A gateway in front of two `plain_server`s named `alpha` and `beta`. Fields drop in
/// order: the gateway stops before its upstreams.
struct TwoUpstreams {
    _gateway: Proc,
    /// `http://127.0.0.1:PORT/mcp`, as the gateway announced it.
    announced: String,
    alpha: (Proc, String),
    beta: (Proc, String),
    _config: Option<ConfigFile>,
}

/// A config file of one test, removed when dropped.
struct ConfigFile(PathBuf);

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What a client can make an upstream count: sessions opened and calls run.
#[derive(Debug, PartialEq, Clone, Copy)]
struct Counters {
    initialize: u64,
    calls: u64,
}

async fn counters(upstream_url: &str) -> Counters {
    let stats = upstream_stats(upstream_url).await;
    Counters {
        initialize: stats["initializeCount"].as_u64().expect("initializeCount"),
        calls: stats["callsStarted"].as_u64().expect("callsStarted"),
    }
}

impl TwoUpstreams {
    /// `--upstream alpha=URL --upstream beta=URL`, nothing else.
    fn on_command_line() -> Self {
        let (alpha, beta) = (start_plain_server(), start_plain_server());
        let alpha_arg = format!("alpha={}", alpha.1);
        let beta_arg = format!("beta={}", beta.1);
        let command = gateway_command(
            &["--upstream", &alpha_arg, "--upstream", &beta_arg],
            &[],
            "warn",
        );
        let (gateway, announced) = spawn_announcing("mcp-task-gateway", command);
        Self {
            _gateway: gateway,
            announced,
            alpha,
            beta,
            _config: None,
        }
    }

    /// A `--config` file whose `[upstreams.alpha]` and `[upstreams.beta]` tables have
    /// their URL and, after it, the settings given here (TOML lines).
    fn with_config(alpha_settings: &str, beta_settings: &str) -> Self {
        let (alpha, beta) = (start_plain_server(), start_plain_server());
        let path =
            std::env::temp_dir().join(format!("mtg-named-clients-{}.toml", uuid::Uuid::new_v4()));
        let text = format!(
            "[upstreams.alpha]\nurl = {:?}\n{alpha_settings}\n\n\
             [upstreams.beta]\nurl = {:?}\n{beta_settings}\n",
            alpha.1, beta.1
        );
        std::fs::write(&path, text).expect("config file written");
        let config = ConfigFile(path);
        let path = config.0.to_string_lossy().into_owned();
        let command = gateway_command(&["--config", &path], &[], "warn");
        let (gateway, announced) = spawn_announcing("mcp-task-gateway", command);
        Self {
            _gateway: gateway,
            announced,
            alpha,
            beta,
            _config: Some(config),
        }
    }

    /// The URL of `/mcp/NAME`.
    fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.announced)
    }

    async fn counters(&self) -> (Counters, Counters) {
        (counters(&self.alpha.1).await, counters(&self.beta.1).await)
    }
}

#[tokio::test]
async fn named_clients_rmcp_runs_a_task_at_its_path_only() {
    let world = TwoUpstreams::on_command_line();
    let (alpha_before, beta_before) = world.counters().await;
    let client = rmcp_client::connect(&world.url("beta")).await;

    // create → poll (input_required) → answer → poll (completed) → the result.
    let task_id = rmcp_client::start(&client, "ask_name", json!({})).await;
    let payload = rmcp_client::poll_payload(&client, &task_id, |p| {
        matches!(p, TaskPayload::InputRequired { .. })
    })
    .await;
    let TaskPayload::InputRequired { input_requests } = payload else {
        unreachable!()
    };
    assert_eq!(input_requests.len(), 1, "{input_requests:?}");
    let key = input_requests.keys().next().unwrap().clone();
    let mut responses = InputResponses::new();
    let answer =
        ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Ferris"}));
    responses.insert(key, serde_json::to_value(answer).unwrap());
    client
        .update_task(UpdateTaskParams::new(task_id.clone(), responses))
        .await
        .expect("tasks/update");
    let payload = rmcp_client::poll_payload(&client, &task_id, |p| {
        matches!(p, TaskPayload::Completed { .. })
    })
    .await;
    let TaskPayload::Completed { result } = payload else {
        unreachable!()
    };
    let result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    let content = serde_json::to_value(&result.content).unwrap();
    assert_eq!(content[0]["text"], "Hello, Ferris!");

    // The call ran on beta, and its answer reached beta; alpha heard nothing.
    let (alpha_after, beta_after) = world.counters().await;
    assert_eq!(beta_after.calls, beta_before.calls + 1, "{beta_after:?}");
    let stats = upstream_stats(&world.beta.1).await;
    assert_eq!(responses_received(&stats), [1], "{stats}");
    assert_eq!(alpha_after, alpha_before, "alpha's counters moved");

    // The other path's world does not know the task, even for the same caller.
    let other = rmcp_client::connect(&world.url("alpha")).await;
    let unknown = other.get_task(GetTaskParams::new(task_id.clone())).await;
    assert!(unknown.is_err(), "alpha knows beta's task: {unknown:?}");
    let known = client.get_task(GetTaskParams::new(task_id)).await;
    assert!(known.is_ok(), "{known:?}");
}

#[tokio::test]
async fn named_clients_typescript_session_gets_its_paths_tasks_and_policies() {
    let world = TwoUpstreams::with_config(
        r#"tool-policy = { echo = "forbidden" }"#,
        r#"tool-policy = { sleep = "required" }"#,
    );
    let (alpha_before, beta_before) = world.counters().await;
    let plan = json!({"url": world.url("beta"), "steps": [
        {"do": "listTools"},
        {"do": "callToolStream", "name": "echo", "arguments": {"text": "beta"}, "task": {}},
        {"do": "callToolStream", "name": "ask_name", "task": {}},
    ]});
    let lines = tokio::task::spawn_blocking(move || ts_client_with(plan))
        .await
        .expect("client ran");

    // beta's policy, not alpha's: sleep required, echo offered as a task.
    let tools = &line(&lines, "tools")["tools"];
    assert_eq!(tools["sleep"], "required", "{tools}");
    assert_eq!(tools["echo"], "optional", "{tools}");
    assert_eq!(tools["ask_name"], "optional", "{tools}");

    let created = &line(&lines, "taskCreated")["taskCreated"];
    assert_eq!(created["status"], "working");
    let results: Vec<&Value> = lines.iter().filter_map(|l| l.get("result")).collect();
    assert_eq!(results.len(), 2, "{lines:#?}");
    assert_eq!(
        results[0]["structuredContent"]["echo"],
        json!({"text": "beta"})
    );
    assert_eq!(
        results[0]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        created["taskId"]
    );
    // The elicitation reached the client's handler on the tasks/result stream.
    line(&lines, "elicited");
    assert_eq!(results[1]["content"][0]["text"], "Hello, Ada!");

    let (alpha_after, beta_after) = world.counters().await;
    assert_eq!(beta_after.calls, beta_before.calls + 2, "{beta_after:?}");
    assert!(beta_after.initialize > beta_before.initialize);
    assert_eq!(alpha_after, alpha_before, "alpha's counters moved");
}

#[tokio::test]
async fn named_clients_python_without_tasks_meets_its_paths_deferral_only() {
    // Deferral is alpha's setting alone.
    let world = TwoUpstreams::with_config("defer-after-ms = 500", "");
    let (alpha_before, beta_before) = world.counters().await;

    let alpha_url = world.url("alpha");
    let seen = tokio::task::spawn_blocking(move || {
        python_client(
            &alpha_url,
            "slow_echo",
            json!({"text": "later", "ms": 2500}),
            &["--fetch-deferred"],
        )
    })
    .await
    .expect("client ran");
    assert_eq!(seen["protocolVersion"], STATELESS, "{seen}");
    let tools = seen["tools"].as_array().expect("tools listed");
    assert!(tools.contains(&json!("get_task_result")), "{seen}");
    let deferred = seen["deferred"].as_array().expect("deferred results");
    assert!(!deferred.is_empty(), "the call was not deferred: {seen}");
    let task_id = deferred[0]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no taskId: {seen}"));
    assert_eq!(
        deferred[0]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id
    );
    assert_eq!(seen["result"]["structuredContent"]["echo"]["text"], "later");
    let (alpha_mid, beta_mid) = world.counters().await;
    assert_eq!(alpha_mid.calls, alpha_before.calls + 1, "{alpha_mid:?}");
    assert_eq!(beta_mid, beta_before, "beta's counters moved");

    // beta defers nothing: the same call, longer than alpha's budget, comes back whole,
    // and beta offers no get_task_result.
    let beta_url = world.url("beta");
    let seen = tokio::task::spawn_blocking(move || {
        python_client(
            &beta_url,
            "slow_echo",
            json!({"text": "now", "ms": 1500}),
            &["--fetch-deferred"],
        )
    })
    .await
    .expect("client ran");
    let tools = seen["tools"].as_array().expect("tools listed");
    assert!(!tools.contains(&json!("get_task_result")), "{seen}");
    assert_eq!(seen["deferred"], json!([]), "{seen}");
    assert_eq!(seen["result"]["structuredContent"]["echo"]["text"], "now");
    let (alpha_after, beta_after) = world.counters().await;
    assert_eq!(beta_after.calls, beta_mid.calls + 1, "{beta_after:?}");
    assert_eq!(alpha_after, alpha_mid, "alpha's counters moved");
}
