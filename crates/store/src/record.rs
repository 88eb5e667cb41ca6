//! The task record and the transition rules, written in Rust for the memory store. The
//! Redis store applies the same rules as Lua scripts (`lua/`); the contract tests
//! (`contract_tests/`) hold both to them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::metrics;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::{InputRequest, TaskStatus};

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
    /// What another instance needs to run the call again if this task's owner is lost
    /// (the caller's capabilities and sealed credential); `None` when it cannot be run
    /// elsewhere (a session client's task lives in that client's upstream session).
    /// Opaque to the store.
    #[serde(default)]
    pub resume: Option<Value>,
    /// How many times another instance took the task over after its owner was lost.
    #[serde(default)]
    pub takeovers: u32,
    /// Whether the call's arguments outlive the task's end (the console shows them,
    /// `--admin-show-results`); otherwise an ended task keeps only [`call_after_end`].
    /// Read back from Redis as whether the task holds `request_kept`.
    #[serde(default)]
    pub keep_arguments: bool,
}

/// What an ended task keeps of its `tools/call` params: the tool's name, for the console
/// and the admin API, and the client's progress token, for progress that arrives after
/// the end (a session's stream reads it from the task). Both are copied byte for byte.
pub(crate) fn call_after_end(params: &RawValue) -> Box<RawValue> {
    #[derive(Deserialize, Serialize)]
    struct Call<'a> {
        #[serde(borrow, skip_serializing_if = "Option::is_none")]
        name: Option<&'a RawValue>,
        #[serde(borrow, rename = "_meta", skip_serializing_if = "Option::is_none")]
        meta: Option<Meta<'a>>,
    }
    #[derive(Deserialize, Serialize)]
    struct Meta<'a> {
        #[serde(borrow, rename = "progressToken")]
        progress_token: Option<&'a RawValue>,
    }
    let Ok(call) = serde_json::from_str::<Call<'_>>(params.get()) else {
        return params.to_owned();
    };
    let kept = Call {
        name: call.name,
        meta: call.meta.filter(|meta| meta.progress_token.is_some()),
    };
    // Writing borrowed JSON cannot fail; were it to, the params stay whole.
    serde_json::value::to_raw_value(&kept).unwrap_or_else(|_| params.to_owned())
}

/// The key of a task's n-th input request (the Lua scripts build the same).
pub fn input_key(n: u64) -> String {
    format!("input-{n}")
}

/// Who a new task is and how it is kept ([`TaskRecord::working`]).
pub struct NewTask {
    pub task_id: String,
    pub principal: String,
    pub owner: String,
    /// The `tools/call` params, as the client sent them.
    pub request: Box<RawValue>,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    /// See [`TaskRecord::keep_arguments`].
    pub keep_arguments: bool,
}

impl TaskRecord {
    /// A task just made: `working` since `now_ms`, nothing asked, answered or taken over.
    pub fn working(new: NewTask, now_ms: u64) -> Self {
        TaskRecord {
            task_id: new.task_id,
            principal: new.principal,
            owner: new.owner,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: now_ms,
            last_updated_at_ms: now_ms,
            ttl_ms: new.ttl_ms,
            poll_interval_ms: new.poll_interval_ms,
            input_requests: BTreeMap::new(),
            answers: BTreeMap::new(),
            next_input_key: 0,
            result: None,
            error: None,
            request: new.request,
            upstream_state: None,
            resume: None,
            takeovers: 0,
            keep_arguments: new.keep_arguments,
        }
    }

    /// Drops what only a running call needs once the task has ended: the data to resume
    /// it elsewhere, the upstream's round state, and (unless `keep_arguments`) all of the
    /// call but [`call_after_end`]. No answer returns them; in Redis they were a third
    /// of a finished task's bytes (docs/redis.md). `lua/prelude.lua`'s `shed` is the same.
    pub(super) fn shed_after_end(&mut self) {
        self.resume = None;
        self.upstream_state = None;
        if !self.keep_arguments {
            self.request = call_after_end(&self.request);
        }
    }

    pub fn expires_at_ms(&self) -> u64 {
        self.created_at_ms.saturating_add(self.ttl_ms)
    }

    pub(super) fn touch(&mut self, now_ms: u64) {
        self.last_updated_at_ms = now_ms.max(self.last_updated_at_ms);
    }

    /// Sets `statusMessage` unless the task has ended.
    pub(super) fn set_status_message(&mut self, message: &str, now_ms: u64) {
        if !self.status.is_terminal() {
            self.status_message = Some(message.to_owned());
            self.touch(now_ms);
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
    pub(super) fn push_input_request(&mut self, request: InputRequest, now_ms: u64) -> String {
        let key = input_key(self.next_input_key);
        self.next_input_key += 1;
        self.input_requests.insert(key.clone(), request);
        self.set_status(TaskStatus::InputRequired);
        self.touch(now_ms);
        key
    }

    pub(super) fn withdraw_input_request(&mut self, key: &str, now_ms: u64) {
        if self.input_requests.remove(key).is_some() {
            if self.input_requests.is_empty() && !self.status.is_terminal() {
                self.set_status(TaskStatus::Working);
            }
            self.touch(now_ms);
        }
    }

    /// Moves answers for outstanding keys into `answers`; returns the accepted keys.
    pub(super) fn accept_responses(
        &mut self,
        responses: Map<String, Value>,
        now_ms: u64,
    ) -> Vec<String> {
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

    /// Moves the task from `from` to `to` (see [`Takeover`]).
    pub(super) fn take_over(&mut self, takeover: &Takeover<'_>, now_ms: u64) -> Adoption {
        if self.owner != takeover.from || self.status.is_terminal() {
            return Adoption::NotOwned;
        }
        if takeover.counts {
            self.takeovers += 1;
            if self.takeovers > takeover.max_takeovers {
                self.finish(takeover.exhausted.clone(), now_ms);
                return Adoption::Exhausted;
            }
        }
        if !takeover.keep_round {
            self.input_requests.clear();
            self.answers.clear();
            self.upstream_state = None;
            self.set_status(TaskStatus::Working);
        }
        self.owner = takeover.to.to_owned();
        self.status_message = Some(takeover.message.to_owned());
        self.touch(now_ms);
        Adoption::Adopted(Box::new(self.clone()))
    }

    pub(super) fn finish(&mut self, outcome: Outcome, now_ms: u64) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        self.input_requests.clear();
        self.answers.clear();
        match outcome {
            Outcome::Completed(result) => {
                self.set_status(TaskStatus::Completed);
                // The last progress text says nothing true of a completed task.
                self.status_message = None;
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

/// A live instance taking over a task whose owner is gone. Exactly one instance wins:
/// the move happens only while `from` still owns the task and it has not ended.
#[derive(Debug, Clone)]
pub struct Takeover<'a> {
    pub from: &'a str,
    pub to: &'a str,
    /// The task's statusMessage once resumed.
    pub message: &'a str,
    /// Whether this takeover counts against `max_takeovers` (a lost owner does; a
    /// graceful hand-over at shutdown does not).
    pub counts: bool,
    pub max_takeovers: u32,
    /// Keep the outstanding input requests and accepted answers (a 2026-07-28
    /// upstream's round stays valid on any instance); otherwise they are withdrawn with
    /// the round, and the call runs again from the start.
    pub keep_round: bool,
    /// How the task ends when it was taken over too often already.
    pub exhausted: Outcome,
}

/// What a [`Takeover`] did.
#[derive(Debug)]
pub enum Adoption {
    /// The task is the new owner's now, as it reads after the move.
    Adopted(Box<TaskRecord>),
    /// It had been taken over `max_takeovers` times already: it failed instead.
    Exhausted,
    /// Someone else moved or ended it first.
    NotOwned,
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
    /// The status a task ends in with this outcome (the contract tests check it).
    #[cfg(test)]
    pub(crate) fn status(&self) -> TaskStatus {
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
