//! The Redis store's outbox. Per subscription, under `mtg:<ns>:outbox:<id>:`: `due`
//! (zset, task -> next try of its head), `queues` (hash, task -> its pending event ids,
//! oldest first), `events` (hash, id -> event JSON), `attempts` (hash, id -> attempts
//! JSON), `ages` (zset, pending id -> when it happened), `dead` (zset, id -> given up).
//! A task transition appends to the first four and `ages` in its own script (`emit` in
//! `lua/prelude.lua`), so on Redis Cluster webhooks are refused (the keys would span
//! slots); the settle scripts are `lua/outbox_*.lua`.

use async_trait::async_trait;
use redis::{Cmd, Value};

use super::scripts::Lua;
use super::{RedisStore, corrupt, parse, pipe_of};
use crate::outbox::{
    Claimed, EventType, Outbox, OutboxEntry, OutboxPlan, OutboxStats, StoredEvent, new_event_id,
};
use crate::{StoreError, now_ms};

/// The keys a transition writes for one subscription, in `emit`'s order.
const EMIT_PARTS: [&str; 4] = ["due", "queues", "events", "ages"];
/// The keys the settle and redeliver scripts take, in their order.
const ALL_PARTS: [&str; 6] = ["due", "queues", "events", "attempts", "ages", "dead"];

impl RedisStore {
    /// Whether some subscription wants one of `kinds`: then the transition writes its
    /// event in the same script ([`Self::emitting`]).
    pub(super) fn heard(&self, kinds: &[EventType]) -> bool {
        self.plan
            .get()
            .is_some_and(|plan| plan.matching(kinds).next().is_some())
    }

    /// `lua` called on `task_id`'s hash with the outbox keys of every subscription that
    /// wants one of `kinds`, and the plan the script's last ARGV must be (`""` when none).
    pub(super) fn emitting(&self, lua: &Lua, task_id: &str, kinds: &[EventType]) -> (Cmd, String) {
        let mut keys = vec![self.keys.task(task_id)];
        let Some(plan) = self.plan.get() else {
            return (lua.call_keys(&keys), String::new());
        };
        let mut subs = Vec::new();
        for route in plan.matching(kinds) {
            keys.extend(
                EMIT_PARTS
                    .iter()
                    .map(|part| self.keys.outbox(&route.subscription, part)),
            );
            let wanted: Vec<&str> = route.events.iter().map(|e| e.as_str()).collect();
            subs.push(serde_json::json!({
                "i": new_event_id(),
                "w": wanted,
                "r": u8::from(route.include_result),
            }));
        }
        if subs.is_empty() {
            return (lua.call_keys(&keys), String::new());
        }
        let plan = serde_json::json!({"t": task_id, "n": now_ms().to_string(), "s": subs});
        (lua.call_keys(&keys), plan.to_string())
    }

    /// Tells this process's delivery workers that `plan` (from [`Self::emitting`]) may
    /// have written events.
    pub(super) fn emitted(&self, plan: &str) {
        if !plan.is_empty() {
            self.enqueued.send_modify(|n| *n += 1);
        }
    }

    fn outbox_keys(&self, subscription: &str) -> Vec<String> {
        ALL_PARTS
            .iter()
            .map(|part| self.keys.outbox(subscription, part))
            .collect()
    }

    async fn settle(
        &self,
        subscription: &str,
        what: &str,
        task_id: &str,
        event_id: &str,
        next_ms: u64,
        error: &str,
    ) -> Result<bool, StoreError> {
        let mut cmd = self
            .scripts
            .outbox_settle
            .call_keys(&self.outbox_keys(subscription));
        cmd.arg(what)
            .arg(task_id)
            .arg(event_id)
            .arg(now_ms())
            .arg(next_ms)
            .arg(error);
        let done: i64 = parse(self.conn.one("outbox_settle", cmd).await?)?;
        Ok(done == 1)
    }

    /// The events and attempts of `ids`, in order; ids whose event is gone are skipped.
    async fn entries(
        &self,
        subscription: &str,
        ids: Vec<String>,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut events = redis::cmd("HMGET");
        events
            .arg(self.keys.outbox(subscription, "events"))
            .arg(&ids);
        let mut attempts = redis::cmd("HMGET");
        attempts
            .arg(self.keys.outbox(subscription, "attempts"))
            .arg(&ids);
        let replies = self
            .conn
            .run("outbox_entries", vec![pipe_of([events, attempts])])
            .await?;
        let mut group = replies.into_iter().next().unwrap_or_default().into_iter();
        let events: Vec<Option<String>> = parse(group.next().unwrap_or(Value::Nil))?;
        let attempts: Vec<Option<String>> = parse(group.next().unwrap_or(Value::Nil))?;
        let mut out = Vec::new();
        for (event, attempts) in events.into_iter().zip(attempts) {
            let Some(event) = event else { continue };
            out.push(OutboxEntry {
                event: serde_json::from_str(&event).map_err(corrupt)?,
                attempts: attempts
                    .map(|a| serde_json::from_str(&a))
                    .transpose()
                    .map_err(corrupt)?
                    .unwrap_or_default(),
            });
        }
        Ok(out)
    }

    async fn range(&self, key: String, limit: usize) -> Result<Vec<String>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(key).arg(0).arg(limit - 1);
        parse(self.conn.one("outbox_range", cmd).await?)
    }
}

#[async_trait]
impl Outbox for RedisStore {
    fn route(&self, plan: OutboxPlan) {
        let _ = self.plan.set(plan);
    }

    fn enqueued(&self) -> tokio::sync::watch::Receiver<u64> {
        self.enqueued.subscribe()
    }

    async fn claim(
        &self,
        subscription: &str,
        claimer: &str,
        now_ms: u64,
        visibility_ms: u64,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        let keys = &self.outbox_keys(subscription)[..4];
        let mut cmd = self.scripts.outbox_claim.call_keys(keys);
        cmd.arg(now_ms)
            .arg(now_ms.saturating_add(visibility_ms))
            .arg(limit)
            .arg(claimer);
        let flat: Vec<String> = parse(self.conn.one("outbox_claim", cmd).await?)?;
        flat.chunks_exact(2)
            .map(|pair| {
                let event: StoredEvent = serde_json::from_str(&pair[0]).map_err(corrupt)?;
                let attempts = pair[1].parse().map_err(corrupt)?;
                Ok(Claimed { event, attempts })
            })
            .collect()
    }

    async fn ack(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
    ) -> Result<bool, StoreError> {
        self.settle(subscription, "ack", task_id, event_id, 0, "")
            .await
    }

    async fn retry(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
        next_ms: u64,
        error: &str,
    ) -> Result<bool, StoreError> {
        self.settle(subscription, "retry", task_id, event_id, next_ms, error)
            .await
    }

    async fn give_up(
        &self,
        subscription: &str,
        task_id: &str,
        event_id: &str,
        error: &str,
    ) -> Result<bool, StoreError> {
        self.settle(subscription, "dead", task_id, event_id, 0, error)
            .await
    }

    async fn stats(&self, subscription: &str) -> Result<OutboxStats, StoreError> {
        let ages = self.keys.outbox(subscription, "ages");
        let mut count = redis::cmd("ZCARD");
        count.arg(&ages);
        let mut oldest = redis::cmd("ZRANGE");
        oldest.arg(&ages).arg(0).arg(0).arg("WITHSCORES");
        let mut dead = redis::cmd("ZCARD");
        dead.arg(self.keys.outbox(subscription, "dead"));
        let replies = self
            .conn
            .run("outbox_stats", vec![pipe_of([count, oldest, dead])])
            .await?;
        let mut group = replies.into_iter().next().unwrap_or_default().into_iter();
        let pending: u64 = parse(group.next().unwrap_or(Value::Nil))?;
        let oldest: Vec<(String, f64)> = parse(group.next().unwrap_or(Value::Nil))?;
        let dead: u64 = parse(group.next().unwrap_or(Value::Nil))?;
        Ok(OutboxStats {
            pending,
            oldest_at_ms: oldest.first().map(|(_, at)| *at as u64),
            dead,
        })
    }

    async fn pending(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let ids = self
            .range(self.keys.outbox(subscription, "ages"), limit)
            .await?;
        self.entries(subscription, ids).await
    }

    async fn dead_letters(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let ids = self
            .range(self.keys.outbox(subscription, "dead"), limit)
            .await?;
        self.entries(subscription, ids).await
    }

    async fn redeliver(
        &self,
        subscription: &str,
        event_id: Option<&str>,
    ) -> Result<usize, StoreError> {
        let mut cmd = self
            .scripts
            .outbox_redeliver
            .call_keys(&self.outbox_keys(subscription));
        cmd.arg(now_ms()).arg(event_id.unwrap_or(""));
        let moved: i64 = parse(self.conn.one("outbox_redeliver", cmd).await?)?;
        Ok(usize::try_from(moved).unwrap_or(0))
    }
}
