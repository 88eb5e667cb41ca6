//! What a 2026-07-28 client asked to hear while its call runs (`_meta.progressToken`,
//! a log level), and which of the upstream's notifications pass to it.

use bytes::Bytes;
use serde_json::Value;

use crate::server::sse::sse_event;
use mtg_protocol::jsonrpc;
use mtg_protocol::meta;
use mtg_protocol::names::method;

/// What the client asked to hear about while the call runs.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Wanted {
    progress_token: Option<Value>,
    log_level: Option<String>,
}

impl Wanted {
    /// `None` when the client asked for neither: a plain JSON answer will do.
    pub(super) fn of(params: Option<&Value>) -> Option<Self> {
        let wanted = Self {
            progress_token: meta::progress_token(params).cloned(),
            log_level: meta::log_level(params).map(str::to_owned),
        };
        (wanted.progress_token.is_some() || wanted.log_level.is_some()).then_some(wanted)
    }

    /// A notification a task's runner relayed (`ToolCall::relay`) as the client's SSE
    /// frame, if it asked for it: the runner's progress token is the task's, so progress
    /// is put back under the client's own token first.
    pub(super) fn relayed_frame(
        &self,
        method_name: &str,
        mut params: Option<Value>,
    ) -> Option<Bytes> {
        if method_name == method::PROGRESS
            && let (Some(token), Some(object)) = (
                &self.progress_token,
                params.as_mut().and_then(Value::as_object_mut),
            )
        {
            object.insert("progressToken".into(), token.clone());
        }
        self.passes(method_name, params.as_ref()).then(|| {
            let message = jsonrpc::notification_value(method_name, params);
            sse_event(&serde_json::to_vec(&message).expect("JSON values serialize"))
        })
    }

    /// Notifications must relate to the client's request: progress under its own token,
    /// log messages at or above its level; anything else stays here.
    pub(super) fn passes(&self, method_name: &str, params: Option<&Value>) -> bool {
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

    #[test]
    fn relayed_progress_goes_back_under_the_clients_token() {
        let wanted = Wanted::of(Some(&json!({"_meta": {"progressToken": "mine"}}))).unwrap();
        let relayed = json!({"progressToken": "task-1", "progress": 2});
        let frame = wanted
            .relayed_frame(method::PROGRESS, Some(relayed))
            .expect("progress passes");
        let text = String::from_utf8(frame.to_vec()).unwrap();
        assert!(text.contains(r#""progressToken":"mine""#), "{text}");
    }
}
