//! One revision per answer (#43): a request's generation is decided by one rule when its
//! signals disagree (`MCP-Protocol-Version`, the `_meta` version, `Mcp-Session-Id`, the
//! method; ARCHITECTURE.md, "The generation"), and no answer mixes 2026-07-28 and 2025-11-25
//! shapes. A request that says 2026-07-28 is answered as 2026-07-28 whatever session id
//! it carries; session traffic with an id no session has gets the 2025 transport's 404.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::{Value, json};
use test_support::RedisServer;

use crate::common::session::SessionClient;
use crate::common::stdio::{everything_cmd, start_stdio_gateway};
use crate::common::*;

/// Session ids no session has, as the campaign sent them.
fn bogus_session_ids() -> Vec<String> {
    vec![
        "../..".to_owned(),
        "x".repeat(5000),
        "3f9a1c0e5b7d42a8b6e1d0c9f8a7b6c5".to_owned(),
        "mtg-t.3f9a1c0e5b7d42a8".to_owned(),
    ]
}

/// `tasks/get` of `task_id` with every 2026-07-28 signal (header, `_meta`, the tasks
/// extension, `Mcp-Method`, `Mcp-Name`) and `Mcp-Session-Id: session`.
async fn stateless_get_with_session(url: &str, task_id: &str, session: &str) -> (u16, Value) {
    let client = Client::with_tasks(url);
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/get",
        "params": client.params(json!({"taskId": task_id}))});
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tasks/get")
        .header("mcp-name", task_id)
        .header("mcp-session-id", session)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A 2026-07-28 task's shape: `resultType`, `ttlMs`, `pollIntervalMs`; never the
/// 2025-11-25 dialect's `ttl` or `pollInterval`.
fn assert_2026_task(result: &Value) {
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result.get("ttlMs").is_some(), "{result}");
    assert!(result.get("ttl").is_none(), "{result}");
    assert!(result.get("pollInterval").is_none(), "{result}");
}

/// The 2025-11-25 dialect's shape: `ttl`, `pollInterval`, no `resultType`.
fn assert_2025_task(result: &Value) {
    assert!(result.get("resultType").is_none(), "{result}");
    assert!(result.get("ttl").is_some(), "{result}");
    assert!(result.get("pollInterval").is_some(), "{result}");
    assert!(result.get("ttlMs").is_none(), "{result}");
}

/// The case on a pass-through upstream, with the memory store and Redis: a
/// `tasks/get` that says 2026-07-28 and carries a session id no session has is answered
/// as 2026-07-28; the same task asked for by a real session of the same caller comes in
/// that session's dialect; asked for in a session no one has, it is a 404.
#[tokio::test]
async fn a_request_that_says_2026_is_answered_as_2026_whatever_session_id_it_carries() {
    let redis = RedisServer::start();
    let redis_url = redis.url();
    for store in [&[][..], &["--redis", redis_url.as_str()][..]] {
        let (_upstream, upstream_url) = start_plain_server();
        let (_gateway, url) = start_gateway(&upstream_url, store);
        let client = Client::with_tasks(&url);
        let task_id = client.start_task("echo", json!({"text": "one"})).await;
        client.wait_status(&task_id, "completed").await;

        for bogus in bogus_session_ids() {
            let (status, body) = stateless_get_with_session(&url, &task_id, &bogus).await;
            assert_eq!(
                status,
                200,
                "{store:?} {}: {body}",
                &bogus[..bogus.len().min(20)]
            );
            assert_2026_task(&body["result"]);
        }

        // A real session of the same (anonymous) caller: its own dialect.
        let mut session = SessionClient::new(&url);
        session.initialize("2025-11-25", json!({})).await;
        let got = session
            .post(json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
                "params": {"taskId": task_id}}))
            .await;
        assert_eq!(got.status(), 200, "{store:?}");
        let got: Value = got.json().await.unwrap();
        assert_2025_task(&got["result"]);

        // Session traffic (no 2026-07-28 signal) in a session no one has: 404.
        for bogus in bogus_session_ids() {
            let mut stranger = session.clone();
            stranger.session = Some(bogus.clone());
            let got = stranger
                .post(json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get",
                    "params": {"taskId": task_id}}))
                .await;
            assert_eq!(
                got.status(),
                404,
                "{store:?} {}",
                &bogus[..bogus.len().min(20)]
            );
        }
    }
}

/// The same on the sessions the gateway serves itself (a stdio upstream): 2026-07-28
/// signals get a 2026-07-28 answer; an unknown session id alone gets 404.
#[tokio::test]
async fn gateway_served_sessions_follow_the_same_rule() {
    let gateway = start_stdio_gateway(&everything_cmd(), &[]);
    let url = gateway.url.clone();
    let client = Client::with_tasks(&url);
    let ready = eventually("the stdio upstream", || async {
        let reply = client.try_request("tools/list", json!({})).await?;
        (reply.status == 200 && reply.body.get("result").is_some()).then_some(())
    });
    ready.await;
    let task_id = client.start_task("echo", json!({"message": "stdio"})).await;
    client.wait_status(&task_id, "completed").await;
    for bogus in bogus_session_ids() {
        let (status, body) = stateless_get_with_session(&url, &task_id, &bogus).await;
        assert_eq!(status, 200, "{body}");
        assert_2026_task(&body["result"]);
        let mut stranger = SessionClient::new(&url);
        stranger.session = Some(bogus);
        let got = stranger
            .post(json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get",
                "params": {"taskId": task_id}}))
            .await;
        assert_eq!(got.status(), 404);
    }
}

/// The signals a generated request carries.
#[derive(Debug, Clone)]
struct Signals {
    header: Option<&'static str>,
    meta: Option<&'static str>,
    /// 0: none, 1: the real session's id, 2: an id no session has.
    session: u8,
    method: &'static str,
}

fn signals() -> impl Strategy<Value = Signals> {
    (
        prop::sample::select(vec![
            None,
            Some("2026-07-28"),
            Some("2025-11-25"),
            Some("2025-06-18"),
            Some("2099-01-01"),
        ]),
        prop::sample::select(vec![
            None,
            Some("2026-07-28"),
            Some("2025-11-25"),
            Some("2030-01-01"),
        ]),
        0u8..3,
        prop::sample::select(vec!["tasks/get", "tools/list"]),
    )
        .prop_map(|(header, meta, session, method)| Signals {
            header,
            meta,
            session,
            method,
        })
}

/// What the rule gives: `Ok(true)` a 2026-07-28 answer, `Ok(false)` a session's (or
/// the 2025 transport's refusal of its session), `Err(code)` a refusal with HTTP 400.
fn rule(s: &Signals) -> Result<bool, i64> {
    match s.meta {
        Some("2026-07-28") => match s.header {
            Some("2026-07-28") => Ok(true),
            // Missing or disagreeing header: the 2026-07-28 path's -32020.
            _ => Err(-32020),
        },
        Some(_) => Err(-32022),
        None => match s.header {
            Some("2026-07-28") => Err(-32602),
            Some("2099-01-01") => Err(-32022),
            _ => Ok(false),
        },
    }
}

/// Every combination against a live gateway (plain_server upstream): the answer is of
/// the generation the rule names, never both; refusals are 400 with the rule's code; a
/// session answer with an id no session has is the 2025 transport's 404.
#[tokio::test]
async fn live_answers_follow_the_rule_for_every_combination() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = Client::with_tasks(&url);
    let task_id = client.start_task("echo", json!({"text": "p"})).await;
    client.wait_status(&task_id, "completed").await;
    let mut session = SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;
    let real = session.session.clone().unwrap();

    // Deterministic: a failure names its case, and the same cases run again.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = signals();
    for _ in 0..96 {
        let s = strategy.new_tree(&mut runner).unwrap().current();
        let mut params = json!({});
        if s.method == "tasks/get" {
            params["taskId"] = json!(task_id);
        }
        if let Some(version) = s.meta {
            params = client.params(params);
            params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(version);
        }
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": s.method, "params": params});
        let mut request = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-method", s.method);
        if s.method == "tasks/get" {
            request = request.header("mcp-name", task_id.as_str());
        }
        if let Some(version) = s.header {
            request = request.header("mcp-protocol-version", version);
        }
        match s.session {
            1 => request = request.header("mcp-session-id", real.as_str()),
            2 => request = request.header("mcp-session-id", "../.."),
            _ => {}
        }
        let response = request.json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let answer: Value = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .rfind(|d| !d.trim().is_empty())
            .map_or_else(
                || serde_json::from_str(&text).unwrap_or(Value::Null),
                |d| serde_json::from_str(d.trim()).unwrap(),
            );
        let result = answer.get("result");
        match rule(&s) {
            Err(code) => {
                assert_eq!(status, 400, "{s:?}: {answer}");
                assert_eq!(answer["error"]["code"], code, "{s:?}: {answer}");
            }
            Ok(true) => {
                assert_eq!(status, 200, "{s:?}: {answer}");
                let result = result.unwrap_or_else(|| panic!("{s:?}: {answer}"));
                assert!(result.get("resultType").is_some(), "{s:?}: {answer}");
                if s.method == "tasks/get" {
                    assert_2026_task(result);
                }
            }
            Ok(false) => {
                // Nothing of 2026-07-28 in a session's answer.
                if let Some(result) = result {
                    assert!(result.get("resultType").is_none(), "{s:?}: {answer}");
                    if s.method == "tasks/get" {
                        assert_2025_task(result);
                    }
                }
                match s.session {
                    1 => assert_eq!(status, 200, "{s:?}: {answer}"),
                    2 => assert_eq!(status, 404, "{s:?}: {answer}"),
                    // No session: the upstream's refusal of a request without one.
                    _ => assert!(status >= 400, "{s:?}: {answer}"),
                }
            }
        }
    }
}
