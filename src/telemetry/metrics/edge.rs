//! The listener's and worker threads' series: the process's, without an `upstream`
//! label.

use std::time::Duration;

use metrics::{counter, gauge};

/// `accept` failed for want of descriptors or memory (the listener pauses).
pub fn accept_failed() {
    counter!("mtg_accept_errors_total").increment(1);
}

/// The gauge of client connections open on worker thread `worker`, at 0 until the
/// first one, so that every worker has its series from the start.
pub fn connections_open(worker: usize) -> metrics::Gauge {
    let open = gauge!("mtg_http_connections_open", "worker" => worker.to_string());
    open.set(0.0);
    open
}

/// What workers' polling before sleep did (`--idle-poll-us`): parks by outcome, and the
/// time spent polling, which is CPU spent to save wake-ups.
pub fn idle_polls(caught: u64, missed: u64, pressed: u64, polled: Duration) {
    for (outcome, count) in [
        ("caught", caught),
        ("missed", missed),
        ("pressure", pressed),
    ] {
        counter!("mtg_idle_polls_total", "outcome" => outcome).increment(count);
    }
    counter!("mtg_idle_poll_microseconds_total").increment(polled.as_micros() as u64);
}
