//! What the admin API does, over the store's inspection contract and the task service
//! (a cancel goes the way a client's does, so the owner stops the upstream call).

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use super::wire::{
    CancelReply, CancelResult, InstanceView, Instances, OwnerLease, TaskDetail, TaskList,
    TaskSummary,
};
use crate::protocol::jsonrpc::ErrorObject;
use crate::protocol::wire::{TaskStatus, rfc3339_millis};
use crate::store::{
    CancelOutcome, InspectError, InstanceInfo, Scope, StoreError, TaskInspection, TaskRecord,
    now_ms,
};
use crate::tasks::TaskService;

/// Most tasks one listing call returns.
pub const MAX_LIMIT: usize = 1000;
pub const DEFAULT_LIMIT: usize = 100;
/// Most entries one listing call examines, whatever its filters: a sparse filter over a
/// large store answers with a cursor instead of walking everything.
const MAX_EXAMINED: usize = 10_000;

/// What a listing keeps; every field that is set must match.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub status: Option<TaskStatus>,
    pub owner: Option<String>,
    pub principal: Option<String>,
    pub tool: Option<String>,
    pub older_than: Option<Duration>,
}

impl Filter {
    /// The narrowest scope holding every task this filter can match.
    fn scope(&self) -> Scope<'_> {
        match (&self.principal, self.status) {
            (Some(principal), _) => Scope::Principal(principal),
            (None, Some(status)) if !status.is_terminal() => Scope::Unfinished {
                owner: self.owner.as_deref(),
            },
            _ => Scope::All,
        }
    }

    fn matches(&self, task: &TaskRecord, now: u64) -> bool {
        self.status.is_none_or(|status| task.status == status)
            && self.owner.as_ref().is_none_or(|owner| &task.owner == owner)
            && self
                .principal
                .as_ref()
                .is_none_or(|principal| &task.principal == principal)
            && self
                .tool
                .as_ref()
                .is_none_or(|tool| tool_of(task).as_deref() == Some(tool.as_str()))
            && self
                .older_than
                .is_none_or(|age| now.saturating_sub(task.created_at_ms) >= age.as_millis() as u64)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Inspect(#[from] InspectError),
    #[error("{}", .0.message)]
    Task(ErrorObject),
}

impl From<StoreError> for AdminError {
    fn from(error: StoreError) -> Self {
        Self::Inspect(error.into())
    }
}

pub struct Admin {
    inspection: Arc<dyn TaskInspection>,
    tasks: Arc<TaskService>,
    instance_id: String,
    /// The Redis store's namespace (`""`: the legacy layout); `None` in memory.
    store_namespace: Option<String>,
}

impl Admin {
    pub fn new(
        inspection: Arc<dyn TaskInspection>,
        tasks: Arc<TaskService>,
        instance_id: String,
        store_namespace: Option<String>,
    ) -> Self {
        Self {
            inspection,
            tasks,
            instance_id,
            store_namespace,
        }
    }

    /// One page of the tasks that match `filter`, from `cursor`.
    pub async fn list(
        &self,
        filter: &Filter,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<TaskList, AdminError> {
        let limit = limit.clamp(1, MAX_LIMIT);
        let scope = filter.scope();
        let mut cursor = cursor;
        let mut found: Vec<Arc<TaskRecord>> = Vec::new();
        let mut examined = 0;
        // Ask for what is still missing; widen while steps find nothing (a sparse filter).
        let mut step = limit;
        loop {
            let page = self.inspection.scan(scope, cursor.as_deref(), step).await?;
            let now = now_ms();
            let before = found.len();
            found.extend(page.tasks.into_iter().filter(|t| filter.matches(t, now)));
            examined += step;
            cursor = page.next;
            if cursor.is_none() || found.len() >= limit || examined >= MAX_EXAMINED {
                break;
            }
            step = if found.len() == before {
                (step * 4).min(MAX_LIMIT)
            } else {
                limit - found.len()
            };
        }
        found.sort_by(|a, b| (b.created_at_ms, &b.task_id).cmp(&(a.created_at_ms, &a.task_id)));
        let now = now_ms();
        Ok(TaskList {
            tasks: found.iter().map(|task| summary(task, now)).collect(),
            next_cursor: cursor,
        })
    }

    pub async fn show(&self, task_id: &str) -> Result<Option<TaskDetail>, AdminError> {
        let Some(task) = self.inspection.inspect(task_id).await? else {
            return Ok(None);
        };
        let instances = self.inspection.instances().await?;
        let owner_lease = match instances.iter().find(|i| i.instance == task.owner) {
            Some(InstanceInfo {
                lease_expires_in_ms: Some(_),
                ..
            }) => OwnerLease::Live,
            Some(_) => OwnerLease::Lapsed,
            None => OwnerLease::None,
        };
        Ok(Some(TaskDetail {
            summary: summary(&task, now_ms()),
            owner_lease,
            pending_input_keys: task.input_requests.keys().cloned().collect(),
            pending_input_methods: task
                .input_requests
                .values()
                .map(|request| request.method.clone())
                .collect(),
            updated_at: rfc3339_millis(task.last_updated_at_ms),
            expires_at: rfc3339_millis(task.expires_at_ms()),
            error: task
                .error
                .as_ref()
                .and_then(|error| serde_json::to_value(error).ok()),
            answers_waiting: task.answers.len(),
            takeovers: task.takeovers,
            resumable: task.resume.is_some(),
        }))
    }

    /// Cancels a task as its client would; the owner stops the upstream call.
    pub async fn cancel(&self, task_id: &str) -> Result<Option<CancelReply>, AdminError> {
        let Some(task) = self.inspection.inspect(task_id).await? else {
            return Ok(None);
        };
        let result = match self
            .tasks
            .cancel_as_operator(&task)
            .await
            .map_err(AdminError::Task)?
        {
            // Expired between the two reads.
            CancelOutcome::NotFound => return Ok(None),
            CancelOutcome::Cancelled { .. } => {
                tracing::warn!(task_id, owner = %task.owner, "task cancelled by an operator");
                CancelResult::Cancelled
            }
            CancelOutcome::AlreadyTerminal => CancelResult::AlreadyTerminal,
        };
        Ok(Some(CancelReply {
            task_id: task.task_id.clone(),
            result,
        }))
    }

    pub async fn instances(&self) -> Result<Instances, AdminError> {
        let instances = self.inspection.instances().await?;
        Ok(Instances {
            store_namespace: self.store_namespace.clone(),
            instances: instances
                .into_iter()
                .map(|info| InstanceView {
                    this: info.instance == self.instance_id,
                    lease_live: info.lease_expires_in_ms.is_some(),
                    instance: info.instance,
                    advertise_url: info.advertise_url,
                    lease_expires_in_ms: info.lease_expires_in_ms,
                    running_tasks: info.running_tasks,
                })
                .collect(),
        })
    }
}

fn summary(task: &TaskRecord, now: u64) -> TaskSummary {
    TaskSummary {
        task_id: task.task_id.clone(),
        status: task.status.as_str().to_owned(),
        tool: tool_of(task),
        owner: task.owner.clone(),
        principal: task.principal.clone(),
        created_at: rfc3339_millis(task.created_at_ms),
        age_ms: now.saturating_sub(task.created_at_ms),
        ttl_ms: task.ttl_ms,
        status_message: task.status_message.clone(),
        pending_input: task.input_requests.len(),
    }
}

/// The tool of the task's `tools/call` (its stored params).
fn tool_of(task: &TaskRecord) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        name: Option<String>,
    }
    let request: &RawValue = &task.request;
    serde_json::from_str::<Named>(request.get())
        .ok()
        .and_then(|named| named.name)
}
