//! 2025-11-25 session clients pass through the gateway unchanged: initialize,
//! SSE responses, server-to-client requests with the client's answers, GET and DELETE.

use crate::common::session::*;
use crate::common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use sse_stream::SseStream;

/// Opens a session the way a 2025-11-25 client with elicitation does.
async fn initialize(client: &mut SessionClient) {
    let result = client
        .initialize("2025-11-25", json!({"elicitation": {"form": {}}}))
        .await;
    assert_eq!(result["serverInfo"]["name"], "plain-server");
}

/// The fixture, the gateway in front of it, and an initialized client session through it.
async fn session_through_gateway() -> ([Proc; 2], SessionClient) {
    let (upstream, upstream_url) = start_plain_server();
    let (gateway, url) = start_gateway(&upstream_url, &[]);
    let mut client = SessionClient::new(&url);
    initialize(&mut client).await;
    ([gateway, upstream], client)
}

/// A `tools/call` of the fixture's `sleep` for `ms`, with three progress notifications
/// on the way (after each third).
fn sleep_with_progress(id: u64, ms: u64, token: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": ms, "steps": 3},
        "_meta": {"progressToken": token}
    }})
}

#[tokio::test]
async fn a_client_session_works_through_the_gateway() {
    let (_processes, client) = session_through_gateway().await;

    let list = read_messages(
        client
            .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .await,
    )
    .await;
    let tools = list.last().unwrap()["result"]["tools"]
        .as_array()
        .unwrap()
        .clone();
    assert!(tools.iter().any(|t| t["name"] == "ask_name"));
    // Pass-through: no 2026 fields are added for session clients.
    assert!(list.last().unwrap()["result"].get("resultType").is_none());

    // A server-to-client request reaches the client on the call's stream, and the
    // client's answer reaches the upstream.
    let response = client.post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask_name", "arguments": {}}})).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = SseStream::from_bytes_stream(response.bytes_stream());
    let request: Value = loop {
        let event = stream.next().await.expect("elicitation").unwrap();
        if let Some(data) = event.data.filter(|d| !d.trim().is_empty()) {
            break serde_json::from_str(&data).unwrap();
        }
    };
    assert_eq!(request["method"], "elicitation/create");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"name": "Grace"}}});
    assert_eq!(client.post(answer).await.status(), 202);
    let result: Value = loop {
        let event = stream.next().await.expect("result").unwrap();
        if let Some(data) = event.data.filter(|d| !d.trim().is_empty()) {
            break serde_json::from_str(&data).unwrap();
        }
    };
    assert_eq!(result["id"], 2);
    assert_eq!(result["result"]["content"][0]["text"], "Hello, Grace!");

    // GET opens the standalone stream; DELETE ends the session.
    let get = client.get().await;
    assert_eq!(get.status(), 200);
    assert_eq!(get.headers()["content-type"], "text/event-stream");
    drop(get);
    let delete = client.delete().await;
    assert_eq!(delete.status(), 200);
    let after = client
        .post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
        .await;
    assert_eq!(after.status(), 404);
}

#[tokio::test]
async fn client_session_against_server_everything() {
    let (_upstream, upstream_url) = start_everything();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let mut client = SessionClient::new(&url);
    let result = client.initialize("2025-11-25", json!({})).await;
    assert_eq!(result["serverInfo"]["name"], "mcp-servers/everything");
    let echo = read_messages(
        client
            .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "pass"}}}))
            .await,
    )
    .await;
    assert_eq!(
        echo.last().unwrap()["result"]["content"][0]["text"],
        "Echo: pass"
    );
}

/// The gateway writes a quick answer in one piece (head, event and end together), but a
/// stream that stays open must still reach the client as it goes, not at its end.
#[tokio::test]
async fn progress_of_a_pass_through_call_streams_through_as_it_happens() {
    let (_processes, client) = session_through_gateway().await;

    // Progress after 500, 1000 and 1500 ms; the result right after the last one.
    let response = client.post(sleep_with_progress(7, 1500, "p-1")).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = SseStream::from_bytes_stream(response.bytes_stream());
    let mut arrivals = Vec::new();
    let deadline = std::time::Duration::from_secs(20);
    while let Some(event) = tokio::time::timeout(deadline, stream.next())
        .await
        .expect("the stream ends within the deadline")
    {
        if let Some(data) = event.unwrap().data.filter(|d| !d.trim().is_empty()) {
            let message: Value = serde_json::from_str(&data).unwrap();
            arrivals.push((std::time::Instant::now(), message));
        }
    }
    let progress: Vec<_> = arrivals
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{arrivals:?}");
    assert_eq!(progress[0].1["params"]["progressToken"], "p-1");
    let (result_at, result) = arrivals.last().unwrap();
    assert_eq!(result["id"], 7);
    assert_eq!(result["result"]["content"][0]["text"], "slept 1500 ms");
    // Held or batched, the first progress would arrive with the result.
    let lead = result_at.duration_since(progress[0].0);
    assert!(
        lead >= std::time::Duration::from_millis(600),
        "first progress only {lead:?} before the result"
    );
}

/// Each client connection keeps its own connection to the upstream. When the upstream
/// goes away, the client's connection gets a clear error, and once the upstream is back
/// (on the same address) the upstream's own answers again.
#[tokio::test]
async fn a_client_connection_outlives_an_upstream_restart() {
    let (mut upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let mut client = SessionClient::new(&url);
    initialize(&mut client).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(client.post(list.clone()).await.status(), 200);

    upstream.kill();
    let down = client.post(list.clone()).await;
    assert_eq!(down.status(), 502);
    let error: Value = down.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("upstream unreachable"),
        "{error}"
    );

    let listen = upstream_url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp");
    let (_upstream, _) = start_plain_server_at(listen);
    // The new process does not know the old session, and says so itself.
    assert_eq!(client.post(list.clone()).await.status(), 404);
    client.session = None;
    initialize(&mut client).await;
    let tools = read_messages(client.post(list).await).await;
    assert!(tools.last().unwrap()["result"]["tools"].is_array());
}

/// An HTTP/2 client sends its calls on one connection at once: a call that streams for
/// seconds does not hold up the others behind it.
#[tokio::test]
async fn an_http2_client_is_not_held_up_by_its_own_slow_call() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let mut client = SessionClient::new(&url);
    client.http = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    initialize(&mut client).await;

    // Progress every second: the response (and the upstream connection under it) is
    // open from the first event to the result at 3 s.
    let slow = client.post(sleep_with_progress(2, 3000, "slow")).await;
    assert_eq!(slow.status(), 200);
    let quick = tokio::time::timeout(
        DEADLINE,
        client.post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})),
    )
    .await
    .expect("the quick call is answered while the slow one streams");
    let quick = read_messages(quick).await;
    let quick_done = std::time::Instant::now();
    assert!(quick.last().unwrap()["result"]["tools"].is_array());

    let slow = read_messages(slow).await;
    let slow_done = std::time::Instant::now();
    assert_eq!(
        slow.last().unwrap()["result"]["content"][0]["text"],
        "slept 3000 ms"
    );
    assert!(
        slow_done.duration_since(quick_done) >= std::time::Duration::from_millis(500),
        "the quick call ended only {:?} before the slow one",
        slow_done.duration_since(quick_done)
    );
}
