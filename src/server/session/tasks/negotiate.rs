//! What a session client that declared `capabilities.tasks` is told differently: the
//! gateway's `tasks` capability at `initialize`, and each tool's `execution.taskSupport`
//! in `tools/list`, both from the gateway's own task support, not the upstream's.

use serde_json::{Map, Value};

use crate::tasks::policy::Policies;
use mtg_protocol::task_support::TaskSupport;
use mtg_protocol::wire::dialect_2025::{declares_response_modes, server_tasks_capability};

/// What a client's `initialize` declared about tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Declared {
    /// SEP-1905 `tasks.responses.modes`.
    pub modes: bool,
}

/// `Some` when the client's `initialize` params declare `capabilities.tasks`.
pub(crate) fn declared(params: Option<&Value>) -> Option<Declared> {
    let tasks = params?
        .get("capabilities")?
        .get("tasks")
        .filter(|t| t.is_object())?;
    Some(Declared {
        modes: declares_response_modes(tasks),
    })
}

/// The client's `initialize` params as the upstream sees them: without `tasks`, which
/// the gateway answers for (an upstream told of it could send task-augmented requests
/// the gateway would have to carry out).
pub(crate) fn without_client_tasks(params: &mut Value) {
    if let Some(capabilities) = params
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    {
        capabilities.remove("tasks");
    }
}

/// The `InitializeResult` with the gateway's `tasks` capability in place of any the
/// upstream had.
pub(crate) fn advertise_tasks(result: &mut Value, declared: Declared) {
    let Some(result) = result.as_object_mut() else {
        return;
    };
    if let Some(capabilities) = object_entry(result, "capabilities") {
        capabilities.insert("tasks".into(), server_tasks_capability(declared.modes));
    }
}

/// A `tools/list` result with each tool's `execution.taskSupport` from `--tool-policy`.
pub(crate) fn annotate_tools(result: &mut Value, policies: &Policies) {
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        // A tool the upstream runs only as its own task cannot run inline through the
        // gateway either (the gateway follows the upstream's task, `tasks::upstream_tasks`).
        let upstream_requires = tool
            .pointer("/execution/taskSupport")
            .and_then(Value::as_str)
            == Some("required");
        let support = match policies.policy_of(name) {
            TaskSupport::Required => "required",
            TaskSupport::Optional if upstream_requires => "required",
            TaskSupport::Optional => "optional",
            TaskSupport::Forbidden => "forbidden",
        };
        let Some(tool) = tool.as_object_mut() else {
            continue;
        };
        if let Some(execution) = object_entry(tool, "execution") {
            execution.insert("taskSupport".into(), support.into());
        }
    }
}

/// A `tools/list` result for a session that did not declare tasks: a tool the upstream
/// runs only as its own task is `optional` there, since the gateway runs its plain call
/// as a task (`tasks::deferral`). Left `required`, the TypeScript SDK 1.x client would
/// refuse to call it. A tool the operator marked `required` or `forbidden` stays so.
pub(crate) fn offer_task_only_tools(result: &mut Value, policies: &Policies) {
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        if policies.policy_of(name) != TaskSupport::Optional {
            continue;
        }
        if let Some(support) = tool.pointer_mut("/execution/taskSupport")
            && support == "required"
        {
            *support = "optional".into();
        }
    }
}

/// A session's `tools/list` result with each tool's task support as the gateway
/// serves it: from its policies for a session that declared tasks, else with the
/// upstream's task-only tools offered for plain calls.
pub(crate) fn show_task_support(result: &mut Value, policies: &Policies, declared: bool) {
    match declared {
        true => annotate_tools(result, policies),
        false => offer_task_only_tools(result, policies),
    }
}

/// `object[key]` as an object, made empty if missing; `None` if it is something else.
fn object_entry<'a>(
    object: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    object
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    #[test]
    fn the_gateway_capability_replaces_the_upstreams() {
        let mut result = json!({"capabilities": {"tools": {}, "tasks": {"requests": {"x": {}}}}});
        advertise_tasks(&mut result, Declared { modes: false });
        assert_eq!(
            result["capabilities"]["tasks"],
            json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
        );
        assert_eq!(result["capabilities"]["tools"], json!({}));
    }

    #[test]
    fn a_session_without_tasks_is_offered_the_upstreams_task_only_tools() {
        let policies = Policies::new(HashMap::from([("kept".to_owned(), TaskSupport::Required)]));
        let mut result = json!({"tools": [
            {"name": "native", "execution": {"taskSupport": "required", "other": 1}},
            {"name": "kept", "execution": {"taskSupport": "required"}},
            {"name": "plain"},
            {"name": "either", "execution": {"taskSupport": "optional"}},
        ]});
        offer_task_only_tools(&mut result, &policies);
        assert_eq!(
            result["tools"],
            json!([
                {"name": "native", "execution": {"taskSupport": "optional", "other": 1}},
                {"name": "kept", "execution": {"taskSupport": "required"}},
                {"name": "plain"},
                {"name": "either", "execution": {"taskSupport": "optional"}},
            ])
        );
    }

    #[test]
    fn tools_carry_the_configured_policy() {
        let policies = Policies::new(HashMap::from([
            ("slow".to_owned(), TaskSupport::Required),
            ("quick".to_owned(), TaskSupport::Forbidden),
        ]));
        let mut result = json!({"tools": [
            {"name": "slow"},
            {"name": "quick", "execution": {"taskSupport": "required", "other": 1}},
            {"name": "any"},
            {"name": "native", "execution": {"taskSupport": "required"}},
        ]});
        annotate_tools(&mut result, &policies);
        let support: Vec<_> = result["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["execution"]["taskSupport"].clone())
            .collect();
        assert_eq!(
            support,
            [
                json!("required"),
                json!("forbidden"),
                json!("optional"),
                json!("required")
            ]
        );
        assert_eq!(result["tools"][1]["execution"]["other"], json!(1));
    }

    #[test]
    fn only_a_declared_tasks_object_counts() {
        assert_eq!(declared(Some(&json!({"capabilities": {}}))), None);
        assert_eq!(
            declared(Some(
                &json!({"capabilities": {"tasks": {"responses": {"modes": ["immediate"]}}}})
            )),
            Some(Declared { modes: true })
        );
        let mut params = json!({"capabilities": {"tasks": {}, "elicitation": {}}});
        without_client_tasks(&mut params);
        assert_eq!(params, json!({"capabilities": {"elicitation": {}}}));
    }
}
