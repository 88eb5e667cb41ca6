//! `Mcp-Param-{Name}` headers of 2026-07-28: a tool's `inputSchema` may mark properties
//! with `x-mcp-header`, and a client calling the tool over HTTP must mirror their values
//! into headers (the upstream rejects a call without them with -32020).

use serde_json::{Map, Value};

pub(crate) const X_MCP_HEADER: &str = "x-mcp-header";
pub(crate) const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// Where one annotated property sits (its chain of `properties` keys) and its header token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    pub path: Vec<String>,
    pub token: String,
}

/// Why a tool's `x-mcp-header` annotations make its definition invalid (a client must
/// then not use the tool). `at` is the property's dotted path.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAnnotation {
    #[error("x-mcp-header {0:?} is not unique")]
    Duplicate(String),
    #[error("x-mcp-header on {at} is not reachable through properties alone")]
    Unreachable { at: String },
    #[error("x-mcp-header on {at} is not an HTTP field-name token")]
    NotAToken { at: String },
    #[error("x-mcp-header on {at} needs type string, integer or boolean")]
    NotPrimitive { at: String },
}

/// The annotated properties of a tool's `inputSchema`, or why the annotations make the
/// tool definition invalid.
pub fn annotations(input_schema: &Value) -> Result<Vec<ParamHeader>, InvalidAnnotation> {
    let mut found = Vec::new();
    walk(input_schema, &mut Vec::new(), true, &mut found)?;
    let mut seen = std::collections::HashSet::new();
    for header in &found {
        if !seen.insert(header.token.to_ascii_lowercase()) {
            return Err(InvalidAnnotation::Duplicate(header.token.clone()));
        }
    }
    Ok(found)
}

/// Visits every schema node; `static_path` is false once the chain left `properties`.
fn walk(
    node: &Value,
    path: &mut Vec<String>,
    static_path: bool,
    found: &mut Vec<ParamHeader>,
) -> Result<(), InvalidAnnotation> {
    match node {
        Value::Object(schema) => {
            if let Some(token) = schema.get(X_MCP_HEADER) {
                found.push(check(schema, token, path, static_path)?);
            }
            for (keyword, child) in schema {
                if keyword == "properties"
                    && let Some(properties) = child.as_object()
                {
                    for (name, property) in properties {
                        path.push(name.clone());
                        walk(property, path, static_path, found)?;
                        path.pop();
                    }
                } else if keyword != X_MCP_HEADER {
                    // `items`, `anyOf`, `$defs`, ...: an annotation below is not reachable.
                    walk(child, path, false, found)?;
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, path, false, found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn check(
    schema: &Map<String, Value>,
    token: &Value,
    path: &[String],
    static_path: bool,
) -> Result<ParamHeader, InvalidAnnotation> {
    let at = if path.is_empty() {
        "the schema root".to_owned()
    } else {
        path.join(".")
    };
    if !static_path || path.is_empty() {
        return Err(InvalidAnnotation::Unreachable { at });
    }
    let Some(token) = token
        .as_str()
        .filter(|t| !t.is_empty() && t.bytes().all(is_tchar))
    else {
        return Err(InvalidAnnotation::NotAToken { at });
    };
    let primitive = matches!(
        schema.get("type").and_then(Value::as_str),
        Some("string" | "integer" | "boolean")
    );
    if !primitive {
        return Err(InvalidAnnotation::NotPrimitive { at });
    }
    Ok(ParamHeader {
        path: path.to_vec(),
        token: token.to_owned(),
    })
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The headers a `tools/call` with these arguments carries: name and unencoded value.
/// A missing or `null` value, or one that is not a primitive, gives no header.
pub fn values(annotations: &[ParamHeader], arguments: Option<&Value>) -> Vec<(String, String)> {
    annotations
        .iter()
        .filter_map(|header| Some((header.name(), value_of(header, arguments)?.text)))
        .collect()
}

impl ParamHeader {
    /// The header's name, lower-case prefix and the annotation's token.
    pub fn name(&self) -> String {
        format!("{PARAM_HEADER_PREFIX}{}", self.token)
    }
}

/// An annotated argument's value as its header carries it (unencoded).
pub struct ParamValue {
    pub text: String,
    /// An integer: a header may write it another way (`42.0`).
    pub integer: bool,
}

/// The annotated argument's value, if it has one a header can carry.
pub fn value_of(header: &ParamHeader, arguments: Option<&Value>) -> Option<ParamValue> {
    let mut value = arguments?;
    for key in &header.path {
        value = value.get(key)?;
    }
    let (text, integer) = match value {
        Value::String(s) => (s.clone(), false),
        Value::Bool(b) => (b.to_string(), false),
        Value::Number(n) if n.is_i64() || n.is_u64() => (n.to_string(), true),
        _ => return None,
    };
    Some(ParamValue { text, integer })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_annotations_on_properties_and_mirrors_values() {
        let schema = json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry-Run"}}},
                "n": {"type": "integer", "x-mcp-header": "N"},
                "query": {"type": "string"}
            }
        });
        let found = annotations(&schema).unwrap();
        assert_eq!(found.len(), 3);
        let mut headers = values(
            &found,
            Some(&json!({"region": "eu 1", "opts": {"dry": true}, "n": null, "query": "q"})),
        );
        headers.sort();
        assert_eq!(
            headers,
            [
                ("mcp-param-Dry-Run".to_owned(), "true".to_owned()),
                ("mcp-param-Region".to_owned(), "eu 1".to_owned()),
            ]
        );
        assert!(values(&found, None).is_empty());
    }

    #[test]
    fn rejects_invalid_annotations() {
        for schema in [
            json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A B"}}}),
            json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
            json!({"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A"}, "b": {"type": "string", "x-mcp-header": "a"}}}),
        ] {
            assert!(annotations(&schema).is_err(), "{schema}");
        }
        assert_eq!(annotations(&json!({"type": "object"})).unwrap(), []);
    }
}
