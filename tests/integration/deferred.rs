//! Deferred results (`--defer-after-ms`) for 2026-07-28 clients without the tasks
//! extension: a call that outlives the budget is answered with a taskId and words for a
//! model, goes on as a task of its caller, and `get_task_result` / `cancel_task` (the
//! gateway's own tools, never sent upstream) fetch or stop it. Against the fixture
//! upstream (a 2025-11-25 session server), with our 2026-07-28 client and the Python SDK
//! 2.x client, which validates results against the listed outputSchema.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::RedisServer;

use crate::bridged_clients::python_client;
use crate::common::*;

const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A 2026-07-28 client with elicitation, sampling and roots, without the tasks extension.
fn plain_client(url: &str) -> Client {
    Client::new(
        url,
        json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}}),
    )
}

/// The deferred result's task id, asserting the shape a client and a model see: the id
/// in `_meta`, words naming the exact next call, and `structuredContent` (where the tool
/// has an `outputSchema`) carrying the same words.
fn deferred_task(result: &Value) -> String {
    assert_eq!(result["isError"], false, "{result}");
    let task_id = result["_meta"][RELATED_TASK]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a deferred result: {result}"))
        .to_owned();
    let (tool, arguments) = next_call(result);
    assert_eq!(tool, "get_task_result", "{result}");
    assert_eq!(arguments["taskId"], task_id.as_str(), "{result}");
    if let Some(structured) = result.get("structuredContent") {
        assert_eq!(structured["taskId"], task_id.as_str(), "{result}");
        assert_eq!(structured["message"], first_text(result), "{result}");
        assert_eq!(structured["nextCall"]["arguments"], arguments, "{result}");
    }
    task_id
}

/// The call a deferred result's words name, read as a model reads it: the JSON object
/// after "call the tool NAME with".
pub fn next_call(result: &Value) -> (String, Value) {
    let text = first_text(result);
    let marker = "call the tool ";
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no next call in {text}"))
        + marker.len();
    let (tool, rest) = text[at..]
        .split_once(" with ")
        .unwrap_or_else(|| panic!("no arguments in {text}"));
    let mut objects = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    let arguments = objects
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON arguments in {text}"));
    (tool.to_owned(), arguments)
}

/// How many `notifications/cancelled` the fixture upstream received.
fn cancels_heard(stats: &Value) -> usize {
    stats["cancelledReceived"].as_array().map_or(0, Vec::len)
}

fn is_deferred(result: &Value) -> bool {
    result["isError"] != true && result["_meta"][RELATED_TASK]["taskId"].is_string()
}

async fn get_task_result(client: &Client, arguments: Value) -> Value {
    client
        .call_tool("get_task_result", arguments)
        .await
        .result()
        .clone()
}

/// Calls `get_task_result` until the answer is not deferred.
async fn fetch(client: &Client, task_id: &str) -> Value {
    let started = Instant::now();
    loop {
        let result = get_task_result(client, json!({"taskId": task_id, "waitSeconds": 5})).await;
        if !is_deferred(&result) {
            return result;
        }
        assert!(started.elapsed() < DEADLINE, "still deferred: {result}");
    }
}

/// The raw body of a quick `echo` call.
async fn quick_echo_body(url: &str) -> String {
    raw_call(url, "echo", json!({"text": "hi"}), None).await
}

/// The raw body of a `tools/call`, with a progress token when given.
async fn raw_call(url: &str, tool: &str, arguments: Value, progress: Option<&str>) -> String {
    let client = plain_client(url);
    let mut params = client.params(json!({"name": tool, "arguments": arguments}));
    if let Some(token) = progress {
        params["_meta"]["progressToken"] = json!(token);
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    client
        .http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body.to_string())
        .send()
        .await
        .expect("gateway reachable")
        .text()
        .await
        .expect("a body")
}

#[tokio::test]
async fn a_long_call_is_deferred_and_get_task_result_returns_the_upstreams_result() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "1000"]);
    let client = plain_client(&url);

    let listed = client.request("tools/list", json!({})).await;
    let tools = listed.result()["tools"].as_array().expect("tools").clone();
    let named = |name: &str| tools.iter().find(|t| t["name"] == name).cloned();
    assert!(named("get_task_result").is_some() && named("cancel_task").is_some());
    let schema = &named("echo").expect("echo")["outputSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["anyOf"][0]["required"], json!(["echo"]), "{schema}");

    // Quick: answered as a gateway without the flag answers it, to the byte.
    let quick = quick_echo_body(&url).await;
    let (_plain_gateway, plain_url) = start_gateway(&upstream_url, &[]);
    assert_eq!(quick, quick_echo_body(&plain_url).await);
    assert!(quick.contains(r#""echo":{"text":"hi"}"#), "{quick}");
    // The same for a quick call that asks for progress: the same events, to the byte.
    let arguments = json!({"ms": 300, "steps": 3});
    let streamed = raw_call(&url, "sleep", arguments.clone(), Some("p-7")).await;
    let plain = raw_call(&plain_url, "sleep", arguments, Some("p-7")).await;
    assert_eq!(streamed, plain);
    assert_eq!(
        streamed.matches(r#""progressToken":"p-7""#).count(),
        3,
        "{streamed}"
    );

    let started = Instant::now();
    let first = client
        .call_tool("sleep", json!({"ms": 4000, "steps": 0}))
        .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(3500),
        "deferred after {waited:?}"
    );
    let task_id = deferred_task(first.result());
    // `sleep` lists no outputSchema: the words are all, for every host.
    assert!(
        first.result().get("structuredContent").is_none(),
        "{}",
        first.body
    );
    assert_eq!(next_call(first.result()).1["attempt"], 1);

    // Waiting less than the call needs gets another deferred result.
    let again = get_task_result(&client, json!({"taskId": task_id, "waitSeconds": 0})).await;
    assert_eq!(deferred_task(&again), task_id);

    let result = fetch(&client, &task_id).await;
    assert_eq!(result["isError"], json!(null), "{result}");
    assert!(first_text(&result).contains("slept"), "{result}");
    let stats = upstream_stats(&upstream_url).await;
    assert_eq!(
        stats["callsStarted"], 5,
        "two echoes, two quick sleeps and the long one, nothing else: {stats}"
    );
}

#[tokio::test]
async fn without_the_flag_the_same_call_waits_for_its_result() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = plain_client(&url);
    let listed = client.request("tools/list", json!({})).await;
    let names: Vec<_> = listed.result()["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert!(!names.contains(&json!("get_task_result")), "{names:?}");
    let result = client
        .call_tool("sleep", json!({"ms": 2000, "steps": 0}))
        .await;
    assert!(!is_deferred(result.result()));
    assert!(first_text(result.result()).contains("slept"));
}

#[tokio::test]
async fn cancel_task_stops_the_upstream_call() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "500"]);
    let client = plain_client(&url);
    let first = client
        .call_tool("sleep", json!({"ms": 60_000, "steps": 0}))
        .await;
    let task_id = deferred_task(first.result());
    let cancelled = client
        .call_tool("cancel_task", json!({"taskId": task_id}))
        .await;
    assert_eq!(cancelled.result()["isError"], false);
    eventually("the upstream hears the cancel", || async {
        let stats = upstream_stats(&upstream_url).await;
        (cancels_heard(&stats) == 1 && stats["callsInFlight"] == 0).then_some(())
    })
    .await;
    let after = get_task_result(&client, json!({"taskId": task_id})).await;
    assert_eq!(after["isError"], true, "{after}");
    assert!(first_text(&after).contains("cancelled"), "{after}");
}

#[tokio::test]
async fn bad_arguments_and_other_callers_get_a_clear_tool_error_and_nothing_upstream() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "500"]);
    let mut client = plain_client(&url);
    client.authorization = Some("Bearer alice".into());
    let first = client
        .call_tool("sleep", json!({"ms": 3000, "steps": 0}))
        .await;
    let task_id = deferred_task(first.result());
    let mut other = plain_client(&url);
    other.authorization = Some("Bearer mallory".into());

    for (who, tool, arguments, says) in [
        (
            &client,
            "get_task_result",
            json!({}),
            "needs arguments.taskId",
        ),
        (
            &client,
            "get_task_result",
            json!({"taskId": 42}),
            "needs arguments.taskId",
        ),
        (
            &client,
            "get_task_result",
            json!({"taskId": "no-such-task"}),
            "no task",
        ),
        (
            &other,
            "get_task_result",
            json!({"taskId": task_id}),
            "no task",
        ),
        (
            &client,
            "get_task_result",
            json!({"taskId": task_id, "waitSeconds": -1}),
            "waitSeconds",
        ),
        (
            &client,
            "get_task_result",
            json!({"taskId": task_id, "waitSeconds": 1e12}),
            "waitSeconds",
        ),
        (
            &client,
            "get_task_result",
            json!({"taskId": task_id, "waitSeconds": "soon"}),
            "waitSeconds",
        ),
        (
            &client,
            "get_task_result",
            json!({"taskId": task_id, "attempt": 0}),
            "attempt must be a whole number",
        ),
        (
            &client,
            "get_task_result",
            json!({"taskId": task_id, "attempt": "two"}),
            "attempt must be a whole number",
        ),
        (
            &client,
            "get_task_result",
            json!({"taskId": task_id, "attempt": 2.5}),
            "attempt must be a whole number",
        ),
        (&client, "cancel_task", json!({}), "needs arguments.taskId"),
        (&other, "cancel_task", json!({"taskId": task_id}), "no task"),
    ] {
        let reply = who.call_tool(tool, arguments.clone()).await;
        let result = reply.result();
        assert_eq!(result["isError"], true, "{tool} {arguments}: {result}");
        assert!(
            first_text(result)
                .to_lowercase()
                .contains(&says.to_lowercase()),
            "{tool} {arguments}: {result}"
        );
    }
    // The foreign cancel changed nothing: the call still completes for its caller.
    let result = fetch(&client, &task_id).await;
    assert!(first_text(&result).contains("slept"), "{result}");
    let stats = upstream_stats(&upstream_url).await;
    assert_eq!(
        stats["callsStarted"], 1,
        "only the sleep reached the upstream: {stats}"
    );
}

#[tokio::test]
async fn a_question_asked_while_deferred_is_answered_through_get_task_result_once() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "500"]);
    let client = plain_client(&url);
    let first = client.call_tool("wait_then_ask", json!({"ms": 1500})).await;
    let task_id = deferred_task(first.result());

    let arguments = json!({"taskId": task_id, "waitSeconds": 5});
    let started = Instant::now();
    let asked = loop {
        let result = get_task_result(&client, arguments.clone()).await;
        if result["resultType"] == "input_required" {
            break result;
        }
        assert_eq!(deferred_task(&result), task_id);
        assert!(started.elapsed() < DEADLINE, "never asked: {result}");
    };
    let (key, request) = asked["inputRequests"]
        .as_object()
        .and_then(|requests| requests.iter().next())
        .expect("one input request");
    assert_eq!(request["method"], "elicitation/create");
    let answered = client
        .retry_tool(
            "get_task_result",
            arguments.clone(),
            json!({key: {"action": "accept", "content": {"name": "Ada"}}}),
            &asked["requestState"],
        )
        .await;
    let mut result = answered.result().clone();
    if is_deferred(&result) {
        result = fetch(&client, &task_id).await;
    }
    assert_eq!(first_text(&result), "Hello, Ada!", "{result}");
    let stats = upstream_stats(&upstream_url).await;
    assert_eq!(
        responses_received(&stats),
        [1],
        "the answer reached the upstream once: {stats}"
    );
}

#[tokio::test]
async fn a_question_asked_within_the_budget_is_the_calls_mrtr_round() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "2000"]);
    let client = plain_client(&url);
    let asked = client.call_tool("ask_name", json!({})).await;
    let asked = asked.result();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let key = asked["inputRequests"]
        .as_object()
        .and_then(|requests| requests.keys().next().cloned())
        .expect("one input request");
    let answered = client
        .retry_tool(
            "ask_name",
            json!({}),
            json!({key: {"action": "accept", "content": {"name": "Ada"}}}),
            &asked["requestState"],
        )
        .await;
    assert_eq!(first_text(answered.result()), "Hello, Ada!");
    let stats = upstream_stats(&upstream_url).await;
    assert_eq!(responses_received(&stats), [1], "{stats}");
}

#[tokio::test]
async fn the_python_sdk_takes_a_deferred_result_of_a_tool_with_an_output_schema() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "1000"]);
    let seen = tokio::task::spawn_blocking(move || {
        python_client(
            &url,
            "slow_echo",
            json!({"text": "later", "ms": 3000}),
            &["--fetch-deferred"],
        )
    })
    .await
    .expect("client ran");
    let tools = seen["tools"].as_array().expect("tools listed");
    assert!(tools.contains(&json!("get_task_result")) && tools.contains(&json!("cancel_task")));
    let deferred = seen["deferred"].as_array().expect("deferred results");
    assert!(!deferred.is_empty(), "the call was not deferred: {seen}");
    deferred_task(&deferred[0]);
    // The SDK validated both against the listed schema; the last is the tool's own.
    assert_eq!(
        seen["result"]["structuredContent"]["echo"]["text"], "later",
        "{seen}"
    );
}

#[tokio::test]
async fn a_call_deferred_on_one_instance_is_fetched_and_cancelled_on_another() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let shared = ["--defer-after-ms", "500", "--redis", &redis.url()];
    let (_a, url_a) = start_gateway(&upstream_url, &shared);
    let (_b, url_b) = start_gateway(&upstream_url, &shared);
    let on_a = plain_client(&url_a);
    let on_b = plain_client(&url_b);

    let first = on_a
        .call_tool("sleep", json!({"ms": 2500, "steps": 0}))
        .await;
    let task_id = deferred_task(first.result());
    let result = fetch(&on_b, &task_id).await;
    assert!(first_text(&result).contains("slept"), "{result}");

    let long = on_a
        .call_tool("sleep", json!({"ms": 60_000, "steps": 0}))
        .await;
    let long_id = deferred_task(long.result());
    let cancelled = on_b
        .call_tool("cancel_task", json!({"taskId": long_id}))
        .await;
    assert_eq!(cancelled.result()["isError"], false);
    eventually("the upstream hears the cancel from the owner", || async {
        let stats = upstream_stats(&upstream_url).await;
        (cancels_heard(&stats) == 1 && stats["callsInFlight"] == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_deferred_call_of_a_killed_instance_is_run_again_elsewhere_if_it_may_be() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let shared = [
        "--defer-after-ms",
        "500",
        "--redis",
        &redis.url(),
        "--lease-timeout-ms",
        "2000",
    ];
    let (mut a, url_a) = start_gateway(&upstream_url, &shared);
    let (_b, url_b) = start_gateway(&upstream_url, &shared);
    let on_a = plain_client(&url_a);
    let on_b = plain_client(&url_b);

    // `lookup` is annotated read-only by the upstream, so it may run again; `sleep` not.
    let lookup = on_a
        .call_tool("lookup", json!({"key": "k1", "ms": 3000}))
        .await;
    let lookup_id = deferred_task(lookup.result());
    let sleep = on_a
        .call_tool("sleep", json!({"ms": 60_000, "steps": 0}))
        .await;
    let sleep_id = deferred_task(sleep.result());
    eventually("both calls to run upstream", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["callsInFlight"] == 2).then_some(())
    })
    .await;
    a.kill();

    let result = fetch(&on_b, &lookup_id).await;
    assert_eq!(first_text(&result), "found k1", "{result}");
    let failed = fetch(&on_b, &sleep_id).await;
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(first_text(&failed).contains("failed"), "{failed}");
}

/// rmcp 3.x as a 2026-07-28 client (an independent implementation, which puts a
/// `progressToken` on every request, so the call is answered on SSE): lists the tools,
/// gets a deferred result for a slow tool with an outputSchema, then its result through
/// `get_task_result`.
#[tokio::test]
async fn the_rmcp_client_gets_a_deferred_result_and_then_the_tools_own() {
    use rmcp::model::{CallToolRequestParams, JsonObject};
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "500"]);
    let client = crate::rmcp_client_mrtr::stateless_client(&url).await;
    let tools = tokio::time::timeout(DEADLINE, client.list_all_tools())
        .await
        .expect("listed in time")
        .expect("tools/list");
    assert!(tools.iter().any(|tool| tool.name == "get_task_result"));
    let call = |name: &'static str, arguments: Value| {
        let arguments: JsonObject = serde_json::from_value(arguments).unwrap();
        let params = CallToolRequestParams::new(name).with_arguments(arguments);
        let client = &client;
        async move {
            let result = tokio::time::timeout(DEADLINE, client.call_tool(params))
                .await
                .expect("answered in time")
                .expect("tools/call");
            serde_json::to_value(result).unwrap()
        }
    };
    let first = call("slow_echo", json!({"text": "rmcp", "ms": 2000})).await;
    let task_id = deferred_task(&first);
    let wait = json!({"taskId": task_id, "waitSeconds": 10});
    let mut result = call("get_task_result", wait.clone()).await;
    while is_deferred(&result) {
        result = call("get_task_result", wait.clone()).await;
    }
    assert_eq!(
        result["structuredContent"]["echo"]["text"], "rmcp",
        "{result}"
    );
}

/// A client that asks for progress hears the upstream's progress under its own token
/// while the call runs within the budget, then gets the deferred result on the same
/// stream (the Python SDK 2.x).
#[tokio::test]
async fn a_call_that_asks_for_progress_hears_it_before_its_deferred_result() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, gateway_url) = start_gateway(&upstream_url, &["--defer-after-ms", "1500"]);
    let url = gateway_url.clone();
    let seen = tokio::task::spawn_blocking(move || {
        python_client(
            &url,
            "sleep",
            json!({"ms": 4000, "steps": 8}),
            &["--progress", "--fetch-deferred"],
        )
    })
    .await
    .expect("client ran");
    let deferred = seen["deferred"].as_array().expect("deferred results");
    assert!(!deferred.is_empty(), "the call was not deferred: {seen}");
    deferred_task(&deferred[0]);
    let progress = seen["progress"].as_array().expect("progress");
    assert!(
        !progress.is_empty(),
        "no progress before the deferral: {seen}"
    );
    assert!(first_text(&seen["result"]).contains("slept"), "{seen}");

    // Log messages at or above the client's level reach it the same way.
    let url = gateway_url.clone();
    let seen = tokio::task::spawn_blocking(move || {
        python_client(
            &url,
            "sleep",
            json!({"ms": 300, "steps": 2, "log": true}),
            &["--log-level", "warning"],
        )
    })
    .await
    .expect("client ran");
    assert_eq!(seen["logs"], json!([["warning", "woke up"]]), "{seen}");
}

/// The TypeScript SDK 1.x client, a 2025-11-25 session client without tasks, with its
/// default options, in front of a stdio upstream (server-everything), whose sessions the
/// gateway serves itself: a long call answered with a deferred result, then its result
/// through `get_task_result`, as a model told by the text would fetch it.
#[test]
fn a_session_client_without_tasks_gets_a_deferred_result_over_stdio() {
    use crate::common::stdio::{everything_cmd, start_stdio_gateway};
    use crate::session_tasks::{line, ts_client_with};
    let gateway = start_stdio_gateway(&everything_cmd(), &["--defer-after-ms", "1500"]);
    let lines = ts_client_with(json!({"url": gateway.url, "noTasks": true, "steps": [
        {"do": "listTools"},
        {"do": "callToolFetchDeferred", "name": "trigger-long-running-operation",
         "arguments": {"duration": 4, "steps": 4}},
    ]}));
    let tools = &line(&lines, "tools")["tools"];
    assert!(
        tools.get("get_task_result").is_some() && tools.get("cancel_task").is_some(),
        "{tools}"
    );
    let first = &line(&lines, "first")["first"];
    deferred_task(first);
    let result = &line(&lines, "result")["result"];
    assert!(!is_deferred(result), "{result}");
    assert!(
        first_text(result).contains("Long running operation completed"),
        "{result}"
    );
}

/// The issue's case: a host with a fixed 60 s ceiling (the TypeScript SDK 1.x client's
/// default timeout), a tool that works 90 s. With `--defer-after-ms 20000` the client
/// gets a deferred result after about 20 s and then the tool's result; without the flag,
/// the test below shows the same client giving up at 60 s.
#[test]
fn a_90_s_tool_reaches_a_client_that_gives_up_after_60_s() {
    use crate::common::stdio::{everything_cmd, start_stdio_gateway};
    use crate::session_tasks::{line, ts_client_with};
    let gateway = start_stdio_gateway(&everything_cmd(), &["--defer-after-ms", "20000"]);
    let started = Instant::now();
    let lines = ts_client_with(json!({"url": gateway.url, "noTasks": true, "steps": [
        {"do": "callToolFetchDeferred", "name": "trigger-long-running-operation",
         "arguments": {"duration": 90, "steps": 9}},
    ]}));
    deferred_task(&line(&lines, "first")["first"]);
    let result = &line(&lines, "result")["result"];
    assert!(
        first_text(result).contains("Long running operation completed"),
        "{lines:#?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(90), "{lines:#?}");
}

#[test]
fn without_deferral_the_same_client_gives_up_on_a_90_s_tool_at_60_s() {
    use crate::common::stdio::{everything_cmd, start_stdio_gateway};
    use crate::session_tasks::{line, ts_client_with};
    let gateway = start_stdio_gateway(&everything_cmd(), &[]);
    let lines = ts_client_with(json!({"url": gateway.url, "noTasks": true, "steps": [
        {"do": "callTool", "name": "trigger-long-running-operation",
         "arguments": {"duration": 90, "steps": 9}},
    ]}));
    let error = &line(&lines, "error")["error"];
    assert_eq!(error["code"], -32001, "{lines:#?}");
}

/// A `forbidden` tool never runs as a task, so it is not deferred either: its call waits
/// for its result, as without the flag (2026-07-28 client and gateway-served session).
#[tokio::test]
async fn a_forbidden_tool_is_not_deferred() {
    let (_upstream, upstream_url) = start_plain_server();
    let flags = [
        "--defer-after-ms",
        "300",
        "--tool-policy",
        "sleep=forbidden",
    ];
    let (_gateway, url) = start_gateway(&upstream_url, &flags);
    let result = plain_client(&url)
        .call_tool("sleep", json!({"ms": 1200, "steps": 0}))
        .await;
    assert!(!is_deferred(result.result()), "{}", result.body);
    assert!(first_text(result.result()).contains("slept"));

    use crate::common::stdio::{everything_cmd, start_stdio_gateway};
    use crate::session_tasks::{line, ts_client_with};
    let flags = [
        "--defer-after-ms",
        "300",
        "--tool-policy",
        "trigger-long-running-operation=forbidden",
    ];
    let gateway = start_stdio_gateway(&everything_cmd(), &flags);
    let lines = tokio::task::spawn_blocking(move || {
        ts_client_with(json!({"url": gateway.url, "noTasks": true, "steps": [
            {"do": "callToolFetchDeferred", "name": "trigger-long-running-operation",
             "arguments": {"duration": 1, "steps": 1}},
        ]}))
    })
    .await
    .expect("client ran");
    let first = &line(&lines, "first")["first"];
    assert!(!is_deferred(first), "{first}");
}

/// The TypeScript SDK 1.x client validates a result against the `outputSchema` it
/// listed and refuses a non-error result that lacks or contradicts it: the deferred
/// result of a slow tool with an outputSchema must pass, and so must the tool's own
/// (a TypeScript SDK server over stdio, sessions served by the gateway).
#[test]
fn the_typescript_sdk_accepts_a_deferred_result_of_a_tool_with_an_output_schema() {
    use crate::common::stdio::start_stdio_gateway;
    use crate::session_tasks::ts_client_with;
    let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/stop_probe_server.mjs");
    let command = format!(
        "node {} --mode stdio --stats-port {}",
        server.display(),
        free_port()
    );
    let gateway = start_stdio_gateway(&command, &["--defer-after-ms", "500"]);
    let lines = ts_client_with(json!({"url": gateway.url, "noTasks": true, "steps": [
        {"do": "listTools"},
        {"do": "callToolFetchDeferred", "name": "slow_structured",
         "arguments": {"text": "typed", "ms": 2000}},
        {"do": "callToolFetchDeferred", "name": "sleep", "arguments": {"ms": 2000}},
    ]}));
    assert!(
        lines.iter().all(|l| l.get("error").is_none()),
        "the SDK refused a result: {lines:#?}"
    );
    let firsts: Vec<&Value> = lines.iter().filter_map(|l| l.get("first")).collect();
    let results: Vec<&Value> = lines.iter().filter_map(|l| l.get("result")).collect();
    assert_eq!((firsts.len(), results.len()), (2, 2), "{lines:#?}");
    // With an outputSchema: structuredContent that validates and carries the words.
    deferred_task(firsts[0]);
    assert_eq!(firsts[0]["structuredContent"]["status"], "working");
    assert_eq!(
        results[0]["structuredContent"]["echo"], "typed",
        "{lines:#?}"
    );
    // Without one: the words alone, which every host shows its model.
    deferred_task(firsts[1]);
    assert!(firsts[1].get("structuredContent").is_none(), "{lines:#?}");
    assert_eq!(first_text(results[1]), "slept 2000 ms", "{lines:#?}");
}

/// A model that follows each answer's words never sends the same fetch twice: a tool
/// that works 10 minutes, deferred after 2 s, is fetched as each answer says. The first
/// fetches are made exactly as named (each waits the 2 s budget); the rest add
/// `"waitSeconds": 0` to go through the 300 answers such a call gets in seconds.
#[tokio::test]
async fn successive_fetches_of_a_ten_minute_call_are_never_alike() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "2000"]);
    let client = plain_client(&url);
    let first = client
        .call_tool("sleep", json!({"ms": 600_000, "steps": 0}))
        .await;
    let task_id = deferred_task(first.result());
    let mut calls: Vec<Value> = Vec::new();
    let mut answer = first.result().clone();
    for round in 0..300 {
        let (tool, mut arguments) = next_call(&answer);
        assert_eq!(tool, "get_task_result");
        assert_eq!(arguments["taskId"], task_id.as_str());
        assert_ne!(
            calls.last(),
            Some(&arguments),
            "the same fetch twice: {answer}"
        );
        calls.push(arguments.clone());
        if round >= 3 {
            arguments["waitSeconds"] = json!(0);
        }
        let started = Instant::now();
        answer = get_task_result(&client, arguments).await;
        if round < 3 {
            assert!(
                started.elapsed() >= Duration::from_millis(1900),
                "round {round}"
            );
        }
        assert_eq!(deferred_task(&answer), task_id, "round {round}");
        assert!(answer.get("structuredContent").is_none(), "{answer}");
    }
    let distinct: std::collections::HashSet<String> = calls.iter().map(Value::to_string).collect();
    assert_eq!(distinct.len(), calls.len(), "every fetch differs");
    // A fetch that names an old attempt, or none, still gets the task.
    for stale in [
        json!({"taskId": task_id, "attempt": 1, "waitSeconds": 0}),
        json!({"taskId": task_id, "waitSeconds": 0}),
    ] {
        let answer = get_task_result(&client, stale.clone()).await;
        assert_eq!(deferred_task(&answer), task_id, "{stale}");
    }
    let cancelled = client
        .call_tool("cancel_task", json!({"taskId": task_id}))
        .await;
    assert_eq!(cancelled.result()["isError"], false, "{}", cancelled.body);
}

/// `waitSeconds` above the budget is honoured up to `--deferred-max-wait-ms`: one fetch
/// of a 6 s tool deferred after 1 s gets its result; without the flag the same fetch
/// waits the budget only.
#[tokio::test]
async fn a_fetch_waits_longer_than_the_budget_up_to_the_operators_cap() {
    let (_upstream, upstream_url) = start_plain_server();
    let flags = ["--defer-after-ms", "1000", "--deferred-max-wait-ms", "8000"];
    let (_gateway, url) = start_gateway(&upstream_url, &flags);
    let client = plain_client(&url);

    let listed = client.request("tools/list", json!({})).await;
    let tools = listed.result()["tools"].as_array().expect("tools").clone();
    let get = tools
        .iter()
        .find(|t| t["name"] == "get_task_result")
        .expect("listed");
    assert_eq!(
        get["inputSchema"]["properties"]["waitSeconds"]["maximum"],
        8
    );

    let first = client
        .call_tool("sleep", json!({"ms": 6000, "steps": 0}))
        .await;
    let task_id = deferred_task(first.result());
    assert!(first_text(first.result()).contains("\"waitSeconds\" (up to 8)"));
    let started = Instant::now();
    let result = get_task_result(&client, json!({"taskId": task_id, "waitSeconds": 60})).await;
    assert_eq!(first_text(&result), "slept 6000 ms", "{result}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // Without the flag, the cap is the budget: the same ask waits 1 s and defers again.
    let (_plain, plain_url) = start_gateway(&upstream_url, &["--defer-after-ms", "1000"]);
    let client = plain_client(&plain_url);
    let first = client
        .call_tool("sleep", json!({"ms": 6000, "steps": 0}))
        .await;
    let task_id = deferred_task(first.result());
    assert!(!first_text(first.result()).contains("waitSeconds"));
    let started = Instant::now();
    let again = get_task_result(&client, json!({"taskId": task_id, "waitSeconds": 60})).await;
    assert_eq!(deferred_task(&again), task_id);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

/// Session clients passed through to a 2025-xx HTTP upstream's own sessions (the fixture
/// `plain_server`): the gateway watches a plain `tools/call` and defers it past the
/// budget; the TypeScript SDK 1.x client without tasks, with its default options.
mod pass_through {
    use super::*;
    use crate::common::session::{SessionClient, read_messages};
    use crate::session_tasks::{line, ts_client_with};

    #[test]
    fn a_session_client_gets_a_deferred_result_then_the_tools_own() {
        let (_upstream, upstream_url) = start_plain_server();
        let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "1500"]);
        let lines = ts_client_with(json!({"url": url, "noTasks": true, "steps": [
            {"do": "listTools"},
            {"do": "callToolFetchDeferred", "name": "sleep", "arguments": {"ms": 4000, "steps": 0}},
        ]}));
        let tools = &line(&lines, "tools")["tools"];
        assert!(
            tools.get("get_task_result").is_some() && tools.get("cancel_task").is_some(),
            "{tools}"
        );
        deferred_task(&line(&lines, "first")["first"]);
        let result = &line(&lines, "result")["result"];
        assert_eq!(first_text(result), "slept 4000 ms", "{lines:#?}");
        let stats = tokio_block_on(upstream_stats(&upstream_url));
        assert_eq!(
            stats["callsStarted"], 1,
            "get_task_result never reached the upstream: {stats}"
        );
    }

    /// The issue's case over an HTTP session upstream: a 90 s silent tool, the client's
    /// fixed 60 s ceiling, `--defer-after-ms 20000`.
    #[test]
    fn a_90_s_tool_reaches_a_client_that_gives_up_after_60_s_through_a_pass_through_session() {
        let (_upstream, upstream_url) = start_plain_server();
        let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "20000"]);
        let started = Instant::now();
        let lines = ts_client_with(json!({"url": url, "noTasks": true, "steps": [
            {"do": "callToolFetchDeferred", "name": "sleep", "arguments": {"ms": 90000, "steps": 0}},
        ]}));
        deferred_task(&line(&lines, "first")["first"]);
        let result = &line(&lines, "result")["result"];
        assert_eq!(first_text(result), "slept 90000 ms", "{lines:#?}");
        assert!(started.elapsed() >= Duration::from_secs(90), "{lines:#?}");
    }

    #[test]
    fn without_deferral_the_same_client_gives_up_on_a_90_s_tool_through_a_pass_through_session() {
        let (_upstream, upstream_url) = start_plain_server();
        let (_gateway, url) = start_gateway(&upstream_url, &[]);
        let lines = ts_client_with(json!({"url": url, "noTasks": true, "steps": [
            {"do": "callTool", "name": "sleep", "arguments": {"ms": 90000, "steps": 0}},
        ]}));
        assert_eq!(line(&lines, "error")["error"]["code"], -32001, "{lines:#?}");
    }

    /// The raw bodies of a session's quick calls: an `echo`, and a `sleep` that reports
    /// progress under the client's token.
    async fn quick_bodies(url: &str) -> Vec<String> {
        let mut client = SessionClient::new(url);
        client.initialize("2025-11-25", json!({})).await;
        let calls = [
            json!({"name": "echo", "arguments": {"text": "hi"}}),
            json!({"name": "sleep", "arguments": {"ms": 300, "steps": 3},
                   "_meta": {"progressToken": "p-7"}}),
        ];
        let mut bodies = Vec::new();
        let list = json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}});
        let listed = read_messages(client.post(list).await).await;
        let tools = listed[0]["result"]["tools"]
            .as_array()
            .expect("tools")
            .clone();
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        bodies.push(format!(
            "get_task_result listed: {}",
            names.contains(&"get_task_result")
        ));
        for (n, params) in calls.into_iter().enumerate() {
            let body =
                json!({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call", "params": params});
            let response = client.post(body).await;
            bodies.push(response.text().await.expect("a body"));
        }
        bodies
    }

    #[tokio::test]
    async fn a_quick_call_is_answered_to_the_byte_as_without_the_flags() {
        let (_upstream, upstream_url) = start_plain_server();
        let (_watching, url) = start_gateway(&upstream_url, &["--defer-after-ms", "5000"]);
        let flags = ["--progress-keepalive-ms", "0"];
        let (_plain, plain_url) = start_gateway(&upstream_url, &flags);
        let mut watched = quick_bodies(&url).await;
        let mut plain = quick_bodies(&plain_url).await;
        // Only with the flag does tools/list name the gateway's tools.
        assert_eq!(watched.remove(0), "get_task_result listed: true");
        assert_eq!(plain.remove(0), "get_task_result listed: false");
        assert_eq!(watched, plain);
        assert!(
            watched[0].contains(r#""echo":{"text":"hi"}"#),
            "{watched:?}"
        );
        assert_eq!(
            watched[1].matches(r#""progressToken":"p-7""#).count(),
            3,
            "{watched:?}"
        );
    }

    /// The upstream asks after the deferral: the TypeScript client's elicitation handler
    /// gets the question on `get_task_result`'s stream, and the answer reaches the
    /// upstream once.
    #[test]
    fn a_question_after_the_deferral_is_answered_through_get_task_result_once() {
        let (_upstream, upstream_url) = start_plain_server();
        let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "500"]);
        let lines = ts_client_with(json!({"url": url, "noTasks": true, "steps": [
            {"do": "callToolFetchDeferred", "name": "wait_then_ask", "arguments": {"ms": 1500}},
        ]}));
        deferred_task(&line(&lines, "first")["first"]);
        line(&lines, "elicited");
        let result = &line(&lines, "result")["result"];
        assert_eq!(first_text(result), "Hello, Ada!", "{lines:#?}");
        let stats = tokio_block_on(upstream_stats(&upstream_url));
        assert_eq!(responses_received(&stats), [1], "{stats}");
    }

    /// A session client's deferred call, fetched and cancelled from another instance
    /// (Redis): the same session id through gateway B.
    #[tokio::test]
    async fn a_deferred_call_is_fetched_and_cancelled_through_another_instance() {
        let redis = RedisServer::start();
        let (_upstream, upstream_url) = start_plain_server();
        let shared = ["--defer-after-ms", "500", "--redis", &redis.url()];
        let (_a, url_a) = start_gateway(&upstream_url, &shared);
        let (_b, url_b) = start_gateway(&upstream_url, &shared);
        let mut on_a = SessionClient::new(&url_a);
        on_a.initialize("2025-11-25", json!({})).await;
        let mut on_b = on_a.clone();
        on_b.url = url_b;

        let call = |client: &SessionClient, id: u64, name: &str, arguments: Value| {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": name, "arguments": arguments}});
            let client = client.clone();
            async move {
                let messages = read_messages(client.post(body).await).await;
                let answer = messages
                    .into_iter()
                    .find(|m| m["id"] == id)
                    .expect("an answer");
                answer["result"].clone()
            }
        };
        let first = call(&on_a, 1, "sleep", json!({"ms": 2500, "steps": 0})).await;
        let task_id = deferred_task(&first);
        let mut id = 2;
        let result = loop {
            let result = call(&on_b, id, "get_task_result", json!({"taskId": task_id})).await;
            id += 1;
            if !is_deferred(&result) {
                break result;
            }
        };
        assert_eq!(first_text(&result), "slept 2500 ms", "{result}");

        let long = call(&on_a, 100, "sleep", json!({"ms": 60000, "steps": 0})).await;
        let long_id = deferred_task(&long);
        let cancelled = call(&on_b, 101, "cancel_task", json!({"taskId": long_id})).await;
        assert_eq!(cancelled["isError"], false, "{cancelled}");
        eventually("the upstream hears the cancel from the owner", || async {
            let stats = upstream_stats(&upstream_url).await;
            (cancels_heard(&stats) == 1 && stats["callsInFlight"] == 0).then_some(())
        })
        .await;
    }

    /// A session that declared `capabilities.tasks` (its id marked by the gateway) and
    /// calls a tool without `params.task`: deferred the same way; `tools/list` keeps
    /// each tool's task support and gains the gateway's tools; the deferral and the
    /// tool calls are counted.
    #[tokio::test]
    async fn a_session_that_declared_tasks_gets_a_deferred_result_for_a_plain_call() {
        let (_upstream, upstream_url) = start_plain_server();
        let metrics_port = free_port();
        let listen = format!("127.0.0.1:{metrics_port}");
        let flags = ["--defer-after-ms", "500", "--metrics-listen", &listen];
        let (_gateway, url) = start_gateway(&upstream_url, &flags);
        let mut session = SessionClient::new(&url);
        session
            .initialize("2025-11-25", json!({"tasks": {"list": {}, "cancel": {}}}))
            .await;
        assert!(
            session
                .session
                .as_deref()
                .is_some_and(|id| id.starts_with("mtg-t.")),
            "{:?}",
            session.session
        );
        let request = |id: u64, method: &str, params: Value| {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            let session = session.clone();
            async move {
                let messages = read_messages(session.post(body).await).await;
                let answer = messages
                    .into_iter()
                    .find(|m| m["id"] == id)
                    .expect("an answer");
                answer["result"].clone()
            }
        };
        let listed = request(1, "tools/list", json!({})).await;
        let tools = listed["tools"].as_array().expect("tools");
        let sleep = tools.iter().find(|t| t["name"] == "sleep").expect("sleep");
        assert_eq!(sleep["execution"]["taskSupport"], "optional", "{sleep}");
        assert!(
            tools.iter().any(|t| t["name"] == "get_task_result"),
            "{listed}"
        );

        let call = json!({"name": "sleep", "arguments": {"ms": 2000, "steps": 0}});
        let first = request(2, "tools/call", call).await;
        let task_id = deferred_task(&first);
        let mut id = 3;
        let result = loop {
            let fetch = json!({"name": "get_task_result", "arguments": {"taskId": task_id}});
            let result = request(id, "tools/call", fetch).await;
            id += 1;
            if !is_deferred(&result) {
                break result;
            }
        };
        assert_eq!(first_text(&result), "slept 2000 ms", "{result}");
        let metrics = scrape_metrics(metrics_port).await;
        assert_eq!(
            metric_sample(&metrics, "mtg_deferred_calls_total"),
            Some(1.0),
            "{metrics}"
        );
    }

    fn tokio_block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(future)
    }
}
