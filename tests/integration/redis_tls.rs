//! `rediss://`: the gateway's store over TLS to a real `redis-server --tls-port`, with
//! certificates of a test CA named by `--redis-ca-file`; without it the server's
//! certificate is not trusted and the store reads as unavailable.

use crate::common::*;
use serde_json::json;
use test_support::RedisServer;
use test_support::tls::TestCa;

#[tokio::test]
async fn tasks_flow_through_a_tls_redis() {
    let ca = TestCa::new("redis");
    let issued = ca.issue("redis");
    let redis = RedisServer::start_tls(&issued.cert, &issued.key, &ca.cert_file());
    let (_upstream, upstream_url) = start_plain_server();
    let url = redis.tls_url();
    let ca_file = ca.cert_file();
    let store = [
        "--redis",
        &url,
        "--redis-ca-file",
        ca_file.to_str().unwrap(),
    ];
    let (_a, url_a) = start_gateway(
        &upstream_url,
        &[&store[..], &["--instance-id", "gw-a"]].concat(),
    );
    let (_b, url_b) = start_gateway(
        &upstream_url,
        &[&store[..], &["--instance-id", "gw-b"]].concat(),
    );
    let a = Client::with_tasks(&url_a);
    let b = Client::with_tasks(&url_b);
    let task_id = a.start_task("ask_name", json!({})).await;
    let task = b.wait_status(&task_id, "input_required").await;
    let (key, _) = only_input_request(&task);
    b.update(
        &task_id,
        json!({key: {"action": "accept", "content": {"name": "Tess"}}}),
    )
    .await
    .result();
    let done = a.wait_status(&task_id, "completed").await;
    assert!(first_text(&done["result"]).contains("Tess"), "{done}");
    // The task is in that Redis (read over its plain port).
    let mut conn = redis.connection();
    let owner: String = redis::cmd("HGET")
        .arg(task_key(&mut conn, &task_id))
        .arg("owner")
        .query(&mut conn)
        .unwrap();
    assert_eq!(owner, "gw-a");
}

#[tokio::test]
async fn an_untrusted_redis_certificate_is_refused() {
    let ca = TestCa::new("untrusted");
    let issued = ca.issue("redis");
    let redis = RedisServer::start_tls(&issued.cert, &issued.key, &ca.cert_file());
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--redis", &redis.tls_url()]);
    let reply = Client::with_tasks(&url)
        .call_tool("sleep", json!({"ms": 1}))
        .await;
    assert_eq!(reply.error_code(), -32603, "{}", reply.body);
    reply.assert_message_mentions("task store unavailable");
    let ready = reqwest::get(url.replace("/mcp", "/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
}
