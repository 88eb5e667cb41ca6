//! The console's task table: newest first from the store's newest-first walk, with the
//! filters the store cannot apply applied while paging. A page never holds more than its
//! limit, and it ends right after its last task, so the next page neither skips nor
//! repeats one; a sparse filter gets a short page and a cursor rather than a walk of the
//! whole store.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use super::views::{TaskRow, TaskTable};
use mtg_protocol::wire::{InputRequest, TaskStatus, rfc3339_millis};
use mtg_store::{InspectError, Newest, TaskInspection, TaskRecord, now_ms};

pub(super) const DEFAULT_LIMIT: usize = 50;
pub(super) const MAX_LIMIT: usize = 500;
/// Most tasks one page examines whatever its filters.
const MAX_EXAMINED: usize = 10_000;
/// Most tasks asked of the store in one step.
const MAX_STEP: usize = 1_000;

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
    let mut cursor = cursor;
    let mut found: Vec<Arc<TaskRecord>> = Vec::new();
    let mut examined = 0;
    let mut step = limit;
    loop {
        let page = inspection.newest(which, cursor.as_deref(), step).await?;
        let before = found.len();
        let last = page.tasks.len().checked_sub(1);
        let mut full_at = None;
        for (index, scanned) in page.tasks.into_iter().enumerate() {
            if filter.matches(&scanned.task) {
                found.push(scanned.task);
                if found.len() == limit {
                    full_at = Some((index, scanned.after));
                    break;
                }
            }
        }
        examined += step;
        // Full before the step's end: go on right after the task that filled it.
        cursor = match full_at {
            Some((index, after)) if Some(index) != last => Some(after),
            _ => page.next,
        };
        if cursor.is_none() || found.len() >= limit || examined >= MAX_EXAMINED {
            break;
        }
        // Ask for as many as the matches so far say the rest of the page needs.
        let missing = limit - found.len();
        step = if found.len() == before {
            (step * 4).min(MAX_STEP)
        } else {
            (missing * examined / found.len()).clamp(missing, MAX_STEP)
        };
    }
    let now = now_ms();
    Ok(TaskTable {
        tasks: found.iter().map(|task| row(task, upstream, now)).collect(),
        next_cursor: cursor,
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

/// The tool of the task's `tools/call` (its stored params).
pub(super) fn tool_of(task: &TaskRecord) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        name: Option<String>,
    }
    let request: &RawValue = &task.request;
    serde_json::from_str::<Named>(request.get())
        .ok()
        .and_then(|named| named.name)
}
