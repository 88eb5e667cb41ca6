//! The overview: each instance sharing the store, each upstream's readiness and calls in
//! flight, tasks by status, and the tasks waiting for a person. Every count is read from
//! the store or this instance's task services, with bounded walks, on each refresh.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::try_join_all;

use super::listing::row;
use super::views::{InstanceRow, Overview, StatusCounts, TaskRow, UpstreamView};
use super::world::WorldView;
use crate::tasks::mrtr_bridge::HELD_PREFIX;
use mtg_protocol::wire::{TaskStatus, rfc3339_millis};
use mtg_store::{InspectError, InstanceInfo, Newest, Scope, now_ms};

/// Most unfinished tasks read per upstream and refresh.
const MAX_UNFINISHED: usize = 2_000;
/// How many of the newest tasks the ended counts are taken over.
const NEWEST: usize = 500;
/// Most waiting tasks listed.
const MAX_WAITING: usize = 50;
const STEP: usize = 500;

pub(super) async fn overview(
    worlds: &[WorldView],
    instance_id: &str,
    lease_ttl: Duration,
) -> Result<Overview, InspectError> {
    let seen = try_join_all(worlds.iter().map(world)).await?;
    let mut instances: BTreeMap<String, InstanceRow> = BTreeMap::new();
    let mut upstreams = Vec::new();
    let mut waiting = Vec::new();
    for (view, leases, mut waits) in seen {
        for info in leases {
            let row = instances
                .entry(info.instance.clone())
                .or_insert_with(|| instance_row(&info, instance_id, lease_ttl));
            row.tasks_owned += info.running_tasks;
        }
        upstreams.push(view);
        waiting.append(&mut waits);
    }
    // Longest waiting first.
    waiting.sort_by_key(|row| std::cmp::Reverse(row.age_ms));
    waiting.truncate(MAX_WAITING);
    Ok(Overview {
        instance: instance_id.to_owned(),
        generated_at: rfc3339_millis(now_ms()),
        instances: instances.into_values().collect(),
        upstreams,
        waiting,
    })
}

fn instance_row(info: &InstanceInfo, me: &str, lease_ttl: Duration) -> InstanceRow {
    let ttl = lease_ttl.as_millis() as u64;
    InstanceRow {
        instance: info.instance.clone(),
        this: info.instance == me,
        lease_live: info.lease_expires_in_ms.is_some(),
        lease_age_ms: info
            .lease_expires_in_ms
            .map(|left| ttl.saturating_sub(left)),
        lease_expires_in_ms: info.lease_expires_in_ms,
        tasks_owned: 0,
    }
}

/// One upstream's view, the leases in its namespace, and its tasks waiting for input.
async fn world(
    world: &WorldView,
) -> Result<(UpstreamView, Vec<InstanceInfo>, Vec<TaskRow>), InspectError> {
    let (readiness, leases, unfinished, ended) = tokio::join!(
        world.tasks.readiness(world.ask_upstream),
        world.inspection.instances(),
        unfinished(world),
        newest_ended(world),
    );
    let leases = leases?;
    let (mut counts, held_calls, waiting) = unfinished?;
    let (completed, failed, cancelled, examined) = ended?;
    counts.completed = completed;
    counts.failed = failed;
    counts.cancelled = cancelled;
    counts.newest_examined = examined;
    let not_ready = match (&readiness.store, &readiness.upstream) {
        (Err(e), _) => Some(format!("store: {e}")),
        (Ok(()), Some(Err(e))) => Some(format!("upstream: {e}")),
        _ => None,
    };
    let in_flight = world.tasks.in_flight();
    let view = UpstreamView {
        name: world.name.clone(),
        path: world.path(),
        ready: not_ready.is_none(),
        not_ready,
        running_tasks: leases.iter().map(|info| info.running_tasks).sum(),
        held_calls,
        runners_here: in_flight.runners,
        held_calls_here: in_flight.held_calls,
        deferred_calls_here: in_flight.deferred_calls,
        counts,
    };
    Ok((view, leases, waiting))
}

/// Working and waiting tasks from the owners' indexes, how many of them are held calls,
/// and the waiting ones' rows.
async fn unfinished(world: &WorldView) -> Result<(StatusCounts, u64, Vec<TaskRow>), InspectError> {
    let scope = Scope::Unfinished { owner: None };
    let mut counts = StatusCounts::default();
    let mut held = 0;
    let mut waiting = Vec::new();
    let mut cursor: Option<String> = None;
    let mut examined = 0;
    loop {
        let page = world
            .inspection
            .scan(scope, cursor.as_deref(), STEP)
            .await?;
        let now = now_ms();
        for scanned in &page.tasks {
            if scanned.task.principal.starts_with(HELD_PREFIX) {
                held += 1;
            }
            match scanned.task.status {
                TaskStatus::Working => counts.working += 1,
                TaskStatus::InputRequired => {
                    counts.input_required += 1;
                    waiting.push(row(&scanned.task, &world.name, now));
                }
                _ => {}
            }
        }
        examined += STEP;
        cursor = page.next;
        if cursor.is_none() {
            counts.unfinished_exact = true;
            break;
        }
        if examined >= MAX_UNFINISHED {
            break;
        }
    }
    Ok((counts, held, waiting))
}

/// Completed, failed and cancelled tasks among the newest, and how many were read.
async fn newest_ended(world: &WorldView) -> Result<(u64, u64, u64, u64), InspectError> {
    let page = world
        .inspection
        .newest(Newest::default(), None, NEWEST)
        .await?;
    let count = |status: TaskStatus| {
        page.tasks
            .iter()
            .filter(|scanned| scanned.task.status == status)
            .count() as u64
    };
    Ok((
        count(TaskStatus::Completed),
        count(TaskStatus::Failed),
        count(TaskStatus::Cancelled),
        page.tasks.len() as u64,
    ))
}
