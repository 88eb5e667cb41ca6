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

use super::{KEY_GRACE, RedisStore, codec, corrupt, is_task_id, parse};
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

impl<'a> Index<'a> {
    fn principal(self) -> Option<&'a str> {
        match self {
            Index::Principal(principal) => Some(principal),
            Index::Created => None,
        }
    }
}

/// The creation times a walk keeps, both ends included.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Window {
    pub(super) at_most: Option<u64>,
    pub(super) at_least: Option<u64>,
}

/// A principal's tasks (`tasks/list`). Not an `async fn`: one more level of nested
/// futures overflows the compiler's layout depth in the callers.
pub(super) fn list<'a>(
    store: &'a RedisStore,
    principal: &'a str,
    after: Option<&'a ListCursor>,
    limit: usize,
) -> impl Future<Output = Result<Vec<Arc<TaskRecord>>, StoreError>> + Send + 'a {
    walk(
        store,
        Index::Principal(principal),
        after,
        Window::default(),
        limit,
    )
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
    let mut page = Page::new(store, index, after, window, limit);
    loop {
        // Read more at a time once members turn out to be dead.
        let want = (limit - page.found.len()).max(page.dropped).min(MAX_BATCH);
        let members = page.range(want).await?;
        let exhausted = members.len() < want;
        let fresh = page.past_bound(members);
        if fresh.is_empty() {
            if exhausted {
                break;
            }
            continue;
        }
        page.read(fresh).await?;
        if page.found.len() == limit || exhausted {
            break;
        }
    }
    if !page.gone.is_empty() {
        store.unlist(index.principal(), page.gone);
    }
    Ok(page.found)
}

/// One page being listed: where the next range starts, and what was found so far.
struct Page<'a> {
    store: &'a RedisStore,
    index: Index<'a>,
    limit: usize,
    key: String,
    /// The lowest score read: `-inf`, or the window's oldest creation time.
    floor: String,
    now: u64,
    /// Created before this, a task is past any TTL the gateway gives.
    surely_expired: u64,
    /// Created before this, a member without a task is gone (see [`Page::new`]).
    settled: u64,
    /// The last member listed, (score, id): the next range starts there (an empty id:
    /// every member of that score is still to come).
    from: Option<(u64, String)>,
    /// Members of `from`'s score to pass over (many created in one millisecond).
    offset: usize,
    /// Whether the set was trimmed yet (once, with the first range).
    trimmed: bool,
    found: Vec<Arc<TaskRecord>>,
    /// Members read that are not (or no longer) live tasks of the index.
    dropped: usize,
    /// Members whose task is surely gone, removed from the set at the end.
    gone: Vec<String>,
}

impl<'a> Page<'a> {
    fn new(
        store: &'a RedisStore,
        index: Index<'a>,
        after: Option<&ListCursor>,
        window: Window,
        limit: usize,
    ) -> Self {
        let now = now_ms();
        let grace = KEY_GRACE.as_millis() as u64;
        // On a Cluster a create writes the index and the task concurrently, so a young
        // member without a task may be a create under way: skipped, but not removed. (A
        // create takes at most two attempts and a script load, each within the timeout.)
        let settled = now.saturating_sub(grace + 3 * store.settings.timeout.as_millis() as u64);
        let mut from = after.map(|cursor| (cursor.created_at_ms, cursor.task_id.clone()));
        if let Some(most) = window.at_most.and_then(|most| most.checked_add(1)) {
            let ceiling = (most, String::new());
            if from.as_ref().is_none_or(|from| *from > ceiling) {
                from = Some(ceiling);
            }
        }
        Self {
            store,
            index,
            limit,
            key: match index {
                Index::Principal(principal) => store.keys.by_principal(principal),
                Index::Created => store.keys.by_created(),
            },
            floor: window
                .at_least
                .map_or("-inf".to_owned(), |least| least.to_string()),
            now,
            surely_expired: surely_expired(store, now),
            settled,
            from,
            offset: 0,
            trimmed: false,
            found: Vec::new(),
            dropped: 0,
            gone: Vec::new(),
        }
    }

    /// Up to `want` members from `from` down, newest first; the first range also trims
    /// what is surely expired.
    async fn range(&mut self, want: usize) -> Result<Vec<(u64, String)>, StoreError> {
        let mut range = redis::cmd("ZRANGE");
        range
            .arg(&self.key)
            .arg(
                self.from
                    .as_ref()
                    .map_or("+inf".into(), |(score, _)| score.to_string()),
            )
            .arg(&self.floor)
            .arg("BYSCORE")
            .arg("REV")
            .arg("LIMIT")
            .arg(self.offset)
            .arg(want)
            .arg("WITHSCORES");
        let mut group = redis::pipe();
        if !self.trimmed {
            let mut trim = redis::cmd("ZREMRANGEBYSCORE");
            trim.arg(&self.key)
                .arg("-inf")
                .arg(format!("({}", self.surely_expired));
            group.add_command(trim);
        }
        group.add_command(range);
        self.trimmed = true;
        let reply = self
            .store
            .conn
            .run("list", vec![group])
            .await?
            .into_iter()
            .next()
            .and_then(|group| group.into_iter().last())
            .unwrap_or(Value::Nil);
        scored(reply)
    }

    /// The members not listed yet, and the bound moved past them. The range starts at
    /// the bound's score: members of that score up to the bound itself were listed
    /// already. They come first. None new (only many tasks created in the same
    /// millisecond get here): the next range passes over these.
    fn past_bound(&mut self, mut members: Vec<(u64, String)>) -> Vec<(u64, String)> {
        let passed = self.from.as_ref().map_or(0, |(score, id)| {
            members
                .iter()
                .take_while(|(s, m)| (*s, m.as_str()) >= (*score, id.as_str()))
                .count()
        });
        if passed == members.len() {
            self.offset += members.len();
            return Vec::new();
        }
        let fresh = members.split_off(passed);
        self.from = fresh.last().cloned();
        self.offset = 0;
        fresh
    }

    /// Reads the tasks of `fresh` in one pipeline and keeps the index's live ones,
    /// up to the limit.
    async fn read(&mut self, fresh: Vec<(u64, String)>) -> Result<(), StoreError> {
        // Members that are not task ids never form a key.
        let members = fresh.len();
        let readable: Vec<(u64, String)> =
            fresh.into_iter().filter(|(_, id)| is_task_id(id)).collect();
        self.dropped += members - readable.len();
        let reads = self
            .store
            .on_each_task("HGETALL", readable.iter().map(|(_, id)| id.as_str()));
        let replies = if readable.is_empty() {
            Vec::new()
        } else {
            self.store.conn.run("list", reads).await?
        };
        for ((created, task_id), reply) in readable.into_iter().zip(replies) {
            let fields: HashMap<String, String> =
                parse(reply.into_iter().next().unwrap_or(Value::Nil))?;
            if fields.is_empty() {
                self.dropped += 1;
                if created < self.settled {
                    self.gone.push(task_id);
                }
                continue;
            }
            let task = codec::decode(&task_id, fields).map_err(corrupt)?;
            // Expired ones go with a later trim.
            let whose = self
                .index
                .principal()
                .is_none_or(|principal| task.principal == principal);
            if !whose || task.expires_at_ms() <= self.now {
                self.dropped += 1;
                continue;
            }
            self.found.push(Arc::new(task));
            if self.found.len() == self.limit {
                break;
            }
        }
        Ok(())
    }
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
