//! One request sent on a legacy upstream session and its final answer, for requests the
//! gateway forwards without making a task of them.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use serde_json::{Map, Value, json};

use super::{LegacyUpstream, Session, UpstreamError, UpstreamEvent};
use crate::protocol::jsonrpc::{self, ErrorObject, code};

/// Who a forwarded request is sent for: the session it needs upstream.
pub struct Caller<'a> {
    pub capabilities: &'a Map<String, Value>,
    pub auth: Option<&'a HeaderValue>,
}

/// Sends `method` upstream and waits for its answer. Server-to-client requests on the
/// way are refused: a stateless client without the tasks extension cannot receive them.
pub async fn forward(
    upstream: &Arc<LegacyUpstream>,
    caller: &Caller<'_>,
    method: &str,
    params: Option<Value>,
    timeout: Option<Duration>,
) -> Result<Result<Value, ErrorObject>, UpstreamError> {
    let exchange = async {
        let (session, mut stream, id) = open_call(upstream, caller, method, params).await?;
        loop {
            match stream.next().await {
                None => return Err(UpstreamError::Lost("stream ended without an answer".into())),
                Some(Err(e)) => return Err(e),
                Some(Ok(UpstreamEvent::Response { id: got, outcome })) if got == id => {
                    return Ok(outcome);
                }
                Some(Ok(UpstreamEvent::Request { id, method, .. })) => {
                    let refusal = refuse_request(&method);
                    let reply = jsonrpc::response_value(id, refusal);
                    upstream.send(&session, &reply).await?;
                }
                Some(Ok(_)) => {}
            }
        }
    };
    match timeout {
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or(Err(UpstreamError::Timeout(limit.as_millis() as u64))),
        None => exchange.await,
    }
}

/// Opens (or reuses) the session and sends the request; a session the upstream forgot
/// is replaced once.
pub async fn open_call(
    upstream: &Arc<LegacyUpstream>,
    caller: &Caller<'_>,
    method: &str,
    params: Option<Value>,
) -> Result<(Arc<Session>, super::CallStream, Value), UpstreamError> {
    let mut retried = false;
    loop {
        let session = upstream.session(caller.capabilities, caller.auth).await?;
        let id = upstream.next_request_id();
        match upstream
            .call(&session, id.clone(), method, params.clone())
            .await
        {
            Ok(stream) => return Ok((session, stream, id)),
            Err(UpstreamError::SessionExpired) if !retried => {
                upstream.invalidate(&session);
                retried = true;
            }
            Err(e) => return Err(e),
        }
    }
}

fn refuse_request(method: &str) -> Result<Value, ErrorObject> {
    if method == "ping" {
        return Ok(json!({}));
    }
    Err(ErrorObject::new(
        code::METHOD_NOT_FOUND,
        format!(
            "{method} cannot reach this client: it called the tool without the \
             io.modelcontextprotocol/tasks extension"
        ),
    ))
}
