//! One request sent upstream and its final answer, for requests the gateway forwards
//! without making a task of them.

use crate::protocol::names::method;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Caller, Upstream, UpstreamError, UpstreamEvent};
use crate::protocol::jsonrpc::{ErrorObject, code};

/// Sends `method` upstream and waits for its answer. Server-to-client requests on the
/// way are refused: a stateless client without the tasks extension cannot receive them.
pub async fn forward(
    upstream: &dyn Upstream,
    caller: &Caller<'_>,
    method: &str,
    params: Option<Value>,
    timeout: Option<Duration>,
) -> Result<Result<Value, ErrorObject>, UpstreamError> {
    let exchange = async {
        let mut call = upstream.open_call(caller, method, params).await?;
        loop {
            match call.next().await {
                None => return Err(UpstreamError::Lost("stream ended without an answer".into())),
                Some(Err(e)) => return Err(e),
                Some(Ok(UpstreamEvent::Response { id, outcome })) if &id == call.request_id() => {
                    return Ok(outcome);
                }
                Some(Ok(UpstreamEvent::Request { id, method, .. })) => {
                    call.reply(id, refuse_request(&method)).await?;
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

fn refuse_request(method: &str) -> Result<Value, ErrorObject> {
    if method == method::PING {
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
