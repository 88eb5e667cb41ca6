//! Task state: the store contract and its implementations.
//!
//! The stored record is the truth. Every transition is a compare-and-set against it, and
//! terminal states are final, so a late upstream answer after a cancel is dropped.

pub mod memory;
pub mod metrics;
pub mod redis;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::protocol::jsonrpc::ErrorObject;
use crate::protocol::wire::{InputRequest, ResultType, TaskResult, TaskStatus, rfc3339_millis};

/// Everything the gateway keeps about one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task_id: String,
    /// Who created the task; any other caller is told the task does not exist.
    pub principal: String,
    /// The gateway instance running the upstream call.
    pub owner: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at_ms: u64,
    pub last_updated_at_ms: u64,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    /// Outstanding requests for the client, by key.
    pub input_requests: BTreeMap<String, InputRequest>,
    /// Accepted answers the owner has not yet forwarded upstream, by key.
    pub answers: BTreeMap<String, Value>,
    /// Keys are `input-<n>`; the counter only grows, so a key is never reused.
    pub next_input_key: u64,
    pub result: Option<Box<RawValue>>,
    pub error: Option<ErrorObject>,
    /// The tool and its arguments, as sent upstream. Kept as raw JSON: nothing on a
    /// hot path reads it, and every Redis read would otherwise parse it into a tree.
    pub request: Box<RawValue>,
    /// What the runner needs to resume the upstream call elsewhere (for 2026-07-28
    /// upstreams: the round's `requestState` and key mapping). Opaque to the store.
    #[serde(default)]
    pub upstream_state: Option<Value>,
}

impl TaskRecord {
    pub fn expires_at_ms(&self) -> u64 {
        self.created_at_ms.saturating_add(self.ttl_ms)
    }

    fn touch(&mut self, now_ms: u64) {
        self.last_updated_at_ms = now_ms.max(self.last_updated_at_ms);
    }

    /// The `CreateTaskResult` (resultType `task`) or `tasks/get` result (`complete`).
    pub fn to_result(&self, result_type: ResultType) -> TaskResult<'_> {
        TaskResult {
            result_type,
            task_id: &self.task_id,
            status: self.status,
            status_message: self.status_message.as_deref(),
            created_at: rfc3339_millis(self.created_at_ms),
            last_updated_at: rfc3339_millis(self.last_updated_at_ms),
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            input_requests: (self.status == TaskStatus::InputRequired)
                .then_some(&self.input_requests),
            result: (self.status == TaskStatus::Completed)
                .then_some(self.result.as_deref())
                .flatten(),
            error: (self.status == TaskStatus::Failed)
                .then_some(self.error.as_ref())
                .flatten(),
        }
    }

    /// Sets the status, counting the transition when it is one.
    fn set_status(&mut self, status: TaskStatus) {
        if self.status != status {
            self.status = status;
            metrics::task_reached(status);
        }
    }

    /// Applies an input request; returns its new key. Caller checked it is not terminal.
    fn push_input_request(&mut self, request: InputRequest, now_ms: u64) -> String {
        let key = format!("input-{}", self.next_input_key);
        self.next_input_key += 1;
        self.input_requests.insert(key.clone(), request);
        self.set_status(TaskStatus::InputRequired);
        self.touch(now_ms);
        key
    }

    fn withdraw_input_request(&mut self, key: &str, now_ms: u64) {
        if self.input_requests.remove(key).is_some() {
            if self.input_requests.is_empty() && !self.status.is_terminal() {
                self.set_status(TaskStatus::Working);
            }
            self.touch(now_ms);
        }
    }

    /// Moves answers for outstanding keys into `answers`; returns the accepted keys.
    fn accept_responses(&mut self, responses: Map<String, Value>, now_ms: u64) -> Vec<String> {
        if self.status.is_terminal() {
            return Vec::new();
        }
        let mut accepted = Vec::new();
        for (key, response) in responses {
            if self.input_requests.remove(&key).is_some() {
                self.answers.insert(key.clone(), response);
                accepted.push(key);
            }
        }
        if !accepted.is_empty() {
            if self.input_requests.is_empty() {
                self.set_status(TaskStatus::Working);
            }
            self.touch(now_ms);
        }
        accepted
    }

    fn finish(&mut self, outcome: Outcome, now_ms: u64) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        self.input_requests.clear();
        self.answers.clear();
        match outcome {
            Outcome::Completed(result) => {
                self.set_status(TaskStatus::Completed);
                self.result = Some(result);
            }
            Outcome::Failed { error, message } => {
                self.set_status(TaskStatus::Failed);
                self.status_message = Some(message);
                self.error = Some(error);
            }
            Outcome::Cancelled { message } => {
                self.set_status(TaskStatus::Cancelled);
                self.status_message = Some(message);
            }
        }
        self.touch(now_ms);
        true
    }
}

/// How a task ends.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The upstream's result, `isError: true` included.
    Completed(Box<RawValue>),
    /// A JSON-RPC error, or the upstream was lost or timed out.
    Failed {
        error: ErrorObject,
        message: String,
    },
    Cancelled {
        message: String,
    },
}

impl Outcome {
    /// The status a task ends in with this outcome.
    pub fn status(&self) -> TaskStatus {
        match self {
            Outcome::Completed(_) => TaskStatus::Completed,
            Outcome::Failed { .. } => TaskStatus::Failed,
            Outcome::Cancelled { .. } => TaskStatus::Cancelled,
        }
    }

    /// A failure the gateway itself reports (`-32603` with `message` as statusMessage).
    pub fn gateway_failure(message: &str) -> Self {
        Outcome::Failed {
            error: ErrorObject::internal(message),
            message: message.to_owned(),
        }
    }
}

/// statusMessage of the tasks of an owner whose lease lapsed (crash, kill -9, partition).
pub const INSTANCE_LOST: &str = "gateway instance lost";
/// statusMessage of the tasks still running on an owner that shut down gracefully.
pub const INSTANCE_STOPPED: &str = "gateway instance stopped";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or did not answer in time; retrying may help.
    #[error("task store unavailable: {0}")]
    Unavailable(String),
    #[error("task {0} already exists")]
    Duplicate(String),
    /// The store answered something the gateway cannot use (a bug or a foreign key).
    #[error("task store error: {0}")]
    Corrupt(String),
}

/// What a `tasks/update` did.
#[derive(Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// No such task for this principal (or it expired).
    NotFound,
    /// The keys accepted, in order; empty when none was outstanding.
    Accepted { keys: Vec<String>, owner: String },
}

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

/// Receives the ids of tasks whose owner must look at them again (answers to forward,
/// a cancel to carry out), or [`WAKE_ALL`].
pub type WakeReceiver = mpsc::UnboundedReceiver<String>;

/// A wake-up for every task the owner runs: sent when wake-ups may have been missed
/// (the wake-up channel reconnected), so each runner re-reads the stored state.
pub const WAKE_ALL: &str = "*";

/// What a live instance publishes about itself.
#[derive(Debug, Clone)]
pub struct Lease<'a> {
    pub instance: &'a str,
    /// Where other instances can reach this one (for forwarding), if configured.
    pub advertise_url: Option<&'a str>,
    /// How long the lease holds without renewal.
    pub ttl: Duration,
}

/// The task store contract, shared by the in-memory and Redis implementations.
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

    /// Removes a task the client never saw (it was answered inline).
    async fn delete(&self, task_id: &str) -> Result<(), StoreError>;

    /// Sets `statusMessage` of a running task; ignored once terminal.
    async fn set_status_message(&self, task_id: &str, message: &str) -> Result<(), StoreError>;

    /// Adds an outstanding input request; returns its key, or `None` if the task ended.
    async fn add_input_request(
        &self,
        task_id: &str,
        request: InputRequest,
    ) -> Result<Option<String>, StoreError>;

    /// Adds several input requests at once (an MRTR round), so that no reader sees part
    /// of them; their keys in order, or `None` if the task ended. Stores that can should
    /// override this default, which adds them one by one.
    async fn add_input_requests(
        &self,
        task_id: &str,
        requests: Vec<InputRequest>,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let mut keys = Vec::with_capacity(requests.len());
        for request in requests {
            match self.add_input_request(task_id, request).await? {
                Some(key) => keys.push(key),
                None => return Ok(None),
            }
        }
        Ok(Some(keys))
    }

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

    /// Cancels a non-terminal task for the client.
    async fn cancel(&self, task_id: &str, principal: &str) -> Result<CancelOutcome, StoreError>;

    /// Tells `owner` to look at `task_id` again.
    async fn wake(&self, owner: &str, task_id: &str) -> Result<(), StoreError>;

    /// The wake-ups addressed to `owner`. Called once per instance at start.
    fn wakeups(&self, owner: &str) -> WakeReceiver;

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Renews (or takes) the instance's lease; `Ok(false)` when it had lapsed, in which
    /// case other instances may have failed its tasks.
    async fn renew_lease(&self, lease: &Lease<'_>) -> Result<bool, StoreError>;

    /// Fails the unfinished tasks indexed under `instance` with `message` (-32603).
    /// Used at start for tasks an earlier process with the same instance id left.
    async fn fail_tasks_of(&self, instance: &str, message: &str) -> Result<usize, StoreError>;

    /// Gives the lease up on a graceful stop and fails the instance's unfinished tasks
    /// ([`INSTANCE_STOPPED`]) so every instance reports them at once. Returns how many.
    async fn release_lease(&self, instance: &str) -> Result<usize, StoreError>;

    /// Fails the unfinished tasks ([`INSTANCE_LOST`]) of every other instance whose lease
    /// lapsed. Returns how many tasks were failed.
    async fn fail_tasks_of_lost_owners(&self, me: &str) -> Result<usize, StoreError>;
}

/// Records a task's outcome, retrying with backoff while the store is unavailable, so a
/// short store outage loses no upstream result. Gives up after `give_up_after` (the
/// task's TTL: by then the task is gone anyway).
pub async fn finish_with_retry(
    store: &dyn TaskStore,
    task_id: &str,
    outcome: Outcome,
    give_up_after: Duration,
) -> Result<bool, StoreError> {
    let deadline = tokio::time::Instant::now() + give_up_after;
    let mut backoff = Duration::from_millis(50);
    loop {
        match store.finish(task_id, outcome.clone()).await {
            Err(StoreError::Unavailable(e)) if tokio::time::Instant::now() + backoff < deadline => {
                tracing::warn!(task_id, error = %e, retry_in_ms = backoff.as_millis() as u64, "could not record the task's outcome; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
