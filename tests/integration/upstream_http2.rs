//! `--upstream-http2`: the gateway's own calls to `plain_server` (hyper's auto server,
//! which speaks HTTP/1.1 and h2c) as HTTP/2 streams on a pool of connections.

use std::process::Command;

use crate::common::*;
use serde_json::{Value, json};

/// `plain_server` with extra flags (`--h2-max-streams N`, `--http1-only`).
fn start_plain_server_with(flags: &[&str]) -> (Proc, String) {
    let mut command = Command::new(plain_server_binary());
    command.args(["--listen", "127.0.0.1:0"]).args(flags);
    spawn_announcing("plain_server", command)
}

/// `POST /mcp` requests the upstream got over HTTP/1.1 and over HTTP/2.
fn posts_by_version(stats: &Value) -> (u64, u64) {
    let count = |version: &str| stats["postsByVersion"][version].as_u64().unwrap_or(0);
    (count("HTTP/1.1"), count("HTTP/2.0"))
}

struct Setup {
    upstream: Proc,
    upstream_url: String,
    _gateway: Proc,
    client: Client,
}

fn setup(upstream_flags: &[&str], gateway_flags: &[&str]) -> Setup {
    let (upstream, upstream_url) = start_plain_server_with(upstream_flags);
    let (gateway, url) = start_gateway(&upstream_url, gateway_flags);
    Setup {
        upstream,
        upstream_url,
        _gateway: gateway,
        client: Client::with_tasks(&url),
    }
}

#[tokio::test]
async fn tasks_complete_over_http2_and_every_post_is_http2() {
    let s = setup(&[], &["--upstream-http2"]);
    let task_id = s
        .client
        .start_task("echo", json!({"text": "over h2"}))
        .await;
    let done = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&done["result"]), "over h2");
    // A forwarded request (no task) takes the same pool.
    let listed = s.client.request("tools/list", json!({})).await;
    assert!(listed.result()["tools"].is_array(), "{:?}", listed.body);

    let stats = upstream_stats(&s.upstream_url).await;
    let (http1, http2) = posts_by_version(&stats);
    assert_eq!(http1, 0, "no POST over HTTP/1.1: {stats}");
    // initialize, initialized, the call, tools/list at least.
    assert!(http2 >= 4, "{stats}");
}

#[tokio::test]
async fn input_requests_are_answered_over_http2() {
    let s = setup(&[], &["--upstream-http2"]);
    let task_id = s.client.start_task("ask_name", json!({})).await;
    let waiting = s.client.wait_status(&task_id, "input_required").await;
    let (key, request) = only_input_request(&waiting);
    assert_eq!(request["method"], "elicitation/create");
    let answer = json!({key.as_str(): {"action": "accept", "content": {"name": "Ada"}}});
    assert_eq!(
        s.client.update(&task_id, answer).await.result(),
        &gateway_ack()
    );
    let done = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&done["result"]), "Hello, Ada!");
    let stats = upstream_stats(&s.upstream_url).await;
    assert_eq!(responses_received(&stats), vec![1]);
    assert_eq!(posts_by_version(&stats).0, 0, "{stats}");
}

#[tokio::test]
async fn cancel_reaches_the_upstream_over_http2() {
    let s = setup(&[], &["--upstream-http2"]);
    let task_id = s.client.start_task("sleep", json!({"ms": 60000})).await;
    eventually("the sleep runs upstream", || async {
        let stats = upstream_stats(&s.upstream_url).await;
        (stats["callsInFlight"] == 1).then_some(())
    })
    .await;
    assert_eq!(s.client.cancel(&task_id).await.result(), &gateway_ack());
    s.client.wait_status(&task_id, "cancelled").await;
    // Both ways of stopping reach the server: the notification, and the stream's reset
    // (the call's future is dropped, so it is no longer in flight).
    let stats = eventually("the call stopped upstream", || async {
        let stats = upstream_stats(&s.upstream_url).await;
        (stats["callsInFlight"] == 0 && !stats["cancelledReceived"].as_array().unwrap().is_empty())
            .then_some(stats)
    })
    .await;
    assert_eq!(stats["cancelledReceived"].as_array().unwrap().len(), 1);
    assert_eq!(posts_by_version(&stats).0, 0, "{stats}");
}

/// A server caps the streams of one connection; the pool opens another connection
/// rather than let a held call wait behind the others.
#[tokio::test]
async fn held_calls_past_one_connections_stream_cap_all_run_upstream_at_once() {
    const CAP: usize = 8;
    const CALLS: usize = 3 * CAP + 2;
    let cap = CAP.to_string();
    let s = setup(
        &["--h2-max-streams", &cap],
        &["--upstream-http2", "--upstream-http2-max-streams", &cap],
    );
    let mut tasks = Vec::new();
    for _ in 0..CALLS {
        tasks.push(s.client.start_task("sleep", json!({"ms": 60000})).await);
    }
    let stats = eventually("every held call in flight upstream", || async {
        let stats = upstream_stats(&s.upstream_url).await;
        (stats["callsInFlight"] == CALLS as u64).then_some(stats)
    })
    .await;
    // CALLS streams and the session's GET stream, CAP a connection.
    let connections = stats["connectionsAccepted"].as_u64().unwrap();
    assert!(
        connections >= (CALLS + 1).div_ceil(CAP) as u64,
        "{connections} connections for {CALLS} calls: {stats}"
    );
    assert_eq!(posts_by_version(&stats).0, 0, "{stats}");
    for task_id in &tasks {
        assert_eq!(s.client.get_task(task_id).await["status"], "working");
    }
}

#[tokio::test]
async fn an_http1_only_upstream_with_the_flag_fails_the_call_clearly() {
    let s = setup(&["--http1-only"], &["--upstream-http2"]);
    // The first call detects the upstream's generation, over HTTP/2: it fails at once
    // (as a task, or as the call's error), saying why, and does not hang.
    let reply = s.client.call_tool("echo", json!({"text": "x"})).await;
    let message = match reply.body.get("error") {
        Some(error) => error["message"].as_str().unwrap().to_owned(),
        None => {
            let task_id = reply.result()["taskId"].as_str().unwrap().to_owned();
            let failed = s.client.wait_status(&task_id, "failed").await;
            status_message(&failed).to_owned()
        }
    };
    assert!(
        message.contains("HTTP/2") && message.contains("HTTP/1.1 only"),
        "{message}"
    );
}

#[tokio::test]
async fn a_lost_upstream_connection_fails_held_calls_instead_of_hanging() {
    let mut s = setup(&[], &["--upstream-http2"]);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(s.client.start_task("sleep", json!({"ms": 60000})).await);
    }
    eventually("the sleeps run upstream", || async {
        let stats = upstream_stats(&s.upstream_url).await;
        (stats["callsInFlight"] == 3).then_some(())
    })
    .await;
    s.upstream.kill();
    for task_id in &tasks {
        let failed = s.client.wait_status(task_id, "failed").await;
        assert!(status_message(&failed).contains("upstream"), "{failed}");
    }
}

#[tokio::test]
async fn without_the_flag_the_calls_stay_on_http1() {
    let s = setup(&[], &[]);
    let task_id = s.client.start_task("echo", json!({"text": "h1"})).await;
    s.client.wait_status(&task_id, "completed").await;
    let stats = upstream_stats(&s.upstream_url).await;
    let (http1, http2) = posts_by_version(&stats);
    assert!(http1 >= 3 && http2 == 0, "{stats}");
}

/// `upstream-http2` in an `[upstreams.NAME]` entry applies to that upstream only.
#[tokio::test]
async fn a_named_upstream_sets_http2_for_itself() {
    let (_h2, h2_url) = start_plain_server_with(&[]);
    let (_h1, h1_url) = start_plain_server_with(&[]);
    let dir = std::env::temp_dir().join(format!("mtg-h2-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[upstreams.fast]\nurl = \"{h2_url}\"\nupstream-http2 = true\n\
             upstream-http2-max-streams = 50\n\
             [upstreams.plain]\nurl = \"{h1_url}\"\n"
        ),
    )
    .unwrap();
    let command = gateway_command(&["--config", config.to_str().unwrap()], &[], "warn");
    let (_gateway, base) = spawn_announcing("mcp-task-gateway", command);
    for (name, upstream_url, over_http2) in [("fast", &h2_url, true), ("plain", &h1_url, false)] {
        let client = Client::with_tasks(&format!("{base}/{name}"));
        let task_id = client.start_task("echo", json!({"text": name})).await;
        client.wait_status(&task_id, "completed").await;
        let stats = upstream_stats(upstream_url).await;
        let (http1, http2) = posts_by_version(&stats);
        assert_eq!(
            (http1 == 0, http2 > 0),
            (over_http2, over_http2),
            "{name}: {stats}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
