//! What came back, and whether it is acceptable.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::ANSWER_TIMEOUT;
use crate::case::Case;

pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) content_type: Option<String>,
    pub(crate) body: Bytes,
}

pub(crate) enum Outcome {
    Responses(Vec<Answer>),
    /// The connection ended without a byte of response (reset or closed).
    Closed(String),
    /// A response started but its body did not arrive whole.
    BrokenBody(String),
    /// Bytes that are not HTTP/1.1 responses, and the bytes.
    Malformed(String, Vec<u8>),
    H2Frames,
    /// The client dropped the connection on purpose; nothing to read.
    Aborted,
    TimedOut,
    ClientError(String),
}

/// What the checks made of one outcome: the JSON-RPC codes seen, or why it failed.
pub(crate) struct Verdict {
    pub(crate) rpc: Vec<String>,
    pub(crate) failure: Option<String>,
}

pub(crate) fn judge(case: &Case, outcome: &Outcome) -> Verdict {
    let mut rpc = Vec::new();
    let failure = match outcome {
        Outcome::Responses(answers) => answers
            .iter()
            .find_map(|answer| check_answer(case, answer, &mut rpc).err()),
        Outcome::Closed(why) if !case.may_close => {
            Some(format!("closed without a response: {why}"))
        }
        Outcome::Closed(_) | Outcome::Aborted | Outcome::H2Frames => None,
        Outcome::BrokenBody(why) => Some(format!("response body broken: {why}")),
        Outcome::Malformed(why, _) => Some(format!("malformed HTTP response: {why}")),
        Outcome::TimedOut => Some(format!("no answer within {ANSWER_TIMEOUT:?}")),
        Outcome::ClientError(why) => Some(format!("client error: {why}")),
    };
    Verdict { rpc, failure }
}

fn check_answer(case: &Case, answer: &Answer, rpc: &mut Vec<String>) -> Result<(), String> {
    if case.is_head() {
        // No body, whatever the headers say.
        return case.expect.check(answer.status, &[]);
    }
    let media = answer
        .content_type
        .as_deref()
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    let status = answer.status;
    // What a client sends is never the gateway's own failure (#43): 500 is for faults
    // of the gateway's that no request should reach.
    if status == 500 && case.path_is_mcp() {
        return Err(format!(
            "HTTP 500 (the gateway's own failure) for a client's request: {}",
            String::from_utf8_lossy(&answer.body[..answer.body.len().min(300)])
        ));
    }
    let codes = match media.as_deref() {
        Some("application/json") if case.path_is_mcp() => {
            let value: Value = serde_json::from_slice(&answer.body)
                .map_err(|e| format!("{status} with a JSON body that does not parse: {e}"))?;
            let code = check_rpc_response(&value)?;
            if status >= 400 && code.is_none() {
                return Err(format!("{status} with a JSON-RPC result"));
            }
            if let Some(result) = value.get("result") {
                case.expect.check_result(result)?;
            }
            if let Some(error) = value.get("error") {
                case.expect.check_error(error)?;
            }
            vec![code]
        }
        Some("text/event-stream") => check_sse(&answer.body, case)?,
        _ => Vec::new(),
    };
    for code in &codes {
        rpc.push(code.map_or_else(|| "result".to_owned(), |c| c.to_string()));
    }
    case.expect.check(status, &codes)
}

/// A JSON-RPC response: `Some(code)` for an error, `None` for a result.
fn check_rpc_response(value: &Value) -> Result<Option<i64>, String> {
    let object = value
        .as_object()
        .ok_or("a JSON body that is not an object")?;
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(format!("no \"jsonrpc\": \"2.0\" in {}", clip(value)));
    }
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "jsonrpc" | "id" | "result" | "error"))
    {
        return Err(format!("member {extra:?} in a response: {}", clip(value)));
    }
    let id = object.get("id").ok_or("a response without \"id\"")?;
    if !(id.is_string() || id.is_i64() || id.is_u64() || id.is_null()) {
        return Err(format!("bad response id {id}"));
    }
    match (object.get("result"), object.get("error")) {
        (Some(_), None) if !id.is_null() => Ok(None),
        (None, Some(error)) => check_error_object(error).map(Some),
        _ => Err(format!(
            "not exactly one of result and error: {}",
            clip(value)
        )),
    }
}

fn check_error_object(error: &Value) -> Result<i64, String> {
    let object = error.as_object().ok_or("\"error\" is not an object")?;
    let code = object
        .get("code")
        .and_then(Value::as_i64)
        .ok_or_else(|| format!("error without an integer code: {}", clip(error)))?;
    if !object.get("message").is_some_and(Value::is_string) {
        return Err(format!("error without a message: {}", clip(error)));
    }
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "code" | "message" | "data"))
    {
        return Err(format!("member {extra:?} in an error object"));
    }
    Ok(code)
}

/// An SSE body: each event's data a JSON-RPC message; the responses' codes.
fn check_sse(body: &[u8], case: &Case) -> Result<Vec<Option<i64>>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "an SSE body that is not UTF-8")?;
    let mut codes = Vec::new();
    for event in text.replace("\r\n", "\n").split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&data.join("\n"))
            .map_err(|e| format!("SSE data that is not JSON: {e}"))?;
        if value.get("method").is_some() {
            if value.get("jsonrpc") != Some(&json!("2.0")) {
                return Err(format!("SSE message without jsonrpc: {}", clip(&value)));
            }
        } else {
            codes.push(check_rpc_response(&value)?);
            if let Some(result) = value.get("result") {
                case.expect.check_result(result)?;
            }
        }
    }
    if codes.is_empty() {
        return Err("an SSE stream that ended without a response".into());
    }
    Ok(codes)
}

fn clip(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}
