//! The inspection contract: what an operator may see of every task, whoever created it,
//! and of every instance. Only the gateway's admin API uses it; clients see their
//! own tasks through [`super::TaskStore`].
//!
//! Listing every task must stay cheap on a store holding millions: a page examines a
//! bounded number of entries and hands back a cursor, so one call never walks the whole
//! keyspace, and nothing uses `KEYS`. Every task found carries the cursor that resumes
//! right after it, so a caller can stop after any of them (a page of at most `limit`
//! tasks) without skipping or repeating one.

use std::sync::Arc;

use async_trait::async_trait;

use super::{StoreError, TaskRecord};

/// Where a listing looks. The narrowest scope that holds every task a filter can match
/// is the cheapest to walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every live task.
    All,
    /// Tasks not yet ended, of one instance or of every instance (the owners' indexes).
    Unfinished { owner: Option<&'a str> },
    /// One principal's tasks (its listing index).
    Principal(&'a str),
}

/// Which tasks a newest-first walk ([`TaskInspection::newest`]) lists: every live task
/// or one principal's, created within a window (both ends included, ms since the epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Newest<'a> {
    pub principal: Option<&'a str>,
    pub created_at_most: Option<u64>,
    pub created_at_least: Option<u64>,
}

impl Newest<'_> {
    /// Whether `task` is one of these (for the contract tests).
    #[cfg(test)]
    pub(crate) fn holds(&self, task: &TaskRecord) -> bool {
        self.principal.is_none_or(|p| p == task.principal)
            && self
                .created_at_most
                .is_none_or(|most| task.created_at_ms <= most)
            && self
                .created_at_least
                .is_none_or(|least| task.created_at_ms >= least)
    }
}

/// One page of a [`TaskInspection::scan`] or [`TaskInspection::newest`].
#[derive(Debug, Default)]
pub struct ScanPage {
    /// Live tasks found among the entries examined, in walk order; may be empty while
    /// `next` is not.
    pub tasks: Vec<Scanned>,
    /// Where the next page starts, after every entry examined; `None` once the scope is
    /// walked to its end.
    pub next: Option<String>,
}

/// A task a scan found, and where a walk that stops after it goes on.
#[derive(Debug)]
pub struct Scanned {
    pub task: Arc<TaskRecord>,
    /// The cursor of the entries after this one: the tasks before it in this page and
    /// earlier pages are never listed again from it, the ones after it are.
    pub after: String,
}

/// An instance as its lease shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceInfo {
    pub instance: String,
    pub advertise_url: Option<String>,
    /// Time left on the lease; `None` once it lapsed (the instance is gone or cut off).
    pub lease_expires_in_ms: Option<u64>,
    /// Unfinished tasks indexed under the instance.
    pub running_tasks: u64,
}

/// The cursor was not made by this scope's listing.
#[derive(Debug, thiserror::Error)]
#[error("invalid cursor {0:?}: pass back a nextCursor of the same listing unchanged")]
pub struct BadCursor(pub(crate) String);

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    BadCursor(#[from] BadCursor),
    /// The store cannot walk this scope (e.g. every key of a Redis Cluster).
    #[error("{0}")]
    Unsupported(&'static str),
}

#[async_trait]
pub trait TaskInspection: Send + Sync + 'static {
    /// A live task by id, whoever created it.
    async fn inspect(&self, task_id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError>;

    /// A page of live tasks in `scope`, from `cursor` (`None`: the start), examining
    /// about `budget` entries (a store may examine more in one step, never unboundedly
    /// many). Walking on from `next`, or from the `after` of any task of the page, lists
    /// every task that stays in the scope exactly once; tasks created during the walk
    /// may or may not be seen.
    async fn scan(
        &self,
        scope: Scope<'_>,
        cursor: Option<&str>,
        budget: usize,
    ) -> Result<ScanPage, InspectError>;

    /// A page of at most `budget` live tasks of `which`, newest first: by createdAt, then
    /// task id, both descending, from `cursor` (`None`: the newest). Each task's `after`
    /// and the page's `next` are `<createdAt>.<taskId>`; walking on from either lists
    /// every task that stays in `which` exactly once, in that order, whatever the order
    /// tasks were created in. (A store that has just started keeping this order may not
    /// list tasks created before.)
    async fn newest(
        &self,
        which: Newest<'_>,
        cursor: Option<&str>,
        budget: usize,
    ) -> Result<ScanPage, InspectError>;

    /// The instances that own a lease or owned one recently, by id.
    async fn instances(&self) -> Result<Vec<InstanceInfo>, StoreError>;
}
