//! Tasks created, running, ended or refused, and the input requests they issued.

use std::time::Duration;

use metrics::histogram;

use super::Labels;

/// [`super::Meter::tasks`].
pub struct TaskMetrics<'a>(pub(super) &'a Labels);

impl TaskMetrics<'_> {
    pub fn created(&self) {
        self.0.counter("mtg_tasks_created_total").increment(1);
    }

    /// A task reached a terminal status after `age` (creation to the end).
    pub fn finished(&self, status: &'static str, age: Duration) {
        self.0
            .counter_with("mtg_tasks_finished_total", "status", status)
            .increment(1);
        histogram!(
            "mtg_task_time_to_terminal_seconds",
            self.0.with(&[("status", status)])
        )
        .record(age.as_secs_f64());
    }

    /// A `tools/call` was refused a task: its caller had as many running as it may.
    pub fn refused_at_limit(&self) {
        self.0
            .counter_with("mtg_tasks_refused_total", "reason", "principal_limit")
            .increment(1);
    }

    pub fn runner_started(&self) {
        self.0.gauge("mtg_tasks_in_flight").increment(1.0);
    }

    pub fn runner_ended(&self) {
        self.0.gauge("mtg_tasks_in_flight").decrement(1.0);
    }

    pub fn input_request_issued(&self) {
        self.0
            .counter("mtg_input_requests_issued_total")
            .increment(1);
    }

    pub fn input_requests_answered(&self, count: usize) {
        self.0
            .counter("mtg_input_requests_answered_total")
            .increment(count as u64);
    }
}
