//! Calls answered otherwise than inline: held for a client's answers, deferred, kept
//! alive with progress, and calls of the gateway's own tools.

use super::Labels;

/// [`super::Meter::calls`].
pub struct CallMetrics<'a>(pub(super) &'a Labels);

impl CallMetrics<'_> {
    /// A bridged call was held for a 2026-07-28 client's answers (MRTR bridge).
    pub fn held(&self) {
        self.0.counter("mtg_held_calls_total").increment(1);
    }

    /// A call outlived `--defer-after-ms` and was answered with a deferred result.
    pub fn deferred(&self) {
        self.0.counter("mtg_deferred_calls_total").increment(1);
    }

    /// A progress keep-alive went to a client (`--progress-keepalive-ms`).
    pub fn progress_keepalive_sent(&self) {
        self.0.counter("mtg_progress_keepalives_total").increment(1);
    }

    /// A call of one of the gateway's own tools (`get_task_result`, `cancel_task`).
    pub fn gateway_tool_called(&self, tool: &'static str) {
        self.0
            .counter_with("mtg_gateway_tool_calls_total", "tool", tool)
            .increment(1);
    }
}
