//! A limit on the tasks one caller has running on this instance, so that one caller
//! cannot take the gateway's memory (about 20 KB per running task) or the upstream's
//! capacity for itself.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::json;

use mtg_protocol::jsonrpc::{ErrorObject, code};

type Running = Arc<Mutex<HashMap<String, u32>>>;

/// The running tasks of each principal on this instance, counted across every upstream
/// (`/mcp/NAME`): the limit is the gateway's, not each path's.
#[derive(Debug, Clone, Default)]
pub struct RunningCounts(Running);

/// Running tasks per principal, when a limit is set.
pub struct RunningLimit {
    limit: Option<NonZeroU32>,
    running: Running,
    /// Counts the refusals.
    meter: crate::telemetry::Meter,
}

/// One running task counted against its principal until dropped (when its runner ends).
pub struct RunningSlot {
    running: Running,
    principal: String,
}

impl RunningLimit {
    /// `limit` 0 means none: nothing is counted. `counts` may be shared with other
    /// upstreams' limits.
    pub fn new(limit: u32, counts: RunningCounts, meter: crate::telemetry::Meter) -> Self {
        Self {
            limit: NonZeroU32::new(limit),
            running: counts.0,
            meter,
        }
    }

    /// Counts one more running task of `principal`, or says why it may not start.
    pub fn reserve(&self, principal: &str) -> Result<Option<RunningSlot>, ErrorObject> {
        let Some(limit) = self.limit else {
            return Ok(None);
        };
        let mut running = lock(&self.running);
        let count = running.entry(principal.to_owned()).or_default();
        if *count >= limit.get() {
            self.meter.tasks().refused_at_limit();
            return Err(ErrorObject::new(
                code::TOO_MANY_RUNNING_TASKS,
                format!(
                    "this caller already has {count} tasks running on this gateway, the most it may; \
                     wait for one to finish or cancel one (tasks/cancel), then call again"
                ),
            )
            .with_data(json!({"limit": limit.get(), "running": *count})));
        }
        *count += 1;
        Ok(Some(RunningSlot {
            running: self.running.clone(),
            principal: principal.to_owned(),
        }))
    }
}

impl Drop for RunningSlot {
    fn drop(&mut self) {
        let mut running = lock(&self.running);
        if let Some(count) = running.get_mut(&self.principal) {
            *count -= 1;
            // Callers come and go; the map keeps only those with tasks running.
            if *count == 0 {
                running.remove(&self.principal);
            }
        }
    }
}

fn lock(running: &Running) -> MutexGuard<'_, HashMap<String, u32>> {
    // Counts only; a panic elsewhere cannot leave one half-written.
    running.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_gets_its_own_count_up_to_the_limit_and_slots_free_on_drop() {
        let limit = RunningLimit::new(
            2,
            RunningCounts::default(),
            crate::telemetry::Meter::new(None),
        );
        let a1 = limit.reserve("a").unwrap();
        let _a2 = limit.reserve("a").unwrap();
        let refused = limit.reserve("a").err().unwrap();
        assert_eq!(refused.code, code::TOO_MANY_RUNNING_TASKS);
        assert_eq!(refused.data, Some(json!({"limit": 2, "running": 2})));
        assert!(
            limit.reserve("b").unwrap().is_some(),
            "another caller is not limited"
        );
        drop(a1);
        assert!(limit.reserve("a").unwrap().is_some());
    }

    #[test]
    fn without_a_limit_nothing_is_counted() {
        let limit = RunningLimit::new(
            0,
            RunningCounts::default(),
            crate::telemetry::Meter::new(None),
        );
        assert!(limit.reserve("a").unwrap().is_none());
        assert!(lock(&limit.running).is_empty());
    }

    #[test]
    fn a_principal_with_nothing_running_is_forgotten() {
        let limit = RunningLimit::new(
            1,
            RunningCounts::default(),
            crate::telemetry::Meter::new(None),
        );
        drop(limit.reserve("a").unwrap());
        assert!(lock(&limit.running).is_empty());
    }
}
