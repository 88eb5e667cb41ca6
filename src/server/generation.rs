//! Which generation of client sent a `/mcp` request: one rule for every path, whatever
//! the signals say (ARCHITECTURE.md, "The generation"), and its property tests.

use http::HeaderMap;
use serde_json::json;

use mtg_protocol::headers::MCP_PROTOCOL_VERSION;
use mtg_protocol::jsonrpc::{ErrorObject, Message, code};
use mtg_protocol::meta;
use mtg_protocol::names::{self, Generation, SESSION_VERSIONS, STATELESS_VERSION};

/// Whether a request with `Mcp-Session-Id` may be other than session traffic by
/// [`classify`], judged without parsing: its header is not a session version, or its
/// body may hold the `_meta` version key (`protocolVersion`, or an escape that could
/// spell it). Only then is session traffic parsed.
pub(super) fn may_say_stateless(headers: &HeaderMap, body: &[u8]) -> bool {
    let session_header = match headers.get(MCP_PROTOCOL_VERSION) {
        None => true,
        Some(v) => v
            .to_str()
            .map(str::trim)
            .is_ok_and(|v| v.starts_with("2024-") || v.starts_with("2025-")),
    };
    !session_header
        || memchr::memchr(b'\\', body).is_some()
        || memchr::memmem::find(body, b"protocolVersion").is_some()
}

/// A request's generation, one rule for every path (ARCHITECTURE.md, "The generation"),
/// or the error that refuses the request:
/// `initialize` opens a session; else a version in `_meta` makes the request of the
/// 2026-07-28 form (2026-07-28, or -32022), whatever its header or `Mcp-Session-Id`
/// say (a disagreeing header is -32020 on the stateless path); else the header
/// decides (2026-07-28 without `_meta`: -32602; a session version or none: session
/// traffic; another: -32022). `Mcp-Session-Id` never makes a request a session's
/// when its own version says 2026-07-28: such a request is answered as 2026-07-28,
/// its session id ignored.
pub(super) fn classify(headers: &HeaderMap, message: &Message) -> Result<Generation, ErrorObject> {
    let (method, params) = match message {
        Message::Request { method, params, .. } | Message::Notification { method, params } => {
            (method.as_str(), params.as_ref())
        }
        Message::Response { .. } => return Ok(Generation::Session),
    };
    if method == names::method::INITIALIZE {
        return Ok(Generation::Session);
    }
    let header_version = headers
        .get(MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    match (meta::protocol_version(params), header_version) {
        (Some(STATELESS_VERSION), _) => Ok(Generation::Stateless),
        (Some(other), _) => Err(unsupported_version(other, &[STATELESS_VERSION])),
        (None, None) => Ok(Generation::Session),
        (None, Some(STATELESS_VERSION)) => Err(ErrorObject::invalid_params(format!(
            "params._meta[\"{}\"] is required in {STATELESS_VERSION} requests",
            meta::META_PROTOCOL_VERSION
        ))),
        (None, Some(v)) if v.starts_with("2024-") || v.starts_with("2025-") => {
            Ok(Generation::Session)
        }
        (None, Some(other)) => Err(unsupported_version(other, &SESSION_VERSIONS)),
    }
}

/// -32022 naming the versions a request of this form accepts: a stateless request
/// (version in `_meta`) only 2026-07-28, a session request (version in the header
/// alone) only the session versions.
fn unsupported_version(requested: &str, supported: &[&str]) -> ErrorObject {
    ErrorObject::new(
        code::UNSUPPORTED_PROTOCOL_VERSION,
        format!(
            "Unsupported protocol version {requested:?}; this request's form accepts {}",
            supported.join(", ")
        ),
    )
    .with_data(json!({"supported": supported, "requested": requested}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mtg_protocol::names::header::MCP_SESSION_ID as SESSION_HEADER;
    use serde_json::Value;

    fn request(method: &str, params: Value) -> Message {
        Message::Request {
            id: json!(1),
            method: method.into(),
            params: Some(params),
        }
    }

    fn headers(version: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(version) = version {
            headers.insert(MCP_PROTOCOL_VERSION, version.parse().unwrap());
        }
        headers
    }

    fn with_version(version: &str) -> Value {
        json!({"_meta": {meta::META_PROTOCOL_VERSION: version}})
    }

    fn rejected_code(classified: Result<Generation, ErrorObject>) -> i64 {
        match classified {
            Err(error) => error.code,
            Ok(Generation::Session) => panic!("a session request, expected a rejection"),
            Ok(Generation::Stateless) => panic!("a stateless request, expected a rejection"),
        }
    }

    #[test]
    fn the_version_in_meta_makes_a_request_stateless() {
        let message = request("tools/list", with_version(STATELESS_VERSION));
        assert!(matches!(
            classify(&headers(None), &message),
            Ok(Generation::Stateless)
        ));
        let header = headers(Some(STATELESS_VERSION));
        assert!(matches!(
            classify(&header, &message),
            Ok(Generation::Stateless)
        ));
    }

    #[test]
    fn initialize_responses_and_unmarked_requests_are_session_traffic() {
        let initialize = request("initialize", with_version(STATELESS_VERSION));
        assert!(matches!(
            classify(&headers(None), &initialize),
            Ok(Generation::Session)
        ));
        let response = Message::Response {
            id: json!(1),
            outcome: Ok(json!({})),
        };
        assert!(matches!(
            classify(&headers(None), &response),
            Ok(Generation::Session)
        ));
        let plain = request("tools/list", json!({}));
        assert!(matches!(
            classify(&headers(None), &plain),
            Ok(Generation::Session)
        ));
        for version in ["2025-11-25", "2025-03-26", "2024-11-05"] {
            assert!(matches!(
                classify(&headers(Some(version)), &plain),
                Ok(Generation::Session)
            ));
        }
    }

    #[test]
    fn unknown_versions_and_a_stateless_header_without_meta_are_rejected() {
        let plain = request("tools/list", json!({}));
        let unknown = request("tools/list", with_version("2030-01-01"));
        assert_eq!(
            rejected_code(classify(&headers(None), &unknown)),
            code::UNSUPPORTED_PROTOCOL_VERSION
        );
        assert_eq!(
            rejected_code(classify(&headers(Some("1999-01-01")), &plain)),
            code::UNSUPPORTED_PROTOCOL_VERSION
        );
        assert_eq!(
            rejected_code(classify(&headers(Some(STATELESS_VERSION)), &plain)),
            code::INVALID_PARAMS
        );
    }

    /// The generation rule over every combination of its signals (#43): the header,
    /// the `_meta` version (also as a non-string), `Mcp-Session-Id`, the method and the
    /// message kind, with the `_meta` key sometimes written with JSON escapes.
    mod generation_props {
        use super::*;
        use proptest::prelude::*;

        /// What ARCHITECTURE.md ("The generation") says, written apart from `classify`.
        #[derive(Debug, PartialEq)]
        enum Expected {
            Session,
            Stateless,
            Rejected(i64),
        }

        fn expected(
            kind: u8,
            method: &str,
            meta: &Option<Value>,
            header: Option<&str>,
        ) -> Expected {
            if kind == 2 || method == "initialize" {
                return Expected::Session;
            }
            match meta.as_ref().and_then(Value::as_str) {
                Some("2026-07-28") => return Expected::Stateless,
                Some(_) => return Expected::Rejected(code::UNSUPPORTED_PROTOCOL_VERSION),
                None => {}
            }
            match header.map(str::trim) {
                None => Expected::Session,
                Some("2026-07-28") => Expected::Rejected(code::INVALID_PARAMS),
                Some(v) if v.starts_with("2024-") || v.starts_with("2025-") => Expected::Session,
                Some(_) => Expected::Rejected(code::UNSUPPORTED_PROTOCOL_VERSION),
            }
        }

        fn header_version() -> impl Strategy<Value = Option<String>> {
            prop_oneof![
                Just(None),
                Just(Some("2026-07-28".to_owned())),
                Just(Some(" 2026-07-28 ".to_owned())),
                Just(Some("2025-11-25".to_owned())),
                Just(Some("2025-06-18".to_owned())),
                Just(Some("2024-11-05".to_owned())),
                Just(Some("2026-01-01".to_owned())),
                "[ -~]{0,12}".prop_map(Some),
            ]
        }

        fn meta_version() -> impl Strategy<Value = Option<Value>> {
            prop_oneof![
                Just(None),
                Just(Some(json!("2026-07-28"))),
                Just(Some(json!("2025-11-25"))),
                Just(Some(json!("2030-01-01"))),
                Just(Some(json!(20260728))),
                Just(Some(Value::Null)),
                "[ -~]{0,12}".prop_map(|v| Some(json!(v))),
            ]
        }

        fn session_id() -> impl Strategy<Value = Option<String>> {
            prop_oneof![
                Just(None),
                Just(Some("../..".to_owned())),
                Just(Some("x".repeat(5000))),
                Just(Some("mtg-t.abc".to_owned())),
                "[0-9a-f]{32}".prop_map(Some),
            ]
        }

        fn method() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "initialize",
                "tasks/get",
                "tasks/result",
                "tasks/list",
                "tools/call",
                "tools/list",
                "ping",
                "notifications/initialized",
            ])
        }

        /// The body as a client may write it: the `_meta` key plain, or with escapes.
        fn body(kind: u8, method: &str, meta: &Option<Value>, escape: u8) -> Vec<u8> {
            let mut params = json!({"taskId": "t-1", "name": "echo"});
            if let Some(version) = meta {
                params["_meta"] = json!({ meta::META_PROTOCOL_VERSION: version });
            }
            let message = match kind {
                0 => json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
                1 => json!({"jsonrpc": "2.0", "method": method, "params": params}),
                _ => json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            };
            let text = message.to_string();
            let key = meta::META_PROTOCOL_VERSION;
            let written = match escape {
                0 => key.to_owned(),
                1 => key.replace('/', "\\/"),
                _ => format!("\\u{:04x}{}", key.as_bytes()[0], &key[1..]),
            };
            text.replace(key, &written).into_bytes()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// One rule, whatever the session id: a request is classified as the
            /// documented table says, and the session id never changes it.
            #[test]
            fn every_combination_of_signals_follows_the_one_rule(
                kind in 0u8..3,
                method in method(),
                meta_v in meta_version(),
                header in header_version(),
                session in session_id(),
                escape in 0u8..3,
            ) {
                let bytes = body(kind, method, &meta_v, escape);
                let message = Message::parse(&bytes).expect("a JSON-RPC message");
                let mut headers = HeaderMap::new();
                if let Some(v) = &header {
                    headers.insert(MCP_PROTOCOL_VERSION, v.parse().unwrap());
                }
                let without = classify(&headers, &message);
                if let Some(id) = &session {
                    headers.insert(SESSION_HEADER, id.parse().unwrap());
                }
                let with = classify(&headers, &message);
                let outcome = |classified: Result<Generation, ErrorObject>| match classified {
                    Ok(Generation::Session) => Expected::Session,
                    Ok(Generation::Stateless) => Expected::Stateless,
                    Err(e) => Expected::Rejected(e.code),
                };
                let want = expected(kind, method, &meta_v, header.as_deref());
                prop_assert_eq!(outcome(without), outcome(with));
                prop_assert_eq!(outcome(classify(&headers, &message)), want);
            }

            /// Session traffic is read only when it may be other than a session's: a
            /// POST with `Mcp-Session-Id` that the rule gives to 2026-07-28 (or
            /// refuses) is always parsed, however its `_meta` key is written.
            #[test]
            fn session_traffic_the_rule_may_take_is_always_read(
                kind in 0u8..3,
                method in method(),
                meta_v in meta_version(),
                header in header_version(),
                escape in 0u8..3,
            ) {
                let bytes = body(kind, method, &meta_v, escape);
                let mut headers = HeaderMap::new();
                if let Some(v) = &header {
                    headers.insert(MCP_PROTOCOL_VERSION, v.parse().unwrap());
                }
                headers.insert(SESSION_HEADER, "s-1".parse().unwrap());
                if expected(kind, method, &meta_v, header.as_deref()) != Expected::Session {
                    prop_assert!(may_say_stateless(&headers, &bytes));
                }
            }
        }
    }
}
