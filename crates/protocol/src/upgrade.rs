//! Completing a 2025-xx upstream's answers so that 2026-07-28 clients, which validate
//! every result against their schema, accept them.

use super::names::STATELESS_VERSION;
use serde_json::{Map, Value, json};

use super::meta::{META_SERVER_INFO, TASKS_EXTENSION};
use super::param_headers;

/// Results that 2026-07-28 makes cacheable: they need `ttlMs` and `cacheScope`.
const CACHEABLE: [&str; 5] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Adds the fields a 2026-07-28 result requires and a 2025-xx session upstream leaves out.
pub fn complete_result(method: &str, result: &mut Value) {
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    obj.entry("resultType").or_insert_with(|| "complete".into());
    if CACHEABLE.contains(&method) {
        add_cache_hints(obj);
    }
    if method == "tools/list"
        && let Some(tools) = obj.get_mut("tools").and_then(Value::as_array_mut)
    {
        for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
            // `execution.taskSupport` belongs to the 2025-11-25 task dialect.
            tool.remove("execution");
        }
        // An HTTP client must not use a tool whose `x-mcp-header` annotations are
        // invalid; the gateway is one, so it does not offer such a tool either.
        tools.retain(|tool| {
            let schema = tool.get("inputSchema").unwrap_or(&Value::Null);
            match param_headers::annotations(schema) {
                Ok(_) => true,
                Err(reason) => {
                    tracing::warn!(tool = %tool["name"], %reason, "tool hidden: invalid x-mcp-header");
                    false
                }
            }
        });
    }
}

/// A 2025-xx upstream's answer may depend on who asks, so it is private and not cached.
fn add_cache_hints(obj: &mut Map<String, Value>) {
    obj.entry("ttlMs").or_insert_with(|| 0.into());
    obj.entry("cacheScope").or_insert_with(|| "private".into());
}

/// A server description's `capabilities` (an `InitializeResult` or a discover result).
pub fn capabilities_of(server: &Value) -> Map<String, Value> {
    server
        .get("capabilities")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The tasks extension is the gateway's own; an upstream's 2025-11-25 `tasks`
/// capability never shows.
fn offer_tasks_extension(capabilities: &mut Map<String, Value>) {
    capabilities.remove("tasks");
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| json!({}));
    if let Some(extensions) = extensions.as_object_mut() {
        extensions.insert(TASKS_EXTENSION.into(), json!({}));
    }
}

/// The `server/discover` result for a 2025-xx session upstream, from its `InitializeResult`.
/// Its 2025-11-25 `tasks` capability does not leak; the tasks extension is the
/// gateway's own.
/// A 2026-07-28 client hears list changes and resource updates only on
/// `subscriptions/listen`, which a 2025-xx upstream does not serve (its notifications
/// come on session streams no 2026 client has): what the gateway advertises for it must
/// promise nothing of the kind.
fn withhold_undeliverable(capabilities: &mut Map<String, Value>) {
    for kind in ["tools", "prompts", "resources"] {
        if let Some(offered) = capabilities.get_mut(kind).and_then(Value::as_object_mut) {
            offered.remove("listChanged");
            offered.remove("subscribe");
        }
    }
}

pub fn discover_result(initialize: &Value) -> Value {
    let mut capabilities = capabilities_of(initialize);
    offer_tasks_extension(&mut capabilities);
    withhold_undeliverable(&mut capabilities);
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": [STATELESS_VERSION],
        "capabilities": capabilities,
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(info) = initialize.get("serverInfo") {
        result["_meta"] = json!({ META_SERVER_INFO: info });
    }
    if let Some(instructions) = initialize.get("instructions").filter(|i| i.is_string()) {
        result["instructions"] = instructions.clone();
    }
    result
}

/// The `server/discover` result for a 2026-07-28 upstream: its own answer, with the
/// tasks extension added and `supportedVersions` limited to what the gateway speaks.
pub fn discover_result_of_stateless(upstream: &Value) -> Value {
    let mut result = upstream.clone();
    let Some(obj) = result.as_object_mut() else {
        return discover_result(&json!({}));
    };
    obj.insert("resultType".into(), "complete".into());
    obj.insert("supportedVersions".into(), json!([STATELESS_VERSION]));
    let capabilities = obj.entry("capabilities").or_insert_with(|| json!({}));
    // Its own subscriptions/listen serves what it advertises (the gateway relays it).
    if let Some(capabilities) = capabilities.as_object_mut() {
        offer_tasks_extension(capabilities);
    }
    add_cache_hints(obj);
    result
}

/// An `InitializeResult`-like view (capabilities, serverInfo, instructions) of a
/// 2026-07-28 `server/discover` result, for code that reads server information.
pub fn server_info_of_discover(discover: &Value) -> Value {
    let mut info = json!({
        "protocolVersion": STATELESS_VERSION,
        "capabilities": discover.get("capabilities").cloned().unwrap_or_else(|| json!({})),
    });
    if let Some(server) = discover.get("_meta").and_then(|m| m.get(META_SERVER_INFO)) {
        info["serverInfo"] = server.clone();
    }
    if let Some(instructions) = discover.get("instructions").filter(|i| i.is_string()) {
        info["instructions"] = instructions.clone();
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_list_results() {
        let mut result =
            json!({"tools": [{"name": "t", "execution": {"taskSupport": "optional"}}]});
        complete_result("tools/list", &mut result);
        assert_eq!(
            result,
            json!({"tools": [{"name": "t"}], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
        );
        let mut result = json!({"tools": [
            {"name": "ok", "inputSchema": {"properties": {"r": {"type": "string", "x-mcp-header": "R"}}}},
            {"name": "bad", "inputSchema": {"properties": {"r": {"type": "number", "x-mcp-header": "R"}}}}
        ]});
        complete_result("tools/list", &mut result);
        assert_eq!(result["tools"].as_array().unwrap().len(), 1);
        assert_eq!(result["tools"][0]["name"], "ok");
        let mut result = json!({"content": [], "resultType": "complete"});
        complete_result("tools/call", &mut result);
        assert_eq!(result, json!({"content": [], "resultType": "complete"}));
    }

    #[test]
    fn stateless_discover_keeps_the_upstream_answer_and_adds_the_extension() {
        let upstream = json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28", "2027-01-01"],
            "capabilities": {"tools": {"listChanged": true}, "extensions": {"x/y": {}}},
            "ttlMs": 5000,
            "cacheScope": "public",
            "instructions": "hi",
            "_meta": {META_SERVER_INFO: {"name": "up", "version": "2"}}
        });
        let result = discover_result_of_stateless(&upstream);
        assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(
            result["capabilities"]["extensions"],
            json!({"x/y": {}, TASKS_EXTENSION: {}})
        );
        assert_eq!(result["ttlMs"], 5000);
        assert_eq!(result["cacheScope"], "public");
        assert_eq!(result["instructions"], "hi");
        let info = server_info_of_discover(&upstream);
        assert_eq!(info["serverInfo"]["name"], "up");
        assert_eq!(info["capabilities"]["tools"]["listChanged"], true);
    }

    #[test]
    fn discover_promises_notifications_only_where_a_listen_serves_them() {
        let upstream = json!({"capabilities": {
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {"listChanged": false},
        }});
        // A 2025-xx upstream has no listen: nothing of the kind is offered.
        let result = discover_result(&upstream);
        let capabilities = &result["capabilities"];
        assert_eq!(capabilities["tools"], json!({}), "{result}");
        assert_eq!(capabilities["resources"], json!({}), "{result}");
        assert_eq!(capabilities["prompts"], json!({}), "{result}");
        // A 2026-07-28 upstream serves its own listen, which the gateway relays.
        let stateless = discover_result_of_stateless(&upstream);
        assert_eq!(
            stateless["capabilities"]["tools"]["listChanged"], true,
            "{stateless}"
        );
        assert_eq!(
            stateless["capabilities"]["resources"]["subscribe"], true,
            "{stateless}"
        );
    }

    #[test]
    fn discover_hides_the_2025_tasks_capability_and_adds_the_extension() {
        let init = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}, "tasks": {"list": {}}},
            "serverInfo": {"name": "up", "version": "1"},
            "instructions": "be nice"
        });
        let result = discover_result(&init);
        assert_eq!(
            result["capabilities"],
            json!({"tools": {}, "extensions": {TASKS_EXTENSION: {}}})
        );
        assert_eq!(result["_meta"][META_SERVER_INFO]["name"], "up");
        assert_eq!(result["instructions"], "be nice");
        assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    }
}
