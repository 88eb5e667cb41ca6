//! The per-request `_meta` of 2026-07-28 requests: protocol version and client capabilities.

use serde_json::{Map, Value};

use super::names::{STATELESS_VERSION, gateway_info};

pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The minimum level of `notifications/message` a 2026-07-28 client wants for a request;
/// without it a server must send none.
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// `LoggingLevel`s, least severe first (RFC 5424 severities).
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Client capabilities that change what a 2025-xx session upstream does within a session.
const SESSION_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

fn meta(params: Option<&Value>) -> Option<&Map<String, Value>> {
    params?.get("_meta")?.as_object()
}

pub fn protocol_version(params: Option<&Value>) -> Option<&str> {
    meta(params)?.get(META_PROTOCOL_VERSION)?.as_str()
}

pub fn client_capabilities(params: Option<&Value>) -> Option<&Map<String, Value>> {
    meta(params)?.get(META_CLIENT_CAPABILITIES)?.as_object()
}

/// The request's `_meta.progressToken`.
pub fn progress_token(params: Option<&Value>) -> Option<&Value> {
    meta(params)?.get("progressToken")
}

/// The log level the request opted in to, if it is a known one.
pub fn log_level(params: Option<&Value>) -> Option<&str> {
    let level = meta(params)?.get(META_LOG_LEVEL)?.as_str()?;
    LOG_LEVELS.contains(&level).then_some(level)
}

/// Whether a message at `level` is at least as severe as `minimum`; unknown levels
/// are not.
pub fn log_level_reaches(level: &str, minimum: &str) -> bool {
    let rank = |l: &str| LOG_LEVELS.iter().position(|known| *known == l);
    matches!((rank(level), rank(minimum)), (Some(level), Some(minimum)) if level >= minimum)
}

/// Whether the request's own capabilities declare the tasks extension.
pub fn declares_tasks(params: Option<&Value>) -> bool {
    client_capabilities(params)
        .and_then(|caps| caps.get("extensions"))
        .and_then(|ext| ext.get(TASKS_EXTENSION))
        .is_some_and(Value::is_object)
}

/// Of capabilities declared to the gateway, what a 2025-xx session upstream is opened
/// with: elicitation, sampling and roots (sessions are keyed by them, so nothing else may
/// multiply the sessions).
pub fn session_subset(capabilities: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for name in SESSION_CAPABILITIES {
        if let Some(value) = capabilities.get(name).filter(|v| v.is_object()) {
            out.insert(name.to_owned(), value.clone());
        }
    }
    out
}

/// The client's capabilities as they go to the upstream: all it declared (extensions,
/// experimental, ...), except the tasks extension, which the gateway serves itself.
pub fn forwarded_capabilities(params: Option<&Value>) -> Map<String, Value> {
    let Some(declared) = client_capabilities(params) else {
        return Map::new();
    };
    // Built afresh, not cloned and trimmed: a map emptied by removals keeps its node
    // (about 600 B), and every running task holds this one (docs/benchmarks.md, run 30).
    declared
        .iter()
        .filter_map(|(name, value)| {
            let extensions = match value.as_object() {
                Some(extensions) if name == "extensions" => extensions,
                _ => return Some((name.clone(), value.clone())),
            };
            let others: Map<String, Value> = extensions
                .iter()
                .filter(|(extension, _)| *extension != TASKS_EXTENSION)
                .map(|(extension, settings)| (extension.clone(), settings.clone()))
                .collect();
            (!others.is_empty()).then(|| (name.clone(), Value::Object(others)))
        })
        .collect()
}

/// Params as a 2025-xx session upstream should see them: without the 2026-07-28 `_meta` keys,
/// which belong to the hop between client and gateway.
pub fn strip_stateless_meta(params: &mut Value) {
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(META_PROTOCOL_VERSION);
        meta.remove(META_CLIENT_CAPABILITIES);
        meta.remove(META_CLIENT_INFO);
        if meta.is_empty() {
            params.as_object_mut().map(|p| p.remove("_meta"));
        }
    }
}

/// Params as a 2026-07-28 upstream must see them: `_meta` carries this hop's protocol
/// version, the capabilities the gateway declares for the caller, and the gateway as client.
pub fn with_stateless_meta(params: Option<Value>, capabilities: &Map<String, Value>) -> Value {
    let mut params = match params {
        Some(Value::Object(obj)) => obj,
        _ => Map::new(),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_PROTOCOL_VERSION.into(), STATELESS_VERSION.into());
        meta.insert(
            META_CLIENT_CAPABILITIES.into(),
            Value::Object(capabilities.clone()),
        );
        meta.insert(META_CLIENT_INFO.into(), gateway_info());
    }
    Value::Object(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session_capabilities_of(params: Option<&Value>) -> Map<String, Value> {
        client_capabilities(params).map_or_else(Map::new, session_subset)
    }
    use serde_json::json;

    #[test]
    fn the_upstream_gets_every_capability_but_the_tasks_extension() {
        let params = json!({"_meta": {META_CLIENT_CAPABILITIES: {
            "elicitation": {"form": {}},
            "experimental": {"x": {}},
            "extensions": {TASKS_EXTENSION: {}, "io.example/widgets": {"v": 2}},
        }}});
        assert_eq!(
            Value::Object(forwarded_capabilities(Some(&params))),
            json!({
                "elicitation": {"form": {}},
                "experimental": {"x": {}},
                "extensions": {"io.example/widgets": {"v": 2}},
            })
        );
        let only_tasks =
            json!({"_meta": {META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}}}});
        assert_eq!(
            Value::Object(forwarded_capabilities(Some(&only_tasks))),
            json!({})
        );
        assert_eq!(
            Value::Object(session_capabilities_of(Some(&params))),
            json!({"elicitation": {"form": {}}})
        );
        // Not an object: passed on as declared, as any other capability.
        let odd = json!({"_meta": {META_CLIENT_CAPABILITIES: {"extensions": true}}});
        assert_eq!(
            Value::Object(forwarded_capabilities(Some(&odd))),
            json!({"extensions": true})
        );
        assert_eq!(forwarded_capabilities(None), Map::new());
    }

    #[test]
    fn reads_declared_capabilities() {
        let params = json!({"_meta": {
            META_PROTOCOL_VERSION: "2026-07-28",
            META_CLIENT_CAPABILITIES: {"elicitation": {"form": {}}, "experimental": {}, "extensions": {TASKS_EXTENSION: {}}}
        }});
        assert_eq!(protocol_version(Some(&params)), Some("2026-07-28"));
        assert!(declares_tasks(Some(&params)));
        assert_eq!(
            Value::Object(session_capabilities_of(Some(&params))),
            json!({"elicitation": {"form": {}}})
        );
        assert!(!declares_tasks(Some(&json!({}))));
        assert!(!declares_tasks(None));
    }

    #[test]
    fn log_levels_compare_by_severity() {
        let params = json!({"_meta": {META_LOG_LEVEL: "warning", "progressToken": 7}});
        assert_eq!(log_level(Some(&params)), Some("warning"));
        assert_eq!(progress_token(Some(&params)), Some(&json!(7)));
        assert!(log_level_reaches("error", "warning"));
        assert!(log_level_reaches("warning", "warning"));
        assert!(!log_level_reaches("info", "warning"));
        assert!(!log_level_reaches("loud", "debug"));
        assert_eq!(
            log_level(Some(&json!({"_meta": {META_LOG_LEVEL: "chatty"}}))),
            None
        );
    }

    #[test]
    fn adds_stateless_meta_for_the_upstream() {
        let caps = Map::from_iter([("elicitation".to_owned(), json!({}))]);
        let params = with_stateless_meta(
            Some(json!({"name": "t", "_meta": {"progressToken": "p"}})),
            &caps,
        );
        assert_eq!(params["_meta"]["progressToken"], "p");
        assert_eq!(params["_meta"][META_PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(
            params["_meta"][META_CLIENT_CAPABILITIES],
            json!({"elicitation": {}})
        );
        let params = with_stateless_meta(None, &Map::new());
        assert_eq!(params["_meta"][META_CLIENT_CAPABILITIES], json!({}));
    }

    #[test]
    fn strips_only_stateless_meta() {
        let mut params = json!({"name": "x", "_meta": {META_PROTOCOL_VERSION: "2026-07-28", "progressToken": 3}});
        strip_stateless_meta(&mut params);
        assert_eq!(params, json!({"name": "x", "_meta": {"progressToken": 3}}));
        let mut params = json!({"name": "x", "_meta": {META_PROTOCOL_VERSION: "2026-07-28"}});
        strip_stateless_meta(&mut params);
        assert_eq!(params, json!({"name": "x"}));
    }
}
