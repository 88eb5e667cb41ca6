//! What the upstream's `tools/list` says about its tools that changes how the gateway
//! runs them: tools it runs only as its own 2025-11-25 tasks (`execution.taskSupport:
//! "required"`), and tools that are safe to run again after their gateway instance was
//! lost (`annotations.readOnlyHint` or `idempotentHint`), and tools that declare an
//! `outputSchema` (their clients require `structuredContent`). Listed with the caller's
//! credentials, kept a minute; a listing that cannot be had counts as "neither".

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::upstream::{Caller, Upstream, forward};
use mtg_protocol::names::method;

const FRESH_FOR: Duration = Duration::from_secs(60);
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// A listing longer than this many pages is not followed further.
const MAX_PAGES: usize = 20;

pub(super) struct ToolTraits {
    /// The last listing and when it was had: read on every call that asks, so a lock
    /// locked only to swap it, never across the upstream's answer.
    listing: RwLock<Option<(Instant, Arc<Listed>)>>,
    /// Locked while one caller lists, so that callers do not list at once.
    refreshing: Mutex<()>,
    /// Whether the last listing had a tool the upstream runs only as its own task (or
    /// there was none yet): read without a lock on paths that parse nothing otherwise.
    maybe_own_task_only: AtomicBool,
}

impl Default for ToolTraits {
    fn default() -> Self {
        Self {
            listing: RwLock::default(),
            refreshing: Mutex::default(),
            maybe_own_task_only: AtomicBool::new(true),
        }
    }
}

#[derive(Default)]
struct Listed {
    /// Whether the listing was had: without it nothing is known.
    complete: bool,
    /// Every tool's name.
    names: HashSet<String>,
    own_task_only: HashSet<String>,
    safe_to_run_again: HashSet<String>,
    with_output_schema: HashSet<String>,
}

impl ToolTraits {
    /// Whether the upstream may have a tool it runs only as its own task: `false` only
    /// once a listing showed none.
    pub(super) fn may_have_own_task_only(&self) -> bool {
        self.maybe_own_task_only.load(Ordering::Relaxed)
    }

    /// Whether the upstream runs `tool` only as a task of its own.
    pub(super) async fn own_task_only(
        &self,
        upstream: &dyn Upstream,
        caller: &Caller<'_>,
        tool: &str,
    ) -> bool {
        self.listed(upstream, caller)
            .await
            .own_task_only
            .contains(tool)
    }

    /// Whether the upstream annotates `tool` read-only or idempotent: a call of it
    /// may run again.
    pub(super) async fn safe_to_run_again(
        &self,
        upstream: &dyn Upstream,
        caller: &Caller<'_>,
        tool: &str,
    ) -> bool {
        self.listed(upstream, caller)
            .await
            .safe_to_run_again
            .contains(tool)
    }

    /// Whether the upstream lists `tool` with an `outputSchema`; when the listing cannot
    /// be had, yes (a `structuredContent` too many harms no client, one too few does).
    pub(super) async fn declares_output_schema(
        &self,
        upstream: &dyn Upstream,
        caller: &Caller<'_>,
        tool: &str,
    ) -> bool {
        let listed = self.listed(upstream, caller).await;
        !listed.complete || listed.with_output_schema.contains(tool)
    }

    /// Which of `tools` the upstream has, in one look at its listing.
    pub(super) async fn has<const N: usize>(
        &self,
        upstream: &dyn Upstream,
        caller: &Caller<'_>,
        tools: [&str; N],
    ) -> [bool; N] {
        let listed = self.listed(upstream, caller).await;
        tools.map(|tool| listed.names.contains(tool))
    }

    async fn listed(&self, upstream: &dyn Upstream, caller: &Caller<'_>) -> Arc<Listed> {
        if let Some(listed) = self.fresh() {
            return listed;
        }
        let _listing = self.refreshing.lock().await;
        // Another caller may have listed while this one waited.
        if let Some(listed) = self.fresh() {
            return listed;
        }
        let listed = Arc::new(list(upstream, caller).await);
        self.maybe_own_task_only.store(
            !listed.complete || !listed.own_task_only.is_empty(),
            Ordering::Relaxed,
        );
        *self.listing.write().unwrap_or_else(PoisonError::into_inner) =
            Some((Instant::now(), listed.clone()));
        listed
    }

    /// The last listing, if it is fresh.
    fn fresh(&self) -> Option<Arc<Listed>> {
        let listing = self.listing.read().unwrap_or_else(PoisonError::into_inner);
        listing
            .as_ref()
            .filter(|(at, _)| at.elapsed() <= FRESH_FOR)
            .map(|(_, listed)| listed.clone())
    }
}

async fn list(upstream: &dyn Upstream, caller: &Caller<'_>) -> Listed {
    let mut listed = Listed::default();
    let mut cursor: Option<Value> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.take().map(|c| json!({ "cursor": c }));
        let page = forward::request(
            upstream,
            caller,
            method::TOOLS_LIST,
            params,
            Some(LIST_TIMEOUT),
        )
        .await;
        let Ok(Ok(page)) = page else {
            tracing::debug!("could not list the upstream's tools; no tool traits assumed");
            listed.complete = false;
            break;
        };
        listed.complete = true;
        for tool in page["tools"].as_array().into_iter().flatten() {
            let Some(name) = tool["name"].as_str() else {
                continue;
            };
            listed.names.insert(name.to_owned());
            if tool
                .pointer("/execution/taskSupport")
                .and_then(Value::as_str)
                == Some("required")
            {
                listed.own_task_only.insert(name.to_owned());
            }
            if tool.get("outputSchema").is_some_and(Value::is_object) {
                listed.with_output_schema.insert(name.to_owned());
            }
            let hint = |hint: &str| tool["annotations"][hint].as_bool() == Some(true);
            if hint("readOnlyHint") || hint("idempotentHint") {
                listed.safe_to_run_again.insert(name.to_owned());
            }
        }
        match page.get("nextCursor") {
            Some(next) if !next.is_null() => cursor = Some(next.clone()),
            _ => break,
        }
    }
    listed
}
