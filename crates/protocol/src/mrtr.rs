//! Multi round-trip requests (MRTR) of 2026-07-28: the `InputRequiredResult` an upstream
//! returns when it needs input, and the retry that carries the answers back.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::wire::InputRequest;

pub(crate) const RESULT_TYPE_INPUT_REQUIRED: &str = "input_required";
pub(crate) const INPUT_RESPONSES: &str = "inputResponses";
pub(crate) const REQUEST_STATE: &str = "requestState";
/// Rounds in a row that ask for nothing (only a `requestState`, so the retry is
/// immediate) before the gateway decides the upstream is looping.
pub const MAX_ROUNDS_WITHOUT_INPUT: u32 = 16;

/// Whether a result asks for input instead of being final.
pub fn is_input_required(result: &Value) -> bool {
    result.get("resultType").and_then(Value::as_str) == Some(RESULT_TYPE_INPUT_REQUIRED)
}

/// The parts of an `InputRequiredResult` the gateway reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequired {
    /// Server-assigned keys, unique within this round only.
    #[serde(default)]
    pub input_requests: BTreeMap<String, InputRequest>,
    /// Opaque to the gateway; echoed back exactly.
    pub request_state: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum InputRequiredError {
    #[error("malformed InputRequiredResult: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("InputRequiredResult has neither inputRequests nor requestState")]
    Empty,
}

impl InputRequired {
    pub fn parse(result: &Value) -> Result<Self, InputRequiredError> {
        let parsed = Self::deserialize(result)?;
        if parsed.input_requests.is_empty() && parsed.request_state.is_none() {
            return Err(InputRequiredError::Empty);
        }
        Ok(parsed)
    }
}

/// The params of a retry: the original request's params with this round's answers and
/// state. Answers and state of an earlier round are replaced, never merged.
pub fn retry_params(
    original: &Value,
    responses: Map<String, Value>,
    request_state: Option<&str>,
) -> Value {
    let mut params = original.clone();
    if let Some(obj) = params.as_object_mut() {
        obj.remove(INPUT_RESPONSES);
        obj.remove(REQUEST_STATE);
        if !responses.is_empty() {
            obj.insert(INPUT_RESPONSES.into(), Value::Object(responses));
        }
        // Without a state in the InputRequiredResult, the retry must not carry one.
        if let Some(state) = request_state {
            obj.insert(REQUEST_STATE.into(), Value::String(state.to_owned()));
        }
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_an_input_required_result() {
        let result = json!({
            "resultType": "input_required",
            "inputRequests": {"q": {"method": "elicitation/create", "params": {"message": "?"}}},
            "requestState": "s\u{e9}1"
        });
        assert!(is_input_required(&result));
        let parsed = InputRequired::parse(&result).unwrap();
        assert_eq!(parsed.input_requests["q"].method, "elicitation/create");
        assert_eq!(parsed.request_state.as_deref(), Some("s\u{e9}1"));
        assert!(!is_input_required(
            &json!({"resultType": "complete", "content": []})
        ));
        assert!(matches!(
            InputRequired::parse(&json!({"resultType": "input_required"})),
            Err(InputRequiredError::Empty)
        ));
        assert!(InputRequired::parse(&json!({"inputRequests": {"q": 3}})).is_err());
    }

    #[test]
    fn retry_replaces_the_previous_round() {
        let original = json!({"name": "t", "arguments": {"a": 1}, "inputResponses": {"old": 1}, "requestState": "old"});
        let answers = Map::from_iter([("k".to_owned(), json!({"action": "accept"}))]);
        let retry = retry_params(&original, answers, Some("new"));
        assert_eq!(
            retry,
            json!({"name": "t", "arguments": {"a": 1}, "inputResponses": {"k": {"action": "accept"}}, "requestState": "new"})
        );
        let retry = retry_params(&original, Map::new(), None);
        assert_eq!(retry, json!({"name": "t", "arguments": {"a": 1}}));
    }
}
