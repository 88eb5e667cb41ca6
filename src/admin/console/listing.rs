//! The console's task table: newest first from the store's newest-first walk, paged by
//! `admin::paging` with the filters the store cannot apply.

use std::time::Duration;

use super::views::{TaskRow, TaskTable};
use crate::admin::paging;
use crate::admin::task_facts::tool_of;
use mtg_protocol::wire::{InputRequest, TaskStatus, rfc3339_millis};
use mtg_store::{InspectError, Newest, TaskInspection, TaskRecord, now_ms};

pub(super) const DEFAULT_LIMIT: usize = 50;
pub(super) const MAX_LIMIT: usize = 500;

/// What the table keeps; every filter that is set must match.
#[derive(Debug, Default, Clone)]
pub(super) struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub tool: Option<String>,
    pub principal: Option<String>,
    /// Created at least this long ago.
    pub older_than: Option<Duration>,
    /// Created at most this long ago.
    pub newer_than: Option<Duration>,
}

impl TaskFilter {
    fn matches(&self, task: &TaskRecord) -> bool {
        self.status.is_none_or(|status| task.status == status)
            && self
                .tool
                .as_ref()
                .is_none_or(|tool| tool_of(task).as_deref() == Some(tool.as_str()))
    }
}

/// A page of at most `limit` tasks of `filter`, newest first, from `cursor`.
pub(super) async fn page(
    inspection: &dyn TaskInspection,
    upstream: &str,
    filter: &TaskFilter,
    cursor: Option<String>,
    limit: usize,
) -> Result<TaskTable, InspectError> {
    let limit = limit.clamp(1, MAX_LIMIT);
    let now = now_ms();
    let ago = |age: Duration| now.saturating_sub(age.as_millis() as u64);
    let which = Newest {
        principal: filter.principal.as_deref(),
        created_at_most: filter.older_than.map(ago),
        created_at_least: filter.newer_than.map(ago),
    };
    let step = |cursor: Option<String>, step| async move {
        inspection.newest(which, cursor.as_deref(), step).await
    };
    let page = paging::gather(step, |task| filter.matches(task), cursor, limit).await?;
    let now = now_ms();
    Ok(TaskTable {
        tasks: page
            .tasks
            .iter()
            .map(|task| row(task, upstream, now))
            .collect(),
        next_cursor: page.next_cursor,
    })
}

pub(super) fn row(task: &TaskRecord, upstream: &str, now: u64) -> TaskRow {
    TaskRow {
        task_id: task.task_id.clone(),
        upstream: upstream.to_owned(),
        status: task.status.as_str().to_owned(),
        tool: tool_of(task),
        principal: task.principal.clone(),
        owner: task.owner.clone(),
        created_at: rfc3339_millis(task.created_at_ms),
        age_ms: now.saturating_sub(task.created_at_ms),
        status_message: task.status_message.clone(),
        pending_input: task.input_requests.len(),
        asks: task.input_requests.values().find_map(message_of),
    }
}

/// The words an input request asks in (`params.message`), if any.
pub(super) fn message_of(request: &InputRequest) -> Option<String> {
    request
        .params
        .as_ref()?
        .get("message")?
        .as_str()
        .map(str::to_owned)
}
