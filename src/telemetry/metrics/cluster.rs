//! This instance among others sharing a store: its lease, and the tasks of gone
//! instances it took over or failed.

use super::Labels;

/// [`super::Meter::cluster`].
pub struct ClusterMetrics<'a>(pub(super) &'a Labels);

impl ClusterMetrics<'_> {
    /// Whether this instance's last lease renewal for this upstream's namespace reached
    /// the store (1) or not (0): with Redis, 0 means every instance may soon take this
    /// one for lost.
    pub fn lease_held(&self, renewed: bool) {
        self.0
            .gauge("mtg_lease_held")
            .set(if renewed { 1.0 } else { 0.0 });
    }

    /// Tasks failed because the instance running them disappeared (its lease lapsed)
    /// and their call could not run again, or had been taken over too often (`reason`:
    /// `not_resumable`, `max_takeovers`).
    pub fn lost_owner_tasks_failed(&self, reason: &'static str, count: usize) {
        self.0
            .counter_with("mtg_lost_owner_tasks_failed_total", "reason", reason)
            .increment(count as u64);
    }

    /// Tasks this instance took over from a gone one (`reason`: `lost`, its lease
    /// lapsed; `stopped`, it handed them over at shutdown).
    pub fn tasks_taken_over(&self, reason: &'static str, count: usize) {
        self.0
            .counter_with("mtg_tasks_taken_over_total", "reason", reason)
            .increment(count as u64);
    }

    /// A task that was taken over ended (`status`: completed, failed, cancelled).
    pub fn taken_over_task_finished(&self, status: &'static str) {
        self.0
            .counter_with("mtg_taken_over_tasks_finished_total", "status", status)
            .increment(1);
    }
}
