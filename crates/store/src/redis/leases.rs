//! Instance leases, and finding the instances that are gone.
//!
//! An instance renews its lease key (SET PX) and stays in the namespace's `instances` set.
//! A sweep reads that set and checks each lease (EXISTS); an instance without one is
//! gone, and its index is taken over or failed task by task (`takeover.rs`). One that
//! stopped gracefully and handed its tasks over left its `handover` key.
//! Sweeping is background work, never on a request path.

use redis::Value;

use super::{RedisStore, parse, pipe_of};
use crate::{GoneInstance, INSTANCE_STOPPED, Lease, StoreError, now_ms};

pub(super) async fn renew(store: &RedisStore, lease: &Lease<'_>) -> Result<bool, StoreError> {
    let mut set = redis::cmd("SET");
    set.arg(store.keys.lease(lease.instance))
        .arg(lease.advertise_url.unwrap_or("-"))
        .arg("PX")
        .arg(lease.ttl.as_millis() as u64)
        .arg("GET");
    // A live instance has handed nothing over (a restart under the same id).
    let mut unmark = redis::cmd("DEL");
    unmark.arg(store.keys.handover(lease.instance));
    let mut register = redis::cmd("SADD");
    register.arg(store.keys.instances()).arg(lease.instance);
    // The registry outlives any task an instance in it could still own.
    let mut register_ttl = redis::cmd("PEXPIRE");
    register_ttl.arg(store.keys.instances()).arg(
        RedisStore::key_ttl_ms(store.settings.max_ttl.as_millis() as u64)
            + lease.ttl.as_millis() as u64,
    );
    let replies = store
        .conn
        .run(
            "renew_lease",
            vec![pipe_of([set, unmark]), pipe_of([register, register_ttl])],
        )
        .await?;
    let previous = replies
        .into_iter()
        .next()
        .and_then(|group| group.into_iter().next())
        .unwrap_or(Value::Nil);
    Ok(previous != Value::Nil)
}

pub(super) async fn release(
    store: &RedisStore,
    instance: &str,
    hand_over: bool,
) -> Result<usize, StoreError> {
    let mut drop_lease = redis::cmd("DEL");
    drop_lease.arg(store.keys.lease(instance));
    if hand_over {
        // The lease goes and the index stays: live instances see the tasks as gone
        // owners' at their next sweep, and the mark says it was a graceful hand-over.
        let mut mark = redis::cmd("SET");
        mark.arg(store.keys.handover(instance))
            .arg(now_ms())
            .arg("PX")
            .arg(registry_ttl_ms(store));
        store
            .conn
            .run("release_lease", vec![pipe_of([mark, drop_lease])])
            .await?;
        return Ok(0);
    }
    let failed = fail_owned_tasks(store, instance, INSTANCE_STOPPED).await?;
    let mut drop_owned = redis::cmd("DEL");
    drop_owned.arg(store.keys.owned(instance));
    let mut unregister = redis::cmd("SREM");
    unregister.arg(store.keys.instances()).arg(instance);
    store
        .conn
        .run(
            "release_lease",
            vec![pipe_of([drop_owned, drop_lease]), pipe_of([unregister])],
        )
        .await?;
    Ok(failed)
}

/// How long instance bookkeeping is kept: longer than any task it may still index.
fn registry_ttl_ms(store: &RedisStore) -> u64 {
    RedisStore::key_ttl_ms(store.settings.max_ttl.as_millis() as u64) + 60_000
}

pub(super) async fn gone_instances(
    store: &RedisStore,
    me: &str,
) -> Result<Vec<GoneInstance>, StoreError> {
    let mut members = redis::cmd("SMEMBERS");
    members.arg(store.keys.instances());
    let instances: Vec<String> = parse(store.conn.one("sweep", members).await?)?;
    let others: Vec<String> = instances.into_iter().filter(|i| i != me).collect();
    if others.is_empty() {
        return Ok(Vec::new());
    }
    // An instance's lease and hand-over mark share its hash tag: one group each.
    let checks = others
        .iter()
        .map(|instance| {
            let mut lease = redis::cmd("EXISTS");
            lease.arg(store.keys.lease(instance));
            let mut mark = redis::cmd("EXISTS");
            mark.arg(store.keys.handover(instance));
            pipe_of([lease, mark])
        })
        .collect();
    let replies = store.conn.run("sweep", checks).await?;
    let mut gone = Vec::new();
    for (instance, reply) in others.into_iter().zip(replies) {
        let mut reply = reply.into_iter();
        let alive: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
        let handed_over: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
        if alive == 0 {
            gone.push(GoneInstance {
                instance,
                handed_over: handed_over == 1,
            });
        }
    }
    Ok(gone)
}

/// Fails every unfinished task in `instance`'s index with `message`; empties the index
/// of the ids it handled. Returns how many tasks it failed.
pub(super) async fn fail_owned_tasks(
    store: &RedisStore,
    instance: &str,
    message: &str,
) -> Result<usize, StoreError> {
    let mut members = redis::cmd("SMEMBERS");
    members.arg(store.keys.owned(instance));
    let task_ids: Vec<String> = parse(store.conn.one("sweep", members).await?)?;
    if task_ids.is_empty() {
        return Ok(0);
    }
    super::takeover::fail_orphans(store, instance, &task_ids, message).await
}

/// Drops a gone instance from the registry once it has no lease and nothing indexed
/// (if it came back meanwhile, its next renewal registers it again).
pub(super) async fn forget_if_gone(store: &RedisStore, instance: &str) -> Result<(), StoreError> {
    let mut remaining = redis::cmd("SCARD");
    remaining.arg(store.keys.owned(instance));
    let mut alive = redis::cmd("EXISTS");
    alive.arg(store.keys.lease(instance));
    let replies = store
        .conn
        .run("sweep", vec![pipe_of([remaining, alive])])
        .await?;
    let mut replies = replies.into_iter().flatten();
    let remaining: i64 = parse(replies.next().unwrap_or(Value::Nil))?;
    let alive: i64 = parse(replies.next().unwrap_or(Value::Nil))?;
    if remaining == 0 && alive == 0 {
        let mut unmark = redis::cmd("DEL");
        unmark.arg(store.keys.handover(instance));
        let mut unregister = redis::cmd("SREM");
        unregister.arg(store.keys.instances()).arg(instance);
        store
            .conn
            .run("sweep", vec![pipe_of([unmark]), pipe_of([unregister])])
            .await?;
    }
    Ok(())
}
