//! Criterion micro-benchmarks of the per-request hot paths of the gateway:
//!
//! - classifying a JSON-RPC body (`Message::parse` plus the `_meta` checks the server
//!   makes to pick the era and the task plan),
//! - serialising `CreateTaskResult` and `DetailedTask` (`tasks::render::task_result` and
//!   `serde_json::to_vec`, alone and wrapped in the JSON-RPC envelope),
//! - validating the `Mcp-*` headers against the body (`protocol::headers::validate`).
//!
//! `cargo bench --bench hot_paths`; see docs/benchmarks.md.

use mtg_protocol::names::STATELESS_VERSION;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue};
use mcp_task_gateway::tasks::render::task_result;
use mtg_protocol::headers::{self, MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION};
use mtg_protocol::jsonrpc::{self, Message};
use mtg_protocol::meta;
use mtg_protocol::wire::{ResultType, TaskStatus};
use mtg_store::TaskRecord;
use serde_json::{Value, json};

const TASK_ID: &str = "d9516402-57e7-4359-a791-a58667664b8b";

fn modern_params(mut params: Value, tasks: bool) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {"form": {}}, "sampling": {}, "roots": {}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    });
    params
}

fn body(method: &str, params: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .unwrap()
}

/// What `server::classify` and `stateless::handle` look at before routing: the message,
/// its `_meta` protocol version, the client capabilities and the tasks extension.
fn classify(body: &[u8]) -> (bool, bool) {
    let message = Message::parse(body).expect("valid JSON-RPC");
    let params = match &message {
        Message::Request { params, .. } | Message::Notification { params, .. } => params.as_ref(),
        Message::Response { .. } => None,
    };
    let modern = meta::protocol_version(params) == Some(STATELESS_VERSION);
    let declared =
        modern && meta::client_capabilities(params).is_some() && meta::declares_tasks(params);
    black_box(&message);
    (modern, declared)
}

fn bench_classify(c: &mut Criterion) {
    let cases = [
        (
            "tools_call_modern_tasks",
            body(
                "tools/call",
                modern_params(json!({"name": "echo", "arguments": {"text": "hi"}}), true),
            ),
        ),
        (
            "tasks_get_modern",
            body("tasks/get", modern_params(json!({"taskId": TASK_ID}), true)),
        ),
        (
            "tools_call_legacy",
            body(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "hi"}}),
            ),
        ),
    ];
    let mut group = c.benchmark_group("classify");
    for (name, body) in &cases {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(*name, |b| b.iter(|| classify(black_box(body))));
    }
    group.finish();
}

fn record(status: TaskStatus) -> TaskRecord {
    let now = 1_764_066_600_123;
    let result = (status == TaskStatus::Completed).then(|| {
        serde_json::value::to_raw_value(&json!({
            "content": [{"type": "text", "text": "hi"}],
            "structuredContent": {"echo": {"text": "hi"}},
            "resultType": "complete",
        }))
        .unwrap()
    });
    TaskRecord {
        task_id: TASK_ID.into(),
        principal: "anonymous".into(),
        owner: "bench-host-1234".into(),
        status,
        status_message: None,
        created_at_ms: now,
        last_updated_at_ms: now + 3,
        ttl_ms: 3_600_000,
        poll_interval_ms: 1000,
        input_requests: Default::default(),
        answers: Default::default(),
        next_input_key: 0,
        result,
        error: None,
        request: serde_json::value::to_raw_value(
            &json!({"name": "echo", "arguments": {"text": "hi"}}),
        )
        .expect("JSON"),
        upstream_state: None,
        resume: None,
        takeovers: 0,
        keep_arguments: false,
    }
}

fn bench_serialize(c: &mut Criterion) {
    let working = record(TaskStatus::Working);
    let completed = record(TaskStatus::Completed);
    let id = json!(7);
    let mut group = c.benchmark_group("serialize");
    group.bench_function("create_task_result", |b| {
        b.iter(|| serde_json::to_vec(&task_result(black_box(&working), ResultType::Task)).unwrap())
    });
    group.bench_function("create_task_result_envelope", |b| {
        b.iter(|| {
            jsonrpc::success_body_of(&id, &task_result(black_box(&working), ResultType::Task))
        })
    });
    group.bench_function("detailed_task_completed", |b| {
        b.iter(|| {
            serde_json::to_vec(&task_result(black_box(&completed), ResultType::Complete)).unwrap()
        })
    });
    group.bench_function("detailed_task_completed_envelope", |b| {
        b.iter(|| {
            jsonrpc::success_body_of(
                &id,
                &task_result(black_box(&completed), ResultType::Complete),
            )
        })
    });
    // The copy a store makes when a record changes (copy-on-write in the memory store).
    group.bench_function("task_record_clone", |b| {
        b.iter_batched(
            || completed.clone(),
            |r| black_box(r.clone()),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn headers_of(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

fn bench_headers(c: &mut Criterion) {
    let call_params = json!({"name": "echo", "arguments": {"text": "hi"}});
    let get_params = json!({"taskId": TASK_ID});
    let encoded_params = json!({"name": "Hello, 世界"});
    let call = headers_of(&[
        (MCP_PROTOCOL_VERSION, STATELESS_VERSION),
        (MCP_METHOD, "tools/call"),
        (MCP_NAME, "echo"),
    ]);
    let get = headers_of(&[
        (MCP_PROTOCOL_VERSION, STATELESS_VERSION),
        (MCP_METHOD, "tasks/get"),
        (MCP_NAME, TASK_ID),
    ]);
    let encoded = headers_of(&[
        (MCP_PROTOCOL_VERSION, STATELESS_VERSION),
        (MCP_METHOD, "tools/call"),
        (MCP_NAME, "=?base64?SGVsbG8sIOS4lueVjA==?="),
    ]);
    let mut group = c.benchmark_group("headers_validate");
    for (name, headers, method, params) in [
        ("tools_call", &call, "tools/call", &call_params),
        ("tasks_get", &get, "tasks/get", &get_params),
        (
            "tools_call_base64_name",
            &encoded,
            "tools/call",
            &encoded_params,
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                headers::validate(
                    black_box(headers),
                    method,
                    Some(params),
                    STATELESS_VERSION,
                    true,
                )
                .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_classify, bench_serialize, bench_headers);
criterion_main!(benches);
