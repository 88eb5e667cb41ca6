//! What a client sees of a task: the stored record rendered as SEP-2663 wire shapes.
//!
//! This lives in the task layer, not in the store (which keeps records and nothing a
//! client reads) nor in `protocol::wire` (a leaf every layer uses, which must not know
//! the store's record). The task layer owns the dialects: the 2025-11-25 task dialect
//! will render the same record differently, next to this one.

use crate::protocol::wire::{ResultType, TaskResult, TaskStatus, rfc3339_millis};
use crate::store::TaskRecord;

/// The `CreateTaskResult` (resultType `task`) or `tasks/get` result (`complete`).
pub fn task_result(task: &TaskRecord, result_type: ResultType) -> TaskResult<'_> {
    TaskResult {
        result_type,
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
