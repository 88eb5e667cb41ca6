//! Deferred results: what a client that cannot take a task gets when its `tools/call`
//! outlives `--defer-after-ms`, and the two tools the gateway adds so that a model can
//! fetch or stop the call later. Everything here is an ordinary `CallToolResult` or
//! `Tool`, so any client and any host takes it.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::dialect_2025::RELATED_TASK;

/// The tool that fetches a deferred call's result.
pub const GET_TASK_RESULT: &str = "get_task_result";
/// The tool that stops a deferred call.
pub const CANCEL_TASK: &str = "cancel_task";
/// What the gateway's tools are named instead when the upstream has a tool of that name:
/// the upstream's tool stays as it is.
pub const COLLISION_PREFIX: &str = "gateway_";

/// The names the gateway's two tools go by for one upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolNames {
    pub get_result: String,
    pub cancel: String,
}

impl ToolNames {
    /// `upstream_has` tells whether the upstream has a tool of a name.
    pub fn choose(upstream_has: impl Fn(&str) -> bool) -> Self {
        let pick = |name: &str| {
            if upstream_has(name) {
                format!("{COLLISION_PREFIX}{name}")
            } else {
                name.to_owned()
            }
        };
        Self {
            get_result: pick(GET_TASK_RESULT),
            cancel: pick(CANCEL_TASK),
        }
    }
}

/// A `waitSeconds` above this is refused rather than cut to the budget: it is a mistake,
/// not a wish to wait long.
pub const MAX_WAIT_SECONDS: u64 = 86_400;

/// Whether `tool` may name one of the gateway's tools (then the upstream's list decides).
pub fn may_be_gateway_tool(tool: &str) -> bool {
    [GET_TASK_RESULT, CANCEL_TASK]
        .iter()
        .any(|name| tool == *name || tool.strip_prefix(COLLISION_PREFIX) == Some(name))
}

/// The `taskId` argument of one of the gateway's tools, or the result that refuses the
/// call.
pub fn task_id_argument<'a>(arguments: Option<&'a Value>, tool: &str) -> Result<&'a str, Value> {
    match arguments.and_then(|a| a.get("taskId")) {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= 200 => Ok(id),
        Some(other) => Err(error_result(&format!(
            "{tool} needs arguments.taskId, the taskId of an earlier answer (a string); got {other}"
        ))),
        None => Err(error_result(&format!(
            "{tool} needs arguments.taskId, the taskId of an earlier answer"
        ))),
    }
}

/// How long `get_task_result` waits: `waitSeconds` cut to `budget`, or the result that
/// refuses the call.
pub fn wait_argument(arguments: Option<&Value>, budget: Duration) -> Result<Duration, Value> {
    match arguments.and_then(|a| a.get("waitSeconds")) {
        None | Some(Value::Null) => Ok(budget),
        Some(wait) => match wait.as_u64().filter(|s| *s <= MAX_WAIT_SECONDS) {
            Some(seconds) => Ok(budget.min(Duration::from_secs(seconds))),
            None => Err(error_result(&format!(
                "waitSeconds must be a whole number of seconds from 0 to {MAX_WAIT_SECONDS}; got {wait}"
            ))),
        },
    }
}

/// The answer for an id the caller has no task of.
pub fn unknown_task(task_id: &str) -> Value {
    error_result(&format!(
        "There is no task {task_id:?} for you: the id is unknown, its result has expired, or it \
         belongs to someone else."
    ))
}

/// The `structuredContent` schema of a deferred result.
fn deferred_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "taskId": {"type": "string"},
            "status": {"type": "string", "enum": ["working", "input_required"]},
            "statusMessage": {"type": "string"},
        },
        "required": ["taskId", "status"],
    })
}

/// A deferred result: the call goes on as task `task_id`; a model is told in words how
/// to get its result, and a program finds the id in `structuredContent` and `_meta`.
pub fn deferred_result(
    tool: &str,
    task_id: &str,
    status: &str,
    status_message: Option<&str>,
    names: &ToolNames,
    wait_seconds: u64,
) -> Value {
    let mut text = format!(
        "The tool {tool} is still running (task {task_id}); nothing went wrong. Its result is \
         not ready yet. To get it, call the tool {get} with {{\"taskId\": \"{task_id}\"}}; it \
         waits up to {wait_seconds} s for the result and may say again that the work goes on, \
         in which case call it again. To stop the work, call {cancel} with the same taskId.",
        get = names.get_result,
        cancel = names.cancel,
    );
    if let Some(message) = status_message {
        text.push_str(&format!(" Latest status: {message}"));
    }
    let mut structured = Map::new();
    structured.insert("taskId".into(), task_id.into());
    structured.insert("status".into(), status.into());
    if let Some(message) = status_message {
        structured.insert("statusMessage".into(), message.into());
    }
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": false,
        "_meta": {RELATED_TASK: {"taskId": task_id}},
    })
}

/// A tool result that reports a failure to the model (`isError: true`).
pub fn error_result(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

/// A tool result of plain text.
pub fn text_result(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": false})
}

/// Adds the gateway's two tools to a `tools/list` result, and lets every listed tool
/// with an `outputSchema` return a deferred result too: clients validate a result's
/// `structuredContent` against the schema they listed (the TypeScript SDK 1.x refuses a
/// result that lacks or contradicts it), so the schema becomes "the tool's, or a
/// deferred result's" (`anyOf`, under the `type: "object"` root the spec requires).
pub fn advertise(result: &mut Value, names: &ToolNames, max_wait_seconds: u64) {
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    for tool in tools.iter_mut() {
        if let Some(schema) = tool.get_mut("outputSchema")
            && schema.is_object()
        {
            let original = schema.take();
            *schema = json!({"type": "object", "anyOf": [original, deferred_schema()]});
        }
    }
    // The gateway's tools come once, after the upstream's last page.
    if result
        .get("nextCursor")
        .is_some_and(|cursor| !cursor.is_null())
    {
        return;
    }
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    tools.push(json!({
        "name": names.get_result,
        "title": "Get a long tool call's result",
        "description": format!(
            "Gets the result of a tool call that took too long and was answered with a taskId \
             instead of its result. Waits up to waitSeconds (at most {max_wait_seconds}) for \
             the call to finish, then returns the tool's own result, or says that the work \
             still goes on (call this again then), failed, or was cancelled."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "taskId": {"type": "string", "description": "The taskId the earlier call returned."},
                "waitSeconds": {
                    "type": "integer",
                    "minimum": 0,
                    "description": format!("How long to wait for the result, in seconds (at most {max_wait_seconds})."),
                },
            },
            "required": ["taskId"],
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
    }));
    tools.push(json!({
        "name": names.cancel,
        "title": "Stop a long tool call",
        "description": "Stops a tool call that took too long and was answered with a taskId instead of its result. Use it when the result is no longer needed.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "taskId": {"type": "string", "description": "The taskId the earlier call returned."},
            },
            "required": ["taskId"],
        },
        "annotations": {"destructiveHint": true, "idempotentHint": true, "openWorldHint": false},
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_are_renamed_only_where_the_upstream_has_one_of_their_names() {
        let plain = ToolNames::choose(|_| false);
        assert_eq!(plain.get_result, "get_task_result");
        assert_eq!(plain.cancel, "cancel_task");
        let clash = ToolNames::choose(|name| name == "cancel_task");
        assert_eq!(clash.get_result, "get_task_result");
        assert_eq!(clash.cancel, "gateway_cancel_task");
    }

    #[test]
    fn a_listed_output_schema_admits_the_deferred_shape_and_keeps_its_own() {
        let own =
            json!({"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]});
        let mut listed = json!({"tools": [
            {"name": "a", "inputSchema": {"type": "object"}, "outputSchema": own.clone()},
            {"name": "b", "inputSchema": {"type": "object"}},
        ]});
        advertise(&mut listed, &ToolNames::choose(|_| false), 20);
        let tools = listed["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 4);
        assert_eq!(tools[0]["outputSchema"]["type"], "object");
        assert_eq!(tools[0]["outputSchema"]["anyOf"][0], own);
        assert_eq!(
            tools[0]["outputSchema"]["anyOf"][1]["required"],
            json!(["taskId", "status"])
        );
        assert!(tools[1].get("outputSchema").is_none());
        assert_eq!(tools[2]["name"], "get_task_result");
        assert_eq!(tools[3]["name"], "cancel_task");
    }

    #[test]
    fn a_deferred_result_names_the_task_everywhere_a_client_looks() {
        let names = ToolNames::choose(|_| false);
        let result = deferred_result("slow", "t-1", "working", Some("step 2 of 5"), &names, 20);
        assert_eq!(result["isError"], false);
        assert_eq!(
            result["structuredContent"],
            json!({"taskId": "t-1", "status": "working", "statusMessage": "step 2 of 5"})
        );
        assert_eq!(result["_meta"][RELATED_TASK]["taskId"], "t-1");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("get_task_result") && text.contains("t-1") && text.contains("20 s"));
    }
}
