//! Tools the upstream runs only as its own 2025-11-25 tasks (`execution.taskSupport:
//! "required"`, e.g. server-everything's `simulate-research-query`). The gateway still
//! owns the task its client sees (one store, any instance, principal binding, listing,
//! push); its runner creates the upstream's task and follows it with the upstream's
//! `tasks/result`, whose stream carries the upstream's input requests and ends with the
//! result. Which tools those are comes from the upstream's `tools/list`, kept a minute.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::protocol::names::method;
use crate::protocol::wire::session::RELATED_TASK;
use crate::upstream::{Caller, Upstream, forward};

const FRESH_FOR: Duration = Duration::from_secs(60);
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// A listing longer than this many pages is not followed further.
const MAX_PAGES: usize = 20;

#[derive(Default)]
pub struct NativeTaskTools {
    listing: Mutex<Option<(Instant, HashSet<String>)>>,
}

impl NativeTaskTools {
    /// Whether the upstream runs `tool` only as a task of its own. A listing that
    /// cannot be had counts as "no": the call then goes as any other.
    pub async fn required(&self, upstream: &dyn Upstream, caller: &Caller<'_>, tool: &str) -> bool {
        let mut listing = self.listing.lock().await;
        let stale = listing
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() > FRESH_FOR);
        if stale {
            let tools = list_required(upstream, caller).await;
            *listing = Some((Instant::now(), tools));
        }
        listing
            .as_ref()
            .is_some_and(|(_, tools)| tools.contains(tool))
    }
}

async fn list_required(upstream: &dyn Upstream, caller: &Caller<'_>) -> HashSet<String> {
    let mut required = HashSet::new();
    let mut cursor: Option<Value> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.take().map(|c| json!({ "cursor": c }));
        let page = forward::forward(
            upstream,
            caller,
            method::TOOLS_LIST,
            params,
            Some(LIST_TIMEOUT),
        )
        .await;
        let Ok(Ok(page)) = page else {
            tracing::debug!("could not list the upstream's tools; no native tasks assumed");
            break;
        };
        for tool in page["tools"].as_array().into_iter().flatten() {
            if tool
                .pointer("/execution/taskSupport")
                .and_then(Value::as_str)
                == Some("required")
                && let Some(name) = tool["name"].as_str()
            {
                required.insert(name.to_owned());
            }
        }
        match page.get("nextCursor") {
            Some(next) if !next.is_null() => cursor = Some(next.clone()),
            _ => break,
        }
    }
    required
}

/// The upstream task a `CreateTaskResult` names.
pub fn created_task_id(result: &Value) -> Option<&str> {
    if result.get("content").is_some() {
        return None;
    }
    result.pointer("/task/taskId")?.as_str()
}

/// The upstream's result without its own task's `_meta` (the client knows the
/// gateway's task, not the upstream's).
pub fn without_upstream_task(mut result: Value) -> Value {
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(RELATED_TASK);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

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
