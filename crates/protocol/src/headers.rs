//! The standard request headers of 2026-07-28 (`MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name`) checked against the body. A mismatch is HTTP 400 with -32020.

use super::names::method;
use base64::Engine;
use http::HeaderMap;
use serde_json::Value;

use super::jsonrpc::{ErrorObject, code};
use super::param_headers::{ParamHeader, value_of};

pub use super::names::header::{MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION};

/// Which body field `Mcp-Name` mirrors, for the methods that carry it.
pub fn name_field(method: &str) -> Option<&'static str> {
    match method {
        method::TOOLS_CALL | method::PROMPTS_GET => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Checks the headers of a 2026-07-28 request against its body. Values that are present
/// must match; with `require_all`, missing ones are rejected too.
pub fn validate(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    body_version: &str,
    require_all: bool,
) -> Result<(), ErrorObject> {
    check(
        headers,
        MCP_PROTOCOL_VERSION,
        body_version,
        require_all,
        Encoding::Plain,
    )?;
    check(headers, MCP_METHOD, method, require_all, Encoding::Plain)?;
    if let Some(field) = name_field(method) {
        let Some(expected) = params.and_then(|p| p.get(field)).and_then(Value::as_str) else {
            // The handler reports the missing body field with -32602.
            return Ok(());
        };
        check(headers, MCP_NAME, expected, require_all, Encoding::Sentinel)?;
    }
    Ok(())
}

/// Checks a `tools/call`'s `Mcp-Param-*` headers against its arguments, for the tool's
/// `x-mcp-header` annotations: each value present in the body must be mirrored (unless
/// `require_all` is off), each header must match the body, and a header whose argument
/// is absent is a mismatch. Headers the tool does not annotate are not the gateway's.
pub fn validate_params(
    headers: &HeaderMap,
    annotations: &[ParamHeader],
    arguments: Option<&Value>,
    require_all: bool,
) -> Result<(), ErrorObject> {
    for annotation in annotations {
        let name = annotation.name();
        match value_of(annotation, arguments) {
            Some(expected) => {
                let encoding = if expected.integer {
                    Encoding::Integer
                } else {
                    Encoding::Sentinel
                };
                check(headers, &name, &expected.text, require_all, encoding)?
            }
            None if headers.contains_key(name.as_str()) => {
                return Err(mismatch(format!(
                    "{name} header is set but arguments.{} has no value",
                    annotation.path.join(".")
                )));
            }
            None => {}
        }
    }
    Ok(())
}

/// Whether a header may carry the `=?base64?...?=` form: only `Mcp-Name` and
/// `Mcp-Param-*` may; elsewhere the text is the value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Plain,
    Sentinel,
    /// An integer argument: the sentinel form, compared as a number (`42.0` is `42`).
    Integer,
}

fn check(
    headers: &HeaderMap,
    name: &str,
    expected: &str,
    required: bool,
    encoding: Encoding,
) -> Result<(), ErrorObject> {
    let mut values = headers.get_all(name).iter().peekable();
    if values.peek().is_none() {
        return if required {
            Err(mismatch(format!("required header {name} is missing")))
        } else {
            Ok(())
        };
    }
    // Every copy must match: a second, different value must not slip past routing.
    for raw in values {
        let text = raw
            .to_str()
            .map_err(|_| mismatch(format!("{name} header contains invalid characters")))?
            .trim();
        let value = match encoding {
            Encoding::Plain => text.into(),
            Encoding::Sentinel | Encoding::Integer => decode_sentinel(text).ok_or_else(|| {
                mismatch(format!(
                    "{name} header is not valid =?base64?...?= encoding"
                ))
            })?,
        };
        let same =
            value == expected || (encoding == Encoding::Integer && same_number(&value, expected));
        if !same {
            return Err(mismatch(format!(
                "{name} header value {value:?} does not match body value {expected:?}"
            )));
        }
    }
    Ok(())
}

/// A value as a client must send it in `Mcp-Name` or `Mcp-Param-*`: as it is when it is
/// plain visible ASCII without surrounding whitespace, else in the `=?base64?...?=` form
/// (also when the plain text would itself look like that form).
pub fn encode_value(text: &str) -> String {
    let plain = text
        .bytes()
        .all(|b| b == b'\t' || (0x20..=0x7e).contains(&b))
        && text.trim() == text
        && !(text.starts_with("=?base64?") && text.ends_with("?="));
    if plain {
        return text.to_owned();
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
    format!("=?base64?{encoded}?=")
}

/// The same number written two ways (`42.0` and `42`). Integers compare exactly: past
/// 2^53 two different ones can be the same `f64`.
fn same_number(header: &str, body: &str) -> bool {
    let integer = |text: &str| text.parse::<i128>().ok();
    match (integer(header), integer(body)) {
        (Some(a), Some(b)) => a == b,
        (Some(a), None) | (None, Some(a)) if a.unsigned_abs() > 1 << 53 => false,
        _ => matches!((header.parse::<f64>(), body.parse::<f64>()), (Ok(a), Ok(b)) if a == b),
    }
}

/// Decodes the `=?base64?...?=` form; any other text is the literal value.
fn decode_sentinel(text: &str) -> Option<std::borrow::Cow<'_, str>> {
    let Some(encoded) = text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    else {
        return Some(text.into());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok().map(Into::into)
}

fn mismatch(detail: String) -> ErrorObject {
    ErrorObject::new(code::HEADER_MISMATCH, format!("Header mismatch: {detail}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    const V: &str = "2026-07-28";

    #[test]
    fn accepts_matching_and_trimmed_and_encoded_values() {
        let params = json!({"name": "Hello, 世界"});
        let h = headers(&[
            (MCP_METHOD, "tools/call"),
            (MCP_NAME, "=?base64?SGVsbG8sIOS4lueVjA==?="),
            (MCP_PROTOCOL_VERSION, V),
        ]);
        assert!(validate(&h, "tools/call", Some(&params), V, true).is_ok());
        let h = headers(&[(MCP_METHOD, " tasks/get "), (MCP_NAME, "abc")]);
        assert!(validate(&h, "tasks/get", Some(&json!({"taskId": "abc"})), V, false).is_ok());
    }

    #[test]
    fn rejects_mismatch_case_and_bad_base64() {
        let params = json!({"taskId": "abc"});
        for pairs in [
            vec![(MCP_NAME, "xyz")],
            vec![(MCP_METHOD, "TASKS/GET")],
            vec![(MCP_NAME, "=?base64?SGVs!!!bG8=?=")],
            vec![(MCP_PROTOCOL_VERSION, "2025-11-25")],
        ] {
            let err = validate(&headers(&pairs), "tasks/get", Some(&params), V, false).unwrap_err();
            assert_eq!(err.code, code::HEADER_MISMATCH, "{pairs:?}");
        }
    }

    #[test]
    fn missing_headers_fail_only_when_required() {
        let params = json!({"taskId": "abc"});
        assert!(validate(&HeaderMap::new(), "tasks/get", Some(&params), V, false).is_ok());
        let err = validate(
            &headers(&[(MCP_METHOD, "tasks/get"), (MCP_PROTOCOL_VERSION, V)]),
            "tasks/get",
            Some(&params),
            V,
            true,
        )
        .unwrap_err();
        assert!(err.message.contains("mcp-name"), "{}", err.message);
    }

    #[test]
    fn a_second_differing_value_is_a_mismatch() {
        let mut h = headers(&[(MCP_NAME, "abc")]);
        h.append(MCP_NAME, "xyz".parse().unwrap());
        assert!(validate(&h, "tasks/get", Some(&json!({"taskId": "abc"})), V, false).is_err());
    }

    #[test]
    fn encodes_what_is_not_plain_ascii() {
        assert_eq!(encode_value("get_weather"), "get_weather");
        assert_eq!(
            encode_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(encode_value(" x"), "=?base64?IHg=?=");
        for text in ["Hello, 世界", " x", "=?base64?abc?="] {
            assert_eq!(decode_sentinel(&encode_value(text)).unwrap(), text);
        }
    }

    #[test]
    fn only_name_and_param_headers_may_be_encoded() {
        // "tasks/get" encoded: fine for Mcp-Name, not for Mcp-Method.
        let encoded = encode_value(" tasks/get");
        let h = headers(&[(MCP_METHOD, "=?base64?dGFza3MvZ2V0?=")]);
        assert!(validate(&h, "tasks/get", Some(&json!({"taskId": "a"})), V, false).is_err());
        let h = headers(&[(MCP_NAME, encoded.as_str())]);
        assert!(
            validate(
                &h,
                "tools/call",
                Some(&json!({"name": " tasks/get"})),
                V,
                false
            )
            .is_ok()
        );
    }

    #[test]
    fn param_headers_mirror_the_annotated_arguments() {
        let annotations = crate::param_headers::annotations(&json!({"properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
        }}))
        .unwrap();
        let args = json!({"region": "z\u{fc}rich", "n": 42});
        let good = headers(&[
            ("mcp-param-region", "=?base64?esO8cmljaA==?="),
            ("mcp-param-n", "42.0"),
        ]);
        assert!(validate_params(&good, &annotations, Some(&args), true).is_ok());
        let missing = headers(&[("mcp-param-n", "42")]);
        assert!(validate_params(&missing, &annotations, Some(&args), true).is_err());
        assert!(validate_params(&missing, &annotations, Some(&args), false).is_ok());
        let wrong = headers(&[("mcp-param-region", "bern"), ("mcp-param-n", "42")]);
        let err = validate_params(&wrong, &annotations, Some(&args), false).unwrap_err();
        assert_eq!(err.code, code::HEADER_MISMATCH);
        let stray = headers(&[("mcp-param-n", "42")]);
        assert!(
            validate_params(&stray, &annotations, Some(&json!({"region": "x"})), false).is_err()
        );
        // Not the tool's: not the gateway's to judge.
        let other = headers(&[("mcp-param-zone", "x")]);
        assert!(validate_params(&other, &annotations, Some(&json!({})), true).is_ok());
    }

    #[test]
    fn uppercase_sentinel_is_a_literal() {
        let h = headers(&[(MCP_NAME, "=?BASE64?SGVsbG8=?=")]);
        assert!(validate(&h, "tools/call", Some(&json!({"name": "Hello"})), V, false).is_err());
    }
}
