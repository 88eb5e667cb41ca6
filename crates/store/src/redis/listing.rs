//! Tasks newest first from a sorted set of ids by createdAt: a principal's
//! (`mtg:<ns>:by-principal:{<principal>}`, for `tasks/list`) or every task's
//! (`mtg:<ns>:by-created`, for operators). Redis orders equal scores by member, so the
//! reverse order is (createdAt, taskId) descending, the order of [`ListCursor`].
//!
//! Members may outlive their tasks (a task expires long before the set; a delete's ZREM
//! may be lost), so each page trims what is surely expired, skips what it cannot read,
//! and removes what is gone. Nothing here uses KEYS or SCAN.

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;

use super::{KEY_GRACE, RedisStore, codec, corrupt, is_task_id, parse, pipe_of};
use crate::{ListCursor, StoreError, TaskRecord, now_ms};

/// Most members read per round, so one page never pipelines an unbounded number of reads.
const MAX_BATCH: usize = 256;

/// Which sorted set a walk reads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Index<'a> {
    /// One principal's tasks; a member whose task is another's is skipped.
    Principal(&'a str),
    /// Every task.
    Created,
}

/// The creation times a walk keeps, both ends included.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Window {
    pub(super) at_most: Option<u64>,
    pub(super) at_least: Option<u64>,
}

pub(super) async fn list(
    store: &RedisStore,
    principal: &str,
    after: Option<&ListCursor>,
    limit: usize,
) -> Result<Vec<Arc<TaskRecord>>, StoreError> {
    walk(
        store,
        Index::Principal(principal),
        after,
        Window::default(),
        limit,
    )
    .await
}

/// Created before this, a task is past any TTL the gateway gives.
pub(super) fn surely_expired(store: &RedisStore, now: u64) -> u64 {
    let grace = KEY_GRACE.as_millis() as u64;
    now.saturating_sub(store.settings.max_ttl.as_millis() as u64 + grace)
}

/// At most `limit` live tasks of `index`, newest first, after `after`, within `window`.
pub(super) async fn walk(
    store: &RedisStore,
    index: Index<'_>,
    after: Option<&ListCursor>,
    window: Window,
    limit: usize,
) -> Result<Vec<Arc<TaskRecord>>, StoreError> {
    // The cursor is parsed from client text: one the gateway cannot have made lists nothing.
    if limit == 0 || after.is_some_and(|cursor| !is_task_id(&cursor.task_id)) {
        return Ok(Vec::new());
    }
    let key = match index {
        Index::Principal(principal) => store.keys.by_principal(principal),
        Index::Created => store.keys.by_created(),
    };
    let now = now_ms();
    let grace = KEY_GRACE.as_millis() as u64;
    let surely_expired = surely_expired(store, now);
    // On a Cluster a create writes the index and the task concurrently, so a young member
    // without a task may be a create under way: skipped, but not removed. (A create takes
    // at most two attempts and a script load, each within the timeout.)
    let settled = now.saturating_sub(grace + 3 * store.settings.timeout.as_millis() as u64);

    // Members at or above `from` were listed (an empty id: every member of that score).
    let mut from = after.map(|cursor| (cursor.created_at_ms, cursor.task_id.clone()));
    if let Some(most) = window.at_most.and_then(|most| most.checked_add(1)) {
        let ceiling = (most, String::new());
        if from.as_ref().is_none_or(|from| *from > ceiling) {
            from = Some(ceiling);
        }
    }
    let floor = window
        .at_least
        .map_or("-inf".to_owned(), |least| least.to_string());
    let mut offset = 0;
    let mut first = true;
    let mut found = Vec::new();
    let mut dropped = 0;
    let mut gone = Vec::new();
    loop {
        // Read more at a time once members turn out to be dead.
        let want = (limit - found.len()).max(dropped).min(MAX_BATCH);
        let mut range = redis::cmd("ZRANGE");
        range
            .arg(&key)
            .arg(
                from.as_ref()
                    .map_or("+inf".into(), |(score, _)| score.to_string()),
            )
            .arg(&floor)
            .arg("BYSCORE")
            .arg("REV")
            .arg("LIMIT")
            .arg(offset)
            .arg(want)
            .arg("WITHSCORES");
        let mut group = redis::pipe();
        if first {
            let mut trim = redis::cmd("ZREMRANGEBYSCORE");
            trim.arg(&key).arg("-inf").arg(format!("({surely_expired}"));
            group.add_command(trim);
        }
        group.add_command(range);
        first = false;
        let reply = store
            .conn
            .run("list", vec![group])
            .await?
            .into_iter()
            .next()
            .and_then(|group| group.into_iter().last())
            .unwrap_or(Value::Nil);
        let members = scored(reply)?;
        let exhausted = members.len() < want;
        // The range starts at the bound's score: members of that score up to the bound
        // itself were listed already. They come first.
        let passed = from.as_ref().map_or(0, |(score, id)| {
            members
                .iter()
                .take_while(|(s, m)| (*s, m.as_str()) >= (*score, id.as_str()))
                .count()
        });
        if passed == members.len() {
            if exhausted {
                break;
            }
            // Only many tasks created in the same millisecond get here.
            offset += members.len();
            continue;
        }
        let fresh = &members[passed..];
        from = fresh.last().cloned();
        offset = 0;

        // Members that are not task ids never form a key.
        let readable: Vec<&(u64, String)> = fresh.iter().filter(|(_, id)| is_task_id(id)).collect();
        dropped += fresh.len() - readable.len();
        let reads = readable
            .iter()
            .map(|(_, id)| {
                let mut read = redis::cmd("HGETALL");
                read.arg(store.keys.task(id));
                pipe_of([read])
            })
            .collect();
        let replies = if readable.is_empty() {
            Vec::new()
        } else {
            store.conn.run("list", reads).await?
        };
        for ((created, task_id), reply) in readable.into_iter().zip(replies) {
            let fields: HashMap<String, String> =
                parse(reply.into_iter().next().unwrap_or(Value::Nil))?;
            if fields.is_empty() {
                dropped += 1;
                if *created < settled {
                    gone.push(task_id.clone());
                }
                continue;
            }
            let task = codec::decode(task_id, fields).map_err(corrupt)?;
            let whose = match index {
                Index::Principal(principal) => task.principal == principal,
                Index::Created => true,
            };
            // Expired ones go with a later trim.
            if !whose || task.expires_at_ms() <= now {
                dropped += 1;
                continue;
            }
            found.push(Arc::new(task));
            if found.len() == limit {
                break;
            }
        }
        if found.len() == limit || exhausted {
            break;
        }
    }
    if !gone.is_empty() {
        let principal = match index {
            Index::Principal(principal) => Some(principal),
            Index::Created => None,
        };
        store.unlist(principal, gone);
    }
    Ok(found)
}

/// (score, member) pairs of a `ZRANGE … WITHSCORES` reply: flat on RESP2, pairs on RESP3.
fn scored(reply: Value) -> Result<Vec<(u64, String)>, StoreError> {
    let mut flat = Vec::new();
    for item in parse::<Vec<Value>>(reply)? {
        match item {
            Value::Array(pair) => flat.extend(pair),
            other => flat.push(other),
        }
    }
    let mut pairs = flat.into_iter();
    let mut scored = Vec::with_capacity(pairs.len() / 2);
    while let (Some(member), Some(score)) = (pairs.next(), pairs.next()) {
        // Scores are whole milliseconds, exact in a double.
        let score: f64 = parse(score)?;
        scored.push((score as u64, parse(member)?));
    }
    Ok(scored)
}
