//! The tasks of a gone instance: read from its index, then each one taken over
//! (`take_over.lua`) or failed (`fail_owned.lua`). Each script checks that the gone
//! instance still owns the task and that it has not ended, so several instances may
//! sweep at once and exactly one wins. Every step is one round trip for the whole batch.

use std::collections::HashMap;

use redis::Value;

use super::{RedisStore, codec, corrupt, inspect, parse, pipe_of};
use crate::outbox::EventType;
use crate::{Adoption, StoreError, Takeover, TaskRecord, metrics, now_ms};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::TaskStatus;

/// Orphans are read this many at a time: bounded replies, however large the index.
const READ_BATCH: usize = 1000;

pub(super) async fn orphans(
    store: &RedisStore,
    instance: &str,
) -> Result<Vec<TaskRecord>, StoreError> {
    let mut members = redis::cmd("SMEMBERS");
    members.arg(store.keys.owned(instance));
    let task_ids: Vec<String> = parse(store.conn.one("sweep", members).await?)?;
    let mut unfinished = Vec::new();
    let mut stale = Vec::new();
    for batch in task_ids.chunks(READ_BATCH) {
        let tasks = inspect::read_tasks(store, "sweep", batch).await?;
        let mut found: HashMap<&str, &TaskRecord> = HashMap::new();
        for task in &tasks {
            found.insert(task.task_id.as_str(), task);
        }
        for task_id in batch {
            match found.get(task_id.as_str()) {
                Some(task) if task.owner == instance && !task.status.is_terminal() => {
                    unfinished.push((*task).clone())
                }
                _ => stale.push(task_id.clone()),
            }
        }
    }
    unindex(store, instance, &stale).await?;
    Ok(unfinished)
}

pub(super) async fn take_over(
    store: &RedisStore,
    task_ids: &[String],
    takeover: &Takeover<'_>,
) -> Result<Vec<Adoption>, StoreError> {
    if task_ids.is_empty() {
        return Ok(Vec::new());
    }
    let (failed_status, failed_fields) =
        codec::outcome_fields(&takeover.exhausted).map_err(corrupt)?;
    debug_assert_eq!(failed_status, TaskStatus::Failed);
    let failure = failed_fields_of(&failed_fields);
    let now = now_ms();
    // Indexed under the new owner first: if it dies right after the move, its own
    // owner's sweep finds the task (an id without a task is dropped then).
    let owned = store.keys.owned(takeover.to);
    let mut index_add = redis::cmd("SADD");
    index_add.arg(&owned).arg(task_ids);
    // An instance that ran nothing yet has no index: it must not be made without a TTL.
    // Max TTL + grace outlives any task it takes; a create later sets its own.
    let mut index_ttl = redis::cmd("PEXPIRE");
    index_ttl.arg(&owned).arg(store.max_key_ttl_ms());
    let mut groups = vec![pipe_of([index_add, index_ttl])];
    groups.extend(task_ids.iter().map(|task_id| {
        let (mut cmd, plan) = store.emitting(
            &store.scripts.take_over,
            task_id,
            &[EventType::TakenOver, EventType::Failed],
        );
        cmd.arg(takeover.from)
            .arg(takeover.to)
            .arg(now)
            .arg(takeover.max_takeovers)
            .arg(u8::from(takeover.counts))
            .arg(u8::from(takeover.keep_round))
            .arg(takeover.message)
            .arg(failure.0)
            .arg(failure.1)
            .arg(plan);
        pipe_of([cmd])
    }));
    let replies = store.conn.run("take_over", groups).await?;
    store.emitted(if store.plan.get().is_some() {
        "plan"
    } else {
        ""
    });
    let mut adoptions = Vec::with_capacity(task_ids.len());
    let mut not_ours = Vec::new();
    for (task_id, reply) in task_ids.iter().zip(replies.into_iter().skip(1)) {
        let reply: Vec<Value> = parse(reply.into_iter().next().unwrap_or(Value::Nil))?;
        let mut reply = reply.into_iter();
        let code: i64 = parse(reply.next().unwrap_or(Value::Nil))?;
        let adoption = match code {
            1 => {
                let fields: HashMap<String, String> = parse(reply.next().unwrap_or(Value::Nil))?;
                let task = codec::decode(task_id, fields).map_err(corrupt)?;
                Adoption::Adopted(Box::new(task))
            }
            2 => {
                metrics::task_reached(TaskStatus::Failed);
                Adoption::Exhausted
            }
            _ => Adoption::NotOwned,
        };
        if !matches!(adoption, Adoption::Adopted(_)) {
            not_ours.push(task_id.clone());
        }
        adoptions.push(adoption);
    }
    unindex(store, takeover.to, &not_ours).await?;
    unindex(store, takeover.from, task_ids).await?;
    Ok(adoptions)
}

pub(super) async fn fail_orphans(
    store: &RedisStore,
    instance: &str,
    task_ids: &[String],
    message: &str,
) -> Result<usize, StoreError> {
    if task_ids.is_empty() {
        return Ok(0);
    }
    let error = serde_json::to_string(&ErrorObject::internal(message)).map_err(corrupt)?;
    let planned = store.plan.get().is_some();
    let now = now_ms();
    let fails = task_ids
        .iter()
        .map(|task_id| {
            let (mut cmd, plan) =
                store.emitting(&store.scripts.fail_owned, task_id, &[EventType::Failed]);
            cmd.arg(instance)
                .arg(now)
                .arg(message)
                .arg(&error)
                .arg(plan);
            pipe_of([cmd])
        })
        .collect();
    let replies = store.conn.run("fail_owned", fails).await?;
    store.emitted(if planned { "plan" } else { "" });
    let mut failed = 0;
    for reply in replies.into_iter().flatten() {
        if parse::<i64>(reply)? == 1 {
            failed += 1;
            metrics::task_reached(TaskStatus::Failed);
        }
    }
    unindex(store, instance, task_ids).await?;
    Ok(failed)
}

/// The failure's statusMessage and error JSON, from `outcome_fields`' pairs.
fn failed_fields_of(fields: &[String]) -> (&str, &str) {
    let value = |name: &str| {
        fields
            .chunks(2)
            .find(|pair| pair[0] == name)
            .map_or("", |pair| pair[1].as_str())
    };
    (value("msg"), value("error"))
}

pub(super) async fn unindex(
    store: &RedisStore,
    instance: &str,
    task_ids: &[String],
) -> Result<(), StoreError> {
    if task_ids.is_empty() {
        return Ok(());
    }
    let mut cmd = redis::cmd("SREM");
    cmd.arg(store.keys.owned(instance)).arg(task_ids);
    store.conn.one("sweep", cmd).await?;
    Ok(())
}
