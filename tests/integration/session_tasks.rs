//! 2025-11-25 session clients that declare `capabilities.tasks` get tasks from the
//! gateway: the TypeScript SDK 1.x client (tests/package.json), unchanged application
//! code (tests/fixtures/ts_tasks_client.mjs), in front of plain upstreams that have no
//! tasks of their own.

use std::process::Command;

use crate::common;
use crate::common::session::{SessionClient, read_messages};
use crate::common::*;
use serde_json::{Value, json};

/// What a test here runs against: a gateway with `flags` in front of `upstream` (a
/// started server and its URL). Both stop when the guard is dropped, the gateway first.
struct Running {
    gateway: Proc,
    _upstream: Proc,
}

/// Starts the gateway in front of `upstream`; the guard, the upstream's URL and the
/// gateway's.
fn in_front_of(upstream: (Proc, String), flags: &[&str]) -> (Running, String, String) {
    let (upstream, upstream_url) = upstream;
    let (gateway, url) = start_gateway(&upstream_url, flags);
    let running = Running {
        gateway,
        _upstream: upstream,
    };
    (running, upstream_url, url)
}

/// Runs the TypeScript client with `steps` against `url`; every line it printed.
fn ts_client(url: &str, steps: Value) -> Vec<Value> {
    ts_client_with(json!({"url": url, "steps": steps}))
}

pub(crate) fn ts_client_with(plan: Value) -> Vec<Value> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("node")
        .arg(root.join("tests/fixtures/ts_tasks_client.mjs"))
        .arg(plan.to_string())
        .current_dir(root.join("tests"))
        .output()
        .expect("node runs");
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    assert!(
        output.status.success() && lines.last() == Some(&json!({"done": true})),
        "the TypeScript client failed: {lines:#?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A pass-through session stays the gateway's to the end: had the client adopted
    // the upstream's own id, its requests would bypass the gateway's tasks.
    let first = &line(&lines, "session")["session"];
    assert_eq!(
        &line(&lines, "finalSession")["finalSession"],
        first,
        "{lines:#?}"
    );
    lines
}

/// The first line that has `key`.
pub(crate) fn line<'a>(lines: &'a [Value], key: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l.get(key).is_some())
        .unwrap_or_else(|| panic!("no {key:?} in {lines:#?}"))
}

fn all<'a>(lines: &'a [Value], key: &str) -> Vec<&'a Value> {
    lines.iter().filter_map(|l| l.get(key)).collect()
}

#[test]
fn the_client_learns_of_task_support_at_initialize_and_per_tool() {
    let (_running, _, url) = in_front_of(
        start_plain_server(),
        &["--tool-policy", "sleep=required,echo=forbidden"],
    );
    let lines = ts_client(&url, json!([{"do": "listTools"}]));
    assert_eq!(
        line(&lines, "session")["serverTasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
    );
    let tools = &line(&lines, "tools")["tools"];
    assert_eq!(tools["sleep"], "required");
    assert_eq!(tools["echo"], "forbidden");
    assert_eq!(tools["ask_name"], "optional");
}

#[test]
fn an_instant_tool_runs_as_a_task_and_its_result_comes_from_tasks_result() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let lines = ts_client(
        &url,
        json!([{"do": "callToolStream", "name": "echo", "arguments": {"text": "hi"}, "task": {"ttl": 60000}}]),
    );
    let created = &line(&lines, "taskCreated")["taskCreated"];
    assert_eq!(created["status"], "working");
    assert_eq!(created["ttl"], 60000);
    assert!(created["pollInterval"].is_u64(), "{created}");
    let result = &line(&lines, "result")["result"];
    assert_eq!(result["structuredContent"]["echo"], json!({"text": "hi"}));
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        created["taskId"]
    );
    assert!(result.get("resultType").is_none(), "{result}");
}

#[test]
fn a_slow_tool_reports_progress_in_the_task_status() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let lines = ts_client(
        &url,
        // Runs past the client's first poll (pollInterval 1 s): a completed task keeps no
        // progress text, so it is seen while the task works.
        json!([{"do": "callToolStream", "name": "sleep", "arguments": {"ms": 2500, "steps": 5}, "task": {}}]),
    );
    let messages: Vec<String> = all(&lines, "message")
        .into_iter()
        .filter_map(|m| m.as_str().map(str::to_owned))
        .collect();
    assert!(
        messages.iter().any(|m| m.starts_with("step ")),
        "no progress seen while polling: {lines:#?}"
    );
    assert_eq!(
        line(&lines, "result")["result"]["content"][0]["text"],
        "slept 2500 ms"
    );
}

#[test]
fn progress_reaches_the_clients_handler_under_its_own_token() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let lines = ts_client(
        &url,
        json!([{"do": "callToolStream", "name": "sleep", "arguments": {"ms": 1500, "steps": 3}, "task": {}, "progress": true}]),
    );
    let heard: Vec<&Value> = all(&lines, "progress");
    let messages: Vec<&str> = heard.iter().filter_map(|p| p["message"].as_str()).collect();
    assert_eq!(
        messages,
        ["step 1 of 3", "step 2 of 3", "step 3 of 3"],
        "{lines:#?}"
    );
    assert_eq!(heard[2]["progress"], 3);
}

#[test]
fn an_elicitation_reaches_the_clients_handler_on_the_tasks_result_stream() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let lines = ts_client(
        &url,
        json!([{"do": "callToolStream", "name": "ask_name", "task": {}}]),
    );
    let task_id = line(&lines, "taskCreated")["taskCreated"]["taskId"].clone();
    let elicited = line(&lines, "elicited");
    assert_eq!(
        elicited["meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id
    );
    assert!(
        all(&lines, "taskStatus").contains(&&json!("input_required")),
        "{lines:#?}"
    );
    let text = line(&lines, "result")["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("Ada"), "{text}");
}

#[test]
fn sampling_reaches_the_client_too() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let lines = ts_client(
        &url,
        json!([{"do": "callToolStream", "name": "sample", "arguments": {"prompt": "hi"}, "task": {}}]),
    );
    line(&lines, "sampled");
    let result = &line(&lines, "result")["result"];
    assert!(result.to_string().contains("sampled answer"), "{result}");
}

#[test]
fn failing_tools_fail_their_tasks() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let lines = ts_client(
        &url,
        json!([
            {"do": "callToolStream", "name": "tool_error", "task": {}},
            {"do": "callToolStream", "name": "protocol_error", "task": {}},
        ]),
    );
    // 2025-11-25: a tool result with isError is a failed task; so is a JSON-RPC error.
    let errors = all(&lines, "error");
    assert_eq!(errors.len(), 2, "{lines:#?}");
    for error in errors {
        assert!(
            error["message"].as_str().unwrap().contains("failed"),
            "{error}"
        );
    }
    let created: Vec<&Value> = all(&lines, "taskCreated");
    // tasks/result still returns what the call returned: the result, and the error.
    let task_ids: Vec<Value> = created.iter().map(|t| t["taskId"].clone()).collect();
    let lines = ts_client_with(json!({"url": url, "steps": [
        {"do": "getTaskResult", "taskId": task_ids[0]},
        {"do": "getTaskResult", "taskId": task_ids[1]},
    ]}));
    // Another session of the same (anonymous) principal reads them.
    let results: Vec<&Value> = lines
        .iter()
        .filter(|l| l.get("result").is_some() || l.get("error").is_some())
        .collect();
    assert_eq!(results[0]["result"]["isError"], true, "{results:#?}");
    assert_eq!(results[1]["error"]["code"], -32603, "{results:#?}");
    assert!(
        results[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deliberate"),
        "{results:#?}"
    );
}

#[test]
fn list_tasks_shows_the_callers_tasks_newest_first_and_no_one_elses() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let lines = ts_client(
        &url,
        json!([
            {"do": "createTask", "name": "echo", "arguments": {"text": "1"}},
            {"do": "createTask", "name": "echo", "arguments": {"text": "2"}},
            {"do": "listTasks"},
        ]),
    );
    let created: Vec<Value> = all(&lines, "created")
        .iter()
        .map(|t| t["taskId"].clone())
        .collect();
    let listed = line(&lines, "listed")["listed"].as_array().unwrap().clone();
    let order: Vec<(&str, &str)> = listed
        .iter()
        .map(|t| {
            (
                t["createdAt"].as_str().unwrap(),
                t["taskId"].as_str().unwrap(),
            )
        })
        .collect();
    // Newest first; two tasks of one millisecond by taskId descending.
    let mut newest_first = order.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(order, newest_first);
    let mut ids: Vec<&str> = order.iter().map(|(_, id)| *id).collect();
    ids.sort();
    let mut expected: Vec<&str> = created.iter().map(|id| id.as_str().unwrap()).collect();
    expected.sort();
    assert_eq!(ids, expected, "both of the caller's tasks, no one else's");
}

#[tokio::test]
async fn tasks_list_pages_and_other_principals_see_nothing() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let mut alice = SessionClient::new(&url).with_authorization("Bearer alice");
    alice
        .initialize("2025-11-25", json!({"tasks": {"list": {}, "cancel": {}}}))
        .await;
    let mut created = Vec::new();
    for n in 0..55 {
        let answer = post_one(
            &alice,
            json!({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}, "task": {}}}),
        )
        .await;
        created.push(answer["result"]["task"]["taskId"].clone());
    }
    let first = post_one(
        &alice,
        json!({"jsonrpc": "2.0", "id": 100, "method": "tasks/list"}),
    )
    .await;
    let page = first["result"]["tasks"].as_array().unwrap().clone();
    assert_eq!(page.len(), 50);
    let cursor = first["result"]["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = post_one(
        &alice,
        json!({"jsonrpc": "2.0", "id": 101, "method": "tasks/list", "params": {"cursor": cursor}}),
    )
    .await;
    assert!(second["result"].get("nextCursor").is_none(), "{second}");
    let mut tasks = page;
    tasks.extend(
        second["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .cloned(),
    );
    // Newest first: createdAt descending; tasks of one millisecond by taskId descending.
    let order: Vec<(String, String)> = tasks
        .iter()
        .map(|t| {
            let at = t["createdAt"].as_str().unwrap().to_owned();
            (at, t["taskId"].as_str().unwrap().to_owned())
        })
        .collect();
    let mut newest_first = order.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(order, newest_first, "pages in newest-first order");
    let mut listed: Vec<Value> = tasks.iter().map(|t| t["taskId"].clone()).collect();
    listed.sort_by_key(|id| id.to_string());
    let mut all_created = created.clone();
    all_created.sort_by_key(|id| id.to_string());
    assert_eq!(listed, all_created, "every task once, across the two pages");

    let mut mallory = SessionClient::new(&url).with_authorization("Bearer mallory");
    mallory
        .initialize("2025-11-25", json!({"tasks": {"list": {}}}))
        .await;
    let theirs = post_one(
        &mallory,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/list"}),
    )
    .await;
    assert_eq!(theirs["result"]["tasks"], json!([]));
    let peek = post_one(
        &mallory,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": created[0]}}),
    )
    .await;
    assert_eq!(peek["error"]["code"], -32602, "{peek}");
}

/// POSTs one message on the session; its one answer.
async fn post_one(client: &SessionClient, body: Value) -> Value {
    let response = client.post(body).await;
    read_messages(response).await.pop().expect("an answer")
}

#[tokio::test]
async fn cancelling_a_running_task_stops_the_call_upstream() {
    let (_running, upstream_url, url) = in_front_of(start_plain_server(), &[]);
    let url_for_client = url.clone();
    let stats = upstream_url.replace("/mcp", "/stats");
    let lines = tokio::task::spawn_blocking(move || {
        ts_client(
            &url_for_client,
            json!([{"do": "cancelRunning", "name": "sleep", "arguments": {"ms": 60000}, "runningAt": stats}]),
        )
    })
    .await
    .unwrap();
    assert_eq!(line(&lines, "cancelled")["cancelled"], "cancelled");
    let error = &line(&lines, "error")["error"];
    assert!(
        error["message"].as_str().unwrap().contains("cancelled"),
        "{error}"
    );
    eventually("the upstream hears notifications/cancelled", || async {
        let stats = upstream_stats(&upstream_url).await;
        let cancelled = stats["cancelledReceived"].as_array()?.len();
        (cancelled == 1 && stats["callsInFlight"] == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn bad_input_gets_the_2025_codes_and_never_reaches_the_upstream() {
    let (_running, upstream_url, url) =
        in_front_of(start_plain_server(), &["--tool-policy", "echo=forbidden"]);
    let mut client = SessionClient::new(&url);
    client
        .initialize("2025-11-25", json!({"tasks": {"list": {}, "cancel": {}}}))
        .await;
    let calls_before = upstream_stats(&upstream_url).await["callsStarted"].clone();
    let unknown = "786512e2-9e0d-44bd-8f29-789f320fe840";
    let cases = [
        (
            json!({"method": "tasks/get", "params": {"taskId": unknown}}),
            -32602,
            "786512e2",
        ),
        (
            json!({"method": "tasks/result", "params": {"taskId": unknown}}),
            -32602,
            "786512e2",
        ),
        (
            json!({"method": "tasks/cancel", "params": {"taskId": unknown}}),
            -32602,
            "786512e2",
        ),
        (
            json!({"method": "tasks/get", "params": {}}),
            -32602,
            "taskId",
        ),
        (
            json!({"method": "tasks/list", "params": {"cursor": "garbage"}}),
            -32602,
            "cursor",
        ),
        (
            json!({"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}, "task": {}}}),
            -32601,
            "forbidden",
        ),
        (
            json!({"method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 1}, "task": {"ttl": 0}}}),
            -32602,
            "ttl",
        ),
        (
            json!({"method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 1}, "task": {"ttl": -5}}}),
            -32602,
            "ttl",
        ),
        (
            json!({"method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 1}, "task": "soon"}}),
            -32602,
            "params.task",
        ),
    ];
    for (n, (request, code, mentions)) in cases.into_iter().enumerate() {
        let mut body = request.clone();
        body["jsonrpc"] = json!("2.0");
        body["id"] = json!(n + 10);
        let response = client.post(body).await;
        assert_eq!(response.status(), 200, "{request}");
        let answer = read_messages(response).await.pop().unwrap();
        assert_eq!(answer["id"], json!(n + 10), "{answer}");
        assert_eq!(answer["error"]["code"], code, "{request} -> {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(mentions), "{request} -> {message}");
    }
    let calls_after_bad_input = upstream_stats(&upstream_url).await["callsStarted"].clone();
    assert_eq!(
        calls_after_bad_input, calls_before,
        "bad input reached the upstream"
    );

    // A cancelled task has no result to give, and cannot be cancelled again. The cancel is
    // sent once the call runs upstream: the task is stored before its call is sent.
    let created = post_one(
        &client,
        json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 60000}, "task": {}}}),
    )
    .await;
    let task_id = created["result"]["task"]["taskId"].clone();
    let one_more = calls_before.as_u64().map(|n| n + 1);
    eventually("the sleep reaches the upstream", || async {
        let started = upstream_stats(&upstream_url).await["callsStarted"].as_u64();
        (started == one_more).then_some(())
    })
    .await;
    let cancelled = post_one(
        &client,
        json!({"jsonrpc": "2.0", "id": 51, "method": "tasks/cancel", "params": {"taskId": task_id}}),
    )
    .await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let again = post_one(
        &client,
        json!({"jsonrpc": "2.0", "id": 52, "method": "tasks/cancel", "params": {"taskId": task_id}}),
    )
    .await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled")
    );
    let result = post_one(
        &client,
        json!({"jsonrpc": "2.0", "id": 53, "method": "tasks/result", "params": {"taskId": task_id}}),
    )
    .await;
    assert_eq!(result["error"]["code"], -32602, "{result}");
    // Neither the second cancel nor the result call started anything upstream.
    let calls_after = upstream_stats(&upstream_url).await["callsStarted"].as_u64();
    assert_eq!(
        calls_after, one_more,
        "a call on a cancelled task reached the upstream"
    );
}

#[tokio::test]
async fn a_client_without_the_tasks_capability_is_passed_through_unchanged() {
    let (_running, upstream_url, url) = in_front_of(start_plain_server(), &[]);
    let mut direct = SessionClient::new(&upstream_url);
    let mut through = SessionClient::new(&url);
    let capabilities = json!({"elicitation": {}});
    let direct_init = direct.initialize("2025-11-25", capabilities.clone()).await;
    let through_init = through.initialize("2025-11-25", capabilities).await;
    assert_eq!(direct_init, through_init);
    assert!(through_init["capabilities"].get("tasks").is_none());
    // The upstream's own session id, not a gateway mark.
    assert!(!through.session.as_deref().unwrap().starts_with("mtg-"));
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let direct_bytes = direct.post(list.clone()).await.bytes().await.unwrap();
    let through_bytes = through.post(list).await.bytes().await.unwrap();
    // The SSE event ids differ per session; the events are otherwise the same bytes.
    let strip_ids = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .lines()
            .filter(|l| !l.starts_with("id:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip_ids(&direct_bytes), strip_ids(&through_bytes));
    assert!(!strip_ids(&through_bytes).contains("taskSupport"));
}

/// The TypeScript client's flows in front of server-everything: elicitation answered by
/// the client's handler, progress while polling, and a plain result.
fn everything_flows(url: &str) {
    let plan = json!({"url": url, "elicitAnswer": {"name": "Ada Lovelace", "check": true}, "steps": [
        {"do": "listTools"},
        {"do": "callToolStream", "name": "trigger-elicitation-request", "task": {}},
        {"do": "callToolStream", "name": "get-sum", "arguments": {"a": 2, "b": 3}, "task": {}},
        {"do": "callToolStream", "name": "trigger-long-running-operation", "arguments": {"duration": 1, "steps": 2}, "task": {}},
        {"do": "cancelRunning", "name": "trigger-long-running-operation", "arguments": {"duration": 30, "steps": 30}},
    ]});
    let lines = ts_client_with(plan);
    line(&lines, "elicited");
    let results: Vec<String> = all(&lines, "result")
        .iter()
        .map(|r| r["content"].to_string())
        .collect();
    assert_eq!(results.len(), 3, "{lines:#?}");
    assert!(results[0].contains("Ada Lovelace"), "{}", results[0]);
    assert!(results[1].contains('5'), "{}", results[1]);
    assert!(results[2].contains("completed"), "{}", results[2]);
    assert_eq!(line(&lines, "cancelled")["cancelled"], "cancelled");
    let stopped = &line(&lines, "error")["error"];
    assert!(
        stopped["message"].as_str().unwrap().contains("cancelled"),
        "{stopped}"
    );
    // The upstream's own task tool: required for the client too.
    assert_eq!(
        line(&lines, "tools")["tools"]["simulate-research-query"],
        "required"
    );
}

/// server-everything's `simulate-research-query` runs only as a task of the upstream's
/// own: the gateway's task follows it, and its elicitation (queued upstream for the
/// upstream's `tasks/result`) still reaches the client.
fn upstream_native_task(url: &str) {
    let plan = json!({"url": url, "elicitAnswer": {"interpretation": "technical"}, "steps": [
        {"do": "listTools"},
        {"do": "callToolStream", "name": "simulate-research-query", "arguments": {"topic": "gateways", "ambiguous": true}},
        {"do": "listTasks"},
    ]});
    let lines = ts_client_with(plan);
    // Chosen by the client itself: `required` in tools/list makes callToolStream a task.
    line(&lines, "taskCreated");
    line(&lines, "elicited");
    let report = line(&lines, "result")["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        report.contains("Research Report: gateways (technical)"),
        "{report}"
    );
    // One task, the gateway's: the upstream's never shows.
    let listed = line(&lines, "listed")["listed"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        listed[0]["taskId"],
        line(&lines, "taskCreated")["taskCreated"]["taskId"]
    );
}

/// Each server-everything scenario as a test per transport: `http::NAME`, `stdio::NAME`.
macro_rules! over_both_everything_transports {
    ($($scenario:ident),* $(,)?) => {
        mod http {
            $(#[test]
            fn $scenario() {
                let (_running, _, url) = super::in_front_of(super::start_everything(), &[]);
                super::$scenario(&url);
            })*
        }
        mod stdio {
            $(#[test]
            fn $scenario() {
                let gateway = crate::common::stdio::start_stdio_gateway(
                    &crate::common::stdio::everything_cmd(),
                    &[],
                );
                super::$scenario(&gateway.url);
            })*
        }
    };
}

over_both_everything_transports!(everything_flows, upstream_native_task);

/// A 2026-07-28 upstream asks by MRTR; the session client answers on its tasks/result
/// stream, as it would any server.
fn mrtr_upstream(upstream: common::mrtr::MrtrUpstream) {
    let (_running, _, url) = in_front_of(upstream.start(), &[]);
    let plan = json!({"url": url, "elicitAnswer": {"confirm": true}, "steps": [
        {"do": "callToolStream", "name": "confirm_delete", "arguments": {"path": "/tmp/x"}, "task": {}},
        {"do": "listTasks"},
    ]});
    let lines = ts_client_with(plan);
    assert!(
        line(&lines, "elicited")["elicited"]
            .as_str()
            .unwrap()
            .contains("/tmp/x")
    );
    assert_eq!(
        line(&lines, "result")["result"]["content"][0]["text"],
        "deleted /tmp/x"
    );
    assert_eq!(line(&lines, "listed")["listed"][0]["status"], "completed");
}

#[test]
fn a_2026_upstream_python() {
    mrtr_upstream(common::mrtr::MrtrUpstream::Python);
}

#[test]
fn a_2026_upstream_rmcp() {
    mrtr_upstream(common::mrtr::MrtrUpstream::Rmcp);
}

#[test]
fn status_changes_are_pushed_on_the_sessions_get_stream() {
    let (_running, _, url) = in_front_of(start_plain_server(), &[]);
    let lines = ts_client(
        &url,
        json!([
            {"do": "callToolStream", "name": "ask_name", "task": {}},
            {"do": "waitForPush", "status": "completed"},
        ]),
    );
    let pushed: Vec<&Value> = all(&lines, "pushed");
    assert!(pushed.contains(&&json!("input_required")), "{lines:#?}");
    assert_eq!(line(&lines, "pushSeen")["pushSeen"], true, "{lines:#?}");
}

#[test]
fn a_gateway_served_session_gets_pushes_too() {
    let gateway = common::stdio::start_stdio_gateway(&common::stdio::everything_cmd(), &[]);
    let lines = ts_client_with(
        json!({"url": gateway.url, "elicitAnswer": {"name": "Ada Lovelace", "check": true}, "steps": [
            {"do": "callToolStream", "name": "trigger-elicitation-request", "task": {}},
            {"do": "waitForPush", "status": "completed"},
        ]}),
    );
    assert_eq!(line(&lines, "pushSeen")["pushSeen"], true, "{lines:#?}");
}

/// Reads an SSE stream until a message that `wanted` accepts, within the deadline.
async fn next_message_where<E: std::fmt::Debug>(
    events: &mut (impl futures_util::Stream<Item = Result<sse_stream::Sse, E>> + Unpin),
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let message = tokio::time::timeout_at(deadline, common::session::next_message(events))
            .await
            .expect("the message in time");
        if wanted(&message) {
            return message;
        }
    }
}

/// Created on A; the GET stream and `tasks/result` on B: B pushes the status changes of
/// a call that runs on A, delivers its elicitation, and the answer completes it on A.
#[tokio::test]
async fn two_instances_on_redis_share_the_sessions_tasks() {
    let redis = test_support::RedisServer::start();
    let flags = ["--redis", &redis.url()];
    let (_a, upstream_url, url_a) = in_front_of(start_plain_server(), &flags);
    let (_b, url_b) = start_gateway(&upstream_url, &flags);
    let mut on_a = SessionClient::new(&url_a);
    on_a.initialize(
        "2025-11-25",
        json!({"tasks": {"list": {}, "cancel": {}}, "elicitation": {}}),
    )
    .await;
    let mut on_b = on_a.clone();
    on_b.url = url_b.clone();
    let mut pushes = sse_stream::SseStream::from_bytes_stream(on_b.get().await.bytes_stream());

    let created = post_one(
        &on_a,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask_name", "arguments": {}, "task": {}}}),
    )
    .await;
    let task_id = created["result"]["task"]["taskId"].clone();
    let pushed =
        next_message_where(&mut pushes, |m| m["params"]["status"] == "input_required").await;
    assert_eq!(pushed["method"], "notifications/tasks/status");
    assert_eq!(pushed["params"]["taskId"], task_id);

    let result_stream = on_b
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/result", "params": {"taskId": task_id}}))
        .await;
    let mut results = sse_stream::SseStream::from_bytes_stream(result_stream.bytes_stream());
    let asked = next_message_where(&mut results, |m| m["method"] == "elicitation/create").await;
    assert_eq!(
        asked["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id
    );
    let answer = on_b
        .post(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"name": "Grace"}}}))
        .await;
    assert_eq!(answer.status(), 202);
    let done = next_message_where(&mut results, |m| m["id"] == 2).await;
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Grace"),
        "{done}"
    );
    assert_eq!(
        done["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id
    );
    next_message_where(&mut pushes, |m| m["params"]["status"] == "completed").await;
    // The upstream got the answer once.
    let stats = upstream_stats(&upstream_url).await;
    let answers: Vec<u64> = responses_received(&stats);
    assert_eq!(answers, [1], "{stats}");
}

/// SEP-1905: a session that declared response modes gets a quick call's result inline
/// under `immediate`; a slow one, or one with nothing but `streaming` (a plain upstream
/// streams no partial content), becomes a task.
#[tokio::test]
async fn response_modes_give_immediate_results_within_the_promotion_budget() {
    let (_running, _, url) = in_front_of(start_plain_server(), &["--promote-after-ms", "1000"]);
    let mut client = SessionClient::new(&url);
    let init = client
        .initialize(
            "2025-11-25",
            json!({"tasks": {"list": {}, "responses": {"modes": ["task", "immediate", "streaming"]}}}),
        )
        .await;
    assert_eq!(
        init["capabilities"]["tasks"]["responses"]["modes"],
        json!(["task", "immediate"])
    );
    let call = |id: u64, name: &str, arguments: Value, modes: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": name, "arguments": arguments, "task": {"responseModes": modes}}})
    };
    let quick = post_one(
        &client,
        call(
            1,
            "echo",
            json!({"text": "now"}),
            json!(["immediate", "task"]),
        ),
    )
    .await;
    assert_eq!(
        quick["result"]["structuredContent"]["echo"]["text"], "now",
        "{quick}"
    );
    assert!(quick["result"].get("task").is_none(), "{quick}");

    let slow = post_one(
        &client,
        call(
            2,
            "sleep",
            json!({"ms": 3000}),
            json!(["immediate", "task"]),
        ),
    )
    .await;
    assert_eq!(slow["result"]["task"]["status"], "working", "{slow}");

    let streaming = post_one(
        &client,
        call(3, "echo", json!({"text": "s"}), json!(["streaming"])),
    )
    .await;
    assert_eq!(
        streaming["result"]["task"]["status"], "working",
        "{streaming}"
    );
    assert_eq!(
        streaming["result"]["_meta"]["io.modelcontextprotocol/fallback-mode"],
        "task"
    );

    // Without the session's declaration, `immediate` in the call is not honoured.
    let mut plain = SessionClient::new(&url);
    plain
        .initialize("2025-11-25", json!({"tasks": {"list": {}}}))
        .await;
    let not_negotiated = post_one(
        &plain,
        call(4, "echo", json!({"text": "x"}), json!(["immediate"])),
    )
    .await;
    assert!(
        not_negotiated["result"]["task"].is_object(),
        "{not_negotiated}"
    );
}

/// The instance running a session client's task dies (kill -9): another instance tells
/// the client, within the lease, that the task failed, and `tasks/result` gives the error.
#[tokio::test]
async fn a_lost_owner_fails_the_session_task_within_the_lease() {
    let redis = test_support::RedisServer::start();
    let flags = ["--redis", &redis.url(), "--lease-timeout-ms", "1000"];
    let (mut a, upstream_url, url_a) = in_front_of(start_plain_server(), &flags);
    let (_b, url_b) = start_gateway(&upstream_url, &flags);
    let mut on_a = SessionClient::new(&url_a);
    on_a.initialize("2025-11-25", json!({"tasks": {"list": {}, "cancel": {}}}))
        .await;
    let mut on_b = on_a.clone();
    on_b.url = url_b;
    let created = post_one(
        &on_a,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 60000}, "task": {}}}),
    )
    .await;
    let task_id = created["result"]["task"]["taskId"].clone();
    // tasks/result on B waits for the task while its owner dies.
    let waiter = on_b.clone();
    let request =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/result", "params": {"taskId": task_id}});
    let waiting = tokio::spawn(async move { read_messages(waiter.post(request).await).await });
    let killed_at = std::time::Instant::now();
    a.gateway.kill();
    let outcome = waiting.await.unwrap().pop().expect("an answer");
    assert_eq!(outcome["error"]["code"], -32603, "{outcome}");
    assert!(
        outcome["error"]["message"]
            .as_str()
            .unwrap()
            .contains("instance lost"),
        "{outcome}"
    );
    assert!(killed_at.elapsed() < std::time::Duration::from_secs(5));
    let task = post_one(
        &on_b,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}}),
    )
    .await;
    assert_eq!(task["result"]["status"], "failed", "{task}");
}

/// A session client that did not declare `capabilities.tasks` (SDK quick starts do not:
/// in 2025-11-25 a client declares it only to be sent task requests) still gets a gateway
/// task when it sends `params.task`, and its `tasks/get`, `tasks/result` and
/// `tasks/cancel` work: the TypeScript SDK 1.x client, in front of a pass-through
/// upstream that has no tasks.
#[tokio::test]
async fn a_client_that_declared_no_tasks_capability_gets_a_task_when_it_asks() {
    let (_running, upstream_url, url) = in_front_of(start_plain_server(), &[]);
    let stats = upstream_url.replace("/mcp", "/stats");
    let plan = json!({"url": url, "noTasks": true, "steps": [
        {"do": "callToolStream", "name": "sleep", "arguments": {"ms": 300}, "task": {}},
        {"do": "cancelRunning", "name": "sleep", "arguments": {"ms": 60000}, "runningAt": stats},
        {"do": "callTool", "name": "echo", "arguments": {"text": "plain"}},
    ]});
    let lines = tokio::task::spawn_blocking(move || ts_client_with(plan))
        .await
        .unwrap();
    let created = all(&lines, "taskCreated");
    assert_eq!(created.len(), 2, "{lines:#?}");
    assert_eq!(created[0]["status"], "working");
    let results = all(&lines, "result");
    assert_eq!(
        results[0]["content"][0]["text"], "slept 300 ms",
        "{lines:#?}"
    );
    assert_eq!(line(&lines, "cancelled")["cancelled"], "cancelled");
    eventually("the upstream hears notifications/cancelled", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["cancelledReceived"].as_array()?.len() == 1 && stats["callsInFlight"] == 0)
            .then_some(())
    })
    .await;
    // A call without `task` still goes through as it is.
    assert_eq!(results[1]["content"][0]["text"], "plain", "{lines:#?}");
}

/// The same for a session the gateway serves itself (a stdio upstream).
#[test]
fn a_gateway_served_session_that_declared_no_tasks_gets_a_task_when_it_asks() {
    let gateway = common::stdio::start_stdio_gateway(&common::stdio::everything_cmd(), &[]);
    let plan = json!({"url": gateway.url, "noTasks": true, "steps": [
        {"do": "callToolStream", "name": "get-sum", "arguments": {"a": 2, "b": 3}, "task": {}},
    ]});
    let lines = ts_client_with(plan);
    assert_eq!(
        line(&lines, "taskCreated")["taskCreated"]["status"],
        "working"
    );
    let result = &line(&lines, "result")["result"];
    assert!(result["content"].to_string().contains('5'), "{result}");
}
