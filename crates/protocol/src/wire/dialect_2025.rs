//! The 2025-11-25 task dialect (session clients): `params.task`, `CreateTaskResult` as
//! `{task}`, `ttl`/`pollInterval`, `tasks/result`, `tasks/list`, the related-task
//! `_meta`, and SEP-1905's response modes.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::TaskStatus;

/// `_meta` key tying a message to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// SEP-1905: `_meta` key saying which mode the server fell back to.
pub const FALLBACK_MODE: &str = "io.modelcontextprotocol/fallback-mode";

/// A `Task` (the `tasks/get`, `tasks/cancel` and `notifications/tasks/status` shape, and
/// each entry of `tasks/list`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task<'a> {
    pub task_id: &'a str,
    pub status: TaskStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<&'a str>,
    pub created_at: String,
    pub last_updated_at: String,
    pub ttl: u64,
    pub poll_interval: u64,
}

/// The answer to a task-augmented request.
#[derive(Debug, Serialize)]
pub struct CreateTaskResult<'a> {
    pub task: Task<'a>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResult<'a> {
    pub tasks: Vec<Task<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `params.task` of a task-augmented request.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskParam {
    /// Kept as a number of any kind, so that 0, negative and fractional values get a
    /// clear error instead of a parse failure.
    #[serde(default)]
    pub ttl: Option<serde_json::Number>,
    /// SEP-1905: the modes the client accepts, in any order.
    #[serde(default)]
    pub response_modes: Option<Vec<String>>,
}

/// SEP-1905 response modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseMode {
    Task,
    Immediate,
    Streaming,
}

impl ResponseMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Immediate => "immediate",
            Self::Streaming => "streaming",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "task" => Some(Self::Task),
            "immediate" => Some(Self::Immediate),
            "streaming" => Some(Self::Streaming),
            _ => None,
        }
    }
}

/// What SEP-1905 has the gateway do with a task-augmented call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeChoice {
    /// The result inline when the call ends within the promotion budget.
    pub immediate: bool,
    /// The client asked for `streaming` and nothing better: a task with a fallback note.
    pub streaming_fell_back: bool,
}

impl TaskParam {
    /// SEP-1905's choice among the modes the client lists (`immediate` > `streaming` >
    /// `task`), for a session that declared `tasks.responses.modes`. A plain upstream
    /// produces no partial content, so `streaming` becomes `task`.
    pub fn mode_choice(&self, session_declared_modes: bool) -> ModeChoice {
        let listed: Vec<ResponseMode> = self
            .response_modes
            .iter()
            .flatten()
            .filter_map(|m| ResponseMode::parse(m))
            .collect();
        if !session_declared_modes {
            return ModeChoice {
                immediate: false,
                streaming_fell_back: false,
            };
        }
        let immediate = listed.contains(&ResponseMode::Immediate);
        ModeChoice {
            immediate,
            streaming_fell_back: !immediate && listed.contains(&ResponseMode::Streaming),
        }
    }
}

/// `tasks/list` params.
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    #[serde(default)]
    pub cursor: Option<String>,
}

/// Prefix of the ids of the gateway's own server-to-client requests (a task's input
/// requests on a `tasks/result` stream), so the client's answers are told apart from
/// answers to the upstream's requests.
pub const INPUT_REQUEST_ID: &str = "mtg-input:";

/// The id of the request that delivers input request `key` of `task_id`.
pub fn input_request_id(task_id: &str, key: &str) -> String {
    format!("{INPUT_REQUEST_ID}{task_id}:{key}")
}

/// The task id and key an answer's id names, if it is one of the gateway's.
pub fn parse_input_request_id(id: &Value) -> Option<(&str, &str)> {
    let rest = id.as_str()?.strip_prefix(INPUT_REQUEST_ID)?;
    rest.split_once(':')
}

/// `{"taskId": id}` under the related-task key.
pub fn related_task(task_id: &str) -> Value {
    json!({ "taskId": task_id })
}

/// The `tasks` capability the gateway declares to a session client that declared its
/// own; with `modes`, SEP-1905's response modes too.
pub fn server_tasks_capability(modes: bool) -> Value {
    let mut capability = json!({
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    });
    if modes {
        capability["responses"] = json!({"modes": ["task", "immediate"]});
    }
    capability
}

/// Whether a client's declared `tasks` capability lists SEP-1905 response modes.
pub fn declares_response_modes(client_tasks: &Value) -> bool {
    client_tasks
        .pointer("/responses/modes")
        .and_then(Value::as_array)
        .is_some_and(|modes| !modes.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(modes: &[&str]) -> TaskParam {
        TaskParam {
            ttl: None,
            response_modes: Some(modes.iter().map(|m| (*m).to_owned()).collect()),
        }
    }

    #[test]
    fn immediate_wins_then_streaming_falls_back_to_task() {
        let choice = param(&["task", "streaming", "immediate"]).mode_choice(true);
        assert!(choice.immediate && !choice.streaming_fell_back);
        let choice = param(&["streaming"]).mode_choice(true);
        assert!(!choice.immediate && choice.streaming_fell_back);
        let choice = param(&["task"]).mode_choice(true);
        assert!(!choice.immediate && !choice.streaming_fell_back);
    }

    #[test]
    fn modes_count_only_when_the_session_declared_them() {
        let choice = param(&["immediate"]).mode_choice(false);
        assert!(!choice.immediate && !choice.streaming_fell_back);
        assert!(declares_response_modes(
            &json!({"responses": {"modes": ["immediate"]}})
        ));
        assert!(!declares_response_modes(&json!({"list": {}})));
    }

    #[test]
    fn input_request_ids_name_their_task_and_key() {
        let id = Value::from(input_request_id("t-1", "input-3"));
        assert_eq!(parse_input_request_id(&id), Some(("t-1", "input-3")));
        assert_eq!(parse_input_request_id(&json!(7)), None);
        assert_eq!(parse_input_request_id(&json!("7")), None);
    }

    #[test]
    fn a_task_has_the_2025_field_names() {
        let task = Task {
            task_id: "t",
            status: TaskStatus::InputRequired,
            status_message: None,
            created_at: "c".into(),
            last_updated_at: "u".into(),
            ttl: 5,
            poll_interval: 7,
        };
        assert_eq!(
            serde_json::to_value(&task).unwrap(),
            json!({"taskId": "t", "status": "input_required", "createdAt": "c", "lastUpdatedAt": "u", "ttl": 5, "pollInterval": 7})
        );
    }
}
