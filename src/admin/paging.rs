//! A page of tasks from one of the store's walks, with filters the store cannot apply
//! applied while walking: never more than `limit` tasks, and it ends right after its last
//! task, so the next page neither skips nor repeats one. A sparse filter gets a short page
//! and a cursor rather than a walk of the whole store.

use std::sync::Arc;

use mtg_store::{InspectError, ScanPage, TaskRecord};

/// Most tasks one page examines, whatever its filters.
const MAX_EXAMINED: usize = 10_000;
/// Most tasks asked of the store in one step.
const MAX_STEP: usize = 1_000;

/// The tasks of one page, in the walk's order, and where the next page starts.
pub(crate) struct Gathered {
    pub(crate) tasks: Vec<Arc<TaskRecord>>,
    pub(crate) next_cursor: Option<String>,
}

/// At most `limit` tasks that `keep` accepts, walking from `cursor` by `step_from` (the
/// store's page of about `n` tasks after a cursor).
pub(crate) async fn gather<Step, Fut>(
    mut step_from: Step,
    keep: impl Fn(&TaskRecord) -> bool,
    cursor: Option<String>,
    limit: usize,
) -> Result<Gathered, InspectError>
where
    Step: FnMut(Option<String>, usize) -> Fut,
    Fut: Future<Output = Result<ScanPage, InspectError>>,
{
    let mut cursor = cursor;
    let mut found: Vec<Arc<TaskRecord>> = Vec::new();
    let mut examined = 0;
    let mut step = limit;
    loop {
        let page = step_from(cursor.take(), step).await?;
        let before = found.len();
        let last = page.tasks.len().checked_sub(1);
        // A step may hold more than was asked for: the page ends at the task that fills it.
        let mut full_at = None;
        for (index, scanned) in page.tasks.into_iter().enumerate() {
            if keep(&scanned.task) {
                found.push(scanned.task);
                if found.len() == limit {
                    full_at = Some((index, scanned.after));
                    break;
                }
            }
        }
        examined += step;
        // Full before the step's end: go on right after the task that filled it.
        cursor = match full_at {
            Some((index, after)) if Some(index) != last => Some(after),
            _ => page.next,
        };
        if cursor.is_none() || found.len() >= limit || examined >= MAX_EXAMINED {
            break;
        }
        // Ask for as many as the matches so far say the rest of the page needs; widen
        // while steps find nothing.
        let missing = limit - found.len();
        step = if found.len() == before {
            (step * 4).min(MAX_STEP)
        } else {
            (missing * examined / found.len()).clamp(missing, MAX_STEP)
        };
    }
    Ok(Gathered {
        tasks: found,
        next_cursor: cursor,
    })
}
