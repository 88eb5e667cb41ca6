//! One request sent upstream and its final answer, for requests the gateway forwards
//! without making a task of them.

use crate::protocol::names::method;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Caller, Exchange, Upstream, UpstreamError, UpstreamEvent};
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
    forward_relaying(upstream, caller, method, params, timeout, None).await
}

/// Like [`forward`], and the call's notifications (progress, log messages) go to `relay`
/// as they come. When the relay's receiver is gone (the client closed its stream, which
/// on 2026-07-28 HTTP is the cancellation), the call is cancelled upstream.
pub async fn forward_relaying(
    upstream: &dyn Upstream,
    caller: &Caller<'_>,
    method: &str,
    params: Option<Value>,
    timeout: Option<Duration>,
    relay: Option<&mpsc::Sender<UpstreamEvent>>,
) -> Result<Result<Value, ErrorObject>, UpstreamError> {
    let exchange = async {
        let mut call = upstream.open_call(caller, method, params).await?;
        let answer = match relay {
            Some(relay) => {
                tokio::select! {
                    answer = answer_of(call.as_mut(), Some(relay)) => answer,
                    () = relay.closed() => Err(UpstreamError::Lost("the client closed its stream".into())),
                }
            }
            None => answer_of(call.as_mut(), None).await,
        };
        if relay.is_some_and(mpsc::Sender::is_closed) {
            let _ = call.cancel("the client closed its stream").await;
        }
        answer
    };
    match timeout {
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or(Err(UpstreamError::Timeout(limit.as_millis() as u64))),
        None => exchange.await,
    }
}

async fn answer_of(
    call: &mut dyn Exchange,
    relay: Option<&mpsc::Sender<UpstreamEvent>>,
) -> Result<Result<Value, ErrorObject>, UpstreamError> {
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
            Some(Ok(notification @ UpstreamEvent::Notification { .. })) => {
                if let Some(relay) = relay {
                    // A closed relay is noticed by the caller's select.
                    let _ = relay.send(notification).await;
                }
            }
            Some(Ok(UpstreamEvent::Response { .. })) => {}
        }
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
