//! Instance leases and the sweep that fails the tasks of an instance that is gone.
//!
//! An instance renews `mtg:lease:{<instance>}` (SET PX) and stays in `mtg:instances`.
//! The sweep reads that set, checks each lease (EXISTS), and for a lapsed one fails
//! every unfinished task in the owner's index. Each failure is a script on one task
//! that checks the task still belongs to that owner and has not ended, so several
//! instances may sweep at once. Sweeping is background work, never on a request path.

use redis::Value;

use super::{INSTANCES_KEY, RedisStore, corrupt, lease_key, owned_key, parse, pipe_of, task_key};
use crate::protocol::jsonrpc::ErrorObject;
use crate::protocol::wire::TaskStatus;
use crate::store::{INSTANCE_LOST, INSTANCE_STOPPED, Lease, StoreError, metrics, now_ms};

pub(super) async fn renew(store: &RedisStore, lease: &Lease<'_>) -> Result<bool, StoreError> {
    let mut set = redis::cmd("SET");
    set.arg(lease_key(lease.instance))
        .arg(lease.advertise_url.unwrap_or("-"))
        .arg("PX")
        .arg(lease.ttl.as_millis() as u64)
        .arg("GET");
    let mut register = redis::cmd("SADD");
    register.arg(INSTANCES_KEY).arg(lease.instance);
    // The registry outlives any task an instance in it could still own.
    let mut register_ttl = redis::cmd("PEXPIRE");
    register_ttl.arg(INSTANCES_KEY).arg(
        RedisStore::key_ttl_ms(store.settings.max_ttl.as_millis() as u64)
            + lease.ttl.as_millis() as u64,
    );
    let replies = store
        .conn
        .run(
            "renew_lease",
            vec![pipe_of([set]), pipe_of([register, register_ttl])],
        )
        .await?;
    let previous = replies
        .into_iter()
        .next()
        .and_then(|group| group.into_iter().next())
        .unwrap_or(Value::Nil);
    Ok(previous != Value::Nil)
}

pub(super) async fn release(store: &RedisStore, instance: &str) -> Result<usize, StoreError> {
    let failed = fail_owned_tasks(store, instance, INSTANCE_STOPPED).await?;
    let mut drop_owned = redis::cmd("DEL");
    drop_owned.arg(owned_key(instance));
    let mut drop_lease = redis::cmd("DEL");
    drop_lease.arg(lease_key(instance));
    let mut unregister = redis::cmd("SREM");
    unregister.arg(INSTANCES_KEY).arg(instance);
    store
        .conn
        .run(
            "release_lease",
            vec![pipe_of([drop_owned, drop_lease]), pipe_of([unregister])],
        )
        .await?;
    Ok(failed)
}

pub(super) async fn sweep(store: &RedisStore, me: &str) -> Result<usize, StoreError> {
    let mut members = redis::cmd("SMEMBERS");
    members.arg(INSTANCES_KEY);
    let instances: Vec<String> = parse(store.conn.one("sweep", members).await?)?;
    let others: Vec<String> = instances.into_iter().filter(|i| i != me).collect();
    if others.is_empty() {
        return Ok(0);
    }
    let checks = others
        .iter()
        .map(|instance| {
            let mut exists = redis::cmd("EXISTS");
            exists.arg(lease_key(instance));
            pipe_of([exists])
        })
        .collect();
    let leases = store.conn.run("sweep", checks).await?;
    let mut failed = 0;
    for (instance, reply) in others.iter().zip(leases) {
        let alive: i64 = parse(reply.into_iter().next().unwrap_or(Value::Nil))?;
        if alive == 1 {
            continue;
        }
        let count = fail_owned_tasks(store, instance, INSTANCE_LOST).await?;
        if count > 0 {
            tracing::warn!(
                instance,
                tasks = count,
                "gateway instance lost (lease lapsed): failed its unfinished tasks"
            );
        }
        failed += count;
        forget_if_gone(store, instance).await?;
    }
    Ok(failed)
}

/// Fails every unfinished task in `instance`'s index with `message`; empties the index
/// of the ids it handled. Returns how many tasks it failed.
pub(super) async fn fail_owned_tasks(
    store: &RedisStore,
    instance: &str,
    message: &str,
) -> Result<usize, StoreError> {
    let mut members = redis::cmd("SMEMBERS");
    members.arg(owned_key(instance));
    let task_ids: Vec<String> = parse(store.conn.one("sweep", members).await?)?;
    if task_ids.is_empty() {
        return Ok(0);
    }
    let error = serde_json::to_string(&ErrorObject::internal(message)).map_err(corrupt)?;
    let now = now_ms();
    let fails = task_ids
        .iter()
        .map(|task_id| {
            let mut cmd = store.scripts.fail_owned.call(&task_key(task_id));
            cmd.arg(instance).arg(now).arg(message).arg(&error);
            pipe_of([cmd])
        })
        .collect();
    let replies = store.conn.run("fail_owned", fails).await?;
    let mut failed = 0;
    for reply in replies.into_iter().flatten() {
        if parse::<i64>(reply)? == 1 {
            failed += 1;
            metrics::task_reached(TaskStatus::Failed);
        }
    }
    let mut unindex = redis::cmd("SREM");
    unindex.arg(owned_key(instance)).arg(&task_ids);
    store.conn.one("sweep", unindex).await?;
    Ok(failed)
}

/// Drops a lost instance from the registry once it has no lease and nothing indexed
/// (if it came back meanwhile, its next renewal registers it again).
async fn forget_if_gone(store: &RedisStore, instance: &str) -> Result<(), StoreError> {
    let mut remaining = redis::cmd("SCARD");
    remaining.arg(owned_key(instance));
    let mut alive = redis::cmd("EXISTS");
    alive.arg(lease_key(instance));
    let replies = store
        .conn
        .run("sweep", vec![pipe_of([remaining, alive])])
        .await?;
    let mut replies = replies.into_iter().flatten();
    let remaining: i64 = parse(replies.next().unwrap_or(Value::Nil))?;
    let alive: i64 = parse(replies.next().unwrap_or(Value::Nil))?;
    if remaining == 0 && alive == 0 {
        let mut unregister = redis::cmd("SREM");
        unregister.arg(INSTANCES_KEY).arg(instance);
        store.conn.one("sweep", unregister).await?;
    }
    Ok(())
}
