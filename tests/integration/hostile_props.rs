//! Property tests of the code that reads what a client sends (issue #20, hostile input):
//! the JSON-RPC parser, the standard headers and their Base64 form, `Mcp-Param-*`
//! mirroring, task ids, and the flags. Each property states what the input must give,
//! from the rule the code implements, so a change of behaviour fails it; "never panics"
//! is implied by every case running to its end.
//!
//! Case counts keep the whole file under a few seconds in a debug build. Failures are not
//! persisted (no `proptest-regressions/` files): the shrunk input is in the message.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::Parser;
use clap::error::ErrorKind;
use http::{HeaderMap, HeaderName, HeaderValue};
use mcp_task_gateway::config::Config;
use mcp_task_gateway::tasks::render;
use mtg_protocol::headers::{self, encode_value};
use mtg_protocol::jsonrpc::{self, ErrorObject, Message, code};
use mtg_protocol::param_headers::{self, ParamHeader};
use mtg_protocol::wire::{ResultType, TaskIdParams, TaskStatus};
use mtg_store::memory::MemoryStore;
use mtg_store::{CancelOutcome, TaskRecord, TaskStore, UpdateOutcome};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

const STATELESS: &str = "2026-07-28";

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// Generators shared by several sections.

/// Keys a JSON-RPC or schema reader looks at, mixed with arbitrary ones, so generated
/// objects hit the interesting branches often.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "jsonrpc", "id", "method", "params", "result", "error", "code", "message", "data",
            "_meta", "properties", "type", "x-mcp-header", "items", "anyOf", "name", "taskId",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,8}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Decimals serde_json reads back exactly: without its `float_roundtrip` feature
        // it may change the last digit of others (e.g. 2.37912400050865e-244).
        (any::<i32>(), 0i32..7).prop_map(|(m, e)| json!(f64::from(m) / 10f64.powi(e))),
        ".{0,12}".prop_map(Value::from),
        prop::sample::select(vec!["2.0", "string", "integer", "boolean", "number", "A"])
            .prop_map(Value::from),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Any text: unicode, control characters, whitespace, and the sentinel's pieces.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => ".{0,24}",
        2 => "[ -~]{0,24}",
        1 => "[\t \r\n\u{0}\u{7f}\u{85}\u{a0}]{0,4}[a-z=?]{0,6}[\t \u{0}\u{a0}]{0,3}",
        1 => "[a-zA-Z0-9+/=]{0,16}".prop_map(|s| format!("=?base64?{s}?=")),
        1 => "[a-z]{0,6}".prop_map(|s| format!("=?base64?{s}")),
    ]
}

// ---------------------------------------------------------------------------------------
// JSON-RPC parser.

/// One field of a generated message, of a kind whose validity the spec decides.
#[derive(Debug, Clone)]
enum Id {
    Str(String),
    Int(i64),
    Big(u64),
    Fraction(f64),
    Null,
    Bool(bool),
    Object,
    Array,
}

impl Id {
    /// JSON-RPC: a string or a number; MCP: never null, and never fractional.
    fn valid(&self) -> bool {
        matches!(self, Id::Str(_) | Id::Int(_) | Id::Big(_))
    }

    fn json(&self) -> Value {
        match self {
            Id::Str(s) => json!(s),
            Id::Int(n) => json!(n),
            Id::Big(n) => json!(n),
            Id::Fraction(f) => json!(f),
            Id::Null => Value::Null,
            Id::Bool(b) => json!(b),
            Id::Object => json!({"id": 1}),
            Id::Array => json!([1]),
        }
    }
}

fn arb_id() -> impl Strategy<Value = Id> {
    prop_oneof![
        3 => ".{0,10}".prop_map(Id::Str),
        3 => any::<i64>().prop_map(Id::Int),
        1 => ((i64::MAX as u64 + 1)..=u64::MAX).prop_map(Id::Big),
        1 => (-1e9f64..1e9).prop_filter("has a fraction", |f| f.fract() != 0.0).prop_map(Id::Fraction),
        1 => Just(Id::Null),
        1 => any::<bool>().prop_map(Id::Bool),
        1 => Just(Id::Object),
        1 => Just(Id::Array),
    ]
}

#[derive(Debug, Clone)]
enum Params {
    Absent,
    Null,
    Object(Map<String, Value>),
    /// By-position params, a string or a number: MCP has none of these.
    Other(Value),
}

fn arb_params() -> impl Strategy<Value = Params> {
    prop_oneof![
        2 => Just(Params::Absent),
        1 => Just(Params::Null),
        4 => prop::collection::btree_map(key(), arb_json(), 0..4)
            .prop_map(|m| Params::Object(m.into_iter().collect())),
        1 => prop_oneof![
            prop::collection::vec(leaf(), 0..3).prop_map(Value::Array),
            ".{0,5}".prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
        ]
        .prop_map(Params::Other),
    ]
}

/// What a message without `method` carries.
#[derive(Debug, Clone)]
enum Outcome {
    Neither,
    Result(Value),
    Error {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// Not an error object: no code, a fractional code, a non-string message, a scalar.
    /// (Arrays are left out: see `an_error_given_as_an_array_is_not_a_response`.)
    BadError(Value),
    Both,
}

fn arb_outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        1 => Just(Outcome::Neither),
        3 => arb_json().prop_map(Outcome::Result),
        3 => (any::<i64>(), ".{0,10}", prop::option::of(arb_json()))
            .prop_map(|(code, message, data)| Outcome::Error { code, message, data }),
        2 => prop_oneof![
            ".{0,10}".prop_map(|m| json!({"message": m})),
            any::<i64>().prop_map(|c| json!({"code": c})),
            any::<i64>().prop_map(|c| json!({"code": c, "message": 5})),
            (1i64..1000).prop_map(|c| json!({"code": c as f64 + 0.5, "message": "m"})),
            Just(json!("boom")),
            Just(json!(-32000)),
            Just(json!(true)),
        ]
        .prop_map(Outcome::BadError),
        1 => Just(Outcome::Both),
    ]
}

#[derive(Debug, Clone)]
enum Method {
    Absent,
    Str(String),
    Other(Value),
}

fn arb_method() -> impl Strategy<Value = Method> {
    prop_oneof![
        2 => Just(Method::Absent),
        4 => prop_oneof![
            prop::sample::select(vec!["tools/call", "tasks/get", "initialize", "ping"])
                .prop_map(str::to_owned),
            ".{0,12}",
        ]
        .prop_map(Method::Str),
        1 => prop_oneof![Just(Value::Null), any::<i32>().prop_map(Value::from), Just(json!({}))]
            .prop_map(Method::Other),
    ]
}

#[derive(Debug, Clone)]
struct Shape {
    version: Option<Value>,
    id: Option<Id>,
    method: Method,
    params: Params,
    outcome: Outcome,
}

fn arb_shape() -> impl Strategy<Value = Shape> {
    let version = prop_oneof![
        6 => Just(Some(json!("2.0"))),
        1 => Just(None),
        1 => prop::sample::select(vec![json!("1.0"), json!(2.0), json!("2.0 "), json!(null), json!("2")])
            .prop_map(Some),
    ];
    (
        version,
        prop::option::weighted(0.8, arb_id()),
        arb_method(),
        arb_params(),
        arb_outcome(),
    )
        .prop_map(|(version, id, method, params, outcome)| Shape {
            version,
            id,
            method,
            params,
            outcome,
        })
}

/// What the spec makes of a shape.
#[derive(Debug, PartialEq)]
enum Expected {
    Request,
    Notification,
    Response { error_code: Option<i64> },
    InvalidRequest,
}

impl Shape {
    fn expected(&self) -> Expected {
        let invalid = self.version != Some(json!("2.0"))
            || self.id.as_ref().is_some_and(|id| !id.valid())
            || matches!(self.params, Params::Other(_));
        if invalid {
            return Expected::InvalidRequest;
        }
        match (&self.method, &self.id, &self.outcome) {
            (Method::Str(_), Some(_), _) => Expected::Request,
            (Method::Str(_), None, _) => Expected::Notification,
            (Method::Other(_), _, _) | (Method::Absent, None, _) => Expected::InvalidRequest,
            (Method::Absent, Some(_), Outcome::Result(_)) => {
                Expected::Response { error_code: None }
            }
            (Method::Absent, Some(_), Outcome::Error { code, .. }) => Expected::Response {
                error_code: Some(*code),
            },
            (Method::Absent, Some(_), _) => Expected::InvalidRequest,
        }
    }

    /// The members, in the order given by `order` (a permutation seed).
    fn members(&self) -> Vec<(&'static str, Value)> {
        let mut members = Vec::new();
        if let Some(version) = &self.version {
            members.push(("jsonrpc", version.clone()));
        }
        if let Some(id) = &self.id {
            members.push(("id", id.json()));
        }
        match &self.method {
            Method::Absent => {}
            Method::Str(s) => members.push(("method", json!(s))),
            Method::Other(v) => members.push(("method", v.clone())),
        }
        match &self.params {
            Params::Absent => {}
            Params::Null => members.push(("params", Value::Null)),
            Params::Object(m) => members.push(("params", Value::Object(m.clone()))),
            Params::Other(v) => members.push(("params", v.clone())),
        }
        match &self.outcome {
            Outcome::Neither => {}
            Outcome::Result(v) => members.push(("result", v.clone())),
            Outcome::Error {
                code,
                message,
                data,
            } => {
                let mut error = json!({"code": code, "message": message});
                if let Some(data) = data {
                    error["data"] = data.clone();
                }
                members.push(("error", error));
            }
            Outcome::BadError(v) => members.push(("error", v.clone())),
            Outcome::Both => {
                members.push(("result", json!({})));
                members.push(("error", json!({"code": -1, "message": "m"})));
            }
        }
        members
    }
}

/// The JSON text of `members` in this order, with this much whitespace around tokens.
fn write_object(members: &[(&str, Value)], space: &str) -> Vec<u8> {
    let body: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{space}{}{space}:{space}{v}{space}", json!(k)))
        .collect();
    format!("{space}{{{}}}{space}", body.join(",")).into_bytes()
}

fn arb_message_bytes() -> impl Strategy<Value = (Shape, Vec<u8>)> {
    arb_shape().prop_flat_map(|shape| {
        let members = shape.members();
        (
            Just(shape),
            Just(members).prop_shuffle(),
            prop::sample::select(vec!["", " ", "\n\t", "\r\n  "]),
        )
            .prop_map(|(shape, members, space)| {
                let bytes = write_object(&members, space);
                (shape, bytes)
            })
    })
}

fn error_code(result: &Result<Message, jsonrpc::ParseError>) -> Option<i64> {
    result.as_ref().err().map(|e| e.to_error_object().code)
}

proptest! {
    #![proptest_config(cases(512))]

    /// Every shape is classified as the spec says, whatever the member order and
    /// whitespace; what is read back is what was written.
    #[test]
    fn messages_are_classified_as_the_spec_says((shape, bytes) in arb_message_bytes()) {
        let parsed = Message::parse(&bytes);
        let text = String::from_utf8_lossy(&bytes);
        match (shape.expected(), &parsed) {
            (Expected::InvalidRequest, Err(e)) => {
                prop_assert_eq!(e.to_error_object().code, code::INVALID_REQUEST, "{}", text);
            }
            (Expected::Request, Ok(Message::Request { id, method, params })) => {
                prop_assert_eq!(Some(id.clone()), shape.id.as_ref().map(Id::json));
                let same_method = matches!(&shape.method, Method::Str(m) if m == method);
                prop_assert!(same_method, "method {:?}", method);
                prop_assert_eq!(params, &object_params(&shape.params));
            }
            (Expected::Notification, Ok(Message::Notification { method, params })) => {
                let same_method = matches!(&shape.method, Method::Str(m) if m == method);
                prop_assert!(same_method, "method {:?}", method);
                prop_assert_eq!(params, &object_params(&shape.params));
            }
            (Expected::Response { error_code }, Ok(Message::Response { id, outcome })) => {
                prop_assert_eq!(Some(id.clone()), shape.id.as_ref().map(Id::json));
                match (error_code, outcome, &shape.outcome) {
                    (None, Ok(result), Outcome::Result(sent)) => prop_assert_eq!(result, sent),
                    (Some(code), Err(error), Outcome::Error { message, data, .. }) => {
                        prop_assert_eq!(error.code, code);
                        prop_assert_eq!(&error.message, message);
                        // A `null` data is no data.
                        prop_assert_eq!(&error.data, &data.clone().filter(|d| !d.is_null()));
                    }
                    other => prop_assert!(false, "outcome mismatch {:?} for {}", other, text),
                }
            }
            (expected, got) => prop_assert!(false, "expected {:?}, got {:?} for {}", expected, got, text),
        }
    }

    /// Arbitrary bytes: -32700 exactly when they are not JSON, else -32600 or a message.
    #[test]
    fn arbitrary_bytes_get_parse_error_exactly_when_not_json(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_json_or_parse_error(&bytes)?;
    }

    /// Valid messages with bytes flipped, inserted, deleted, duplicated or cut off.
    #[test]
    fn mutated_messages_get_parse_error_exactly_when_not_json(
        (_, bytes) in arb_message_bytes(),
        mutations in prop::collection::vec(arb_mutation(), 1..5),
    ) {
        let mut bytes = bytes;
        for mutation in &mutations {
            mutation.apply(&mut bytes);
        }
        check_json_or_parse_error(&bytes)?;
    }

    /// What the gateway writes, it reads back as the same message.
    #[test]
    fn written_messages_round_trip(
        id in arb_id().prop_filter("valid", Id::valid),
        method in ".{0,16}",
        params in prop::option::of(prop::collection::btree_map(key(), arb_json(), 0..4)),
        result in arb_json(),
        error_code_value in any::<i64>(),
        message in ".{0,16}",
        data in prop::option::of(arb_json().prop_filter("not null", |d| !d.is_null())),
    ) {
        let id = id.json();
        let params = params.map(|m| Value::Object(m.into_iter().collect()));
        let request = serde_json::to_vec(&jsonrpc::request_value(id.clone(), &method, params.clone()))
            .map_err(fail)?;
        match Message::parse(&request) {
            Ok(Message::Request { id: got_id, method: got, params: got_params }) => {
                prop_assert_eq!(&got_id, &id);
                prop_assert_eq!(&got, &method);
                prop_assert_eq!(&got_params, &params);
            }
            other => prop_assert!(false, "request read back as {:?}", other),
        }
        let note = serde_json::to_vec(&jsonrpc::notification_value(&method, params.clone()))
            .map_err(fail)?;
        let note_ok = matches!(
            Message::parse(&note),
            Ok(Message::Notification { method: ref m, params: ref p }) if *m == method && *p == params
        );
        prop_assert!(note_ok, "notification not read back");
        let success = jsonrpc::success_body_of(&id, &result);
        let success_ok = matches!(
            Message::parse(&success),
            Ok(Message::Response { id: ref i, outcome: Ok(ref r) }) if *i == id && *r == result
        );
        prop_assert!(success_ok, "success not read back");
        let mut error = ErrorObject::new(error_code_value, message);
        if let Some(data) = data {
            error = error.with_data(data);
        }
        let failure = jsonrpc::error_body(Some(&id), &error);
        let failure_ok = matches!(
            Message::parse(&failure),
            Ok(Message::Response { id: ref i, outcome: Err(ref e) }) if *i == id && *e == error
        );
        prop_assert!(failure_ok, "error body not read back");
        let response = serde_json::to_vec(&jsonrpc::response_value(id.clone(), Err(error.clone())))
            .map_err(fail)?;
        let response_ok = matches!(
            Message::parse(&response),
            Ok(Message::Response { outcome: Err(ref e), .. }) if *e == error
        );
        prop_assert!(response_ok, "error response not read back");
    }

    /// Nesting far past the parser's recursion limit is a parse error, not a crashed
    /// stack; nesting below it parses.
    #[test]
    fn deep_nesting_is_refused_without_overflowing(depth in 1usize..200_000, brackets in any::<bool>()) {
        let (open, close) = if brackets { ("[", "]") } else { ("{\"a\":", "}") };
        let nested = format!("{}1{}", open.repeat(depth), close.repeat(depth));
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"v":{nested}}}}}"#);
        let parsed = Message::parse(body.as_bytes());
        // serde_json's limit is 128 levels; the envelope takes two.
        if depth <= 120 {
            prop_assert!(matches!(parsed, Ok(Message::Request { .. })), "depth {}", depth);
        } else if depth > 130 {
            prop_assert_eq!(error_code(&parsed), Some(code::PARSE_ERROR), "depth {}", depth);
        }
    }
}

/// `Some(params)` for an object, `None` for absent or null, as the parser keeps them.
fn object_params(params: &Params) -> Option<Value> {
    match params {
        Params::Object(m) => Some(Value::Object(m.clone())),
        _ => None,
    }
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// The parser against serde_json as the judge of what is JSON: -32700 iff not JSON, and
/// JSON gets the same answer as `from_value` on the parsed tree.
fn check_json_or_parse_error(bytes: &[u8]) -> Result<(), TestCaseError> {
    let parsed = Message::parse(bytes);
    match serde_json::from_slice::<Value>(bytes) {
        Err(_) => prop_assert_eq!(error_code(&parsed), Some(code::PARSE_ERROR)),
        Ok(value) => {
            let direct = Message::from_value(value);
            prop_assert_eq!(error_code(&parsed), error_code(&direct));
            prop_assert_ne!(error_code(&parsed), Some(code::PARSE_ERROR));
            if let Err(e) = &parsed {
                prop_assert_eq!(e.to_error_object().code, code::INVALID_REQUEST);
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
    Duplicate(usize, usize),
}

/// Bytes that change JSON's structure more often than random ones.
fn structural_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        2 => prop::sample::select(b"{}[]\",:\\ 0-.eEtfn\x00\xff\xc3".to_vec()),
        1 => any::<u8>(),
    ]
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), structural_byte()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), structural_byte()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

impl Mutation {
    fn apply(&self, bytes: &mut Vec<u8>) {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
        let len = bytes.len();
        match *self {
            Mutation::Flip(i, b) if len > 0 => bytes[at(i, len)] = b,
            Mutation::Insert(i, b) => bytes.insert(at(i, len + 1), b),
            Mutation::Delete(i) if len > 0 => {
                bytes.remove(at(i, len));
            }
            Mutation::Truncate(i) => bytes.truncate(at(i, len + 1)),
            Mutation::Duplicate(i, n) if len > 0 => {
                let start = at(i, len);
                let end = (start + n).min(len);
                let copy = bytes[start..end].to_vec();
                bytes.splice(end..end, copy);
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------
// Standard headers and the Base64 sentinel.

/// The methods whose `Mcp-Name` mirrors a body field, and that field.
const NAMED: [(&str, &str); 5] = [
    ("tools/call", "name"),
    ("prompts/get", "name"),
    ("resources/read", "uri"),
    ("tasks/get", "taskId"),
    ("tasks/cancel", "taskId"),
];

fn header_map(pairs: &[(&str, HeaderValue)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
            value.clone(),
        );
    }
    map
}

/// The value of a header copy as the spec reads it: visible ASCII, trimmed, and the
/// sentinel form decoded with a standard Base64 decoder into UTF-8. `None`: unreadable.
fn spec_decode(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?.trim();
    match text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    {
        Some(encoded) => String::from_utf8(STANDARD.decode(encoded).ok()?).ok(),
        None => Some(text.to_owned()),
    }
}

/// A copy of a header that may or may not carry `expected`.
fn arb_copy(expected: String) -> impl Strategy<Value = Vec<u8>> {
    let encoded = encode_value(&expected);
    let base64 = format!("=?base64?{}?=", STANDARD.encode(expected.as_bytes()));
    prop_oneof![
        3 => Just(encoded.clone().into_bytes()),
        1 => Just(base64.clone().into_bytes()),
        1 => Just(base64.to_uppercase().into_bytes()),
        1 => prop::sample::select(vec![" ", "\t", "  \t"]).prop_map(move |pad| format!("{pad}{encoded}{pad}").into_bytes()),
        2 => any_text().prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..16),
        1 => "[A-Za-z0-9+/]{1,12}={0,3}".prop_map(|b| format!("=?base64?{b}?=").into_bytes()),
    ]
}

proptest! {
    #![proptest_config(cases(512))]

    /// `encode_value` gives a legal header value that validation accepts for its own
    /// text, and for no other; the encoded form decodes back with any Base64 decoder.
    #[test]
    fn encoded_names_are_accepted_for_exactly_their_text(
        text in any_text(),
        other in any_text(),
        named in prop::sample::select(NAMED.to_vec()),
    ) {
        let (method, field) = named;
        let encoded = encode_value(&text);
        let value = HeaderValue::from_str(&encoded).map_err(fail)?;
        if encoded != text {
            let inner = encoded
                .strip_prefix("=?base64?")
                .and_then(|e| e.strip_suffix("?="))
                .ok_or_else(|| fail(format!("not the sentinel form: {encoded:?}")))?;
            prop_assert_eq!(STANDARD.decode(inner).map_err(fail)?, text.as_bytes());
        }
        let headers = header_map(&[
            (headers::MCP_NAME, value),
            (headers::MCP_METHOD, HeaderValue::from_static(method)),
            (headers::MCP_PROTOCOL_VERSION, HeaderValue::from_static(STATELESS)),
        ]);
        let body = json!({ field: text });
        prop_assert!(headers::validate(&headers, method, Some(&body), STATELESS, true).is_ok());
        if other != text {
            let err = headers::validate(&headers, method, Some(&json!({ field: other })), STATELESS, true)
                .err()
                .ok_or_else(|| fail(format!("{encoded:?} accepted for {other:?}")))?;
            prop_assert_eq!(err.code, code::HEADER_MISMATCH);
        }
    }

    /// Only `Mcp-Name` and `Mcp-Param-*` may be Base64: an encoded `Mcp-Method` or
    /// `MCP-Protocol-Version` is a mismatch, so no routing decision is made on hidden text.
    #[test]
    fn method_and_version_are_never_decoded(method in any_text()) {
        let encoded = format!("=?base64?{}?=", STANDARD.encode(method.as_bytes()));
        let value = HeaderValue::from_str(&encoded).map_err(fail)?;
        let headers = header_map(&[(headers::MCP_METHOD, value.clone())]);
        let err = headers::validate(&headers, &method, None, STATELESS, false);
        prop_assert_eq!(err.map_err(|e| e.code), Err(code::HEADER_MISMATCH));
        let version = header_map(&[(headers::MCP_PROTOCOL_VERSION, value)]);
        let err = headers::validate(&version, &method, None, &method, false);
        prop_assert_eq!(err.map_err(|e| e.code), Err(code::HEADER_MISMATCH));
    }

    /// Any set of `Mcp-Name` copies: accepted exactly when every copy reads as the body's
    /// value (or there is none and headers are not required); refusals are -32020.
    #[test]
    fn every_copy_of_the_name_must_match(
        (expected, copies) in (any_text(), any_text()).prop_flat_map(|(expected, other)| {
            // Copies built around the body's value, mixed with copies of another text.
            let copy = prop_oneof![3 => arb_copy(expected.clone()), 1 => arb_copy(other)];
            (Just(expected), prop::collection::vec(copy, 0..4))
        }),
        named in prop::sample::select(NAMED.to_vec()),
        require_all in any::<bool>(),
    ) {
        let (method, field) = named;
        let values: Vec<HeaderValue> = copies
            .iter()
            .filter_map(|c| HeaderValue::from_bytes(c).ok())
            .collect();
        let mut pairs: Vec<(&str, HeaderValue)> =
            values.iter().map(|v| (headers::MCP_NAME, v.clone())).collect();
        pairs.push((headers::MCP_METHOD, HeaderValue::from_static(method)));
        pairs.push((headers::MCP_PROTOCOL_VERSION, HeaderValue::from_static(STATELESS)));
        let headers = header_map(&pairs);
        let outcome = headers::validate(&headers, method, Some(&json!({ field: expected })), STATELESS, require_all);
        let all_match = values.iter().all(|v| spec_decode(v).as_deref() == Some(expected.as_str()));
        let should_pass = all_match && (!values.is_empty() || !require_all);
        prop_assert_eq!(outcome.is_ok(), should_pass, "copies {:?} for {:?}", values, expected);
        if let Err(e) = outcome {
            prop_assert_eq!(e.code, code::HEADER_MISMATCH);
        }
    }

    /// Arbitrary bytes in every standard header, arbitrary method and params: no panic,
    /// and a refusal is always -32020.
    #[test]
    fn arbitrary_headers_are_refused_with_header_mismatch(
        raw in prop::collection::vec(
            (prop::sample::select(vec![headers::MCP_NAME, headers::MCP_METHOD, headers::MCP_PROTOCOL_VERSION, "mcp-param-a"]),
             prop::collection::vec(any::<u8>(), 0..24)),
            0..6),
        method in prop_oneof![prop::sample::select(NAMED.iter().map(|n| n.0.to_owned()).collect::<Vec<_>>()), ".{0,10}"],
        params in prop::option::of(arb_json()),
        version in any_text(),
        require_all in any::<bool>(),
    ) {
        let pairs: Vec<(&str, HeaderValue)> = raw
            .iter()
            .filter_map(|(name, bytes)| Some((*name, HeaderValue::from_bytes(bytes).ok()?)))
            .collect();
        let headers = header_map(&pairs);
        if let Err(e) = headers::validate(&headers, &method, params.as_ref(), &version, require_all) {
            prop_assert_eq!(e.code, code::HEADER_MISMATCH);
        }
        let annotations = [ParamHeader { path: vec!["a".into()], token: "a".into() }];
        let arguments = params.as_ref().and_then(|p| p.get("arguments"));
        if let Err(e) = headers::validate_params(&headers, &annotations, arguments, require_all) {
            prop_assert_eq!(e.code, code::HEADER_MISMATCH);
        }
    }
}

// ---------------------------------------------------------------------------------------
// `Mcp-Param-*` mirroring.

/// RFC 9110 `tchar`, written out again from the RFC.
fn spec_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// The node at `path`, following `properties` from the root.
fn node_at<'a>(schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(schema, |node, key| node.get("properties")?.get(key))
}

/// Every node reachable from the root through `properties` alone that carries
/// `x-mcp-header`, as (path, annotation).
fn reachable_annotations(
    schema: &Value,
    path: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Value)>,
) {
    if let Some(token) = schema.get("x-mcp-header") {
        out.push((path.clone(), token.clone()));
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            path.push(name.clone());
            reachable_annotations(property, path, out);
            path.pop();
        }
    }
}

/// A schema node for one property: an annotation with a token (sometimes not a token,
/// sometimes a non-primitive type), nested properties, or junk.
fn arb_schema() -> impl Strategy<Value = Value> {
    let token = prop_oneof![
        4 => "[A-Za-z0-9-]{1,8}",
        1 => "[!#$%&'*+.^_`|~]{1,3}",
        1 => ".{0,6}",
    ];
    let kind = prop::sample::select(vec![
        "string", "integer", "boolean", "number", "object", "array",
    ]);
    let annotated = (token, kind, any::<bool>()).prop_map(|(token, kind, as_string)| {
        let token = if as_string {
            json!(token)
        } else {
            json!(token.len())
        };
        json!({"type": kind, "x-mcp-header": token})
    });
    let leaf = prop_oneof![3 => annotated, 1 => arb_json()];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            3 => prop::collection::btree_map("[a-c]{1,2}", inner.clone(), 1..4)
                .prop_map(|props| json!({"type": "object", "properties": props})),
            1 => prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"anyOf": v})),
            1 => inner.prop_map(|i| json!({"type": "array", "items": i})),
        ]
    })
}

proptest! {
    #![proptest_config(cases(512))]

    /// On any schema: either a list of annotations each of which sits on a primitive
    /// property reachable through `properties`, with a unique token, and every such
    /// annotation listed; or a refusal.
    #[test]
    fn annotations_are_exactly_the_reachable_valid_ones(schema in prop_oneof![arb_schema(), arb_json()]) {
        let Ok(found) = param_headers::annotations(&schema) else {
            return Ok(());
        };
        let mut reachable = Vec::new();
        reachable_annotations(&schema, &mut Vec::new(), &mut reachable);
        prop_assert_eq!(found.len(), reachable.len(), "schema {}", schema);
        let mut tokens = std::collections::HashSet::new();
        for header in &found {
            prop_assert!(!header.path.is_empty());
            prop_assert!(!header.token.is_empty() && header.token.chars().all(spec_tchar));
            prop_assert!(tokens.insert(header.token.to_ascii_lowercase()), "duplicate {}", header.token);
            let node = node_at(&schema, &header.path)
                .ok_or_else(|| fail(format!("{:?} not reachable in {schema}", header.path)))?;
            prop_assert_eq!(node.get("x-mcp-header"), Some(&json!(header.token)));
            let kind = node.get("type").and_then(Value::as_str);
            prop_assert!(matches!(kind, Some("string" | "integer" | "boolean")), "type {:?}", kind);
            prop_assert_eq!(header.name(), format!("mcp-param-{}", header.token));
        }
    }

    /// Arbitrary arguments against any annotations: a header value exists only for a
    /// string, boolean or integer at the path, and it is that value's text.
    #[test]
    fn values_mirror_primitive_arguments_only(
        schema in arb_schema(),
        arguments in prop::option::of(arb_json()),
    ) {
        let Ok(found) = param_headers::annotations(&schema) else {
            return Ok(());
        };
        let listed = param_headers::values(&found, arguments.as_ref());
        let mut expected = Vec::new();
        for header in &found {
            let at = arguments
                .as_ref()
                .and_then(|a| header.path.iter().try_fold(a, |v, k| v.get(k)));
            let text = match at {
                Some(Value::String(s)) => Some((s.clone(), false)),
                Some(Value::Bool(b)) => Some((b.to_string(), false)),
                Some(Value::Number(n)) if n.as_i64().is_some() || n.as_u64().is_some() => {
                    Some((n.to_string(), true))
                }
                _ => None,
            };
            let got = param_headers::value_of(header, arguments.as_ref()).map(|v| (v.text, v.integer));
            prop_assert_eq!(&got, &text, "{:?} in {:?}", header.path, arguments);
            if let Some((text, _)) = text {
                expected.push((header.name(), text));
            }
        }
        prop_assert_eq!(listed, expected);
    }

    /// Values of annotated string, integer and boolean arguments, encoded, pass the
    /// gateway's own check; a changed value, or a header without its argument, does not.
    #[test]
    fn mirrored_arguments_round_trip_through_encode(
        text in any_text(),
        other in any_text(),
        // Within ±2^53: larger integers are compared as f64 (see docs/security.md).
        number in -(1i64 << 52)..(1i64 << 52),
        delta in 1i64..1000,
        flag in any::<bool>(),
        require_all in any::<bool>(),
    ) {
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "string", "x-mcp-header": "S"},
            "o": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}},
            "b": {"type": "boolean", "x-mcp-header": "B"},
        }});
        let found = param_headers::annotations(&schema).map_err(fail)?;
        let arguments = json!({"s": text, "o": {"n": number}, "b": flag});
        let headers_for = |arguments: &Value| -> Result<HeaderMap, TestCaseError> {
            let mut map = HeaderMap::new();
            for (name, value) in param_headers::values(&found, Some(arguments)) {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(fail)?;
                map.append(name, HeaderValue::from_str(&encode_value(&value)).map_err(fail)?);
            }
            Ok(map)
        };
        let good = headers_for(&arguments)?;
        prop_assert_eq!(good.len(), 3);
        prop_assert!(headers::validate_params(&good, &found, Some(&arguments), require_all).is_ok());

        // An integer may be written as a float.
        let mut as_float = good.clone();
        as_float.insert("mcp-param-n", HeaderValue::from_str(&format!("{number}.0")).map_err(fail)?);
        prop_assert!(headers::validate_params(&as_float, &found, Some(&arguments), require_all).is_ok());

        let changed = [
            ("s", json!({"s": other, "o": {"n": number}, "b": flag})),
            ("n", json!({"s": text, "o": {"n": number + delta}, "b": flag})),
            ("b", json!({"s": text, "o": {"n": number}, "b": !flag})),
        ];
        for (what, body) in changed {
            if what == "s" && other == text {
                continue;
            }
            let err = headers::validate_params(&good, &found, Some(&body), require_all)
                .err()
                .ok_or_else(|| fail(format!("{what} changed, headers still accepted")))?;
            prop_assert_eq!(err.code, code::HEADER_MISMATCH);
        }
        // A header whose argument is absent is a mismatch even when headers are optional.
        let err = headers::validate_params(&good, &found, Some(&json!({"s": text, "b": flag})), false);
        prop_assert_eq!(err.map_err(|e| e.code), Err(code::HEADER_MISMATCH));
    }
}

// ---------------------------------------------------------------------------------------
// Task ids.

fn record(task_id: &str, principal: &str) -> Result<TaskRecord, TestCaseError> {
    let now = mtg_store::now_ms();
    Ok(TaskRecord {
        task_id: task_id.to_owned(),
        principal: principal.to_owned(),
        owner: "instance-a".into(),
        status: TaskStatus::Working,
        status_message: None,
        created_at_ms: now,
        last_updated_at_ms: now,
        ttl_ms: 60_000,
        poll_interval_ms: 1000,
        input_requests: Default::default(),
        answers: Default::default(),
        next_input_key: 0,
        result: None,
        error: None,
        request: RawValue::from_string("{}".into()).map_err(fail)?,
        upstream_state: None,
        resume: None,
        takeovers: 0,
        keep_arguments: false,
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, TestCaseError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(fail)
}

proptest! {
    #![proptest_config(cases(256))]

    /// Any string as a task id reaches the store as it is: only the exact id, under its
    /// own principal, finds, answers or cancels the task; no other id touches it.
    #[test]
    fn task_ids_find_only_their_own_task(
        id in any_text(),
        probe in any_text(),
        principal in ".{0,8}",
        stranger in ".{0,8}",
    ) {
        runtime()?.block_on(async {
            let store = MemoryStore::start();
            store.create(record(&id, &principal)?).await.map_err(fail)?;
            if probe != id {
                prop_assert!(store.get(&probe, &principal).await.map_err(fail)?.is_none());
                prop_assert_eq!(store.cancel(&probe, &principal, "x").await.map_err(fail)?, CancelOutcome::NotFound);
                prop_assert_eq!(
                    store.accept_input_responses(&probe, &principal, Map::new()).await.map_err(fail)?,
                    UpdateOutcome::NotFound
                );
                store.set_status_message(&probe, "touched").await.map_err(fail)?;
                store.delete(&probe).await.map_err(fail)?;
            }
            if stranger != principal {
                prop_assert!(store.get(&id, &stranger).await.map_err(fail)?.is_none());
                prop_assert_eq!(store.cancel(&id, &stranger, "x").await.map_err(fail)?, CancelOutcome::NotFound);
            }
            let mine = store.get(&id, &principal).await.map_err(fail)?
                .ok_or_else(|| fail("the task's own id did not find it"))?;
            prop_assert_eq!(&mine.task_id, &id);
            prop_assert_eq!(mine.status, TaskStatus::Working);
            prop_assert_eq!(&mine.status_message, &None);
            let cancelled = matches!(
                store.cancel(&id, &principal, "x").await.map_err(fail)?,
                CancelOutcome::Cancelled { .. }
            );
            prop_assert!(cancelled, "the owner could not cancel its task");
            Ok::<(), TestCaseError>(())
        })?;
    }

    /// A task id is shown to the client exactly as stored, in valid JSON, and read back
    /// from `tasks/*` params only when it is a string.
    #[test]
    fn task_ids_render_and_read_back_unchanged(
        id in any_text(),
        created in any::<u64>(),
        not_a_string in leaf().prop_filter("not a string", |v| !v.is_string()),
    ) {
        let mut task = record(&id, "p")?;
        task.created_at_ms = created;
        task.last_updated_at_ms = created;
        let shown = serde_json::to_value(render::task_result(&task, ResultType::Complete)).map_err(fail)?;
        prop_assert_eq!(&shown["taskId"], &json!(id));
        prop_assert_eq!(&shown["status"], &json!("working"));
        let params: TaskIdParams = serde_json::from_value(json!({"taskId": id})).map_err(fail)?;
        prop_assert_eq!(&params.task_id, &id);
        let refused = serde_json::from_value::<TaskIdParams>(json!({ "taskId": not_a_string })).is_err();
        prop_assert!(refused, "a non-string taskId was read");
    }
}

// ---------------------------------------------------------------------------------------
// Flags.

const BASE: [&str; 3] = ["mcp-task-gateway", "--upstream", "http://127.0.0.1:9/mcp"];

fn parse(extra: &[String]) -> Result<Config, clap::Error> {
    let args: Vec<String> = BASE
        .iter()
        .map(|s| (*s).to_owned())
        .chain(extra.iter().cloned())
        .collect();
    Config::try_parse_from(args)
}

/// A numeric flag, its accepted range, and where the parsed value lands.
struct Numeric {
    flag: &'static str,
    min: u128,
    max: u128,
    read: fn(&Config) -> u128,
}

const NUMERIC: &[Numeric] = &[
    Numeric {
        flag: "--poll-interval-ms",
        min: 0,
        max: u64::MAX as u128,
        read: |c| c.tasks.poll_interval_ms.into(),
    },
    Numeric {
        flag: "--default-ttl-ms",
        min: 1000,
        max: u64::MAX as u128,
        read: |c| c.tasks.default_ttl_ms.into(),
    },
    Numeric {
        flag: "--max-ttl-ms",
        min: 1000,
        max: u64::MAX as u128,
        read: |c| c.tasks.max_ttl_ms.into(),
    },
    Numeric {
        flag: "--upstream-timeout-ms",
        min: 0,
        max: u64::MAX as u128,
        read: |c| c.upstream.upstream_timeout_ms.into(),
    },
    Numeric {
        flag: "--max-takeovers",
        min: 0,
        max: u32::MAX as u128,
        read: |c| c.cluster.max_takeovers.into(),
    },
    Numeric {
        flag: "--input-wait-timeout-ms",
        min: 100,
        max: u64::MAX as u128,
        read: |c| c.bridge.input_wait_timeout_ms.into(),
    },
    Numeric {
        flag: "--promote-after-ms",
        min: 0,
        max: u64::MAX as u128,
        read: |c| c.tasks.promote_after_ms.into(),
    },
    Numeric {
        flag: "--max-running-tasks-per-principal",
        min: 0,
        max: u32::MAX as u128,
        read: |c| c.limits.max_running_tasks_per_principal.into(),
    },
    Numeric {
        flag: "--session-idle-timeout-ms",
        min: 1,
        max: u64::MAX as u128,
        read: |c| c.limits.session_idle_timeout_ms.into(),
    },
    Numeric {
        flag: "--max-sessions",
        min: 1,
        max: u64::MAX as u128,
        read: |c| c.limits.max_sessions.into(),
    },
    Numeric {
        flag: "--upstream-read-buffer-bytes",
        min: 512,
        max: 1_048_576,
        read: |c| c.upstream.upstream_read_buffer_bytes.into(),
    },
    Numeric {
        flag: "--worker-threads",
        min: 1,
        max: 1024,
        read: |c| c.edge.worker_threads.map_or(0, u128::from),
    },
    Numeric {
        flag: "--idle-poll-us",
        min: 0,
        max: 10_000,
        read: |c| c.edge.idle_poll_us.into(),
    },
    Numeric {
        flag: "--max-body-bytes",
        min: 0,
        max: usize::MAX as u128,
        read: |c| c.limits.max_body_bytes as u128,
    },
    Numeric {
        flag: "--drain-timeout-ms",
        min: 0,
        max: u64::MAX as u128,
        read: |c| c.operations.drain_timeout_ms.into(),
    },
    Numeric {
        flag: "--redis-wait-replicas",
        min: 0,
        max: u32::MAX as u128,
        read: |c| c.store.redis_wait_replicas.into(),
    },
    Numeric {
        flag: "--redis-timeout-ms",
        min: 1,
        max: u64::MAX as u128,
        read: |c| c.store.redis_timeout_ms.into(),
    },
    Numeric {
        flag: "--max-task-requests-per-second",
        min: 0,
        max: u32::MAX as u128,
        read: |c| c.limits.max_task_requests_per_second.into(),
    },
    Numeric {
        flag: "--lease-timeout-ms",
        min: 100,
        max: u64::MAX as u128,
        read: |c| c.cluster.lease_timeout_ms.into(),
    },
];

/// Text for a number: plain digits near the interesting bounds, or something that
/// only looks numeric.
fn arb_number_text() -> impl Strategy<Value = String> {
    let bound = prop::sample::select(vec![
        0u128,
        1,
        99,
        100,
        511,
        512,
        999,
        1000,
        1024,
        1025,
        1_048_576,
        1_048_577,
        u32::MAX as u128,
        u32::MAX as u128 + 1,
        u64::MAX as u128,
        u64::MAX as u128 + 1,
    ]);
    prop_oneof![
        3 => bound.prop_map(|n| n.to_string()),
        2 => any::<u64>().prop_map(|n| n.to_string()),
        2 => prop::sample::select(vec![
            "", " 5", "5 ", "-1", "-0", "+7", "0x10", "1e3", "1.5", "1_000", "007",
            "99999999999999999999999999999999", "٣", "NaN",
        ]).prop_map(str::to_owned),
        1 => ".{0,6}",
    ]
}

/// Plain decimal digits, nothing else: the one spelling every parser agrees on.
fn canonical(text: &str) -> Option<u128> {
    let plain = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    plain.then(|| text.parse::<u128>().ok()).flatten()
}

proptest! {
    #![proptest_config(cases(256))]

    /// Every numeric flag: plain digits are accepted exactly within the flag's range and
    /// land unchanged; anything accepted lands as the number it spells, within range;
    /// refusals are clap's value errors.
    #[test]
    fn numeric_flags_take_exactly_their_range(
        which in 0..NUMERIC.len(),
        text in arb_number_text(),
    ) {
        let numeric = &NUMERIC[which];
        let parsed = parse(&[format!("{}={text}", numeric.flag)]);
        match (&parsed, canonical(&text)) {
            (Ok(config), Some(n)) => {
                prop_assert!((numeric.min..=numeric.max).contains(&n), "{} accepted {}", numeric.flag, text);
                prop_assert_eq!((numeric.read)(config), n);
            }
            (Err(e), Some(n)) => {
                prop_assert!(!(numeric.min..=numeric.max).contains(&n), "{} refused {}: {}", numeric.flag, text, e);
                prop_assert!(matches!(e.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue), "{:?}", e.kind());
            }
            (Ok(config), None) => {
                let value = (numeric.read)(config);
                prop_assert!((numeric.min..=numeric.max).contains(&value));
                let spelled = text.trim_start_matches('+').trim_start_matches('-').parse::<u128>();
                prop_assert_eq!(spelled.ok(), Some(value), "{} accepted {:?}", numeric.flag, text);
            }
            (Err(e), None) => {
                prop_assert!(matches!(e.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue), "{:?}", e.kind());
            }
        }
    }

    /// The text flags with rules of their own: accepted exactly as the rule says.
    #[test]
    fn text_flags_follow_their_rules(
        instance in prop_oneof![".{0,12}", "[a-z{} \t-]{0,6}", "[a-z]{199,202}"],
        redis in prop_oneof![".{0,12}", "(redis|rediss|http|REDIS|)(://|:/|)[a-z:0-9/]{0,6}"],
        key in prop_oneof![".{0,40}", "[a-z]{30,34}"],
        format in prop_oneof![".{0,6}", prop::sample::select(vec!["pretty", "json", "JSON", " json"]).prop_map(str::to_owned)],
    ) {
        let rule_instance = !instance.is_empty()
            && instance.len() <= 200
            && !instance.contains(['{', '}'])
            && !instance.chars().any(char::is_whitespace);
        let parsed = parse(&[format!("--instance-id={instance}")]);
        prop_assert_eq!(parsed.is_ok(), rule_instance, "instance id {:?}", instance);
        if let Ok(config) = parsed {
            prop_assert_eq!(config.cluster.instance_id, instance);
        }

        let rule_redis = matches!(redis.split_once("://"), Some(("redis" | "rediss", rest)) if !rest.is_empty());
        let parsed = parse(&[format!("--redis={redis}")]);
        prop_assert_eq!(parsed.is_ok(), rule_redis, "redis {:?}", redis);
        if let Ok(config) = parsed {
            prop_assert_eq!(config.store.redis, Some(redis));
        }

        let parsed = parse(&[format!("--request-state-key={key}")]);
        prop_assert_eq!(parsed.is_ok(), key.len() >= 32, "key of {} bytes", key.len());

        let parsed = parse(&[format!("--log-format={format}")]);
        prop_assert_eq!(parsed.is_ok(), format == "pretty" || format == "json", "format {:?}", format);
    }

    /// `--tool-policy`: comma-separated `NAME=POLICY`, each with a name and one of the
    /// three policies, or the whole flag is refused.
    #[test]
    fn tool_policies_follow_their_rule(
        pieces in prop::collection::vec(
            (prop_oneof!["[a-z_]{0,5}", "[^,=]{0,5}"],
             prop::option::weighted(0.9, prop_oneof![
                 4 => prop::sample::select(vec!["required", "optional", "forbidden"]).prop_map(str::to_owned),
                 1 => "[a-zA-Z= ]{0,9}",
             ])),
            1..4),
    ) {
        let text: Vec<String> = pieces
            .iter()
            .map(|(name, policy)| match policy {
                Some(p) => format!("{name}={p}"),
                None => name.clone(),
            })
            .collect();
        let all_good = pieces.iter().all(|(name, policy)| {
            !name.is_empty() && matches!(policy.as_deref(), Some("required" | "optional" | "forbidden"))
        });
        let parsed = parse(&[format!("--tool-policy={}", text.join(","))]);
        prop_assert_eq!(parsed.is_ok(), all_good, "{:?}", text);
        if let Ok(config) = parsed {
            let map: std::collections::HashMap<_, _> = config.tasks.tool_policies.into_iter().collect();
            for (name, _) in &pieces {
                prop_assert!(map.contains_key(name));
            }
        }
    }

    /// `--upstream`: whatever is accepted is an http or https URL with a host; plain ones are
    /// accepted.
    #[test]
    fn upstream_urls_are_http_with_a_host(
        raw in prop_oneof![".{0,20}", "(http|https|ftp|HTTP|)(://|:)[a-z0-9.:@\\[\\]]{0,10}(/[a-z]{0,4})?"],
        host in "[a-z][a-z0-9]{0,8}",
        port in any::<u16>(),
    ) {
        let args = ["mcp-task-gateway".to_owned(), format!("--upstream={raw}")];
        if let Ok(config) = Config::from_args(args) {
            let url = config.upstream.url.ok_or_else(|| fail("no upstream"))?;
            prop_assert!(matches!(url.scheme_str(), Some("http" | "https")), "{}", raw);
            // An empty host (`http://:`) is accepted today: see
            // `an_upstream_url_with_an_empty_host_is_refused` below.
            prop_assert!(url.host().is_some(), "{}", raw);
        }
        let plain = format!("http://{host}:{port}/mcp");
        let config = Config::from_args(["mcp-task-gateway".to_owned(), format!("--upstream={plain}")])
            .map_err(fail)?;
        prop_assert_eq!(config.upstream.url.map(|u| u.to_string()), Some(plain));
    }

    /// `check`: a TTL (capped by the maximum) shorter than the poll interval is refused,
    /// anything else passes.
    #[test]
    fn ttl_shorter_than_the_poll_interval_is_inconsistent(
        ttl in 1000u64..10_000_000,
        max in 1000u64..10_000_000,
        poll in 0u64..20_000_000,
    ) {
        let config = parse(&[
            format!("--default-ttl-ms={ttl}"),
            format!("--max-ttl-ms={max}"),
            format!("--poll-interval-ms={poll}"),
        ])
        .map_err(fail)?;
        prop_assert_eq!(config.check().is_err(), ttl.min(max) < poll);
    }

    /// Arbitrary argument lists (invalid UTF-8 included): clap's error, never a panic,
    /// never an internal error kind, and help or version only when asked for.
    #[test]
    fn arbitrary_arguments_get_clap_errors(
        args in prop::collection::vec(prop_oneof![
            3 => prop::sample::select(vec![
                "--upstream", "--upstream-cmd", "--listen", "--tool-policy", "--redis",
                "--redis-cluster", "--instance-id", "--max-body-bytes", "--admin-token-file",
                "--lenient-headers", "--upstream-env", "--config", "--", "-", "--=", "-x",
            ]).prop_map(|s| s.as_bytes().to_vec()),
            2 => ".{0,10}".prop_map(String::into_bytes),
            1 => prop::collection::vec(any::<u8>(), 0..10),
        ], 0..8),
    ) {
        let mut argv = vec![OsString::from("mcp-task-gateway")];
        argv.extend(args.iter().cloned().map(OsString::from_vec));
        if let Err(e) = Config::try_parse_from(argv) {
            prop_assert!(!matches!(e.kind(), ErrorKind::Io | ErrorKind::Format), "{:?}", e.kind());
            let asked = args.iter().any(|a| a.starts_with(b"-h") || a == b"--help" || a.starts_with(b"-V") || a == b"--version");
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                prop_assert!(asked);
            }
            prop_assert!(!e.render().to_string().is_empty());
        }
    }
}

/// Found by `upstream_urls_are_http_with_a_host`: `parse_upstream_url` checks
/// `uri.host().is_some()`, and `http::Uri` gives `Some("")` for `http://:` and
/// `http://:8080/mcp`, so the gateway starts with an upstream it can never reach instead
/// of refusing the flag. Ignored until `src/config.rs` refuses an empty host.
#[test]
fn an_upstream_url_with_an_empty_host_is_refused() {
    for raw in ["http://:", "http://:8080/mcp", "https://:443"] {
        let parsed = Config::try_parse_from(["mcp-task-gateway", "--upstream", raw]);
        assert!(parsed.is_err(), "{raw} accepted");
    }
}

/// Found while writing `mirrored_arguments_round_trip_through_encode`: an integer
/// argument's header is compared as an `f64` (`same_number`), so past 2^53 a header that
/// names another integer matches the body (9007199254740993 reads as 9007199254740992),
/// and a load balancer routing on the header sees a different value than the upstream.
#[test]
fn integer_param_headers_past_2_pow_53_must_match_exactly() {
    let schema = json!({"properties": {"n": {"type": "integer", "x-mcp-header": "N"}}});
    let found = param_headers::annotations(&schema).expect("a valid annotation");
    let mut headers = HeaderMap::new();
    headers.insert("mcp-param-n", HeaderValue::from_static("9007199254740993"));
    let body = json!({"n": 9_007_199_254_740_992_u64});
    assert!(headers::validate_params(&headers, &found, Some(&body), true).is_err());
}

/// Found by reading `Message::from_value`: `ErrorObject` is read with serde's derived
/// `Deserialize`, which also takes a struct as a JSON array, so `"error": [-32000, "m", null]`
/// is read as an error although JSON-RPC requires an object.
#[test]
fn an_error_given_as_an_array_is_not_a_response() {
    let parsed = Message::parse(br#"{"jsonrpc":"2.0","id":1,"error":[-32000,"m",null]}"#);
    assert_eq!(error_code(&parsed), Some(code::INVALID_REQUEST));
}
