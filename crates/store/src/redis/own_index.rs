//! An instance's upkeep of its own index (`owned:{me}`): ids of tasks it no longer runs
//! and whose task is gone are dropped, a step at a time. A runner takes its task's id out
//! when the task ends or expires, but that write can fail (Redis unreachable at that
//! moment), and the index lives on as long as tasks keep coming: without this, such an
//! id would stay, and every operator's count of the instance's running tasks with it.

use redis::Value;

use super::{RedisStore, parse, takeover};
use crate::StoreError;

/// Ids looked at a step: one `SSCAN` reply, bounded however large the index.
const STEP: usize = 256;

/// One step through `instance`'s index from `cursor`: of the ids `running` does not
/// claim, those whose task key is gone are dropped. Returns the next cursor (0 when a
/// pass ended) and how many were dropped.
pub(super) async fn tidy(
    store: &RedisStore,
    instance: &str,
    cursor: u64,
    running: &(dyn for<'r> Fn(&'r str) -> bool + Sync),
) -> Result<(u64, usize), StoreError> {
    let mut scan = redis::cmd("SSCAN");
    scan.arg(store.keys.owned(instance))
        .arg(cursor)
        .arg("COUNT")
        .arg(STEP);
    let (next, task_ids): (u64, Vec<String>) = parse(store.conn.one("tidy", scan).await?)?;
    // A task being created has its runner before its key, and one taken over is in the
    // store before it is indexed here: only an id nobody runs can be a leftover.
    let unclaimed: Vec<String> = task_ids.into_iter().filter(|id| !running(id)).collect();
    if unclaimed.is_empty() {
        return Ok((next, 0));
    }
    let checks = store.on_each_task("EXISTS", unclaimed.iter().map(String::as_str));
    let replies = store.conn.run("tidy", checks).await?;
    let mut gone = Vec::new();
    for (id, reply) in unclaimed.into_iter().zip(replies) {
        let exists: i64 = parse(reply.into_iter().next().unwrap_or(Value::Nil))?;
        if exists == 0 {
            gone.push(id);
        }
    }
    takeover::unindex(store, instance, &gone).await?;
    Ok((next, gone.len()))
}
