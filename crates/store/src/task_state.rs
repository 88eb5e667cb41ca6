//! The task-state contract: the tasks themselves and every change of them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::{Outcome, TaskChange, TaskRecord};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::InputRequest;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or did not answer in time; retrying may help.
    #[error("task store unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    #[error("task {0} already exists")]
    Duplicate(String),
    /// The store answered something the gateway cannot use (a bug or a foreign key).
    #[error("task store error: {0}")]
    Corrupt(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why the store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("Redis did not answer within {0} ms")]
    TimedOut(u128),
    #[error("Redis lost the gateway's scripts; retry")]
    ScriptsLost,
    #[error("{}", describe_redis(.0))]
    Redis(#[source] redis::RedisError),
    #[error("bad Redis address: {0}")]
    BadAddress(#[source] redis::RedisError),
    #[error("only {acked} of {wanted} Redis replicas acknowledged the task")]
    NotReplicated { acked: i64, wanted: u32 },
}

/// Redis's own text says little about the cases an operator meets most.
fn describe_redis(e: &redis::RedisError) -> String {
    if e.is_connection_refusal() {
        "cannot connect to Redis (connection refused)".into()
    } else if e.is_timeout() {
        "Redis did not answer in time".into()
    } else if e.is_connection_dropped() || e.is_io_error() {
        format!("connection to Redis lost: {e}")
    } else {
        format!("Redis: {e}")
    }
}

/// What a client sees when the store failed its request.
impl From<StoreError> for ErrorObject {
    fn from(error: StoreError) -> Self {
        ErrorObject::internal(error.to_string())
    }
}

/// What a `tasks/update` did.
#[derive(Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// No such task for this principal (or it expired).
    NotFound,
    /// The keys accepted, in order; empty when none was outstanding.
    Accepted { keys: Vec<String>, owner: String },
}

/// statusMessage of a task its client cancelled.
pub const CANCELLED_BY_CLIENT: &str = "cancelled by the client";
/// statusMessage of a task an operator cancelled through the admin API.
pub const CANCELLED_BY_OPERATOR: &str = "cancelled by an operator";

/// What a `tasks/cancel` did.
#[derive(Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    NotFound,
    /// The task is now cancelled; its owner must stop the upstream call.
    Cancelled {
        owner: String,
    },
    /// It had already ended; nothing changed.
    AlreadyTerminal,
}

/// Where a page of [`TaskStore::list`] starts: just after this task, in newest-first
/// order (`created_at_ms` descending, then `task_id` descending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub created_at_ms: u64,
    pub task_id: String,
}

impl ListCursor {
    /// The cursor that continues after `task`.
    pub fn after(task: &TaskRecord) -> Self {
        Self {
            created_at_ms: task.created_at_ms,
            task_id: task.task_id.clone(),
        }
    }
}

/// Task state, shared by the in-memory and Redis implementations. Every change is a
/// compare-and-set on one task; terminal states are final; a task past `createdAt +
/// ttlMs` is gone for every method.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new task; durable when it returns, so `get` finds it at once.
    async fn create(&self, task: TaskRecord) -> Result<(), StoreError>;

    /// The task, if it exists, has not expired, and belongs to `principal`.
    async fn get(
        &self,
        task_id: &str,
        principal: &str,
    ) -> Result<Option<Arc<TaskRecord>>, StoreError>;

    /// `principal`'s live tasks, newest first (`created_at_ms` descending, ties by
    /// `task_id` descending), starting just after `after`; at most `limit`. Expired and
    /// deleted tasks are left out, and so is every other principal's task.
    async fn list(
        &self,
        principal: &str,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<Arc<TaskRecord>>, StoreError>;

    /// Removes a task the client never saw (it was answered inline).
    async fn delete(&self, task_id: &str) -> Result<(), StoreError>;

    /// Sets `statusMessage` of a running task; ignored once terminal.
    async fn set_status_message(&self, task_id: &str, message: &str) -> Result<(), StoreError>;

    /// Adds an outstanding input request; returns its key, or `None` if the task ended.
    async fn add_input_request(
        &self,
        task_id: &str,
        request: InputRequest,
    ) -> Result<Option<String>, StoreError> {
        let keys = self.add_input_requests(task_id, vec![request]).await?;
        Ok(keys.and_then(|keys| keys.into_iter().next()))
    }

    /// Adds several input requests in one step (an MRTR round), so that no reader sees
    /// part of them; their keys in order, or `None` if the task ended.
    async fn add_input_requests(
        &self,
        task_id: &str,
        requests: Vec<InputRequest>,
    ) -> Result<Option<Vec<String>>, StoreError>;

    /// Withdraws an outstanding input request the upstream gave up on; the task goes
    /// back to `working` when nothing else is outstanding.
    async fn withdraw_input_request(&self, task_id: &str, key: &str) -> Result<(), StoreError>;

    /// Replaces the runner's resumable state.
    async fn set_upstream_state(
        &self,
        task_id: &str,
        state: Option<Value>,
    ) -> Result<(), StoreError>;

    /// Accepts answers for outstanding keys only, atomically, so that an answer is
    /// accepted once even if two instances receive it.
    async fn accept_input_responses(
        &self,
        task_id: &str,
        principal: &str,
        responses: Map<String, Value>,
    ) -> Result<UpdateOutcome, StoreError>;

    /// Takes the accepted answers not yet forwarded; each is returned once.
    async fn take_answers(&self, task_id: &str) -> Result<Vec<(String, Value)>, StoreError>;

    /// Moves a task to a terminal state; `false` if it already was in one.
    async fn finish(&self, task_id: &str, outcome: Outcome) -> Result<bool, StoreError>;

    /// [`finish`](Self::finish), with `change` announced to every instance after the
    /// move in the same round trip, where the store can (Redis on one server or through
    /// Sentinel). The second value says whether it was announced; if not, the caller
    /// announces it ([`crate::Changes::announce`]).
    async fn finish_announcing(
        &self,
        task_id: &str,
        outcome: Outcome,
        _change: &TaskChange,
    ) -> (Result<bool, StoreError>, bool) {
        (self.finish(task_id, outcome).await, false)
    }

    /// Cancels a non-terminal task of `principal`, with `message` as its statusMessage
    /// ([`CANCELLED_BY_CLIENT`] or [`CANCELLED_BY_OPERATOR`]).
    async fn cancel(
        &self,
        task_id: &str,
        principal: &str,
        message: &str,
    ) -> Result<CancelOutcome, StoreError>;

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// The owner's runner stopped `task_id` at its TTL, unfinished. Where the store keeps
    /// an index of what each instance runs (Redis), nothing else takes the id out of it:
    /// a finish, a cancel and a takeover do, an expiry does not. Where expiry cleans up
    /// after itself (memory), there is nothing to do.
    async fn let_go_expired(&self, _task_id: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Records a task's outcome, retrying with backoff while the store is unavailable, so a
/// short store outage loses no upstream result. Gives up after `give_up_after` (the
/// task's TTL: by then the task is gone anyway). `change` goes with it as
/// [`TaskStore::finish_announcing`] says; the second value says whether it went.
pub async fn finish_with_retry(
    store: &dyn TaskStore,
    task_id: &str,
    outcome: Outcome,
    change: &TaskChange,
    give_up_after: Duration,
) -> (Result<bool, StoreError>, bool) {
    let deadline = tokio::time::Instant::now() + give_up_after;
    let mut backoff = Duration::from_millis(50);
    loop {
        match store
            .finish_announcing(task_id, outcome.clone(), change)
            .await
        {
            (Err(StoreError::Unavailable(e)), _)
                if tokio::time::Instant::now() + backoff < deadline =>
            {
                tracing::warn!(task_id, error = %e, retry_in_ms = backoff.as_millis() as u64, "could not record the task's outcome; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}
