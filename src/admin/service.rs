//! What the admin API does, over the store's inspection contract and the task service
//! (a cancel goes the way a client's does, so the owner stops the upstream call).

use std::sync::Arc;
use std::time::Duration;

use super::paging;
use super::task_facts::{owner_lease, tool_of};
use super::wire::{
    CancelReply, CancelResult, InstanceView, Instances, TaskDetail, TaskList, TaskSummary,
};
use crate::tasks::TaskService;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::{TaskStatus, rfc3339_millis};
use mtg_store::{
    CancelOutcome, InspectError, Scope, StoreError, TaskInspection, TaskRecord, now_ms,
};

/// Most tasks one listing call returns.
pub(super) const MAX_LIMIT: usize = 1000;
pub(super) const DEFAULT_LIMIT: usize = 100;

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
    /// The Redis store's namespace (`""`: the unprefixed layout); `None` in memory.
    store_namespace: Option<String>,
    /// The world's webhook subscriptions, if any (`admin/webhooks.rs`).
    webhooks: Option<super::webhooks::AdminWebhooks>,
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
            webhooks: None,
        }
    }

    /// The world's webhook subscriptions and their outboxes (none without webhooks).
    pub async fn webhooks(&self) -> Result<super::wire::WebhookList, AdminError> {
        match &self.webhooks {
            Some(hooks) => Ok(hooks.list().await?),
            None => Ok(super::wire::WebhookList {
                subscriptions: Vec::new(),
            }),
        }
    }

    /// One subscription's pending events and dead letters; `None`: no such one.
    pub async fn webhook(
        &self,
        id: &str,
    ) -> Result<Option<super::wire::SubscriptionDetail>, AdminError> {
        match &self.webhooks {
            Some(hooks) => Ok(hooks.detail(id).await?),
            None => Ok(None),
        }
    }

    /// Redelivers one dead letter or all of a subscription's; `None`: no such one.
    pub async fn redeliver(
        &self,
        id: &str,
        event: Option<&str>,
    ) -> Result<Option<super::wire::RedeliverReply>, AdminError> {
        match &self.webhooks {
            Some(hooks) => Ok(hooks.redeliver(id, event).await?),
            None => Ok(None),
        }
    }

    /// With the world's webhook subscriptions and their outboxes.
    pub(crate) fn with_webhooks(mut self, webhooks: super::webhooks::AdminWebhooks) -> Self {
        self.webhooks = Some(webhooks);
        self
    }

    /// One page of at most `limit` tasks that match `filter`, from `cursor`.
    pub async fn list(
        &self,
        filter: &Filter,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<TaskList, AdminError> {
        list_page(self.inspection.as_ref(), filter, cursor, limit).await
    }

    pub async fn show(&self, task_id: &str) -> Result<Option<TaskDetail>, AdminError> {
        let Some(task) = self.inspection.inspect(task_id).await? else {
            return Ok(None);
        };
        let instances = self.inspection.instances().await?;
        let owner_lease = owner_lease(&task, &instances);
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

/// One page of at most `limit` tasks that match `filter`, from `cursor`.
pub(crate) async fn list_page(
    inspection: &dyn TaskInspection,
    filter: &Filter,
    cursor: Option<String>,
    limit: usize,
) -> Result<TaskList, AdminError> {
    let limit = limit.clamp(1, MAX_LIMIT);
    let scope = filter.scope();
    let now = now_ms();
    let step = |cursor: Option<String>, step| async move {
        inspection.scan(scope, cursor.as_deref(), step).await
    };
    let mut page = paging::gather(step, |task| filter.matches(task, now), cursor, limit).await?;
    page.tasks
        .sort_by(|a, b| (b.created_at_ms, &b.task_id).cmp(&(a.created_at_ms, &a.task_id)));
    Ok(TaskList {
        tasks: page.tasks.iter().map(|task| summary(task, now)).collect(),
        next_cursor: page.next_cursor,
    })
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

#[cfg(test)]
mod tests {
    //! Pages of the listing hold at most `limit` tasks, and following the cursor lists
    //! each task once, on both stores, in every scope; the stores are filled directly.

    use std::collections::BTreeSet;
    use std::time::Duration;

    use futures_util::future::try_join_all;
    use test_support::RedisServer;

    use super::*;
    use mtg_store::memory::MemoryStore;
    use mtg_store::redis::{RedisSettings, RedisStore, StoreNamespace, Target};
    use mtg_store::{Lease, NewTask, Outcome, Store};

    const OWNERS: [&str; 2] = ["gw-a", "gw-b"];

    /// A new working task of `alice`, run by `owner`, with a fresh UUID and a 60 s TTL
    /// (as the store's contract tests make them; those are private to mtg-store).
    fn record(owner: &str) -> TaskRecord {
        let new = NewTask {
            task_id: uuid::Uuid::new_v4().to_string(),
            principal: "alice".into(),
            owner: owner.into(),
            request: raw(r#"{"name":"echo"}"#),
            ttl_ms: 60_000,
            poll_interval_ms: 1000,
            keep_arguments: false,
        };
        TaskRecord::working(new, now_ms())
    }

    fn raw(json: &str) -> Box<serde_json::value::RawValue> {
        serde_json::value::RawValue::from_string(json.to_owned()).unwrap()
    }

    /// `count` tasks over two owners and two principals, every fifth one completed;
    /// each filter with the ids it must list.
    async fn fill(stores: &[Store; 2], count: usize) -> Vec<(Filter, BTreeSet<String>)> {
        for (store, owner) in stores.iter().zip(OWNERS) {
            let lease = Lease {
                instance: owner,
                advertise_url: None,
                ttl: Duration::from_secs(600),
            };
            store.membership.renew_lease(&lease).await.unwrap();
        }
        let tasks: Vec<TaskRecord> = (0..count)
            .map(|n| {
                let mut task = record(OWNERS[n % 2]);
                task.principal = if n.is_multiple_of(3) { "bob" } else { "alice" }.into();
                // A millisecond apart, as tasks made one by one are (a principal's
                // listing of many tasks of one millisecond is a case of its own).
                task.created_at_ms -= (count - n) as u64;
                // Alive for the whole test, however long the walks take.
                task.ttl_ms = 600_000;
                task
            })
            .collect();
        let numbered: Vec<(usize, &TaskRecord)> = tasks.iter().enumerate().collect();
        // Filled concurrently, a batch at a time: 10,001 one by one takes long on Redis.
        for batch in numbered.chunks(200) {
            try_join_all(batch.iter().map(|&(n, task)| {
                let store = &stores[n % 2];
                async move {
                    store.tasks.create(task.clone()).await?;
                    if n.is_multiple_of(5) {
                        let done = Outcome::Completed(raw("{}"));
                        store.tasks.finish(&task.task_id, done).await?;
                    }
                    Ok::<_, StoreError>(())
                }
            }))
            .await
            .unwrap();
        }
        let ids = |keep: &dyn Fn(usize, &TaskRecord) -> bool| -> BTreeSet<String> {
            (numbered.iter())
                .filter(|(n, task)| keep(*n, task))
                .map(|(_, task)| task.task_id.clone())
                .collect()
        };
        let working = |n: usize| !n.is_multiple_of(5);
        vec![
            (Filter::default(), ids(&|_, _| true)),
            (
                Filter {
                    status: Some(TaskStatus::Working),
                    ..Filter::default()
                },
                ids(&|n, _| working(n)),
            ),
            (
                Filter {
                    status: Some(TaskStatus::Working),
                    owner: Some("gw-b".into()),
                    ..Filter::default()
                },
                ids(&|n, task| working(n) && task.owner == "gw-b"),
            ),
            (
                Filter {
                    principal: Some("alice".into()),
                    ..Filter::default()
                },
                ids(&|_, task| task.principal == "alice"),
            ),
        ]
    }

    /// Every page of `filter`'s listing in pages of `limit`: each at most `limit`, no
    /// task twice, all of `expected`.
    async fn page_through(
        inspection: &dyn TaskInspection,
        filter: &Filter,
        limit: usize,
        expected: &BTreeSet<String>,
    ) {
        let mut seen = BTreeSet::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = list_page(inspection, filter, cursor, limit).await.unwrap();
            pages += 1;
            assert!(
                page.tasks.len() <= limit,
                "{} tasks in a page of {limit} ({filter:?})",
                page.tasks.len()
            );
            for task in &page.tasks {
                assert!(
                    seen.insert(task.task_id.clone()),
                    "{} listed twice ({filter:?}, limit {limit})",
                    task.task_id
                );
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
            assert!(pages <= 3 * expected.len() + 10, "the walk does not end");
        }
        let missing: Vec<&String> = expected.difference(&seen).take(3).collect();
        let extra: Vec<&String> = seen.difference(expected).take(3).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{filter:?}, limit {limit}: {} listed of {} expected; missing {missing:?}, extra {extra:?}",
            seen.len(),
            expected.len()
        );
    }

    /// Every filter in pages of 1, 2 and 100, the walks side by side (each is a chain
    /// of round trips; one after another, 10,001 tasks on Redis take a minute).
    async fn check_paging(stores: [Store; 2], count: usize) {
        let cases = fill(&stores, count).await;
        let inspection = stores[0].inspection.as_ref();
        let walks = cases.iter().flat_map(|(filter, expected)| {
            [1, 2, 100].map(|limit| page_through(inspection, filter, limit, expected))
        });
        futures_util::future::join_all(walks).await;
    }

    fn memory() -> [Store; 2] {
        let store = MemoryStore::start();
        [Store::new(store.clone()), Store::new(store)]
    }

    fn redis(server: &RedisServer) -> [Store; 2] {
        OWNERS.map(|owner| {
            Store::new(
                RedisStore::connect(RedisSettings {
                    target: Target::Server(server.url()),
                    instance_id: owner.into(),
                    wait_replicas: 0,
                    timeout: Duration::from_secs(5),
                    max_ttl: Duration::from_secs(600),
                    ca_cert: None,
                    namespace: StoreNamespace::Named("paging".into()),
                    terminal_cache_bytes: 0,
                })
                .unwrap(),
            )
        })
    }

    #[tokio::test]
    async fn memory_pages_hold_at_most_limit_tasks_and_each_once() {
        for count in [7, 50] {
            check_paging(memory(), count).await;
        }
    }

    #[tokio::test]
    async fn memory_pages_of_10001_tasks() {
        check_paging(memory(), 10_001).await;
    }

    #[tokio::test]
    async fn redis_pages_hold_at_most_limit_tasks_and_each_once() {
        for count in [7, 50] {
            let server = RedisServer::start();
            check_paging(redis(&server), count).await;
        }
    }

    #[tokio::test]
    async fn redis_pages_of_10001_tasks() {
        let server = RedisServer::start();
        check_paging(redis(&server), 10_001).await;
    }
}
