//! The shared store: task state in Redis, so several gateway instances serve one
//! deployment and any instance answers any follow-up.
//!
//! Key layout (`keys.rs` names every key, under the deployment's namespace `mtg:<ns>:`;
//! every key hash-tagged, so Redis Cluster works; every key has a TTL):
//! - `mtg:<ns>:{<taskId>}`: hash, the task (see `codec`); TTL = ttlMs + `KEY_GRACE` (2 s);
//! - `mtg:<ns>:owned:{<instance>}`: set, ids of the unfinished tasks an instance runs,
//!   taken out by the runner when a task ends or expires; TTL = max TTL + grace;
//! - `mtg:<ns>:by-principal:{<principal>}`: sorted set, a principal's task ids by
//!   createdAt (see `listing`); TTL = max TTL + grace, refreshed on each create;
//! - `mtg:<ns>:by-created`: sorted set, every task id by createdAt, for operators'
//!   newest-first listing (`listing` too); trimmed of surely expired ids on each create,
//!   same TTL;
//! - `mtg:<ns>:lease:{<instance>}`: string (its advertise URL), the instance's lease;
//! - `mtg:<ns>:instances`: set, the instances that own or owned a lease;
//! - `mtg:<ns>:handover:{<instance>}`: string, set by an instance that stopped and left
//!   its unfinished tasks for live instances to take over;
//! - `mtg:<ns>:outbox:<subscription>:{due,queues,events,attempts,ages,dead}`: a webhook
//!   subscription's outbox (`outbox.rs`). These have no TTL and no hash tag: an event
//!   stays until delivered or redelivered, and the gateway refuses webhooks on a Cluster;
//! - channel `mtg:<ns>:wake:<instance>`: wake-ups for the owner (payload: a task id).
//!
//! Every change of a task is one Lua script on its hash, except a create that no webhook
//! hears: a `MULTI` that writes `mtg:<ns>:{<taskId>}:new` and renames it onto the task's
//! key (`create_unheard`), so the staged key is never seen. Nothing on a request path
//! uses KEYS or SCAN.

mod changes;
mod codec;
mod conn;
mod inspect;
mod keys;
mod leases;
mod link;
mod listing;
mod outbox;
mod own_index;
mod scripts;
mod takeover;
mod terminal_cache;
mod wakeups;
mod walk;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::{Pipeline, Value};
use serde_json::{Map, Value as Json};
use tokio::sync::mpsc;

pub use conn::{SentinelTarget, SentinelUrlError, Target};
pub use keys::{BadNamespace, StoreNamespace};

use super::{
    Adoption, CancelOutcome, GoneInstance, Lease, ListCursor, MembershipStore, Outcome, StoreError,
    Takeover, TaskChange, TaskRecord, TaskStore, Unavailable, UpdateOutcome, WakeReceiver, WakeUps,
    metrics, now_ms,
};
use crate::outbox::EventType;
use conn::Conn;
use keys::Keys;
use link::Link;
use mtg_protocol::wire::{InputRequest, TaskStatus};
use scripts::Scripts;
use terminal_cache::TerminalCache;

/// How long a task's keys outlive its TTL. Reads treat the task as gone from the TTL on;
/// the grace only keeps instances whose clocks run a little behind from seeing a task
/// vanish before they expect it.
pub(crate) const KEY_GRACE: Duration = Duration::from_secs(2);

/// What the Redis store needs from the config.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub target: Target,
    /// The instance this process runs as (owner of the tasks it creates).
    pub instance_id: String,
    /// With N > 0, a task is created only once N replicas have it (`WAIT`).
    pub wait_replicas: u32,
    /// Time limit for one store operation, connecting included.
    pub timeout: Duration,
    /// The largest task TTL; bounds how long instance bookkeeping is kept.
    pub max_ttl: Duration,
    /// PEM CA certificate(s) that sign a `rediss://` server's certificate, instead of
    /// the public web roots (`--redis-ca-file`).
    pub ca_cert: Option<Vec<u8>>,
    /// Whose keys these are (`--store-namespace`): nothing outside it is read or written.
    pub namespace: StoreNamespace,
    /// Memory for finished tasks' records, so polls of them skip Redis
    /// (`--terminal-cache-bytes`); 0 turns it off. One budget for the process.
    pub terminal_cache_bytes: u64,
}

pub struct RedisStore {
    conn: Conn,
    /// The one pub/sub connection, shared with the stores of other namespaces.
    subscriber: Arc<wakeups::Subscriber>,
    settings: RedisSettings,
    scripts: &'static Scripts,
    keys: Keys,
    /// This instance's own wake-ups are delivered here directly, without Redis.
    local_wake: Mutex<Option<mpsc::UnboundedSender<String>>>,
    /// Finished tasks read before, shared with the stores of other namespaces.
    terminal: Option<Arc<TerminalCache>>,
    /// Which subscriptions hear of which transitions (`Outbox::route`).
    plan: OnceLock<crate::outbox::OutboxPlan>,
    /// Ticks after a transition that may have written events (`Outbox::enqueued`).
    enqueued: tokio::sync::watch::Sender<u64>,
}

/// Task ids are UUIDs the gateway made; anything else names no task. Checking first
/// keeps client-chosen text out of key names (no odd hash tags, no foreign keys).
fn is_task_id(task_id: &str) -> bool {
    task_id.len() == 36 && task_id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

fn pipe_of(cmds: impl IntoIterator<Item = redis::Cmd>) -> Pipeline {
    let mut pipe = redis::pipe();
    for cmd in cmds {
        pipe.add_command(cmd);
    }
    pipe
}

/// `RENAMENX`'s answer from the replies of [`RedisStore::create_unheard`]: `MULTI`'s
/// `OK` and four `QUEUED`, then `EXEC`'s array of the four results.
fn created_unheard(replies: &mut impl Iterator<Item = Value>) -> Result<i64, StoreError> {
    let Some(Value::Array(results)) = replies.nth(5) else {
        return Err(corrupt("create: Redis did not run the transaction"));
    };
    parse(results.into_iter().nth(2).unwrap_or(Value::Nil))
}

/// The first reply of the first group of a `Conn::run`.
fn first_reply(replies: Vec<Vec<Value>>) -> Value {
    replies
        .into_iter()
        .next()
        .and_then(|group| group.into_iter().next())
        .unwrap_or(Value::Nil)
}

fn corrupt(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
    StoreError::Corrupt(e.into())
}

fn parse<T: redis::FromRedisValue>(value: Value) -> Result<T, StoreError> {
    redis::from_redis_value(value).map_err(corrupt)
}

impl RedisStore {
    /// A store for `settings.target`. Fails only on a malformed URL: Redis itself may be
    /// down at start; requests get clear errors until it is up.
    pub fn connect(settings: RedisSettings) -> Result<Arc<Self>, StoreError> {
        let link = Arc::new(Link::default());
        let conn = Conn::new(
            &settings.target,
            settings.timeout,
            settings.ca_cert.as_deref(),
            link.clone(),
        )
        .map_err(Unavailable::BadAddress)?;
        Ok(Arc::new(Self {
            conn,
            subscriber: wakeups::Subscriber::new(
                &settings.target,
                settings.ca_cert.clone(),
                settings.timeout,
                link.clone(),
            ),
            keys: Keys::new(&settings.namespace),
            terminal: TerminalCache::new(settings.terminal_cache_bytes, link).map(Arc::new),
            settings,
            scripts: Scripts::get(),
            local_wake: Mutex::new(None),
            plan: OnceLock::new(),
            enqueued: tokio::sync::watch::Sender::new(0),
        }))
    }

    /// This store's connection under another namespace: one upstream's world of
    /// several, each with its own keys and channels over one connection to Redis.
    pub fn with_namespace(&self, namespace: StoreNamespace) -> Arc<Self> {
        Arc::new(Self {
            conn: self.conn.clone(),
            subscriber: self.subscriber.clone(),
            keys: Keys::new(&namespace),
            settings: RedisSettings {
                namespace,
                ..self.settings.clone()
            },
            scripts: self.scripts,
            local_wake: Mutex::new(None),
            terminal: self.terminal.clone(),
            plan: OnceLock::new(),
            enqueued: tokio::sync::watch::Sender::new(0),
        })
    }

    fn key_ttl_ms(ttl_ms: u64) -> u64 {
        ttl_ms.saturating_add(KEY_GRACE.as_millis() as u64)
    }

    /// Runs one script on one task; its reply.
    async fn eval(&self, op: &'static str, cmd: redis::Cmd) -> Result<Value, StoreError> {
        self.conn.one(op, cmd).await
    }

    /// Drops tasks from the newest-first listing and, when known, their principal's, in
    /// the background: the caller's answer does not wait for it, and the listings skip
    /// members whose task is gone anyway.
    fn unlist(&self, principal: Option<&str>, task_ids: Vec<String>) {
        let mut groups = Vec::with_capacity(2);
        let mut everyone = redis::cmd("ZREM");
        everyone.arg(self.keys.by_created()).arg(&task_ids);
        groups.push(pipe_of([everyone]));
        if let Some(principal) = principal {
            let mut theirs = redis::cmd("ZREM");
            theirs.arg(self.keys.by_principal(principal)).arg(&task_ids);
            groups.push(pipe_of([theirs]));
        }
        let conn = self.conn.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.run("unlist", groups).await {
                tracing::warn!(?task_ids, error = %e, "could not drop tasks from the listings");
            }
        });
    }

    /// Adds a new task to the newest-first listing, and trims what is surely expired
    /// there: nothing else would, while tasks keep coming.
    fn list_created(&self, task: &TaskRecord) -> Pipeline {
        let key = self.keys.by_created();
        let mut add = redis::cmd("ZADD");
        add.arg(&key)
            .arg("NX")
            .arg(task.created_at_ms)
            .arg(&task.task_id);
        let mut trim = redis::cmd("ZREMRANGEBYSCORE");
        trim.arg(&key)
            .arg("-inf")
            .arg(format!("({}", listing::surely_expired(self, now_ms())));
        let mut ttl = redis::cmd("PEXPIRE");
        ttl.arg(&key).arg(self.index_ttl_ms(task));
        pipe_of([add, trim, ttl])
    }

    /// The key TTL of a task that lives as long as any may: max TTL + grace.
    pub(super) fn max_key_ttl_ms(&self) -> u64 {
        Self::key_ttl_ms(self.settings.max_ttl.as_millis() as u64)
    }

    /// The TTL an index gets when `task` joins it: as long as the longest-lived task it
    /// can hold, so that a short-lived task never cuts it below an earlier one's.
    fn index_ttl_ms(&self, task: &TaskRecord) -> u64 {
        self.max_key_ttl_ms().max(Self::key_ttl_ms(task.ttl_ms))
    }

    /// A task no webhook hears created, without a script: written to a staging key of the
    /// same slot, then renamed onto the task's key unless that exists. A script call costs
    /// Redis more than the commands it runs (docs/benchmarks.md, run 34); `MULTI` keeps
    /// the staging key from ever being seen or left behind.
    fn create_unheard(
        &self,
        task_id: &str,
        key_ttl: u64,
        fields: Vec<(String, String)>,
    ) -> Pipeline {
        let (key, staged) = (self.keys.task(task_id), self.keys.task_staged(task_id));
        let mut write = redis::cmd("HSET");
        write.arg(&staged);
        for (field, value) in fields {
            write.arg(field).arg(value);
        }
        let mut ttl = redis::cmd("PEXPIRE");
        ttl.arg(&staged).arg(key_ttl);
        let mut rename = redis::cmd("RENAMENX");
        rename.arg(&staged).arg(&key);
        let mut drop_staged = redis::cmd("DEL");
        drop_staged.arg(&staged);
        pipe_of([
            redis::cmd("MULTI"),
            write,
            ttl,
            rename,
            drop_staged,
            redis::cmd("EXEC"),
        ])
    }

    /// Records the runner's outcome, then announces `change` in the same pipeline.
    async fn finish_then(
        &self,
        task_id: &str,
        outcome: Outcome,
        change: Option<&TaskChange>,
    ) -> Result<bool, StoreError> {
        let (status, fields) = codec::outcome_fields(&outcome).map_err(corrupt)?;
        let kinds: Vec<EventType> = EventType::of_terminal(status).into_iter().collect();
        let (mut finish, plan) = self.emitting(&self.scripts.finish, task_id, &kinds);
        finish.arg(now_ms()).arg(status.as_str());
        for field in fields {
            finish.arg(field);
        }
        finish.arg(&plan);
        // Only the owner finishes a task; its index entry goes in the same round trip.
        let mut unindex = redis::cmd("SREM");
        unindex
            .arg(self.keys.owned(&self.settings.instance_id))
            .arg(task_id);
        let mut groups = vec![pipe_of([finish]), pipe_of([unindex])];
        if let Some(change) = change {
            groups.push(pipe_of([changes::publish(&self.keys, change)]));
        }
        let replies = self.conn.run("finish", groups).await?;
        self.emitted(&plan);
        let moved: i64 = parse(first_reply(replies))?;
        if moved == 1 {
            metrics::task_reached(status);
        }
        Ok(moved == 1)
    }

    async fn unindex(&self, owner: &str, task_id: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("SREM");
        cmd.arg(self.keys.owned(owner)).arg(task_id);
        self.conn.one("unindex", cmd).await?;
        Ok(())
    }

    async fn remove_from_owned(&self, owner: &str, task_id: &str) {
        if let Err(e) = self.unindex(owner, task_id).await {
            tracing::warn!(task_id, error = %e, "could not drop a task from its owner's index");
        }
    }

    /// `command` on each task's key, one group per task: on a Cluster each key is in a
    /// slot of its own.
    fn on_each_task<'a>(
        &self,
        command: &str,
        task_ids: impl IntoIterator<Item = &'a str>,
    ) -> Vec<Pipeline> {
        task_ids
            .into_iter()
            .map(|id| {
                let mut cmd = redis::cmd(command);
                cmd.arg(self.keys.task(id));
                pipe_of([cmd])
            })
            .collect()
    }
}

#[async_trait]
impl TaskStore for RedisStore {
    async fn create(&self, task: TaskRecord) -> Result<(), StoreError> {
        let key_ttl = Self::key_ttl_ms(task.ttl_ms);
        let owned = self.keys.owned(&task.owner);
        // The index entry goes first: if the owner dies in between, a sweep finds an id
        // without a task and drops it, rather than a task nobody would sweep.
        let mut index_add = redis::cmd("SADD");
        index_add.arg(&owned).arg(&task.task_id);
        // As long as the longest-lived task it can hold: a short-lived task must not cut
        // it below an earlier, longer-lived one's. Expired ids are let go of by their
        // runners (`let_go_expired`), not by the index's own expiry.
        let mut index_ttl = redis::cmd("PEXPIRE");
        index_ttl.arg(&owned).arg(self.index_ttl_ms(&task));
        let fields = codec::encode(&task).map_err(corrupt)?;
        let scripted = self.heard(&[EventType::Created]);
        let (mut task_group, plan) = if scripted {
            let (mut create, plan) =
                self.emitting(&self.scripts.create, &task.task_id, &[EventType::Created]);
            create.arg(key_ttl);
            for (field, value) in fields {
                create.arg(field).arg(value);
            }
            create.arg(&plan);
            (pipe_of([create]), plan)
        } else {
            let unheard = self.create_unheard(&task.task_id, key_ttl, fields);
            (unheard, String::new())
        };
        if self.settings.wait_replicas > 0 {
            // Same connection as the write, so WAIT covers it.
            let mut wait = redis::cmd("WAIT");
            wait.arg(self.settings.wait_replicas)
                .arg(self.settings.timeout.as_millis() as u64);
            task_group.add_command(wait);
        }
        // The principal's set lives as long as the longest-lived task it can hold.
        let listed = self.keys.by_principal(&task.principal);
        let mut list_add = redis::cmd("ZADD");
        list_add
            .arg(&listed)
            .arg("NX")
            .arg(task.created_at_ms)
            .arg(&task.task_id);
        let mut list_ttl = redis::cmd("PEXPIRE");
        list_ttl.arg(&listed).arg(self.index_ttl_ms(&task));
        let groups = vec![
            pipe_of([index_add, index_ttl]),
            task_group,
            pipe_of([list_add, list_ttl]),
            self.list_created(&task),
        ];
        let replies = self.conn.run("create", groups).await?;
        self.emitted(&plan);
        let Ok([_owned, task_replies, _listed, _created]) = <[Vec<Value>; 4]>::try_from(replies)
        else {
            return Err(corrupt(
                "create: Redis answered a different number of groups",
            ));
        };
        let mut task_replies = task_replies.into_iter();
        let created: i64 = if scripted {
            parse(task_replies.next().unwrap_or(Value::Nil))?
        } else {
            created_unheard(&mut task_replies)?
        };
        if created == 0 {
            return Err(StoreError::Duplicate(task.task_id));
        }
        if self.settings.wait_replicas > 0 {
            let acked: i64 = parse(task_replies.next().unwrap_or(Value::Nil))?;
            if acked < i64::from(self.settings.wait_replicas) {
                // Not durable as asked: take it back, the client never sees the id.
                let _ = self.delete(&task.task_id).await;
                return Err(Unavailable::NotReplicated {
                    acked,
                    wanted: self.settings.wait_replicas,
                }
                .into());
            }
        }
        metrics::task_reached(task.status);
        Ok(())
    }

    async fn get(
        &self,
        task_id: &str,
        principal: &str,
    ) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        let task = match &self.terminal {
            None => inspect::read_tasks(self, "get", &[task_id]).await?.pop(),
            Some(terminal) => {
                let key = self.keys.task(task_id);
                let remembered = terminal.get(&key, now_ms());
                metrics::terminal_cache_read(remembered.is_some());
                match remembered {
                    Some(task) => Some(task),
                    None => {
                        let epoch = terminal.epoch();
                        let task = inspect::read_tasks(self, "get", &[task_id]).await?.pop();
                        if let Some(task) = &task {
                            terminal.remember(key, epoch, task);
                        }
                        task
                    }
                }
            }
        };
        // Another principal's task reads exactly like an unknown one.
        Ok(task.filter(|task| task.principal == principal))
    }

    async fn list(
        &self,
        principal: &str,
        after: Option<&ListCursor>,
        limit: usize,
    ) -> Result<Vec<Arc<TaskRecord>>, StoreError> {
        listing::list(self, principal, after, limit).await
    }

    async fn delete(&self, task_id: &str) -> Result<(), StoreError> {
        // The principal is read in the same round trip, to unlist the task after: a
        // leftover member per task answered inline would pile up until the max TTL.
        let key = self.keys.task(task_id);
        if let Some(terminal) = &self.terminal {
            terminal.forget(&key);
        }
        let mut principal = redis::cmd("HGET");
        principal.arg(&key).arg("principal");
        let mut del = redis::cmd("DEL");
        del.arg(&key);
        let mut unindex = redis::cmd("SREM");
        unindex
            .arg(self.keys.owned(&self.settings.instance_id))
            .arg(task_id);
        let replies = self
            .conn
            .run(
                "delete",
                vec![pipe_of([principal, del]), pipe_of([unindex])],
            )
            .await?;
        let principal: Option<String> = parse(first_reply(replies))?;
        self.unlist(principal.as_deref(), vec![task_id.to_owned()]);
        Ok(())
    }

    async fn set_status_message(&self, task_id: &str, message: &str) -> Result<(), StoreError> {
        let mut cmd = self.scripts.set_message.call(&self.keys.task(task_id));
        cmd.arg(now_ms()).arg(message);
        self.eval("set_message", cmd).await?;
        Ok(())
    }

    async fn add_input_requests(
        &self,
        task_id: &str,
        requests: Vec<InputRequest>,
    ) -> Result<Option<Vec<String>>, StoreError> {
        if requests.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let (mut cmd, plan) = self.emitting(
            &self.scripts.add_input,
            task_id,
            &[EventType::InputRequired],
        );
        cmd.arg(now_ms());
        for request in &requests {
            cmd.arg(serde_json::to_string(request).map_err(corrupt)?);
        }
        cmd.arg(&plan);
        // The previous status, then the new keys in order.
        let reply: Option<Vec<String>> = parse(self.eval("add_input", cmd).await?)?;
        self.emitted(&plan);
        Ok(reply.map(|reply| {
            let mut reply = reply.into_iter();
            if reply.next().as_deref() != Some(TaskStatus::InputRequired.as_str()) {
                metrics::task_reached(TaskStatus::InputRequired);
            }
            reply.collect()
        }))
    }

    async fn withdraw_input_request(&self, task_id: &str, key: &str) -> Result<(), StoreError> {
        let mut cmd = self.scripts.withdraw_input.call(&self.keys.task(task_id));
        cmd.arg(now_ms()).arg(key);
        let back_to_working: i64 = parse(self.eval("withdraw_input", cmd).await?)?;
        if back_to_working == 1 {
            metrics::task_reached(TaskStatus::Working);
        }
        Ok(())
    }

    async fn set_upstream_state(
        &self,
        task_id: &str,
        state: Option<Json>,
    ) -> Result<(), StoreError> {
        let mut cmd = self.scripts.set_state.call(&self.keys.task(task_id));
        cmd.arg(now_ms());
        match state {
            Some(state) => cmd
                .arg("1")
                .arg(serde_json::to_string(&state).map_err(corrupt)?),
            None => cmd.arg("0").arg(""),
        };
        self.eval("set_state", cmd).await?;
        Ok(())
    }

    async fn accept_input_responses(
        &self,
        task_id: &str,
        principal: &str,
        responses: Map<String, Json>,
    ) -> Result<UpdateOutcome, StoreError> {
        if !is_task_id(task_id) {
            return Ok(UpdateOutcome::NotFound);
        }
        let mut cmd = self.scripts.accept.call(&self.keys.task(task_id));
        cmd.arg(principal).arg(now_ms());
        for (key, response) in &responses {
            cmd.arg(key)
                .arg(serde_json::to_string(response).map_err(corrupt)?);
        }
        let reply: Vec<Value> = parse(self.eval("accept", cmd).await?)?;
        let mut reply = reply.into_iter();
        let found: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
        if found == 0 {
            return Ok(UpdateOutcome::NotFound);
        }
        let owner: String = parse(reply.next().unwrap_or(Value::Nil))?;
        let back_to_working: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
        if back_to_working == 1 {
            metrics::task_reached(TaskStatus::Working);
        }
        let keys = reply.map(parse).collect::<Result<Vec<String>, _>>()?;
        Ok(UpdateOutcome::Accepted { keys, owner })
    }

    async fn take_answers(&self, task_id: &str) -> Result<Vec<(String, Json)>, StoreError> {
        let mut cmd = self.scripts.take_answers.call(&self.keys.task(task_id));
        cmd.arg(now_ms());
        let flat: Vec<String> = parse(self.eval("take_answers", cmd).await?)?;
        flat.chunks_exact(2)
            .map(|pair| {
                let answer = serde_json::from_str(&pair[1]).map_err(corrupt)?;
                Ok((pair[0].clone(), answer))
            })
            .collect()
    }

    async fn finish(&self, task_id: &str, outcome: Outcome) -> Result<bool, StoreError> {
        self.finish_then(task_id, outcome, None).await
    }

    async fn finish_announcing(
        &self,
        task_id: &str,
        outcome: Outcome,
        change: &TaskChange,
    ) -> (Result<bool, StoreError>, bool) {
        // On a Cluster the groups go to their nodes concurrently: the announcement could
        // arrive before the move it announces.
        if !self.conn.keeps_order() {
            return (self.finish(task_id, outcome).await, false);
        }
        let finished = self.finish_then(task_id, outcome, Some(change)).await;
        let announced = finished.is_ok();
        (finished, announced)
    }

    async fn cancel(
        &self,
        task_id: &str,
        principal: &str,
        message: &str,
    ) -> Result<CancelOutcome, StoreError> {
        if !is_task_id(task_id) {
            return Ok(CancelOutcome::NotFound);
        }
        let (mut cmd, plan) = self.emitting(&self.scripts.cancel, task_id, &[EventType::Cancelled]);
        cmd.arg(principal).arg(now_ms()).arg(message).arg(&plan);
        let reply: Vec<Value> = parse(self.eval("cancel", cmd).await?)?;
        self.emitted(&plan);
        let mut reply = reply.into_iter();
        let code: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
        match code {
            1 => {
                let owner: String = parse(reply.next().unwrap_or(Value::Nil))?;
                metrics::task_reached(TaskStatus::Cancelled);
                // The owner's runner stops without a final write; unindex it here.
                self.remove_from_owned(&owner, task_id).await;
                Ok(CancelOutcome::Cancelled { owner })
            }
            2 => Ok(CancelOutcome::AlreadyTerminal),
            _ => Ok(CancelOutcome::NotFound),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.conn.one("ping", redis::cmd("PING")).await?;
        Ok(())
    }

    async fn let_go_expired(&self, task_id: &str) -> Result<(), StoreError> {
        self.unindex(&self.settings.instance_id, task_id).await
    }
}

#[async_trait]
impl WakeUps for RedisStore {
    async fn wake(&self, owner: &str, task_id: &str) -> Result<(), StoreError> {
        if owner == self.settings.instance_id
            && let Some(tx) = self
                .local_wake
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
        {
            let _ = tx.send(task_id.to_owned());
            return Ok(());
        }
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(self.keys.wake(owner)).arg(task_id);
        self.conn.one("wake", cmd).await?;
        Ok(())
    }

    fn wakeups(&self, owner: &str) -> WakeReceiver {
        let (tx, rx) = mpsc::unbounded_channel();
        if owner == self.settings.instance_id {
            *self.local_wake.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
        }
        self.subscriber.subscribe(self.keys.wake(owner), tx);
        rx
    }
}

#[async_trait]
impl MembershipStore for RedisStore {
    async fn renew_lease(&self, lease: &Lease<'_>) -> Result<bool, StoreError> {
        leases::renew(self, lease).await
    }

    async fn release_lease(&self, instance: &str, hand_over: bool) -> Result<usize, StoreError> {
        leases::release(self, instance, hand_over).await
    }

    async fn gone_instances(&self, me: &str) -> Result<Vec<GoneInstance>, StoreError> {
        leases::gone_instances(self, me).await
    }

    async fn tidy_own_index(
        &self,
        cursor: u64,
        running: &(dyn for<'r> Fn(&'r str) -> bool + Sync),
    ) -> Result<(u64, usize), StoreError> {
        own_index::tidy(self, &self.settings.instance_id, cursor, running).await
    }

    async fn orphans(&self, instance: &str) -> Result<Vec<TaskRecord>, StoreError> {
        takeover::orphans(self, instance).await
    }

    async fn take_over(
        &self,
        task_ids: &[String],
        takeover: &Takeover<'_>,
    ) -> Result<Vec<Adoption>, StoreError> {
        takeover::take_over(self, task_ids, takeover).await
    }

    async fn fail_orphans(
        &self,
        instance: &str,
        task_ids: &[String],
        message: &str,
    ) -> Result<usize, StoreError> {
        takeover::fail_orphans(self, instance, task_ids, message).await
    }

    async fn forget_if_gone(&self, instance: &str) -> Result<(), StoreError> {
        leases::forget_if_gone(self, instance).await
    }
}

#[cfg(test)]
#[allow(clippy::too_many_lines)]
mod tests;
