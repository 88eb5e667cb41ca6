//! Terminal task records kept in memory, so that polls of a finished task are answered
//! without a Redis round trip. A terminal record never changes (every script refuses to
//! move a task out of a terminal status), so a copy stays true until the task expires,
//! which each hit checks against the exact `createdAt + ttlMs`, as a Redis read does.
//! Copies are bound to the [`Link`] epoch they were read under: once the link to Redis
//! drops, is replaced or fails, none of them is served again, so no instance answers for
//! a task Redis lost (a restart without persistence, a failover to a replica behind).
//!
//! One cache per process, shared by every namespace (keys are full Redis keys), within
//! a byte budget; the least used records go first (quick_cache's S3-FIFO).

use std::sync::Arc;

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use super::link::Link;
use crate::TaskRecord;

/// Bytes counted for a record beyond its variable parts (the struct, the key, the
/// cache's own slot).
const FIXED_BYTES: u64 = 512;

/// A guess of a record's average size, to size the table up front.
const TYPICAL_BYTES: u64 = 2048;

pub(super) struct TerminalCache {
    records: Cache<String, Remembered, ByBytes>,
    link: Arc<Link>,
}

#[derive(Clone)]
struct Remembered {
    epoch: u64,
    record: Arc<TaskRecord>,
    bytes: u64,
}

#[derive(Clone)]
struct ByBytes;

impl Weighter<String, Remembered> for ByBytes {
    fn weight(&self, _key: &String, value: &Remembered) -> u64 {
        value.bytes
    }
}

impl TerminalCache {
    /// `None` for a budget of 0 bytes (the cache is off).
    pub(super) fn new(budget_bytes: u64, link: Arc<Link>) -> Option<Self> {
        (budget_bytes > 0).then(|| Self {
            records: Cache::with_weighter(
                usize::try_from(budget_bytes / TYPICAL_BYTES)
                    .unwrap_or(usize::MAX)
                    .max(16),
                budget_bytes,
                ByBytes,
            ),
            link,
        })
    }

    /// The remembered record under `key`, if it is still valid at `now_ms`.
    pub(super) fn get(&self, key: &str, now_ms: u64) -> Option<Arc<TaskRecord>> {
        let remembered = self.records.get(key)?;
        let valid = self.link.current() == Some(remembered.epoch)
            && now_ms < remembered.record.expires_at_ms();
        valid.then_some(remembered.record)
    }

    /// The epoch a read starts under: pass it to [`Self::remember`] with what the read
    /// found. `None` while the link is down (nothing read then is kept).
    pub(super) fn epoch(&self) -> Option<u64> {
        self.link.current()
    }

    /// Keeps `record` if it is terminal and the link has not moved since `epoch`.
    pub(super) fn remember(&self, key: String, epoch: Option<u64>, record: &Arc<TaskRecord>) {
        let Some(epoch) = epoch else { return };
        if !record.status.is_terminal() || self.link.current() != Some(epoch) {
            return;
        }
        let bytes = FIXED_BYTES + approximate_bytes(record);
        self.records.insert(
            key,
            Remembered {
                epoch,
                record: record.clone(),
                bytes,
            },
        );
    }

    /// The task is gone from Redis (answered inline and deleted).
    pub(super) fn forget(&self, key: &str) {
        self.records.remove(key);
    }
}

/// What a record's heap parts take, near enough to keep within a budget.
fn approximate_bytes(record: &TaskRecord) -> u64 {
    let text = record.task_id.len()
        + record.principal.len()
        + record.owner.len()
        + record.status_message.as_ref().map_or(0, String::len)
        + record.result.as_ref().map_or(0, |r| r.get().len())
        + record.request.get().len()
        + record.error.as_ref().map_or(0, |e| {
            e.message.len() + e.data.as_ref().map_or(0, |d| d.to_string().len())
        });
    let json = [&record.upstream_state, &record.resume]
        .into_iter()
        .flatten()
        .map(|v| v.to_string().len())
        .sum::<usize>();
    (text + json) as u64
}
