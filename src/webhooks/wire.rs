//! The webhook body, in one place: `{"type", "timestamp", "data": {...}}` made of an
//! event as the outbox kept it. The same event always makes the same bytes, so every
//! retry sends what the first attempt sent.

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use mtg_protocol::wire::rfc3339_millis;
use mtg_store::StoredEvent;

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    timestamp: String,
    data: Data<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Data<'a> {
    task_id: &'a str,
    status: &'a str,
    upstream: Option<&'a str>,
    tool: Option<&'a str>,
    principal: &'a str,
    created_at: String,
    last_updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    input_requests: Vec<InputRequestSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    result_truncated: bool,
}

/// An input request as the receiver sees it: its method and message only.
#[derive(Serialize)]
struct InputRequestSummary {
    method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn summary(text: &str) -> Option<InputRequestSummary> {
    let request: Value = serde_json::from_str(text).ok()?;
    Some(InputRequestSummary {
        method: request.get("method")?.as_str()?.to_owned(),
        message: request
            .pointer("/params/message")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

fn millis(text: &str) -> String {
    rfc3339_millis(text.parse().unwrap_or(0))
}

/// The body of `event` for the upstream `upstream` (`None`: the one at `/mcp`). The
/// result and arguments are in the event only for a subscription that includes them;
/// a result over `max_result_bytes` is left out and `resultTruncated` says so.
pub(crate) fn body(event: &StoredEvent, upstream: Option<&str>, max_result_bytes: u64) -> Vec<u8> {
    let (result, result_truncated) = match &event.result {
        Some(result) if result.len() as u64 > max_result_bytes => (None, true),
        Some(result) => (RawValue::from_string(result.clone()).ok(), false),
        None => (None, false),
    };
    let arguments = event
        .request
        .as_deref()
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
        .and_then(|r| r.get("arguments").cloned());
    let body = Body {
        kind: &event.kind,
        timestamp: millis(&event.at),
        data: Data {
            task_id: &event.task,
            status: &event.status,
            upstream,
            tool: event.tool.as_deref(),
            principal: &event.principal,
            created_at: millis(&event.created),
            last_updated_at: millis(&event.updated),
            status_message: event.msg.as_deref(),
            input_requests: event.ir.iter().filter_map(|r| summary(r)).collect(),
            error: event
                .error
                .as_ref()
                .and_then(|e| RawValue::from_string(e.clone()).ok()),
            arguments,
            result,
            result_truncated,
        },
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> StoredEvent {
        StoredEvent {
            id: "msg_1".into(),
            kind: "task.input_required".into(),
            at: "1764358000123".into(),
            task: "t-1".into(),
            principal: "p".into(),
            status: "input_required".into(),
            created: "1764358000000".into(),
            updated: "1764358000123".into(),
            msg: None,
            error: None,
            ir: vec![r#"{"method":"elicitation/create","params":{"message":"Your name?","requestedSchema":{}}}"#.into()],
            tool: Some("ask_name".into()),
            result: Some(r#"{"content":[{"type":"text","text":"secret"}]}"#.into()),
            request: Some(r#"{"name":"ask_name","arguments":{"a":1}}"#.into()),
        }
    }

    #[test]
    fn the_body_names_the_task_and_only_the_questions_method_and_message() {
        let body: Value = serde_json::from_slice(&body(&event(), Some("files"), 1 << 20)).unwrap();
        assert_eq!(body["type"], "task.input_required");
        assert_eq!(body["timestamp"], "2025-11-28T19:26:40.123Z");
        let data = &body["data"];
        assert_eq!(data["taskId"], "t-1");
        assert_eq!(data["upstream"], "files");
        assert_eq!(data["tool"], "ask_name");
        assert_eq!(
            data["inputRequests"],
            serde_json::json!([{"method": "elicitation/create", "message": "Your name?"}])
        );
        assert_eq!(data["result"]["content"][0]["text"], "secret");
        assert_eq!(data["arguments"]["a"], 1);
    }

    #[test]
    fn a_large_result_is_left_out_and_said_so() {
        let body: Value = serde_json::from_slice(&body(&event(), None, 10)).unwrap();
        assert!(body["data"].get("result").is_none());
        assert_eq!(body["data"]["resultTruncated"], true);
        assert!(body["data"]["upstream"].is_null());
    }
}
