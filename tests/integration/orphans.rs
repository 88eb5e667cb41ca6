//! No orphans: once the store has a task, its call runs to an end, whatever the client's
//! connection does while it asks (closed, half-closed, reset, the reply read halfway,
//! the request cut short), on the memory store and on Redis. And a 2026-07-28 client's
//! 2025-11-25 task markers never reach the upstream.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};
use test_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ADMIN_TOKEN: &str = "orphans-admin-token-0123456789";
/// Hang-ups per way of hanging up.
const ROUNDS: usize = 30;

/// How the client leaves.
#[derive(Debug, Clone, Copy)]
enum HangUp {
    /// The request, then the socket closed at once.
    Close,
    /// The request, then its write half shut; the reply is never read.
    HalfClose,
    /// The request, then an RST.
    Reset,
    /// The request, then the first bytes of the reply, then a close.
    MidReply,
    /// Half the head, then a close: no request at all.
    CutShort,
}

/// A 2026-07-28 `tools/call` of a short `sleep` with the tasks extension, as raw bytes.
fn raw_call(port: u16) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 200},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXT: {}}},
        }
    }})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: {STATELESS}\r\n\
         mcp-method: tools/call\r\nmcp-name: sleep\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn hang_up(port: u16, how: HangUp, delay: Duration) {
    let request = raw_call(port);
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    match how {
        HangUp::CutShort => {
            stream
                .write_all(&request[..request.len() / 4])
                .await
                .unwrap();
            tokio::time::sleep(delay).await;
        }
        HangUp::Close => {
            stream.write_all(&request).await.unwrap();
            tokio::time::sleep(delay).await;
        }
        HangUp::HalfClose => {
            stream.write_all(&request).await.unwrap();
            stream.shutdown().await.unwrap();
            tokio::time::sleep(delay).await;
        }
        HangUp::Reset => {
            stream.write_all(&request).await.unwrap();
            stream.set_zero_linger().unwrap();
            tokio::time::sleep(delay).await;
        }
        HangUp::MidReply => {
            stream.write_all(&request).await.unwrap();
            let mut first = [0u8; 8];
            let _ = stream.read(&mut first).await;
        }
    }
    drop(stream);
}

fn admin_args(admin_listen: &str, token: &std::path::Path) -> Vec<String> {
    vec![
        "--metrics-listen".into(),
        admin_listen.into(),
        "--admin-token-file".into(),
        token.display().to_string(),
    ]
}

/// Every task the gateway's store holds, through the admin API.
async fn stored_tasks(admin: &str) -> Vec<Value> {
    let mut tasks = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{admin}/admin/tasks?limit=500");
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let (status, page) = admin::request("GET", &url, ADMIN_TOKEN).await;
        assert_eq!(status, 200, "{page}");
        tasks.extend(page["tasks"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return tasks,
        }
    }
}

async fn hang_ups_leave_no_orphans(store: &[&str]) {
    let (_upstream, upstream_url) = start_plain_server();
    let admin_port = free_port();
    let admin_listen = format!("127.0.0.1:{admin_port}");
    let token = std::env::temp_dir().join(format!("mtg-orphans-{admin_port}"));
    std::fs::write(&token, ADMIN_TOKEN).unwrap();
    let mut flags: Vec<String> = admin_args(&admin_listen, &token);
    flags.extend(store.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (_gateway, url) = start_gateway(&upstream_url, &flags);
    let _ = std::fs::remove_file(&token);
    let port: u16 = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let admin = format!("http://{admin_listen}");

    let ways = [
        HangUp::Close,
        HangUp::HalfClose,
        HangUp::Reset,
        HangUp::MidReply,
        HangUp::CutShort,
    ];
    for round in 0..ROUNDS {
        // Each way at several moments: at once, and after 1 to 4 ms (within the store's
        // write on Redis).
        let delay = Duration::from_millis((round % 5) as u64);
        let hang_ups = ways.iter().map(|how| hang_up(port, *how, delay));
        futures_util::future::join_all(hang_ups).await;
    }

    // Every stored task ends (the calls take 200 ms), and each ran upstream.
    let start = Instant::now();
    let tasks = loop {
        let tasks = stored_tasks(&admin).await;
        let running = tasks.iter().filter(|t| t["status"] == "working").count();
        if running == 0 {
            break tasks;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{running} of {} stored tasks never ended",
            tasks.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        tasks.len() >= ROUNDS,
        "too few requests made tasks: {}",
        tasks.len()
    );
    for task in &tasks {
        assert_eq!(task["status"], "completed", "{task}");
    }
    let started = upstream_stats(&upstream_url).await["callsStarted"].clone();
    assert_eq!(
        started,
        json!(tasks.len()),
        "every stored task's call reached the upstream once, and no other call did"
    );
}

#[tokio::test]
async fn hang_ups_leave_no_orphans_in_memory() {
    hang_ups_leave_no_orphans(&[]).await;
}

#[tokio::test]
async fn hang_ups_leave_no_orphans_on_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    hang_ups_leave_no_orphans(&["--redis", &url]).await;
}

/// `_meta` of a `tools/call` of `echo` with a related-task marker naming `task_id`.
fn echo_with_marker(client: &Client, task_id: &str) -> Value {
    let mut params = client.params(json!({"name": "echo", "arguments": {"message": "hi"}}));
    params["_meta"]["io.modelcontextprotocol/related-task"] = json!({"taskId": task_id});
    params
}

/// Sends `params` as a `tools/call` (the tool is `echo`).
async fn call_echo(client: &Client, params: &Value) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let headers = [
        ("mcp-method", "tools/call".to_owned()),
        ("mcp-name", "echo".to_owned()),
    ];
    client
        .send_raw(serde_json::to_vec(&body).unwrap(), &headers)
        .await
}

/// A 2026-07-28 call carrying the 2025-11-25 related-task marker: answered, no task
/// touched, and the marker never reaches the upstream (which would hold its answer for
/// a `tasks/result`), over HTTP and over stdio.
#[tokio::test]
async fn a_related_task_marker_from_a_2026_client_never_reaches_the_upstream() {
    let (_everything, everything_url) = start_everything();
    let (_http_gateway, http_url) = start_gateway(&everything_url, &[]);
    let stdio = stdio::start_stdio_gateway(&stdio::everything_cmd(), &[]);
    for url in [&http_url, &stdio.url] {
        let owner = Client::with_tasks(url);
        // A real task, running.
        let theirs = owner
            .start_task(
                "trigger-long-running-operation",
                json!({"duration": 5, "steps": 5}),
            )
            .await;
        let before = owner.get_task(&theirs).await;
        // Callers without the extension: the owner's own principal, and another one.
        let same_caller = Client::new(url, json!({}));
        let mut stranger = Client::new(url, json!({}));
        stranger.authorization = Some("Bearer someone-else".into());
        for (client, marker) in [
            (&same_caller, uuid::Uuid::new_v4().to_string()),
            (&stranger, theirs.clone()),
            (&same_caller, theirs.clone()),
        ] {
            let params = echo_with_marker(client, &marker);
            let reply = tokio::time::timeout(DEADLINE, call_echo(client, &params))
                .await
                .expect("the call is answered");
            let result = reply.result();
            assert_eq!(first_text(result), "Echo: hi", "{result}");
            assert!(
                result["_meta"]
                    .get("io.modelcontextprotocol/related-task")
                    .is_none()
            );
        }
        let after = owner.get_task(&theirs).await;
        assert_eq!(after["status"], before["status"], "{after}");
        assert_eq!(owner.cancel(&theirs).await.result(), &gateway_ack());
    }
}
