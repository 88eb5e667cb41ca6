//! What the connections send: the requests of each scenario, prepared before the clock starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::{LEGACY, LEGACY_IDS, MODERN, TASKS_EXT};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use crate::driver::Target;

/// One request the load generator sends, prebuilt.
#[derive(Clone)]
pub(crate) struct Req {
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

#[derive(Clone, Copy)]
pub(crate) enum Expect {
    /// HTTP 200 and the body contains these bytes.
    Contains(&'static [u8]),
}

impl Expect {
    pub(crate) fn ok(self, status: StatusCode, body: &[u8]) -> bool {
        match self {
            Expect::Contains(needle) => status == StatusCode::OK && contains(body, needle),
        }
    }
}

pub(crate) enum Workload {
    /// The requests, round robin.
    Fixed { requests: Vec<Req>, expect: Expect },
    /// `tools/call` with tasks, then `tasks/get` until the task is `completed`; one
    /// operation per lifecycle.
    Lifecycle { create: Req },
    /// Could not be set up (e.g. the server refused the session).
    Unusable(String),
}

impl Workload {
    pub(crate) fn fixed(requests: Vec<Req>, expect: Expect) -> Self {
        Workload::Fixed { requests, expect }
    }

    pub(crate) fn is_usable(&self) -> bool {
        !matches!(self, Workload::Unusable(_))
    }
}

pub(crate) fn base_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers
}

/// A 2026-07-28 request with `_meta` and the standard headers; `tasks` declares the
/// tasks extension.
pub(crate) fn modern_request(method: &str, mut params: Value, tasks: bool) -> Req {
    let capabilities = if tasks {
        json!({"extensions": {TASKS_EXT: {}}})
    } else {
        json!({})
    };
    let name = match method {
        "tools/call" => params["name"].as_str().map(str::to_owned),
        m if m.starts_with("tasks/") => params["taskId"].as_str().map(str::to_owned),
        _ => None,
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "0"},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut headers = base_headers();
    headers.insert("mcp-protocol-version", HeaderValue::from_static(MODERN));
    headers.insert(
        "mcp-method",
        HeaderValue::from_str(method).expect("ASCII method"),
    );
    if let Some(name) = name {
        headers.insert(
            "mcp-name",
            HeaderValue::from_str(&name).expect("ASCII name"),
        );
    }
    Req {
        headers,
        body: Bytes::from(serde_json::to_vec(&body).expect("JSON")),
    }
}

pub(crate) fn tasks_get_request(task_id: &str) -> Req {
    modern_request("tasks/get", json!({"taskId": task_id}), true)
}

pub(crate) fn tasks_get_workload(ids: &[String]) -> Workload {
    Workload::fixed(
        ids.iter().map(|id| tasks_get_request(id)).collect(),
        Expect::Contains(br#""status":"completed""#),
    )
}

/// A legacy session opened on `target` (initialize + initialized); the requests carry
/// its id. One session is shared by every connection.
pub(crate) async fn legacy_requests(target: &Target, method: &str, params: Value) -> Workload {
    let mut conn = match target.connect().await {
        Ok(conn) => conn,
        Err(e) => return Workload::Unusable(format!("connect: {e}")),
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "load", "version": "0"},
    }});
    let request = Req {
        headers: base_headers(),
        body: Bytes::from(init.to_string()),
    };
    let (status, headers, body) = match target.send_full(&mut conn, &request).await {
        Ok(answer) => answer,
        Err(e) => return Workload::Unusable(format!("initialize: {e}")),
    };
    if status != StatusCode::OK {
        return Workload::Unusable(format!(
            "initialize answered {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    let mut session = base_headers();
    session.insert("mcp-protocol-version", HeaderValue::from_static(LEGACY));
    if let Some(id) = headers.get("mcp-session-id") {
        session.insert("mcp-session-id", id.clone());
    }
    let initialized = Req {
        headers: session.clone(),
        body: Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
    };
    if let Err(e) = target.send_full(&mut conn, &initialized).await {
        return Workload::Unusable(format!("initialized: {e}"));
    }
    // Connections share the session, and a session refuses an id already in flight:
    // the requests cycle through distinct ids.
    let requests = (1..=LEGACY_IDS)
        .map(|id| {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            Req {
                headers: session.clone(),
                body: Bytes::from(body.to_string()),
            }
        })
        .collect();
    Workload::fixed(requests, Expect::Contains(br#""result""#))
}

pub(crate) async fn legacy_echo_requests(target: &Target) -> Workload {
    legacy_requests(
        target,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    )
    .await
}

/// Creates `count` echo tasks and waits until every one is `completed`.
pub(crate) async fn create_completed_tasks(target: &Target, count: usize) -> Vec<String> {
    let create = modern_request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
        true,
    );
    let mut conn = target.connect().await.expect("connect to the gateway");
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        let (_, _, body) = target
            .send_full(&mut conn, &create)
            .await
            .expect("tools/call");
        ids.push(task_id_of(&body).expect("a CreateTaskResult"));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in &ids {
        let get = tasks_get_request(id);
        loop {
            let (_, _, body) = target.send_full(&mut conn, &get).await.expect("tasks/get");
            if contains(&body, br#""status":"completed""#) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} did not complete: {}",
                String::from_utf8_lossy(&body)
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    ids
}

/// Sends `count` copies of `request` over `conns` connections; returns how many got a
/// `CreateTaskResult`.
pub(crate) async fn create_many(
    target: &Target,
    request: &Req,
    count: usize,
    conns: usize,
) -> usize {
    let left = Arc::new(AtomicUsize::new(count));
    let created = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..conns {
        let target = target.clone();
        let request = request.clone();
        let left = left.clone();
        let created = created.clone();
        handles.push(tokio::spawn(async move {
            let Ok(mut conn) = target.connect().await else {
                return;
            };
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                match target.send_full(&mut conn, &request).await {
                    Ok((_, _, body)) if contains(&body, br#""resultType":"task""#) => {
                        created.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => match target.connect().await {
                        Ok(c) => conn = c,
                        Err(_) => return,
                    },
                }
            }
        }));
    }
    for handle in handles {
        let _ = handle.await;
    }
    created.load(Ordering::Relaxed)
}

pub(crate) async fn fixture_stats(upstream: &Target) -> Option<Value> {
    let mut conn = upstream.connect().await.ok()?;
    let request = Request::builder()
        .method(Method::GET)
        .uri("/stats")
        .header(header::HOST, upstream.host.clone())
        .body(Full::new(Bytes::new()))
        .ok()?;
    let response = conn.send_request(request).await.ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&body).ok()
}

/// Waits until the fixture holds `count` calls (or the deadline); returns how many it holds.
pub(crate) async fn wait_in_flight(upstream: &Target, count: u64, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    loop {
        let now = fixture_stats(upstream)
            .await
            .and_then(|s| s["callsInFlight"].as_u64())
            .unwrap_or(0);
        if now >= count || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn task_id_of(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value["result"]["taskId"].as_str().map(str::to_owned)
}

/// A substring search, not a compare at every offset: that one was 2.5 % of the machine's
/// CPU at 16 connections, taken from the processes measured.
pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}
