//! Header values as HTTP defines them (#43): what HTTP/1.1 permits in a field value
//! (obs-text 0x80–0xFF, HTAB, SP, visible ASCII) is forwarded unchanged whichever way a
//! request goes upstream (the pinned connection, the HTTP/1.1 pool, the HTTP/2 pool);
//! what it forbids never reaches the upstream; and a failure is blamed on whoever caused
//! it, with its own status, code and metric.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use http::HeaderValue;
use serde_json::{Value, json};

use crate::common::mrtr::MrtrUpstream;
use crate::common::session::initialize_body;
use crate::common::*;

/// A value HTTP permits that is not visible ASCII: the campaign's `Bearer \xff\xfe`,
/// with a tab and a Latin-1 byte.
const OBS_TEXT: &[u8] = b"Bearer \xff\xfe\tcaf\xe9";

fn obs_text() -> HeaderValue {
    HeaderValue::from_bytes(OBS_TEXT).expect("HTTP permits obs-text and HTAB")
}

/// The `Authorization` values the fixture received, as bytes, oldest first.
fn authorizations_seen(stats: &Value) -> Vec<Vec<u8>> {
    serde_json::from_value(stats["authorizationsSeen"].clone()).expect("authorizationsSeen")
}

/// A 2025-11-25 POST with `auth` (and the session's id once there is one).
async fn session_post(
    url: &str,
    session: Option<&str>,
    auth: HeaderValue,
    body: Value,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("authorization", auth)
        .header("x-note", HeaderValue::from_bytes(b"na\xefve\tv").unwrap())
        .json(&body);
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    request.send().await.expect("gateway reachable")
}

/// The last JSON-RPC message of a JSON or SSE answer.
async fn last_message(response: reqwest::Response) -> Value {
    let text = response.text().await.unwrap();
    let data = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .rfind(|data| !data.trim().is_empty())
        .map(str::to_owned)
        .unwrap_or(text);
    serde_json::from_str(data.trim()).unwrap_or_else(|_| json!({"raw": data}))
}

/// Pass-through on the bare pinned socket: a session opened and used with an
/// `Authorization` holding obs-text reaches the upstream byte for byte (it was a 502
/// "upstream unreachable: … authorization header is not a string").
#[tokio::test]
async fn obs_text_in_authorization_passes_through_the_pinned_socket_unchanged() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);

    let opened = session_post(
        &url,
        None,
        obs_text(),
        initialize_body("2025-11-25", json!({})),
    )
    .await;
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let listed = session_post(
        &url,
        Some(&session),
        obs_text(),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(listed.status(), 200);
    let listed = last_message(listed).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");

    let seen = authorizations_seen(&upstream_stats(&upstream_url).await);
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(seen.iter().all(|value| value == OBS_TEXT), "{seen:?}");
}

/// The gateway's own calls, on the HTTP/1.1 pool (`lean_http1`) and on the HTTP/2 pool
/// (`--upstream-http2`): a task whose caller's `Authorization` holds obs-text runs and
/// completes, the credential going upstream unchanged.
#[tokio::test]
async fn obs_text_in_authorization_reaches_the_upstream_through_both_pools() {
    for flags in [&[][..], &["--upstream-http2"][..]] {
        let (_upstream, upstream_url) = start_plain_server();
        let (_gateway, url) = start_gateway(&upstream_url, flags);
        let client = Client::with_tasks(&url);
        let call = |method: &str, params: Value, name: Option<&str>| {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": method,
                "params": client.params(params)});
            let mut request = reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", method)
                .header("authorization", obs_text())
                .json(&body);
            if let Some(name) = name {
                request = request.header("mcp-name", name);
            }
            request.send()
        };
        let created = call(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "obs"}}),
            Some("echo"),
        )
        .await
        .unwrap();
        assert_eq!(created.status(), 200, "{flags:?}");
        let created: Value = created.json().await.unwrap();
        let task_id = created["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{flags:?}: {created}"))
            .to_owned();
        let done = eventually("the task to complete", || async {
            let got: Value = call(
                "tasks/get",
                json!({"taskId": task_id}),
                Some(task_id.as_str()),
            )
            .await
            .ok()?
            .json()
            .await
            .ok()?;
            (got["result"]["status"] == "completed").then_some(got)
        })
        .await;
        assert_eq!(first_text(&done["result"]["result"]), "obs", "{flags:?}");
        let seen = authorizations_seen(&upstream_stats(&upstream_url).await);
        assert!(
            !seen.is_empty() && seen.iter().all(|value| value == OBS_TEXT),
            "{flags:?}: {seen:?}"
        );
    }
}

/// Sends `head` (a request head without its final empty line) and `body` on a new
/// connection; the status code of the answer.
fn raw_status(addr: &str, head: &[u8], body: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = head.to_vec();
    request.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    request.extend_from_slice(body);
    stream.write_all(&request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let line = String::from_utf8_lossy(&answer);
    line.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {line:?}"))
}

/// Bytes HTTP forbids in a field value (NUL, other controls, DEL; a bare CR or LF ends
/// the line) in `Authorization` or any other header of a pass-through request: HTTP 400,
/// and the upstream receives nothing. hyper's parser refuses them before any of the
/// gateway's code runs, so the answer is hyper's bare 400 (no JSON-RPC body); the
/// gateway's own check (`mtg_transport::lean_http1::forbidden_header`, before anything is
/// written) is for values built without hyper's check.
#[tokio::test]
async fn bytes_http_forbids_in_a_header_never_reach_the_upstream() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let mut session = crate::common::session::SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;
    let id = session.session.clone().unwrap();
    let before = upstream_stats(&upstream_url).await;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
    for byte in [0x00u8, 0x01, 0x08, 0x0b, 0x0c, 0x1b, 0x1f, 0x7f] {
        for header in ["authorization: Bearer a", "x-note: a", "mcp-session-id: "] {
            let mut head = format!(
                "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
                 accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n"
            )
            .into_bytes();
            if !header.starts_with("mcp-session-id") {
                head.extend_from_slice(format!("mcp-session-id: {id}\r\n").as_bytes());
            }
            head.extend_from_slice(header.as_bytes());
            head.push(byte);
            head.extend_from_slice(b"b\r\n");
            assert_eq!(
                raw_status(&addr, &head, body),
                400,
                "{header} + {byte:#04x}"
            );
        }
    }
    let after = upstream_stats(&upstream_url).await;
    assert_eq!(after["postsByVersion"], before["postsByVersion"]);
    assert_eq!(authorizations_seen(&after), authorizations_seen(&before));
}

/// The client's fault with a JSON-RPC answer: a 2026-07-28 request (headers lenient)
/// whose body's method holds a control character cannot be sent to a 2026-07-28
/// upstream, which needs it as the `Mcp-Method` header: HTTP 400, -32600 naming the
/// header; it was a 502-like "upstream unreachable". The upstream gets nothing.
#[tokio::test]
async fn a_method_no_header_can_carry_is_refused_as_the_clients() {
    let (_upstream, upstream_url) = MrtrUpstream::Rmcp.start();
    let (_gateway, url) = start_gateway(&upstream_url, &["--lenient-headers"]);
    let client = Client::new(&url, json!({}));
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/\u{7}list",
        "params": client.params(json!({}))});
    let reply = client
        .send_raw(serde_json::to_vec(&body).unwrap(), &[])
        .await;
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    assert_eq!(reply.error_code(), -32600, "{:?}", reply.body);
    reply.assert_message_mentions("mcp-method");
    reply.assert_message_mentions("request refused");
}

/// The upstream's fault: pass-through to an upstream that went away is HTTP 502,
/// -32603 "upstream unreachable", counted in `mtg_upstream_errors_total`; nothing is
/// counted as the client's or the gateway's.
#[tokio::test]
async fn an_upstream_that_went_away_is_blamed_on_the_upstream() {
    let (upstream, upstream_url) = start_plain_server();
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let (_gateway, url) = start_gateway(&upstream_url, &["--metrics-listen", &listen]);
    let mut session = crate::common::session::SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;
    drop(upstream);
    let answer = eventually("the upstream to be gone", || async {
        let response = session
            .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .await;
        (response.status() == 502).then_some(response)
    })
    .await;
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32603, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("upstream unreachable"), "{message}");
    let metrics = scrape_metrics(metrics_port).await;
    let upstream_errors: f64 = ["unreachable", "lost"]
        .iter()
        .filter_map(|kind| {
            metric_sample(
                &metrics,
                &format!("mtg_upstream_errors_total{{kind=\"{kind}\"}}"),
            )
        })
        .sum();
    assert!(upstream_errors >= 1.0, "{metrics}");
    assert!(
        !metrics.contains("mtg_client_request_errors_total"),
        "{metrics}"
    );
    assert!(!metrics.contains("mtg_gateway_errors_total"), "{metrics}");
}

/// What the campaign found after part 1: a pass-through request with a method token
/// ureq-proto does not know (`BREW`, a lower-case `post`) or a body on `HEAD` was the
/// gateway's 500 (before: a 502 blaming the upstream). It goes to the upstream as it
/// came, as hyper's client sent it, and the client gets the upstream's answer (405).
#[tokio::test]
async fn any_method_token_reaches_the_upstream_as_it_came() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let mut session = crate::common::session::SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;
    let id = session.session.clone().unwrap();
    for method in ["BREW", "post", "PATCH"] {
        let response = reqwest::Client::new()
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                &url,
            )
            .header("mcp-session-id", id.as_str())
            .header("mcp-protocol-version", "2025-11-25")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method}");
    }
}
