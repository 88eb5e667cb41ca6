//! JSON-RPC 2.0 framing: reading requests the gateway handles itself, writing its answers.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// JSON-RPC and MCP error codes the gateway produces.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// The gateway's own: a caller already has as many tasks running as it may. Outside
    /// -32768..=-32000, where 2026-07-28 asks new application codes to go.
    pub const TOO_MANY_RUNNING_TASKS: i64 = -31429;
    /// The gateway's own: a caller sends `tasks/*` requests faster than
    /// `--max-task-requests-per-second` (HTTP 429 with `Retry-After`).
    pub const TOO_MANY_TASK_REQUESTS: i64 = -31430;
}

/// A JSON-RPC error object. `data` is optional detail for the client.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(code::INTERNAL_ERROR, message)
    }
}

/// One JSON-RPC message the gateway parsed. `params` is kept as a `Value` since the
/// gateway reads `_meta` and the method's own fields from it.
#[derive(Debug, Clone)]
pub enum Message {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    Response {
        id: Value,
        outcome: Result<Value, ErrorObject>,
    },
}

/// Why a body is not a JSON-RPC message; maps to the error the client gets.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("not a JSON-RPC 2.0 message: {0}")]
    NotJsonRpc(&'static str),
}

impl ParseError {
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            ParseError::Json(_) => {
                ErrorObject::new(code::PARSE_ERROR, format!("Parse error: {self}"))
            }
            ParseError::NotJsonRpc(_) => {
                ErrorObject::new(code::INVALID_REQUEST, format!("Invalid request: {self}"))
            }
        }
    }
}

impl Message {
    pub fn parse(body: &[u8]) -> Result<Message, ParseError> {
        let value: Value = serde_json::from_slice(body)?;
        Self::from_value(value)
    }

    pub fn from_value(value: Value) -> Result<Message, ParseError> {
        let Value::Object(mut obj) = value else {
            return Err(ParseError::NotJsonRpc(if value.is_array() {
                "batches are not supported; send one message per request"
            } else {
                "expected a JSON object"
            }));
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(ParseError::NotJsonRpc("\"jsonrpc\" must be \"2.0\""));
        }
        let id = obj.remove("id");
        if let Some(id) = &id
            && !(id.is_string() || id.is_i64() || id.is_u64())
        {
            return Err(ParseError::NotJsonRpc(
                "\"id\" must be a string or an integer",
            ));
        }
        // MCP defines no by-position (array) params; a `null` is read as no params.
        let params = obj.remove("params").filter(|p| !p.is_null());
        if params.as_ref().is_some_and(|p| !p.is_object()) {
            return Err(ParseError::NotJsonRpc("\"params\" must be an object"));
        }
        match (obj.remove("method"), id) {
            (Some(Value::String(method)), Some(id)) => Ok(Message::Request { id, method, params }),
            (Some(Value::String(method)), None) => Ok(Message::Notification { method, params }),
            (Some(_), _) => Err(ParseError::NotJsonRpc("\"method\" must be a string")),
            (None, Some(id)) => {
                let outcome = match (obj.remove("result"), obj.remove("error")) {
                    (Some(result), None) => Ok(result),
                    // serde would also read the array form `[code, message, data]`.
                    (None, Some(error @ Value::Object(_))) => Err(serde_json::from_value(error)
                        .map_err(|_| ParseError::NotJsonRpc("malformed \"error\" object"))?),
                    (None, Some(_)) => {
                        return Err(ParseError::NotJsonRpc("\"error\" must be an object"));
                    }
                    _ => {
                        return Err(ParseError::NotJsonRpc(
                            "a response needs exactly one of \"result\" and \"error\"",
                        ));
                    }
                };
                Ok(Message::Response { id, outcome })
            }
            (None, None) => Err(ParseError::NotJsonRpc("missing \"method\"")),
        }
    }
}

/// The JSON of a success response. `result` is already-serialized JSON, so results the
/// gateway only forwards are not serialized again.
pub fn success_body(id: &Value, result: &RawValue) -> Vec<u8> {
    // Sized once: the forwarded result is most of the body.
    success_sized(id, result, result.get().len() + ENVELOPE_BYTES)
}

/// Room for `{"jsonrpc":"2.0","id":…,"result":}` around a result.
const ENVELOPE_BYTES: usize = 64;

/// The JSON of a success response whose result is a serializable value.
pub fn success_body_of<T: Serialize>(id: &Value, result: &T) -> Vec<u8> {
    // A `tasks/get` answer without a result is a few hundred bytes: one allocation, not
    // the two or three of growing from `to_vec`'s 128.
    success_sized(id, result, 512)
}

fn success_sized<T: Serialize + ?Sized>(id: &Value, result: &T, capacity: usize) -> Vec<u8> {
    #[derive(Serialize)]
    struct Success<'a, T: ?Sized> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a T,
    }
    let mut body = Vec::with_capacity(capacity);
    serde_json::to_writer(
        &mut body,
        &Success {
            jsonrpc: "2.0",
            id,
            result,
        },
    )
    .expect("serializing a JSON-RPC response cannot fail");
    body
}

/// The JSON of an error response. `id` is `null` when the request's id could not be read.
pub fn error_body(id: Option<&Value>, error: &ErrorObject) -> Vec<u8> {
    #[derive(Serialize)]
    struct Failure<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        error: &'a ErrorObject,
    }
    serde_json::to_vec(&Failure {
        jsonrpc: "2.0",
        id: id.unwrap_or(&Value::Null),
        error,
    })
    .expect("serializing a JSON-RPC error cannot fail")
}

/// A request as the gateway sends it upstream.
pub fn request_value(id: Value, method: &str, params: Option<Value>) -> Value {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("id".into(), id);
    obj.insert("method".into(), method.into());
    if let Some(params) = params {
        obj.insert("params".into(), params);
    }
    Value::Object(obj)
}

/// A notification as the gateway sends it upstream.
pub fn notification_value(method: &str, params: Option<Value>) -> Value {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("method".into(), method.into());
    if let Some(params) = params {
        obj.insert("params".into(), params);
    }
    Value::Object(obj)
}

/// A response the gateway sends upstream to answer one of the upstream's requests.
pub fn response_value(id: Value, outcome: Result<Value, ErrorObject>) -> Value {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("id".into(), id);
    match outcome {
        Ok(result) => obj.insert("result".into(), result),
        Err(error) => obj.insert(
            "error".into(),
            serde_json::to_value(error).expect("error objects serialize"),
        ),
    };
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A result the gateway reads and writes again (bridged calls, task results) keeps
    /// every float as the upstream wrote it (serde_json's `float_roundtrip`).
    #[test]
    fn floats_survive_a_read_and_a_write() {
        for text in [
            "2.37912400050865e-244",
            "0.1",
            "1.7976931348623157e308",
            "5e-324",
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"x":{text}}}}}"#);
            let Ok(Message::Response {
                outcome: Ok(result),
                ..
            }) = Message::parse(body.as_bytes())
            else {
                panic!("not a response: {body}");
            };
            let again: f64 = text.parse().unwrap();
            assert_eq!(result["x"].as_f64(), Some(again), "{text}");
            let written = serde_json::to_string(&result).unwrap();
            let reread: Value = serde_json::from_str(&written).unwrap();
            assert_eq!(reread["x"].as_f64(), Some(again), "{text} -> {written}");
        }
    }

    #[test]
    fn classifies_messages() {
        let req = Message::parse(
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x"}}"#,
        )
        .unwrap();
        assert!(matches!(req, Message::Request { ref method, .. } if method == "tasks/get"));
        let note =
            Message::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(note, Message::Notification { .. }));
        let resp =
            Message::parse(br#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"m"}}"#)
                .unwrap();
        assert!(matches!(
            resp,
            Message::Response {
                outcome: Err(ErrorObject { code: -1, .. }),
                ..
            }
        ));
    }

    #[test]
    fn rejects_non_json_rpc_with_the_right_codes() {
        assert_eq!(
            Message::parse(b"{not json")
                .unwrap_err()
                .to_error_object()
                .code,
            code::PARSE_ERROR
        );
        for body in [
            &b"[]"[..],
            b"42",
            br#"{"id":1,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
            br#"{"jsonrpc":"2.0"}"#,
        ] {
            let err = Message::parse(body).unwrap_err().to_error_object();
            assert_eq!(
                err.code,
                code::INVALID_REQUEST,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn error_body_has_null_id_when_unknown() {
        let body = error_body(None, &ErrorObject::new(code::PARSE_ERROR, "bad"));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}})
        );
    }
}
