//! OpenTelemetry: spans reach an OTLP/HTTP receiver; the request span continues the
//! client's W3C trace, and the task span links back to the request that created it.

use std::sync::{Arc, Mutex};

use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

type Received = Arc<Mutex<Vec<Value>>>;

/// A minimal OTLP/HTTP (JSON) receiver: stores every export request body.
async fn start_receiver() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received: Received = Arc::default();
    let store = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let store = store.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                        let store = store.clone();
                        async move {
                            let path = request.uri().path().to_owned();
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            if path == "/v1/traces"
                                && let Ok(value) = serde_json::from_slice::<Value>(&body)
                            {
                                store.lock().unwrap().push(value);
                            }
                            let mut response =
                                hyper::Response::new(Full::new(Bytes::from_static(b"{}")));
                            response
                                .headers_mut()
                                .insert("content-type", "application/json".parse().unwrap());
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (format!("http://{addr}"), received)
}

fn spans(received: &Received) -> Vec<Value> {
    let exports = received.lock().unwrap().clone();
    let mut out = Vec::new();
    for export in exports {
        for resource in export["resourceSpans"].as_array().into_iter().flatten() {
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                out.extend(scope["spans"].as_array().into_iter().flatten().cloned());
            }
        }
    }
    out
}

#[tokio::test]
async fn task_spans_reach_an_otlp_receiver_linked_to_the_request() {
    let (endpoint, received) = start_receiver().await;
    let (_upstream, upstream_url) = start_plain_server();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_SERVICE_NAME", "gateway-under-test"),
    ];
    let (_gateway, url) = start_gateway_with_env(&upstream_url, &[], &env);
    let client = Client::with_tasks(&url);

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_span = "00f067aa0ba902b7";
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": client.params(json!({"name": "echo", "arguments": {"text": "traced"}}))});
    let reply = client
        .send_raw(
            serde_json::to_vec(&body).unwrap(),
            &[
                ("mcp-method", "tools/call".into()),
                ("mcp-name", "echo".into()),
                ("traceparent", format!("00-{trace_id}-{parent_span}-01")),
            ],
        )
        .await;
    let task_id = reply.result()["taskId"].as_str().unwrap().to_owned();
    client.wait_status(&task_id, "completed").await;

    let (request, task) = eventually("the request and task spans", || async {
        let all = spans(&received);
        let request = all
            .iter()
            .find(|s| {
                s["name"] == "request"
                    && s["traceId"] == trace_id
                    && s["parentSpanId"] == parent_span
            })?
            .clone();
        let task = all.iter().find(|s| s["name"] == "task")?.clone();
        Some((request, task))
    })
    .await;
    let links = task["links"].as_array().expect("the task span has links");
    assert!(
        links
            .iter()
            .any(|l| l["spanId"] == request["spanId"] && l["traceId"] == trace_id),
        "task span not linked to its request: {task}"
    );
    let resource_names: Vec<String> = received
        .lock()
        .unwrap()
        .iter()
        .flat_map(|e| e["resourceSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| {
            r["resource"]["attributes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|a| a["key"] == "service.name")
        .map(|a| {
            a["value"]["stringValue"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(
        resource_names.iter().any(|n| n == "gateway-under-test"),
        "{resource_names:?}"
    );
}
