//! Forwarding: one request sent upstream and its final answer, without a task: a
//! 2026-07-28 client's forwarded request (`forward`, which may relay the call's
//! notifications or hand it over open when the upstream asks for input), and a plain
//! request (`request`: a gateway-served session's, or one of the gateway's own).

use mtg_protocol::names::method;
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Caller, Exchange, StopReason, Upstream, UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::{ErrorObject, code};

/// Sends `method` upstream as one request and waits for its final answer: a plain
/// forward (no relay, no hold). Server-to-client requests on the way are refused: a
/// stateless client without the tasks extension cannot receive them.
pub(crate) async fn request(
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
        Forwarded::AsksForInput { mut exchange, .. } => {
            let _ = exchange.stop(StopReason::Refused).await;
            Ok(Err(ErrorObject::internal(
                "the upstream asked for input the gateway cannot pass on",
            )))
        }
    }
}

/// How a bridged request is carried.
pub(crate) struct How<'a> {
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
pub(crate) enum Forwarded {
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

/// Sends `method` upstream and carries it as `how` says, to its answer or, with `hold`,
/// to the upstream's first input request. A timeout, or a client that closed its stream
/// (the relay's receiver gone), stops the call upstream (`stop.rs`).
pub(crate) async fn forward(
    upstream: &dyn Upstream,
    caller: &Caller<'_>,
    method: &str,
    params: Option<Value>,
    how: How<'_>,
) -> Result<Forwarded, UpstreamError> {
    let deadline = how.timeout.map(|limit| Instant::now() + limit);
    let timed_out = || UpstreamError::Timeout(how.timeout.unwrap_or_default().as_millis() as u64);
    // Before the request is sent (an upstream session opening, a stdio process leased)
    // a stop has nothing to reach.
    let opening = upstream.open_call(caller, method, params);
    let mut call = match deadline {
        Some(at) => tokio::time::timeout_at(at, opening)
            .await
            .map_err(|_| timed_out())??,
        None => opening.await?,
    };
    let stopping = async {
        tokio::select! {
            () = sleep_until(deadline) => StopReason::TimedOut,
            () = relay_closed(how.relay) => StopReason::ClientLeft,
        }
    };
    let step = tokio::select! {
        // A client that left is not answered, whatever came.
        biased;
        reason = stopping => Err(reason),
        step = next_step(call.as_mut(), &how) => Ok(step),
    };
    let step = match step {
        Ok(step) => step?,
        Err(reason) => {
            let _ = call.stop(reason).await;
            return Err(match reason {
                StopReason::TimedOut => timed_out(),
                _ => UpstreamError::Lost("the client closed its stream".into()),
            });
        }
    };
    Ok(match step {
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
}

/// Resolves once the relay's receiver is gone (the client closed its stream); never
/// without a relay.
async fn relay_closed(relay: Option<&mpsc::Sender<UpstreamEvent>>) {
    match relay {
        Some(relay) => relay.closed().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
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
