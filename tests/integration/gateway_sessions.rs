//! The 2025-xx client sessions the gateway serves itself (here in front of
//! server-everything over stdio): idle expiry, the size limit, credential binding.

use std::time::Duration;

use crate::common::session::*;
use crate::common::stdio::*;
use crate::common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};

/// Opens a session; the client, or the refusal's status and body.
async fn open(
    http: &reqwest::Client,
    url: &str,
    auth: Option<&str>,
) -> Result<SessionClient, (u16, String)> {
    let mut client = SessionClient::with_http(url, http.clone());
    client.authorization = auth.map(str::to_owned);
    let response = client.try_initialize("2025-11-25", json!({})).await;
    let status = response.status().as_u16();
    match client.session {
        Some(_) => Ok(client),
        None => Err((status, response.text().await.unwrap_or_default())),
    }
}

fn tools_list() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
}

#[tokio::test]
async fn ten_thousand_abandoned_sessions_expire_and_make_room() {
    const ABANDONED: usize = 10_050;
    let metrics_port = free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let gateway = start_stdio_gateway(
        &everything_cmd(),
        &[
            "--session-idle-timeout-ms",
            "2000",
            "--max-sessions",
            "10000",
            "--metrics-listen",
            &metrics,
        ],
    );
    let http = reqwest::Client::new();
    let first = open(&http, &gateway.url, None).await.expect("a session");
    // Clients that never send DELETE; some more than the table holds.
    let opened = futures_util::stream::iter(1..ABANDONED)
        .map(|_| open(&http, &gateway.url, None))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for outcome in &opened {
        if let Err((status, body)) = outcome {
            // Refused only while the table is full of sessions not yet idle.
            assert_eq!(*status, 503, "{body}");
            assert!(body.contains("too many open sessions"), "{body}");
        }
    }
    // Once idle, every abandoned session is forgotten, and new ones are served again.
    eventually("the abandoned sessions to expire", || async {
        let page = scrape_metrics(metrics_port).await;
        (metric_sample(&page, "mtg_sessions_open") == Some(0.0)).then_some(())
    })
    .await;
    let page = scrape_metrics(metrics_port).await;
    let opened_ok = opened.iter().filter(|o| o.is_ok()).count() + 1;
    assert_eq!(
        metric_sample(&page, "mtg_sessions_ended_total{reason=\"expired\"}"),
        Some(opened_ok as f64)
    );
    assert!(opened_ok >= 10_000, "only {opened_ok} sessions were opened");
    let fresh = open(&http, &gateway.url, None).await.expect("room again");
    let old = first.post(tools_list()).await;
    assert_eq!(old.status(), 404);
    let new = fresh.post(tools_list()).await;
    assert_eq!(new.status(), 200);
}

#[tokio::test]
async fn a_full_table_refuses_initialize_until_a_session_ends() {
    let gateway = start_stdio_gateway(&everything_cmd(), &["--max-sessions", "2"]);
    let http = reqwest::Client::new();
    let first = open(&http, &gateway.url, None).await.expect("a session");
    open(&http, &gateway.url, None).await.expect("a session");
    let (status, body) = open(&http, &gateway.url, None).await.unwrap_err();
    assert_eq!(status, 503);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert_eq!(first.delete().await.status(), 200);
    open(&http, &gateway.url, None)
        .await
        .expect("room after DELETE");
}

#[tokio::test]
async fn a_session_belongs_to_the_credentials_that_opened_it() {
    let gateway = start_stdio_gateway(&everything_cmd(), &[]);
    let http = reqwest::Client::new();
    let alice = open(&http, &gateway.url, Some("Bearer alice"))
        .await
        .expect("a session");
    let mallory = alice.clone().with_authorization("Bearer mallory");
    assert_eq!(mallory.post(tools_list()).await.status(), 404);
    assert_eq!(mallory.delete().await.status(), 404);
    let own = alice.post(tools_list()).await;
    assert_eq!(own.status(), 200);
    let tools: Value = own.json().await.unwrap();
    assert!(tools["result"]["tools"].is_array(), "{tools}");
}

#[tokio::test]
async fn a_call_in_flight_keeps_its_session_past_the_idle_timeout() {
    let gateway = start_stdio_gateway(&everything_cmd(), &["--session-idle-timeout-ms", "500"]);
    let http = reqwest::Client::new();
    let session = open(&http, &gateway.url, None).await.expect("a session");
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "trigger-long-running-operation",
        "arguments": {"duration": 2, "steps": 2},
        "_meta": {"progressToken": "p"}
    }});
    let response = session.post(call).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let body = tokio::time::timeout(DEADLINE, response.text())
        .await
        .expect("the call ends")
        .unwrap();
    let messages: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m["method"] == "notifications/progress"),
        "{body}"
    );
    let last = messages.last().expect("the response");
    assert_eq!(last["id"], 5, "{body}");
    assert!(last["result"]["content"].is_array(), "{body}");
    // The session outlived the call's 2 s; idle afterwards, it is forgotten.
    let after = session.post(tools_list()).await;
    assert_eq!(after.status(), 200);
    eventually("the idle session to expire", || async {
        let status = session.post(tools_list()).await.status();
        // Each probe touches the session: wait longer than the timeout between them.
        tokio::time::sleep(Duration::from_millis(600)).await;
        (status == 404).then_some(())
    })
    .await;
}
