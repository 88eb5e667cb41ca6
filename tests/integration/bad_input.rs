//! Bad input gets a clear JSON-RPC error with the right code (and HTTP status), and
//! never takes the gateway down.

use crate::common::*;
use serde_json::json;

fn setup(extra: &[&str]) -> (Proc, Proc, Client) {
    let (upstream, upstream_url) = start_plain_server();
    let (gateway, url) = start_gateway(&upstream_url, extra);
    (upstream, gateway, Client::with_tasks(&url))
}

#[tokio::test]
async fn malformed_bodies_get_parse_and_invalid_request_errors() {
    let (_u, _g, client) = setup(&[]);
    let reply = client
        .send_raw(b"{\"jsonrpc\": \"2.0\", \"id\": 1, ".to_vec(), &[])
        .await;
    assert_eq!((reply.status, reply.error_code()), (400, -32700));
    reply.assert_message_mentions("invalid JSON");
    assert_eq!(reply.body["id"], json!(null));

    for body in [
        json!({"hello": "world"}),
        json!([1, 2]),
        json!({"jsonrpc": "2.0", "id": 1, "method": 7}),
    ] {
        let reply = client
            .send_raw(serde_json::to_vec(&body).unwrap(), &[])
            .await;
        assert_eq!((reply.status, reply.error_code()), (400, -32600), "{body}");
    }
}

#[tokio::test]
async fn unknown_task_ids_get_invalid_params() {
    let (_u, _g, client) = setup(&[]);
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let reply = client
            .request(
                method,
                json!({"taskId": "00000000-0000-4000-8000-000000000000", "inputResponses": {}}),
            )
            .await;
        assert_eq!(reply.error_code(), -32602, "{method}: {}", reply.body);
    }
    let reply = client.request("tasks/get", json!({})).await;
    assert_eq!(reply.error_code(), -32602);
    reply.assert_message_mentions("taskId");
}

#[tokio::test]
async fn header_mismatches_get_400_and_header_mismatch() {
    let (_u, _g, client) = setup(&[]);
    let task_id = client.start_task("echo", json!({"text": "x"})).await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/get", "params": client.params(json!({"taskId": task_id}))});
    let bytes = serde_json::to_vec(&body).unwrap();

    let wrong_name = client
        .send_raw(
            bytes.clone(),
            &[
                ("mcp-method", "tasks/get".into()),
                ("mcp-name", "someone-else".into()),
            ],
        )
        .await;
    assert_eq!((wrong_name.status, wrong_name.error_code()), (400, -32020));
    assert_eq!(wrong_name.body["id"], 9);

    let wrong_method = client
        .send_raw(bytes.clone(), &[("mcp-method", "tasks/cancel".into())])
        .await;
    assert_eq!(
        (wrong_method.status, wrong_method.error_code()),
        (400, -32020)
    );

    let wrong_version = client
        .send_raw(
            bytes,
            &[
                ("mcp-method", "tasks/get".into()),
                ("mcp-protocol-version", "2025-11-25".into()),
            ],
        )
        .await;
    assert_eq!(
        (wrong_version.status, wrong_version.error_code()),
        (400, -32020)
    );
}

#[tokio::test]
async fn missing_standard_headers_are_refused_unless_lenient() {
    let (_u, _g, client) = setup(&[]);
    let task_id = client.start_task("echo", json!({"text": "x"})).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": client.params(json!({"taskId": task_id}))});
    let bytes = serde_json::to_vec(&body).unwrap();
    let without_name = client
        .send_raw(bytes.clone(), &[("mcp-method", "tasks/get".into())])
        .await;
    assert_eq!(
        (without_name.status, without_name.error_code()),
        (400, -32020)
    );
    without_name.assert_message_mentions("mcp-name");
    let without_method = client
        .send_raw(bytes.clone(), &[("mcp-name", task_id.clone())])
        .await;
    assert_eq!(
        (without_method.status, without_method.error_code()),
        (400, -32020)
    );
    without_method.assert_message_mentions("mcp-method");
    // With the headers, the same request is fine.
    client.get_task(&task_id).await;

    let (_u2, _g2, lenient) = setup(&["--lenient-headers"]);
    let task_id = lenient.start_task("echo", json!({"text": "x"})).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": lenient.params(json!({"taskId": task_id}))});
    let reply = lenient
        .send_raw(serde_json::to_vec(&body).unwrap(), &[])
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Present headers must still match.
    let reply = lenient
        .send_raw(
            serde_json::to_vec(&body).unwrap(),
            &[("mcp-name", "other".into())],
        )
        .await;
    assert_eq!((reply.status, reply.error_code()), (400, -32020));
}

#[tokio::test]
async fn tasks_methods_need_the_extension() {
    let (_u, _g, client) = setup(&[]);
    let task_id = client.start_task("echo", json!({"text": "x"})).await;
    let plain = Client::new(&client.url, json!({}));
    let reply = plain.request("tasks/get", json!({"taskId": task_id})).await;
    assert_eq!((reply.status, reply.error_code()), (400, -32021));
    assert_eq!(
        reply.body["error"]["data"]["requiredCapabilities"]["extensions"][TASKS_EXT],
        json!({})
    );
}

#[tokio::test]
async fn unknown_input_response_keys_are_ignored() {
    let (_u, _g, client) = setup(&[]);
    let task_id = client.start_task("ask_name", json!({})).await;
    let waiting = client.wait_status(&task_id, "input_required").await;
    let ack = client
        .update(&task_id, json!({"not-a-key": {"action": "accept"}}))
        .await;
    assert_eq!(ack.result(), &gateway_ack());
    let still = client.get_task(&task_id).await;
    assert_eq!(still["status"], "input_required");
    assert_eq!(still["inputRequests"], waiting["inputRequests"]);
}

#[tokio::test]
async fn oversize_bodies_get_413() {
    let (_u, _g, client) = setup(&["--max-body-bytes", "1024"]);
    let big = "x".repeat(4096);
    let reply = client.call_tool("echo", json!({"text": big})).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.error_code(), -32600);
    // Still serving.
    client.start_task("echo", json!({"text": "small"})).await;
}

#[tokio::test]
async fn unsupported_versions_and_missing_meta_are_rejected() {
    let (_u, _g, client) = setup(&[]);
    let mut params = client.params(json!({}));
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
    let reply = client
        .send_raw(
            serde_json::to_vec(&body).unwrap(),
            &[("mcp-protocol-version", "1900-01-01".into())],
        )
        .await;
    assert_eq!((reply.status, reply.error_code()), (400, -32022));
    assert_eq!(reply.body["error"]["data"]["requested"], "1900-01-01");

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let reply = client
        .send_raw(serde_json::to_vec(&body).unwrap(), &[])
        .await;
    assert_eq!((reply.status, reply.error_code()), (400, -32602));
}

#[tokio::test]
async fn disallowed_origins_are_forbidden() {
    let (_u, _g, client) = setup(&[]);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": client.params(json!({}))});
    let headers = |origin: &str| {
        [
            ("origin", origin.to_owned()),
            ("mcp-method", "tools/list".to_owned()),
        ]
    };
    let evil = client
        .send_raw(
            serde_json::to_vec(&body).unwrap(),
            &headers("http://evil.example"),
        )
        .await;
    assert_eq!(evil.status, 403);
    let local = client
        .send_raw(
            serde_json::to_vec(&body).unwrap(),
            &headers("http://localhost:3000"),
        )
        .await;
    assert_eq!(local.status, 200, "{}", local.body);
}
