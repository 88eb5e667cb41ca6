//! Deferred results: what a client that cannot take a task gets when its `tools/call`
//! outlives `--defer-after-ms`, and the two tools the gateway adds so that a model can
//! fetch or stop the call later. Everything here is an ordinary `CallToolResult` or
//! `Tool`, so any client and any host takes it.
//!
//! These answers are read by models through hosts, which shapes them (docs/hosts.md):
//! - Some hosts show the model `structuredContent` in place of the `content` text, so a
//!   deferred result carries `structuredContent` only where the called tool declares an
//!   `outputSchema` (clients then require it), and then it holds the same words.
//! - Some hosts stop a turn when the model repeats an identical tool call, so every
//!   answer that says "still running" names the exact next call, with an `attempt`
//!   number one higher than the last: no two fetches are alike.

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

/// How long `get_task_result` waits: without `waitSeconds` (the deferral budget, which
/// fits under the host's limit), and at most when the caller asks for longer
/// (`--deferred-max-wait-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    pub default: Duration,
    pub max: Duration,
}

impl Waits {
    /// `max` below `default` counts as `default`.
    pub fn new(default: Duration, max: Duration) -> Self {
        Self {
            default,
            max: max.max(default),
        }
    }

    fn default_seconds(&self) -> u64 {
        self.default.as_secs().max(1)
    }

    fn max_seconds(&self) -> u64 {
        self.max.as_secs().max(1)
    }
}

/// A `waitSeconds` above this is refused rather than cut to the cap: it is a mistake,
/// not a wish to wait long.
pub const MAX_WAIT_SECONDS: u64 = 86_400;

/// An `attempt` above this is refused; a model counting fetches never gets near it.
pub const MAX_ATTEMPT: u64 = 1_000_000;

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

/// A whole number from a tool argument: models send `2` or `2.0` alike.
fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}

/// How long `get_task_result` waits: `waitSeconds` cut to the cap, the default without
/// one, or the result that refuses the call.
pub fn wait_argument(arguments: Option<&Value>, waits: Waits) -> Result<Duration, Value> {
    match arguments.and_then(|a| a.get("waitSeconds")) {
        None | Some(Value::Null) => Ok(waits.default),
        Some(wait) => match whole_number(wait).filter(|s| *s <= MAX_WAIT_SECONDS) {
            Some(seconds) => Ok(waits.max.min(Duration::from_secs(seconds))),
            None => Err(error_result(&format!(
                "waitSeconds must be a whole number of seconds from 0 to {MAX_WAIT_SECONDS}; got {wait}"
            ))),
        },
    }
}

/// `get_task_result`'s `attempt`: which fetch this is, by the count the last answer
/// gave. Only a hint that keeps successive calls apart; `None` when not given.
pub fn attempt_argument(arguments: Option<&Value>) -> Result<Option<u64>, Value> {
    match arguments.and_then(|a| a.get("attempt")) {
        None | Some(Value::Null) => Ok(None),
        Some(attempt) => match whole_number(attempt).filter(|n| (1..=MAX_ATTEMPT).contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err(error_result(&format!(
                "attempt must be a whole number from 1 to {MAX_ATTEMPT} (the number the last \
                 answer gave); got {attempt}"
            ))),
        },
    }
}

/// A `get_task_result` call's arguments, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetch<'a> {
    pub task_id: &'a str,
    /// How long to wait for the task.
    pub wait: Duration,
    pub attempt: Option<u64>,
}

/// Reads a `get_task_result` call's arguments, or gives the result that refuses it.
pub fn fetch_arguments<'a>(
    arguments: Option<&'a Value>,
    tool: &str,
    waits: Waits,
) -> Result<Fetch<'a>, Value> {
    Ok(Fetch {
        task_id: task_id_argument(arguments, tool)?,
        wait: wait_argument(arguments, waits)?,
        attempt: attempt_argument(arguments)?,
    })
}

/// The attempt number the answer to a fetch with `attempt` hands on.
pub fn next_attempt(attempt: Option<u64>) -> u64 {
    attempt.map_or(1, |n| (n + 1).min(MAX_ATTEMPT))
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
            "message": {"type": "string"},
            "nextCall": {"type": "object"},
        },
        "required": ["taskId", "status"],
    })
}

/// One "still running" answer: of which call, what to say, and how.
#[derive(Debug, Clone)]
pub struct Deferred<'a> {
    /// The tool the deferred call is of.
    pub tool: &'a str,
    pub task_id: &'a str,
    pub status: &'a str,
    pub status_message: Option<&'a str>,
    pub names: &'a ToolNames,
    pub waits: Waits,
    /// The `attempt` the next fetch carries.
    pub attempt: u64,
    /// Whether the called tool declares an `outputSchema`: its clients then require
    /// `structuredContent`, which carries the same words.
    pub structured: bool,
}

/// A deferred result: the call goes on as task `task_id`; a model is told in words how
/// to get its result, with the exact next call, and a program finds the id in `_meta`.
pub fn deferred_result(deferred: &Deferred<'_>) -> Value {
    let Deferred {
        tool,
        task_id,
        status,
        status_message,
        names,
        waits,
        attempt,
        structured,
    } = deferred;
    let next = json!({"taskId": task_id, "attempt": attempt});
    // Written by hand so that `taskId` comes first, as a person would write the call.
    let next_text = format!("{{\"taskId\": {}, \"attempt\": {attempt}}}", json!(task_id));
    let mut text = format!(
        "The tool {tool} is still running (task {task_id}); nothing went wrong. Its result is \
         not ready yet. To get it, call the tool {get} with {next_text}. That call waits up to \
         {wait} s for the result; if it says again that the work goes on, make the next call \
         it names (its attempt number goes up each time).",
        get = names.get_result,
        wait = waits.default_seconds(),
    );
    if waits.max_seconds() > waits.default_seconds() {
        text.push_str(&format!(
            " If tool calls may take longer here, add \"waitSeconds\" (up to {}) to wait \
             longer in one call.",
            waits.max_seconds()
        ));
    }
    text.push_str(&format!(
        " To stop the work, call {cancel} with {{\"taskId\": \"{task_id}\"}}.",
        cancel = names.cancel
    ));
    if let Some(message) = status_message {
        text.push_str(&format!(" Latest status: {message}"));
    }
    let mut result = json!({
        "content": [{"type": "text", "text": text}],
        "isError": false,
        "_meta": {RELATED_TASK: {"taskId": task_id}},
    });
    if *structured {
        let mut fields = Map::new();
        fields.insert("taskId".into(), (*task_id).into());
        fields.insert("status".into(), (*status).into());
        if let Some(message) = status_message {
            fields.insert("statusMessage".into(), (*message).into());
        }
        fields.insert("message".into(), text.into());
        fields.insert(
            "nextCall".into(),
            json!({"name": names.get_result, "arguments": next}),
        );
        result["structuredContent"] = Value::Object(fields);
    }
    result
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
pub fn advertise(result: &mut Value, names: &ToolNames, waits: Waits) {
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
    let (wait, max_wait) = (waits.default_seconds(), waits.max_seconds());
    tools.push(json!({
        "name": names.get_result,
        "title": "Get a long tool call's result",
        "description": format!(
            "Gets the result of a tool call that took too long and was answered with a taskId \
             instead of its result. Waits up to {wait} s (or waitSeconds, at most {max_wait}) \
             for the call to finish, then returns the tool's own result, or says that the work \
             still goes on and names the next call to make, or that it failed or was cancelled."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "taskId": {"type": "string", "description": "The taskId the earlier answer gave."},
                "attempt": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_ATTEMPT,
                    "description": "The attempt number the earlier answer gave (it goes up by one with each call).",
                },
                "waitSeconds": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": max_wait,
                    "description": format!("How long to wait for the result, in seconds: {wait} if not given, at most {max_wait}."),
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
                "taskId": {"type": "string", "description": "The taskId the earlier answer gave."},
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

    fn waits(default: u64, max: u64) -> Waits {
        Waits::new(Duration::from_secs(default), Duration::from_secs(max))
    }

    fn deferred(structured: bool, attempt: u64) -> Deferred<'static> {
        static NAMES: std::sync::LazyLock<ToolNames> =
            std::sync::LazyLock::new(|| ToolNames::choose(|_| false));
        Deferred {
            tool: "slow",
            task_id: "t-1",
            status: "working",
            status_message: Some("step 2 of 5"),
            names: &NAMES,
            waits: waits(20, 20),
            attempt,
            structured,
        }
    }

    #[test]
    fn a_listed_output_schema_admits_the_deferred_shape_and_keeps_its_own() {
        let own =
            json!({"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]});
        let mut listed = json!({"tools": [
            {"name": "a", "inputSchema": {"type": "object"}, "outputSchema": own.clone()},
            {"name": "b", "inputSchema": {"type": "object"}},
        ]});
        advertise(&mut listed, &ToolNames::choose(|_| false), waits(20, 600));
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
    fn the_fetch_tool_takes_an_attempt_and_a_wait_up_to_the_cap() {
        let mut listed = json!({"tools": []});
        advertise(&mut listed, &ToolNames::choose(|_| false), waits(20, 600));
        let get = &listed["tools"][0];
        assert_eq!(
            get["inputSchema"]["properties"]["attempt"]["type"],
            "integer"
        );
        assert_eq!(
            get["inputSchema"]["properties"]["waitSeconds"]["maximum"],
            600
        );
        assert_eq!(get["inputSchema"]["required"], json!(["taskId"]));
    }

    #[test]
    fn a_deferred_result_without_an_output_schema_is_words_only() {
        let result = deferred_result(&deferred(false, 1));
        assert_eq!(result["isError"], false);
        assert!(result.get("structuredContent").is_none(), "{result}");
        assert_eq!(result["_meta"][RELATED_TASK]["taskId"], "t-1");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("still running") && text.contains("20 s"),
            "{text}"
        );
        assert!(text.contains("Latest status: step 2 of 5"), "{text}");
        assert!(
            !text.contains("waitSeconds"),
            "no longer wait to offer: {text}"
        );
    }

    /// The exact next call stands in the words, as JSON a model can copy.
    fn next_call_in(text: &str) -> Value {
        let at = text.find("call the tool get_task_result with ").unwrap()
            + "call the tool get_task_result with ".len();
        let mut stream = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        stream.next().unwrap().unwrap()
    }

    #[test]
    fn the_words_name_the_exact_next_call_and_it_changes_each_time() {
        let first = deferred_result(&deferred(false, 1));
        let second = deferred_result(&deferred(false, next_attempt(Some(1))));
        let text = |r: &Value| r["content"][0]["text"].as_str().unwrap().to_owned();
        assert_eq!(
            next_call_in(&text(&first)),
            json!({"taskId": "t-1", "attempt": 1})
        );
        assert_eq!(
            next_call_in(&text(&second)),
            json!({"taskId": "t-1", "attempt": 2})
        );
    }

    #[test]
    fn a_deferred_result_of_a_tool_with_an_output_schema_carries_the_words_there_too() {
        let result = deferred_result(&deferred(true, 3));
        let structured = &result["structuredContent"];
        assert_eq!(structured["taskId"], "t-1");
        assert_eq!(structured["status"], "working");
        assert_eq!(structured["statusMessage"], "step 2 of 5");
        assert_eq!(structured["message"], result["content"][0]["text"]);
        assert_eq!(
            structured["nextCall"],
            json!({"name": "get_task_result", "arguments": {"taskId": "t-1", "attempt": 3}})
        );
    }

    #[test]
    fn a_longer_wait_is_offered_only_when_the_cap_allows_one() {
        let mut longer = deferred(false, 1);
        longer.waits = waits(20, 600);
        let text = deferred_result(&longer)["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(text.contains("\"waitSeconds\" (up to 600)"), "{text}");
    }

    #[test]
    fn wait_seconds_is_cut_to_the_cap_and_defaults_to_the_budget() {
        let w = waits(20, 600);
        let wait = |args: Value| wait_argument(Some(&args), w);
        assert_eq!(wait(json!({})), Ok(Duration::from_secs(20)));
        assert_eq!(
            wait(json!({"waitSeconds": 300})),
            Ok(Duration::from_secs(300))
        );
        assert_eq!(
            wait(json!({"waitSeconds": 300.0})),
            Ok(Duration::from_secs(300))
        );
        assert_eq!(
            wait(json!({"waitSeconds": 5000})),
            Ok(Duration::from_secs(600))
        );
        assert_eq!(wait(json!({"waitSeconds": 5})), Ok(Duration::from_secs(5)));
        for bad in [json!(-1), json!(1.5), json!("10"), json!(86_401)] {
            let refused = wait(json!({"waitSeconds": bad})).unwrap_err();
            assert_eq!(refused["isError"], true, "{bad}");
        }
        // A cap below the budget counts as the budget.
        assert_eq!(waits(20, 5).max, Duration::from_secs(20));
    }

    #[test]
    fn an_attempt_is_a_hint_checked_for_shape_only() {
        let attempt = |args: Value| attempt_argument(Some(&args));
        assert_eq!(attempt(json!({})), Ok(None));
        assert_eq!(attempt(json!({"attempt": 7})), Ok(Some(7)));
        assert_eq!(attempt(json!({"attempt": 7.0})), Ok(Some(7)));
        for bad in [
            json!(0),
            json!(-3),
            json!(2.5),
            json!("2"),
            json!(MAX_ATTEMPT + 1),
        ] {
            let refused = attempt(json!({"attempt": bad})).unwrap_err();
            assert_eq!(refused["isError"], true, "{bad}");
            assert!(
                refused["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .contains("attempt")
            );
        }
        assert_eq!(next_attempt(None), 1);
        assert_eq!(next_attempt(Some(4)), 5);
        assert_eq!(next_attempt(Some(MAX_ATTEMPT)), MAX_ATTEMPT);
    }
}
