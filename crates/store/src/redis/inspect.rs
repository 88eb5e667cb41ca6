//! What operators see (`TaskInspection`) on Redis, without `KEYS`: every task by `SCAN`
//! (one server only), the unfinished ones by `SSCAN` of each owner's index, a principal's
//! by its listing index. A page is one cursor step of about `budget` entries; `walk`
//! gives every task found the cursor right after it.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use redis::Value;

use super::listing::{self, Index, Window};
use super::walk::{self, Position, Step};
use super::{RedisStore, codec, corrupt, is_task_id, parse, pipe_of};
use crate::inspect::{
    BadCursor, InspectError, InstanceInfo, Newest, ScanPage, Scanned, Scope, TaskInspection,
};
use crate::{ListCursor, StoreError, TaskRecord, now_ms};

#[async_trait]
impl TaskInspection for RedisStore {
    async fn inspect(&self, task_id: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        Ok(read_tasks(self, "inspect", &[task_id]).await?.pop())
    }

    async fn scan(
        &self,
        scope: Scope<'_>,
        cursor: Option<&str>,
        budget: usize,
    ) -> Result<ScanPage, InspectError> {
        let budget = budget.max(1);
        match scope {
            Scope::Principal(principal) => scan_principal(self, principal, cursor, budget).await,
            Scope::Unfinished { owner } => scan_owners(self, owner, cursor, budget).await,
            Scope::All if self.conn.backend_label() == "redis-cluster" => {
                Err(InspectError::Unsupported(
                    "on Redis Cluster every task cannot be listed without KEYS: filter by a \
                     principal, or by status working or input_required",
                ))
            }
            Scope::All => scan_keys(self, cursor, budget).await,
        }
    }

    async fn newest(
        &self,
        which: Newest<'_>,
        cursor: Option<&str>,
        budget: usize,
    ) -> Result<ScanPage, InspectError> {
        let budget = budget.max(1);
        let after = cursor.map(parse_list_cursor).transpose()?;
        let index = match which.principal {
            Some(principal) => Index::Principal(principal),
            None => Index::Created,
        };
        let window = Window {
            at_most: which.created_at_most,
            at_least: which.created_at_least,
        };
        let tasks = listing::walk(self, index, after.as_ref(), window, budget).await?;
        Ok(newest_first(tasks, budget))
    }

    async fn instances(&self) -> Result<Vec<InstanceInfo>, StoreError> {
        let mut members = redis::cmd("SMEMBERS");
        members.arg(self.keys.instances());
        let mut instances: Vec<String> = parse(self.conn.one("instances", members).await?)?;
        instances.sort();
        if instances.is_empty() {
            return Ok(Vec::new());
        }
        // An instance's lease and index share its hash tag: one group each.
        let reads = instances
            .iter()
            .map(|instance| {
                let mut url = redis::cmd("GET");
                url.arg(self.keys.lease(instance));
                let mut left = redis::cmd("PTTL");
                left.arg(self.keys.lease(instance));
                let mut running = redis::cmd("SCARD");
                running.arg(self.keys.owned(instance));
                pipe_of([url, left, running])
            })
            .collect();
        let replies = self.conn.run("instances", reads).await?;
        instances
            .into_iter()
            .zip(replies)
            .map(|(instance, reply)| {
                let mut reply = reply.into_iter();
                let url: Option<String> = parse(reply.next().unwrap_or(Value::Nil))?;
                let left: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
                let running: u64 = parse(reply.next().unwrap_or(Value::Nil))?;
                Ok(InstanceInfo {
                    instance,
                    advertise_url: url.filter(|url| url != "-"),
                    // PTTL is -2 for a lapsed lease (and -1 for one without expiry, never set).
                    lease_expires_in_ms: u64::try_from(left).ok(),
                    running_tasks: running,
                })
            })
            .collect()
    }
}

/// A principal's tasks, newest first; the cursor is the listing's own (`createdAt.taskId`),
/// exact for every task.
async fn scan_principal(
    store: &RedisStore,
    principal: &str,
    cursor: Option<&str>,
    budget: usize,
) -> Result<ScanPage, InspectError> {
    let after = cursor.map(parse_list_cursor).transpose()?;
    let tasks = listing::list(store, principal, after.as_ref(), budget).await?;
    Ok(newest_first(tasks, budget))
}

/// A page of tasks a listing index gave, newest first: more may follow if it is full.
fn newest_first(tasks: Vec<Arc<TaskRecord>>, budget: usize) -> ScanPage {
    let position = |task: &TaskRecord| format!("{}.{}", task.created_at_ms, task.task_id);
    let next = (tasks.len() == budget)
        .then(|| tasks.last())
        .flatten()
        .map(|last| position(last));
    let tasks = tasks
        .into_iter()
        .map(|task| Scanned {
            after: position(&task),
            task,
        })
        .collect();
    ScanPage { tasks, next }
}

fn parse_list_cursor(text: &str) -> Result<ListCursor, BadCursor> {
    let bad = || BadCursor(text.to_owned());
    let (created, task_id) = text.split_once('.').ok_or_else(bad)?;
    Ok(ListCursor {
        created_at_ms: created.parse().map_err(|_| bad())?,
        task_id: task_id.to_owned(),
    })
}

/// Unfinished tasks from the owners' indexes, one owner after another in name order.
/// The cursor is `<position>:<owner>`, the position one of `walk` (an instance id may
/// hold colons, a position does not).
async fn scan_owners(
    store: &RedisStore,
    owner: Option<&str>,
    cursor: Option<&str>,
    budget: usize,
) -> Result<ScanPage, InspectError> {
    let (from, current) = match cursor {
        Some(text) => {
            let bad = || BadCursor(text.to_owned());
            let (position, instance) = text.split_once(':').ok_or_else(bad)?;
            if instance.is_empty() {
                return Err(bad().into());
            }
            let position = Position::parse(position).map_err(|_| bad())?;
            (position, instance.to_owned())
        }
        None => match owner {
            Some(owner) => (Position::At(0), owner.to_owned()),
            None => match next_instance(store, None).await? {
                Some(first) => (Position::At(0), first),
                None => return Ok(ScanPage::default()),
            },
        },
    };
    let index = SetScan {
        store,
        key: store.keys.owned(&current),
    };
    let step = walk::step(&index, &from, budget as u64).await?;
    let next = match &step.next {
        Some(position) => Some(format!("{position}:{current}")),
        None if owner.is_some() => None,
        None => next_instance(store, Some(&current))
            .await?
            .map(|instance| format!("{}:{instance}", Position::At(0))),
    };
    let unfinished = |task: &TaskRecord| !task.status.is_terminal() && task.owner == current;
    let tasks = tasks_of(store, &step, unfinished, |position| {
        format!("{position}:{current}")
    })
    .await?;
    Ok(ScanPage { tasks, next })
}

/// The first instance in name order after `after`.
async fn next_instance(
    store: &RedisStore,
    after: Option<&str>,
) -> Result<Option<String>, StoreError> {
    let mut members = redis::cmd("SMEMBERS");
    members.arg(store.keys.instances());
    let instances: Vec<String> = parse(store.conn.one("inspect", members).await?)?;
    Ok(instances
        .into_iter()
        .filter(|instance| after.is_none_or(|after| instance.as_str() > after))
        .min())
}

/// Every task of the namespace, by `SCAN` of its task keys; the cursor is a `walk`
/// position.
async fn scan_keys(
    store: &RedisStore,
    cursor: Option<&str>,
    budget: usize,
) -> Result<ScanPage, InspectError> {
    let from = match cursor {
        Some(text) => Position::parse(text)?,
        None => Position::At(0),
    };
    let step = walk::step(&TaskKeys(store), &from, budget as u64).await?;
    Ok(ScanPage {
        tasks: tasks_of(store, &step, |_| true, Position::to_string).await?,
        next: step.next.as_ref().map(Position::to_string),
    })
}

/// `SSCAN` of an owner's index.
struct SetScan<'a> {
    store: &'a RedisStore,
    key: String,
}

impl walk::Scan for SetScan<'_> {
    async fn scan(&self, cursor: u64, count: u64) -> Result<(u64, Vec<String>), StoreError> {
        let mut sscan = redis::cmd("SSCAN");
        sscan.arg(&self.key).arg(cursor).arg("COUNT").arg(count);
        parse(self.store.conn.one("inspect", sscan).await?)
    }
}

/// `SCAN` of the namespace's task keys.
struct TaskKeys<'a>(&'a RedisStore);

impl walk::Scan for TaskKeys<'_> {
    async fn scan(&self, cursor: u64, count: u64) -> Result<(u64, Vec<String>), StoreError> {
        let keys = &self.0.keys;
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(keys.task_pattern())
            .arg("COUNT")
            .arg(count)
            .arg("TYPE")
            .arg("hash");
        let (next, found): (u64, Vec<String>) = parse(self.0.conn.one("inspect", scan).await?)?;
        let ids = found
            .iter()
            .filter_map(|key| keys.task_id_of(key))
            .map(str::to_owned)
            .collect();
        Ok((next, ids))
    }
}

/// The live tasks of a walk's step that `keep` keeps, in its order, each with the cursor
/// after it (`cursor_of` writes a position as the scope's cursor).
async fn tasks_of(
    store: &RedisStore,
    step: &Step,
    keep: impl Fn(&TaskRecord) -> bool,
    cursor_of: impl Fn(&Position) -> String,
) -> Result<Vec<Scanned>, StoreError> {
    let ids: Vec<&str> = step.entries.iter().map(|(id, _)| id.as_str()).collect();
    let tasks = read_tasks(store, "inspect", &ids).await?;
    // `read_tasks` keeps the order of the ids it found.
    let mut entries = step.entries.iter();
    let mut found = Vec::with_capacity(tasks.len());
    for task in tasks {
        let Some((_, position)) = entries.find(|(id, _)| *id == task.task_id) else {
            break;
        };
        if keep(&task) {
            found.push(Scanned {
                after: cursor_of(position),
                task,
            });
        }
    }
    Ok(found)
}

/// The live tasks among `ids`, in one round trip (timed as `op`); unknown and expired
/// ones left out.
pub(super) async fn read_tasks(
    store: &RedisStore,
    op: &'static str,
    ids: &[impl AsRef<str> + Sync],
) -> Result<Vec<Arc<TaskRecord>>, StoreError> {
    let ids: Vec<&str> = ids
        .iter()
        .map(AsRef::as_ref)
        .filter(|id| is_task_id(id))
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let reads = store.on_each_task("HGETALL", ids.iter().copied());
    let replies = store.conn.run(op, reads).await?;
    let now = now_ms();
    let mut tasks = Vec::with_capacity(ids.len());
    for (id, reply) in ids.into_iter().zip(replies) {
        let fields: HashMap<String, String> =
            parse(reply.into_iter().next().unwrap_or(Value::Nil))?;
        if fields.is_empty() {
            continue;
        }
        let task = codec::decode(id, fields).map_err(corrupt)?;
        if task.expires_at_ms() > now {
            tasks.push(Arc::new(task));
        }
    }
    Ok(tasks)
}
