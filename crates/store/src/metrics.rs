//! Store metrics, through the `metrics` facade (no-ops until a recorder is installed).
//!
//! - `mtg_tasks_total{status}`: tasks reaching each status (creation counts as `working`);
//! - `mtg_store_errors_total{backend}`: store operations that failed;
//! - `mtg_store_roundtrip_seconds{op}`: time of one store round trip, by operation;
//! - `mtg_terminal_cache_reads_total{outcome}`: reads of a task by id on Redis with the
//!   terminal cache on, `hit` (answered from memory) or `miss` (read from Redis).

use std::time::Duration;

use mtg_protocol::wire::TaskStatus;

pub(crate) fn task_reached(status: TaskStatus) {
    metrics::counter!("mtg_tasks_total", "status" => status.as_str()).increment(1);
}

pub(crate) fn store_error(backend: &'static str) {
    metrics::counter!("mtg_store_errors_total", "backend" => backend).increment(1);
}

pub(crate) fn roundtrip(op: &'static str, elapsed: Duration) {
    metrics::histogram!("mtg_store_roundtrip_seconds", "op" => op).record(elapsed.as_secs_f64());
}

pub(crate) fn terminal_cache_read(hit: bool) {
    let outcome = if hit { "hit" } else { "miss" };
    metrics::counter!("mtg_terminal_cache_reads_total", "outcome" => outcome).increment(1);
}
