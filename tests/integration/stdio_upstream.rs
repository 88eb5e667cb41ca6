//! The gateway in front of stdio upstreams it starts itself: the pinned
//! `@modelcontextprotocol/server-everything` (a 2025-11-25 server) and
//! `tests/fixtures/junk_stdio_server.py` (garbage on stdout; 2025-xx or 2026-07-28).

use std::time::Instant;

use crate::common::session::*;
use crate::common::stdio::*;
use crate::common::*;
use serde_json::{Value, json};

fn everything(extra: &[&str]) -> (StdioGateway, Client) {
    let gateway = start_stdio_gateway(&everything_cmd(), extra);
    let client = Client::with_tasks(&gateway.url);
    (gateway, client)
}

fn result_text(task: &Value) -> String {
    task["result"]["content"].to_string()
}

#[tokio::test]
async fn fifty_concurrent_calls_share_one_process_and_land_on_their_tasks() {
    let (gateway, client) = everything(&[]);
    let started = futures_util::future::join_all((0..50).map(|i| {
        let client = client.clone();
        async move {
            let message = format!("message number {i}");
            let task_id = client.start_task("echo", json!({"message": message})).await;
            (task_id, message)
        }
    }))
    .await;
    for (task_id, message) in &started {
        let done = client.wait_status(task_id, "completed").await;
        assert_eq!(first_text(&done["result"]), format!("Echo: {message}"));
    }
    assert_eq!(
        gateway.children().len(),
        1,
        "echo calls need no process of their own"
    );
}

#[tokio::test]
async fn calls_run_concurrently_on_one_process() {
    let (gateway, client) = everything(&[]);
    let mut tasks = Vec::new();
    for _ in 0..5 {
        tasks.push(
            client
                .start_task(
                    "trigger-long-running-operation",
                    json!({"duration": 4, "steps": 4}),
                )
                .await,
        );
    }
    // Run one after another, the last would report progress only after the first
    // finished; together, all report progress while none has finished.
    let start = Instant::now();
    loop {
        let states = futures_util::future::join_all(tasks.iter().map(|t| client.get_task(t))).await;
        assert!(
            states.iter().all(|t| t["status"] == "working"),
            "a call finished before all had started: {states:?}"
        );
        if states.iter().all(|t| t["statusMessage"].is_string()) {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "not all calls made progress");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(gateway.children().len(), 1);
    for task in &tasks {
        client.wait_status(task, "completed").await;
    }
}

#[tokio::test]
async fn concurrent_elicitations_each_reach_their_own_task() {
    let (gateway, client) = everything(&[]);
    // The first call teaches the gateway that this tool asks for input.
    let first = client
        .start_task("trigger-elicitation-request", json!({}))
        .await;
    let first_waiting = client.wait_status(&first, "input_required").await;
    // The second gets a process of its own, so its request is attributed with certainty.
    let second = client
        .start_task("trigger-elicitation-request", json!({}))
        .await;
    let second_waiting = client.wait_status(&second, "input_required").await;
    assert_eq!(gateway.children().len(), 2);
    let (first_key, _) = only_input_request(&first_waiting);
    let (second_key, _) = only_input_request(&second_waiting);
    let accept = |name: &str| json!({"action": "accept", "content": {"name": name}});
    client
        .update(
            &second,
            json!({second_key.as_str(): accept("Second Person")}),
        )
        .await
        .result();
    client
        .update(&first, json!({first_key.as_str(): accept("First Person")}))
        .await
        .result();
    let first_done = client.wait_status(&first, "completed").await;
    let second_done = client.wait_status(&second, "completed").await;
    assert!(
        result_text(&first_done).contains("First Person"),
        "{first_done}"
    );
    assert!(
        result_text(&second_done).contains("Second Person"),
        "{second_done}"
    );
}

#[tokio::test]
async fn an_unattributable_request_is_refused_never_guessed() {
    // One process: the elicitation arrives while another call is in flight.
    let (_gateway, client) = everything(&["--upstream-pool", "1"]);
    let busy = client.start_reporting_operation(3).await;
    let asking = client
        .start_task("trigger-elicitation-request", json!({}))
        .await;
    let refused = client
        .poll_until(&asking, |t| t["status"] != "working")
        .await;
    assert_eq!(refused["status"], "completed", "{refused}");
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        result_text(&refused).contains("does not guess"),
        "{refused}"
    );
    let busy_task = client.get_task(&busy).await;
    assert!(busy_task.get("inputRequests").is_none(), "{busy_task}");
    // Retried, the call waits for the process to be free of other calls and is asked.
    let retried = client
        .start_task("trigger-elicitation-request", json!({}))
        .await;
    let waiting = client.wait_status(&retried, "input_required").await;
    assert_eq!(client.get_task(&busy).await["status"], "completed");
    let (key, _) = only_input_request(&waiting);
    client
        .update(&retried, json!({key.as_str(): {"action": "decline"}}))
        .await
        .result();
    let done = client.wait_status(&retried, "completed").await;
    assert!(result_text(&done).contains("declined"), "{done}");
}

#[tokio::test]
async fn a_killed_process_fails_its_calls_and_is_restarted() {
    let (gateway, client) = everything(&[]);
    let task_id = client.start_reporting_operation(30).await;
    let children = gateway.wait_children(1);
    kill_pid(children[0]);
    let failed = client.wait_status(&task_id, "failed").await;
    let message = failed["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("upstream process exited with status 137 (signal 9)"),
        "{failed}"
    );
    let next = client
        .start_task("echo", json!({"message": "after the restart"}))
        .await;
    let done = client.wait_status(&next, "completed").await;
    assert_eq!(first_text(&done["result"]), "Echo: after the restart");
    let restarted = gateway.wait_children(1);
    assert_ne!(restarted, children);
    assert_eq!(gateway.readyz().await.0, 200);
}

#[tokio::test]
async fn a_crash_loop_shows_in_readyz_and_fails_calls_clearly() {
    let gateway = start_stdio_gateway("sh -c 'echo starting >&2; exit 3'", &[]);
    let client = Client::with_tasks(&gateway.url);
    let (status, body) = eventually("readyz to report the crash loop", || async {
        let (status, body) = gateway.readyz().await;
        (status == 503 && body.contains("keeps failing")).then_some((status, body))
    })
    .await;
    assert!(body.contains("exited with status 3"), "{status} {body}");
    gateway.wait_for_log(&["crash-looping"]);
    gateway.wait_for_log(&["upstream_stderr", "starting"]);
    let task_id = client.start_task("echo", json!({"message": "x"})).await;
    let failed = client.wait_status(&task_id, "failed").await;
    assert!(
        status_message(&failed).contains("exited with status 3"),
        "{failed}"
    );
}

#[tokio::test]
async fn junk_on_stdout_is_logged_and_skipped() {
    let gateway = start_stdio_gateway(&junk_server_cmd(""), &[]);
    let client = Client::with_tasks(&gateway.url);
    for i in 0..3 {
        let task_id = client
            .start_task("echo", json!({"message": format!("through junk {i}")}))
            .await;
        let done = client.wait_status(&task_id, "completed").await;
        assert_eq!(
            first_text(&done["result"]),
            format!("Echo: through junk {i}")
        );
    }
    gateway.wait_for_log(&["not a JSON-RPC message", "this line is not JSON"]);
    let tools = client.request("tools/list", json!({})).await;
    assert_eq!(tools.result()["tools"][0]["name"], "echo");
    let discover = client.request("server/discover", json!({})).await;
    assert_eq!(
        discover.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "junk-legacy"
    );
    assert_eq!(
        gateway.children().len(),
        1,
        "the process was never restarted"
    );
}

#[tokio::test]
async fn a_stateless_stdio_server_is_spoken_to_statelessly() {
    let gateway = start_stdio_gateway(&junk_server_cmd("--modern"), &[]);
    let client = Client::with_tasks(&gateway.url);
    let task_id = client.start_task("meta", json!({})).await;
    let done = client.wait_status(&task_id, "completed").await;
    let meta: Value = serde_json::from_str(first_text(&done["result"])).unwrap();
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"], STATELESS,
        "{meta}"
    );
    assert!(
        meta["io.modelcontextprotocol/clientCapabilities"]["elicitation"].is_object(),
        "{meta}"
    );
    let discover = client.request("server/discover", json!({})).await;
    assert_eq!(
        discover.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "junk-modern"
    );
    gateway.wait_for_log(&["speaks 2026-07-28"]);
}

#[tokio::test]
async fn session_clients_are_served_by_the_gateway() {
    let (gateway, _) = everything(&[]);
    let mut client = SessionClient::new(&gateway.url);
    let init = client
        .initialize("2025-06-18", json!({"elicitation": {}}))
        .await;
    assert_eq!(init["serverInfo"]["name"], "mcp-servers/everything");
    assert_eq!(init["protocolVersion"], "2025-06-18");

    // Requests are multiplexed onto the process; the answer carries the client's id.
    let echo = client
        .post(json!({"jsonrpc": "2.0", "id": "e-1", "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "session"}}}))
        .await;
    assert_eq!(echo.headers()["content-type"], "text/event-stream");
    let mut stream = sse_stream::SseStream::from_bytes_stream(echo.bytes_stream());
    let answer = next_message(&mut stream).await;
    assert_eq!(answer["id"], "e-1");
    assert_eq!(answer["result"]["content"][0]["text"], "Echo: session");

    // An upstream request goes out on the call's stream; the POSTed answer goes back.
    let call = client
        .post(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "trigger-elicitation-request", "arguments": {}}}))
        .await;
    let mut stream = sse_stream::SseStream::from_bytes_stream(call.bytes_stream());
    let request = next_message(&mut stream).await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"name": "Grace Hopper"}}});
    assert_eq!(client.post(answer).await.status(), 202);
    let result = next_message(&mut stream).await;
    assert_eq!(result["id"], 7);
    assert!(
        result["result"]["content"]
            .to_string()
            .contains("Grace Hopper"),
        "{result}"
    );

    // A client that declared no sampling is not asked for it: the upstream gets an error.
    let sampling = client
        .post(json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "trigger-sampling-request", "arguments": {"prompt": "hi"}}}))
        .await;
    let mut stream = sse_stream::SseStream::from_bytes_stream(sampling.bytes_stream());
    let result = next_message(&mut stream).await;
    assert_eq!(result["id"], 8, "{result}");
    assert_eq!(result["result"]["isError"], true, "{result}");

    let delete = client.delete().await;
    assert_eq!(delete.status(), 200);
    let after = client
        .post(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))
        .await;
    assert_eq!(after.status(), 404);
}
