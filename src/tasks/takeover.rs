//! Tasks outlive their instance. When an instance is gone (its lease lapsed, or it
//! stopped and handed its tasks over), a live instance's sweep takes each unfinished
//! task over where its call can run again, and fails the rest:
//! - a call on a 2026-07-28 upstream that is in an MRTR round resumes from that round
//!   (the round's `requestState` and answers are in the record; the upstream keeps
//!   nothing between rounds);
//! - a call of a tool the upstream annotates `readOnlyHint` or `idempotentHint`, or the
//!   operator names (`--retry-on-owner-loss`), runs again from the start: its pending
//!   input is withdrawn, and a question asked again gets a fresh key;
//! - anything else fails ("gateway instance lost"), as does a session client's task (its
//!   upstream session was the gone instance's) and a task taken over too often.
//!
//! The move itself is one compare-and-set in the store, so exactly one instance wins.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use http::HeaderValue;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::start::Start;
use super::upstream_mrtr::RoundState;
use super::{TaskService, ToolCall, credential};
use crate::cluster::{SweepCounts, Sweeper};
use crate::upstream::Caller;
use mtg_store::{
    Adoption, GoneInstance, INSTANCE_LOST, Outcome, StoreError, Takeover, TaskChange, TaskRecord,
};

/// statusMessage of a task another instance took over.
pub const RESUMED_AFTER_LOSS: &str =
    "resumed on another gateway instance: the one running it was lost";
/// statusMessage of a task another instance took over at a graceful hand-over.
pub const RESUMED_AFTER_STOP: &str =
    "resumed on another gateway instance: the one running it stopped";

/// What another instance needs to run a task's call (`TaskRecord::resume`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Resume {
    /// The client's capabilities the upstream saw.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    capabilities: Map<String, Value>,
    /// The caller's `Authorization`, sealed (`credential`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    auth: Option<String>,
}

/// What to do with a gone instance's task.
#[derive(Debug, PartialEq)]
enum Plan {
    /// Run it here, keeping its pending input (a 2026-07-28 round) or not.
    TakeOver {
        keep_round: bool,
    },
    Fail,
}

/// The record's `resume`: `None` for a session client's task, which lives in that
/// client's upstream session on this instance.
pub(super) fn resume_of(
    state_keys: &super::mrtr_bridge::StateKeys,
    call: &ToolCall,
    task_id: &str,
) -> Option<Value> {
    if call.session.is_some() {
        return None;
    }
    let auth = match &call.auth {
        None => None,
        Some(auth) => Some(credential::seal(state_keys, task_id, auth.as_bytes())?),
    };
    let resume = Resume {
        capabilities: call.capabilities.clone(),
        auth,
    };
    serde_json::to_value(resume).ok()
}

/// Takes over the tasks of instances that are gone (`cluster` calls it), and hands
/// this instance's over at shutdown.
pub struct Takeovers {
    tasks: Arc<TaskService>,
    /// Where the tidying of this instance's own index goes on from (`tidy_own_index`).
    tidy_cursor: std::sync::Mutex<u64>,
}

impl Takeovers {
    pub fn new(tasks: Arc<TaskService>) -> Self {
        Self {
            tasks,
            tidy_cursor: std::sync::Mutex::new(0),
        }
    }

    /// Waits up to `limit` for the tasks running here to finish. Then, when
    /// `peers_alive`, the ones whose call can run again are left for live instances to
    /// take over (`takeover`); the rest are failed, so that no task stays `working` after
    /// this instance is gone. Returns whether any task was left to be taken over.
    pub async fn drain(&self, limit: Duration, peers_alive: bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ended = self.tasks.runners.ended.notified();
            let running = self.tasks.runners.count();
            if running == 0 {
                return false;
            }
            tracing::info!(running, "waiting for running tasks to finish");
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                break;
            }
        }
        let left = self.tasks.runners.tasks();
        let mut handed_over = 0;
        let mut failed = Vec::new();
        for (task_id, principal) in left {
            if peers_alive && self.can_hand_over(&task_id, &principal).await {
                handed_over += 1;
            } else {
                failed.push(task_id);
            }
        }
        // Every runner stops here: none may write once another instance runs its task.
        self.tasks.runners.stop(|_| true).await;
        if handed_over == 0 {
            tracing::warn!(
                count = failed.len(),
                "drain timeout passed; failing the tasks still running"
            );
        } else {
            tracing::warn!(
                handed_over,
                failed = failed.len(),
                "drain timeout passed; leaving the tasks that can run again to live instances, failing the rest"
            );
        }
        for task_id in failed {
            let outcome = mtg_store::Outcome::gateway_failure(mtg_store::INSTANCE_STOPPED);
            match self.tasks.store.finish(&task_id, outcome).await {
                Ok(true) => {
                    self.tasks
                        .meter()
                        .tasks()
                        .finished("failed", Duration::ZERO);
                    self.tasks.announce(&task_id, None).await;
                }
                Ok(false) => {}
                Err(e) => tracing::error!(task_id, error = %e, "could not fail a task at shutdown"),
            }
        }
        handed_over > 0
    }

    /// Whether a live instance could run `task_id`'s call again (at a hand-over).
    pub(super) async fn can_hand_over(&self, task_id: &str, principal: &str) -> bool {
        match self.tasks.store.get(task_id, principal).await {
            Ok(Some(task)) => matches!(self.plan(&task).await, Plan::TakeOver { .. }),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(task_id, error = %e, "could not read a task to hand it over");
                false
            }
        }
    }

    async fn plan(&self, task: &TaskRecord) -> Plan {
        let Some(resume) = task
            .resume
            .clone()
            .and_then(|r| serde_json::from_value::<Resume>(r).ok())
        else {
            return Plan::Fail;
        };
        let Ok(auth) = self.open_auth(task, &resume) else {
            return Plan::Fail;
        };
        // Waiting for answers or retrying with them, the round stays as it is.
        if RoundState::from_upstream_state(task.upstream_state.as_ref()).is_some() {
            return Plan::TakeOver { keep_round: true };
        }
        let tool = serde_json::from_str::<Value>(task.request.get())
            .ok()
            .and_then(|r| r.get("name").and_then(Value::as_str).map(str::to_owned));
        let Some(tool) = tool else {
            return Plan::Fail;
        };
        if self.tasks.settings.takeover.retry_tools.contains(&tool) {
            return Plan::TakeOver { keep_round: false };
        }
        let caller = Caller {
            capabilities: &resume.capabilities,
            auth: auth.as_ref(),
            session: None,
        };
        let safe = self
            .tasks
            .tool_traits
            .safe_to_run_again(self.tasks.upstream.as_ref(), &caller, &tool)
            .await;
        if safe {
            Plan::TakeOver { keep_round: false }
        } else {
            Plan::Fail
        }
    }

    /// The caller's credential, unsealed; `Err` when this instance cannot open it (its
    /// `--request-state-key` differs).
    fn open_auth(&self, task: &TaskRecord, resume: &Resume) -> Result<Option<HeaderValue>, ()> {
        let Some(sealed) = &resume.auth else {
            return Ok(None);
        };
        let opened = credential::open(&self.tasks.settings.state_keys, &task.task_id, sealed)
            .and_then(|bytes| HeaderValue::from_bytes(&bytes).ok());
        match opened {
            Some(auth) => Ok(Some(auth)),
            None => {
                tracing::warn!(
                    task_id = %task.task_id,
                    "cannot open the task's sealed credential (is --request-state-key the same on every instance?)"
                );
                Err(())
            }
        }
    }

    /// Starts the runner of a task this instance just took over.
    fn adopt(self: &Arc<Self>, task: TaskRecord) {
        let resume = task
            .resume
            .clone()
            .and_then(|r| serde_json::from_value::<Resume>(r).ok());
        let Some(resume) = resume else {
            return;
        };
        let auth = self.open_auth(&task, &resume).ok().flatten();
        let call = ToolCall {
            params: task.request.clone(),
            capabilities: resume.capabilities,
            auth,
            principal: task.principal.clone(),
            session: None,
            ttl_ms: Some(task.ttl_ms),
            relay: None,
        };
        let start = Start::TakenOver {
            round: RoundState::from_upstream_state(task.upstream_state.as_ref()),
            expires_at_ms: task.expires_at_ms(),
        };
        tracing::debug!(task_id = %task.task_id, takeovers = task.takeovers, "took over a task of a gone instance");
        // A taken-over task is not refused by the per-caller limit: it already ran.
        drop(
            self.tasks
                .spawn_runner(&task.task_id, call, start, None, None),
        );
    }

    /// After this instance's lease had lapsed: stops the runners of tasks that another
    /// instance took over (or failed) meanwhile, so that only the new owner writes.
    async fn lease_regained(&self) {
        let running = self.tasks.runners.tasks();
        let mut moved = std::collections::HashSet::new();
        for (task_id, principal) in running {
            match self.tasks.store.get(&task_id, &principal).await {
                Ok(Some(task)) if task.owner == self.tasks.settings.instance_id => {}
                Ok(_) => {
                    moved.insert(task_id);
                }
                Err(e) => tracing::warn!(task_id, error = %e, "could not check a task's owner"),
            }
        }
        if !moved.is_empty() {
            tracing::warn!(
                tasks = moved.len(),
                "stopping the runners of tasks other instances took over while this one was cut off"
            );
            self.tasks
                .runners
                .stop(|task_id| moved.contains(task_id))
                .await;
        }
    }

    async fn sweep_gone(self: &Arc<Self>, gone: &GoneInstance) -> Result<SweepCounts, StoreError> {
        let started = std::time::Instant::now();
        let orphans = self.tasks.membership.orphans(&gone.instance).await?;
        let mut counts = SweepCounts::default();
        if orphans.is_empty() {
            return Ok(counts);
        }
        let mut keep_round = Vec::new();
        let mut run_again = Vec::new();
        let mut fail = Vec::new();
        for task in orphans {
            match self.plan(&task).await {
                Plan::TakeOver { keep_round: true } => keep_round.push(task.task_id),
                Plan::TakeOver { keep_round: false } => run_again.push(task.task_id),
                Plan::Fail => fail.push(task.task_id),
            }
        }
        let reason = if gone.handed_over { "stopped" } else { "lost" };
        for (task_ids, keep_round) in [(keep_round, true), (run_again, false)] {
            self.take_over(gone, &task_ids, keep_round, &mut counts)
                .await?;
        }
        self.tasks
            .meter()
            .cluster()
            .tasks_taken_over(reason, counts.taken_over);
        counts.failed += self.fail_the_rest(gone, &fail).await?;
        if counts.taken_over + counts.failed > 0 {
            tracing::warn!(
                instance = %gone.instance,
                reason,
                taken_over = counts.taken_over,
                failed = counts.failed,
                sweep_ms = started.elapsed().as_millis() as u64,
                "gateway instance gone: took over the tasks whose call can run again, failed the rest"
            );
            // The sweep touched many tasks: whoever watches one looks again.
            if let Err(e) = self.tasks.changes.announce(&TaskChange::everything()).await {
                tracing::debug!(error = %e, "could not announce the swept tasks");
            }
        }
        Ok(counts)
    }

    /// Moves a gone instance's tasks to this one and runs them here, keeping their
    /// round of input or not; a task taken over too often fails instead.
    async fn take_over(
        self: &Arc<Self>,
        gone: &GoneInstance,
        task_ids: &[String],
        keep_round: bool,
        counts: &mut SweepCounts,
    ) -> Result<(), StoreError> {
        let max = self.tasks.settings.takeover.max_takeovers;
        let takeover = Takeover {
            from: &gone.instance,
            to: &self.tasks.settings.instance_id,
            message: if gone.handed_over {
                RESUMED_AFTER_STOP
            } else {
                RESUMED_AFTER_LOSS
            },
            counts: !gone.handed_over,
            max_takeovers: max,
            keep_round,
            exhausted: Outcome::gateway_failure(&format!(
                "{INSTANCE_LOST}: the task was taken over {max} times already, and its call \
                 lost each instance that ran it"
            )),
        };
        let adoptions = self.tasks.membership.take_over(task_ids, &takeover).await?;
        for (task_id, adoption) in task_ids.iter().zip(adoptions) {
            match adoption {
                Adoption::Adopted(task) => {
                    counts.taken_over += 1;
                    self.adopt(*task);
                }
                Adoption::Exhausted => {
                    counts.failed += 1;
                    self.tasks
                        .meter()
                        .cluster()
                        .lost_owner_tasks_failed("max_takeovers", 1);
                    tracing::warn!(task_id, max, "task taken over too often; failed");
                }
                Adoption::NotOwned => {}
            }
        }
        Ok(())
    }

    /// Fails a gone instance's tasks whose call cannot run again; how many it failed.
    async fn fail_the_rest(
        &self,
        gone: &GoneInstance,
        fail: &[String],
    ) -> Result<usize, StoreError> {
        let message = if gone.handed_over {
            mtg_store::INSTANCE_STOPPED
        } else {
            INSTANCE_LOST
        };
        let failed = self
            .tasks
            .membership
            .fail_orphans(&gone.instance, fail, message)
            .await?;
        if !gone.handed_over {
            self.tasks
                .meter()
                .cluster()
                .lost_owner_tasks_failed("not_resumable", failed);
        }
        Ok(failed)
    }
}

#[async_trait]
impl Sweeper for Takeovers {
    async fn sweep(self: Arc<Self>, gone: GoneInstance) -> Result<SweepCounts, StoreError> {
        self.sweep_gone(&gone).await
    }

    async fn lease_regained(self: Arc<Self>) {
        Takeovers::lease_regained(&self).await
    }

    async fn tidy_own_index(self: Arc<Self>) {
        let cursor = *self
            .tidy_cursor
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let runners = &self.tasks.runners;
        let running = |task_id: &str| runners.contains(task_id);
        match self.tasks.membership.tidy_own_index(cursor, &running).await {
            Ok((next, dropped)) => {
                *self
                    .tidy_cursor
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = next;
                if dropped > 0 {
                    tracing::info!(
                        dropped,
                        "dropped ids of gone tasks from this instance's index"
                    );
                }
            }
            Err(e) => tracing::debug!(error = %e, "could not tidy this instance's index"),
        }
    }
}
