//! One request sent upstream and its final answer, for requests the gateway forwards
//! without making a task of them.

use mtg_protocol::names::method;
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Caller, Exchange, Upstream, UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::{ErrorObject, code};

/// Sends `method` upstream as one request and waits for its final answer: a plain
/// forward (no relay, no hold). Server-to-client requests on the way are refused: a
/// stateless client without the tasks extension cannot receive them.
pub async fn request(
    upstream: &dyn Upstream,
    caller: &Caller<'_>,
    method: &str,
    params: Option<Value>,
    timeout: Option<Duration>,
) -> Result<Result<Value, ErrorObject>, UpstreamError> {
    let how = How {
        timeout,
        relay: None,
        hold: false,
    };
    match forward(upstream, caller, method, params, how).await? {
        Forwarded::Answer(answer) => Ok(answer),
        // Not produced without `hold`; should it ever be, the call is not left open.
        Forwarded::AsksForInput { exchange, .. } => {
            let _ = exchange.cancel("the gateway cannot hold this call").await;
            Ok(Err(ErrorObject::internal(
                "the upstream asked for input the gateway cannot pass on",
            )))
        }
    }
}

/// How a bridged request is carried.
pub struct How<'a> {
    pub timeout: Option<Duration>,
    /// Where the call's notifications (progress, log messages) go as they come. When
    /// its receiver is gone (the client closed its stream, which on 2026-07-28 HTTP is
    /// the cancellation), the call is cancelled upstream.
    pub relay: Option<&'a mpsc::Sender<UpstreamEvent>>,
    /// Whether the call may stop at the upstream's first input request (elicitation,
    /// sampling, roots) and be handed over open, to be held for the client's answers.
    pub hold: bool,
}

/// What became of a forwarded request.
pub enum Forwarded {
    Answer(Result<Value, ErrorObject>),
    /// The upstream asked for input: the call, still open, the requests it sent together,
    /// and what it sent right after them, for whoever carries the call on.
    AsksForInput {
        exchange: Box<dyn Exchange>,
        asked: Vec<Asked>,
        later: Vec<UpstreamEvent>,
    },
}

/// A server-to-client request of the upstream, as it came.
pub struct Asked {
    pub id: Value,
    pub method: String,
    pub params: Option<Value>,
}

enum Step {
    Answer(Result<Value, ErrorObject>),
    Asks(Asked),
}

/// Sends `method` upstream and carries it `how` says, to its answer or, with `hold`, to
/// the upstream's first input request.
pub async fn forward(
    upstream: &dyn Upstream,
    caller: &Caller<'_>,
    method: &str,
    params: Option<Value>,
    how: How<'_>,
) -> Result<Forwarded, UpstreamError> {
    let exchange = async {
        let mut call = upstream.open_call(caller, method, params).await?;
        let step = match how.relay {
            Some(relay) => {
                tokio::select! {
                    step = next_step(call.as_mut(), &how) => step,
                    () = relay.closed() => Err(UpstreamError::Lost("the client closed its stream".into())),
                }
            }
            None => next_step(call.as_mut(), &how).await,
        };
        if how.relay.is_some_and(mpsc::Sender::is_closed) {
            let _ = call.cancel("the client closed its stream").await;
        }
        Ok(match step? {
            Step::Answer(answer) => Forwarded::Answer(answer),
            Step::Asks(first) => {
                let (asked, later) = asked_together(call.as_mut(), first);
                Forwarded::AsksForInput {
                    exchange: call,
                    asked,
                    later,
                }
            }
        })
    };
    match how.timeout {
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or(Err(UpstreamError::Timeout(limit.as_millis() as u64))),
        None => exchange.await,
    }
}

async fn next_step(call: &mut dyn Exchange, how: &How<'_>) -> Result<Step, UpstreamError> {
    loop {
        match call.next().await {
            None => return Err(UpstreamError::Lost("stream ended without an answer".into())),
            Some(Err(e)) => return Err(e),
            Some(Ok(UpstreamEvent::Response { id, outcome })) if &id == call.request_id() => {
                return Ok(Step::Answer(outcome));
            }
            Some(Ok(UpstreamEvent::Request { id, method, params }))
                if how.hold && method::INPUT_REQUESTS.contains(&method.as_str()) =>
            {
                return Ok(Step::Asks(Asked { id, method, params }));
            }
            Some(Ok(UpstreamEvent::Request { id, method, .. })) => {
                call.reply(id, refuse_request(&method)).await?;
            }
            Some(Ok(notification @ UpstreamEvent::Notification { .. })) => {
                if let Some(relay) = how.relay {
                    // A closed relay is noticed by the caller's select.
                    let _ = relay.send(notification).await;
                }
            }
            Some(Ok(UpstreamEvent::Response { .. })) => {}
        }
    }
}

/// Requests an upstream sends together (two elicitations at once) arrive in one read:
/// those already here are taken without waiting, so that the client gets them in one
/// round. The first other event already here is kept for the call's next carrier.
fn asked_together(call: &mut dyn Exchange, first: Asked) -> (Vec<Asked>, Vec<UpstreamEvent>) {
    let mut asked = vec![first];
    // `next` is cancel-safe: polling it once loses nothing.
    while let Some(Some(Ok(event))) = call.next().now_or_never() {
        match event {
            UpstreamEvent::Request { id, method, params }
                if method::INPUT_REQUESTS.contains(&method.as_str()) =>
            {
                asked.push(Asked { id, method, params });
            }
            other => return (asked, vec![other]),
        }
    }
    (asked, Vec::new())
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
