//! A bridged 2026-07-28 call whose client asked for progress (`_meta.progressToken`) or
//! log messages (`_meta["io.modelcontextprotocol/logLevel"]`): answered on an SSE
//! stream that carries the call's notifications before its result. Closing the stream
//! cancels the call upstream.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response};
use serde_json::Value;
use tokio::sync::mpsc;

use super::reply::Body;
use super::sse::{sse_event, sse_response};
use crate::protocol::bridge;
use crate::protocol::jsonrpc;
use crate::protocol::meta;
use crate::protocol::names::method;
use crate::upstream::{Caller, Upstream, UpstreamEvent, forward};

/// What the client asked to hear about while the call runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    progress_token: Option<Value>,
    log_level: Option<String>,
}

impl Wanted {
    /// `None` when the client asked for neither: a plain JSON answer will do.
    pub fn of(params: Option<&Value>) -> Option<Self> {
        let wanted = Self {
            progress_token: meta::progress_token(params).cloned(),
            log_level: meta::log_level(params).map(str::to_owned),
        };
        (wanted.progress_token.is_some() || wanted.log_level.is_some()).then_some(wanted)
    }

    /// Notifications must relate to the client's request: progress under its own token,
    /// log messages at or above its level; anything else stays here.
    fn passes(&self, method_name: &str, params: Option<&Value>) -> bool {
        match method_name {
            method::PROGRESS => {
                self.progress_token.is_some()
                    && params.and_then(|p| p.get("progressToken")) == self.progress_token.as_ref()
            }
            "notifications/message" => {
                let level = params.and_then(|p| p.get("level")).and_then(Value::as_str);
                match (level, &self.log_level) {
                    (Some(level), Some(minimum)) => meta::log_level_reaches(level, minimum),
                    _ => false,
                }
            }
            _ => false,
        }
    }
}

/// One bridged request, owned, so that it can run after the handler returned.
pub struct RelayedCall {
    pub id: Value,
    pub method: String,
    pub params: Option<Value>,
    pub capabilities: serde_json::Map<String, Value>,
    pub auth: Option<HeaderValue>,
    pub wanted: Wanted,
}

pub fn serve(
    upstream: Arc<dyn Upstream>,
    timeout: Option<Duration>,
    call: RelayedCall,
) -> Response<Body> {
    let (events, stream) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let (notifications, mut heard) = mpsc::channel::<UpstreamEvent>(16);
        let caller = Caller {
            capabilities: &call.capabilities,
            auth: call.auth.as_ref(),
        };
        let forwarding = forward::forward_relaying(
            upstream.as_ref(),
            &caller,
            &call.method,
            call.params,
            timeout,
            Some(&notifications),
        );
        tokio::pin!(forwarding);
        let relay = |event: UpstreamEvent| {
            let UpstreamEvent::Notification { method, params } = event else {
                return None;
            };
            call.wanted.passes(&method, params.as_ref()).then(|| {
                let message = jsonrpc::notification_value(&method, params);
                sse_event(&serde_json::to_vec(&message).expect("JSON values serialize"))
            })
        };
        let answer = loop {
            tokio::select! {
                // Notifications are queued before the answer: they go first.
                biased;
                Some(event) = heard.recv() => {
                    if let Some(frame) = relay(event) {
                        // A client that left is noticed by the branch below.
                        let _ = events.send(frame).await;
                    }
                }
                answer = &mut forwarding => {
                    while let Ok(event) = heard.try_recv() {
                        if let Some(frame) = relay(event) {
                            let _ = events.send(frame).await;
                        }
                    }
                    break answer;
                }
                () = events.closed() => {
                    // The client closed its stream: with `heard` gone, the forward
                    // cancels the call upstream and ends.
                    drop(heard);
                    break forwarding.await;
                }
            }
        };
        let last = match answer {
            Ok(Ok(mut result)) => {
                bridge::complete_result(&call.method, &mut result);
                jsonrpc::success_body_of(&call.id, &result)
            }
            Ok(Err(error)) => jsonrpc::error_body(Some(&call.id), &error),
            Err(e) => jsonrpc::error_body(Some(&call.id), &e.into()),
        };
        // The client may have gone; then there is nobody to tell.
        let _ = events.send(sse_event(&last)).await;
    });
    sse_response(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_what_the_client_asked_for_passes() {
        let wanted = Wanted::of(Some(&json!({"_meta": {
            "progressToken": "p1",
            "io.modelcontextprotocol/logLevel": "warning"
        }})))
        .expect("asked for both");
        let progress = |token: &str| json!({"progressToken": token, "progress": 1});
        assert!(wanted.passes(method::PROGRESS, Some(&progress("p1"))));
        assert!(!wanted.passes(method::PROGRESS, Some(&progress("other"))));
        let log = |level: &str| json!({"level": level, "data": "x"});
        assert!(wanted.passes("notifications/message", Some(&log("error"))));
        assert!(!wanted.passes("notifications/message", Some(&log("info"))));
        assert!(!wanted.passes("notifications/tools/list_changed", None));
    }

    #[test]
    fn without_a_token_or_level_the_answer_stays_json() {
        assert_eq!(Wanted::of(Some(&json!({"_meta": {}}))), None);
        assert_eq!(Wanted::of(None), None);
        let progress_only =
            Wanted::of(Some(&json!({"_meta": {"progressToken": 1}}))).expect("progress");
        assert!(!progress_only.passes(
            "notifications/message",
            Some(&json!({"level": "emergency"}))
        ));
    }
}
