//! Tools the upstream runs only as its own 2025-11-25 tasks (`execution.taskSupport:
//! "required"`, e.g. server-everything's `simulate-research-query`). The gateway still
//! owns the task its client sees (one store, any instance, principal binding, listing,
//! push); its runner creates the upstream's task and follows it with the upstream's
//! `tasks/result`, whose stream carries the upstream's input requests and ends with the
//! result. Which tools those are comes from the upstream's `tools/list`
//! (`tool_traits.rs`).

use serde_json::Value;

use mtg_protocol::wire::dialect_2025::RELATED_TASK;

/// The upstream task a `CreateTaskResult` names.
pub(super) fn created_task_id(result: &Value) -> Option<&str> {
    if result.get("content").is_some() {
        return None;
    }
    result.pointer("/task/taskId")?.as_str()
}

/// The upstream's result without its own task's `_meta` (the client knows the
/// gateway's task, not the upstream's).
pub(super) fn without_upstream_task(mut result: Value) -> Value {
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(RELATED_TASK);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_create_task_result_names_the_upstream_task() {
        let created = json!({"task": {"taskId": "up-1", "status": "working"}});
        assert_eq!(created_task_id(&created), Some("up-1"));
        let result = json!({"content": [], "task": {"taskId": "x"}});
        assert_eq!(created_task_id(&result), None);
        let cleaned = without_upstream_task(
            json!({"content": [], "_meta": {RELATED_TASK: {"taskId": "up-1"}, "k": 1}}),
        );
        assert_eq!(cleaned, json!({"content": [], "_meta": {"k": 1}}));
    }
}
