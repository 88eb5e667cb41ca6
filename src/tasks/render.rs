//! What a client sees of a task: the stored record rendered in SEP-2663's wire shapes
//! or in the 2025-11-25 dialect's.
//!
//! This lives in the task layer, not in the store (which keeps records and nothing a
//! client reads) nor in `mtg_protocol::wire` (a leaf every layer uses, which must not know
//! the store's record). One record, two dialects.

use serde_json::Value;
use serde_json::value::RawValue;

use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::{self, ResultType, TaskResult, TaskStatus, dialect_2025, rfc3339_millis};
use mtg_store::TaskRecord;

/// The `CreateTaskResult` (resultType `task`) or `tasks/get` result (`complete`).
pub fn task_result(task: &TaskRecord, result_type: ResultType) -> TaskResult<'_> {
    TaskResult {
        result_type,
        meta: wire::GatewayMeta,
        task_id: &task.task_id,
        status: task.status,
        status_message: task.status_message.as_deref(),
        created_at: rfc3339_millis(task.created_at_ms),
        last_updated_at: rfc3339_millis(task.last_updated_at_ms),
        ttl_ms: task.ttl_ms,
        poll_interval_ms: task.poll_interval_ms,
        input_requests: (task.status == TaskStatus::InputRequired).then_some(&task.input_requests),
        result: (task.status == TaskStatus::Completed)
            .then_some(task.result.as_deref())
            .flatten(),
        error: (task.status == TaskStatus::Failed)
            .then_some(task.error.as_ref())
            .flatten(),
    }
}

/// The 2025-11-25 `Task` of a record. A tool result with `isError: true` is `failed` in
/// that dialect (SEP-2663 keeps it `completed`); only then is the result read.
pub fn session_task(task: &TaskRecord) -> dialect_2025::Task<'_> {
    let status = match (task.status, task.result.as_deref()) {
        (TaskStatus::Completed, Some(result)) if is_tool_error(result) => TaskStatus::Failed,
        (status, _) => status,
    };
    dialect_2025::Task {
        task_id: &task.task_id,
        status,
        status_message: task.status_message.as_deref(),
        created_at: rfc3339_millis(task.created_at_ms),
        last_updated_at: rfc3339_millis(task.last_updated_at_ms),
        ttl: task.ttl_ms,
        poll_interval: task.poll_interval_ms,
    }
}

/// What `tasks/result` answers for an ended task: exactly what the call would have
/// returned (the result, or its JSON-RPC error), tied to the task by `_meta`.
pub fn session_outcome(task: &TaskRecord) -> Result<Value, ErrorObject> {
    match task.status {
        TaskStatus::Completed => {
            let raw = task.result.as_deref().map_or("{}", RawValue::get);
            let mut result: Value = serde_json::from_str(raw)
                .map_err(|e| ErrorObject::internal(format!("stored result unreadable: {e}")))?;
            if let Some(object) = result.as_object_mut() {
                // 2026-07-28's field; a 2025-11-25 result has none.
                object.remove("resultType");
                let meta = object
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(
                        dialect_2025::RELATED_TASK.into(),
                        dialect_2025::related_task(&task.task_id),
                    );
                }
            }
            Ok(result)
        }
        TaskStatus::Failed => Err(task
            .error
            .clone()
            .unwrap_or_else(|| ErrorObject::internal("the task failed"))),
        TaskStatus::Cancelled => Err(ErrorObject::invalid_params(format!(
            "task {} was cancelled; it has no result",
            task.task_id
        ))),
        TaskStatus::Working | TaskStatus::InputRequired => Err(ErrorObject::internal(
            "the task has not ended yet".to_owned(),
        )),
    }
}

fn is_tool_error(result: &RawValue) -> bool {
    #[derive(serde::Deserialize)]
    struct ToolResult {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    serde_json::from_str::<ToolResult>(result.get()).is_ok_and(|r| r.is_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: TaskStatus, result: Option<&str>) -> TaskRecord {
        TaskRecord {
            task_id: "t-1".into(),
            principal: "p".into(),
            owner: "o".into(),
            status,
            status_message: None,
            created_at_ms: 0,
            last_updated_at_ms: 0,
            ttl_ms: 1000,
            poll_interval_ms: 100,
            input_requests: Default::default(),
            answers: Default::default(),
            next_input_key: 0,
            result: result.map(|r| RawValue::from_string(r.into()).unwrap()),
            error: None,
            request: RawValue::from_string("{}".into()).unwrap(),
            upstream_state: None,
            resume: None,
            takeovers: 0,
            keep_arguments: false,
        }
    }

    #[test]
    fn a_tool_error_is_a_failed_task_in_the_2025_dialect() {
        let task = record(
            TaskStatus::Completed,
            Some(r#"{"content":[],"isError":true,"resultType":"complete"}"#),
        );
        assert_eq!(session_task(&task).status, TaskStatus::Failed);
        let ok = record(TaskStatus::Completed, Some(r#"{"content":[]}"#));
        assert_eq!(session_task(&ok).status, TaskStatus::Completed);
    }

    #[test]
    fn the_result_loses_result_type_and_names_its_task() {
        let task = record(
            TaskStatus::Completed,
            Some(r#"{"content":[],"resultType":"complete","_meta":{"k":1}}"#),
        );
        assert_eq!(
            session_outcome(&task).unwrap(),
            serde_json::json!({"content": [], "_meta": {"k": 1, dialect_2025::RELATED_TASK: {"taskId": "t-1"}}})
        );
        let cancelled = record(TaskStatus::Cancelled, None);
        assert_eq!(
            session_outcome(&cancelled).unwrap_err().code,
            mtg_protocol::jsonrpc::code::INVALID_PARAMS
        );
    }
}
