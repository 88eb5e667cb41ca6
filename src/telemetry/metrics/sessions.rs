//! The 2025-xx client sessions the gateway serves itself.

use super::Labels;

/// [`super::Meter::sessions`].
pub struct SessionMetrics<'a>(pub(super) &'a Labels);

impl SessionMetrics<'_> {
    /// A client session the gateway serves itself was opened (`initialize`).
    pub fn opened(&self) {
        self.0.counter("mtg_sessions_opened_total").increment(1);
        self.0.gauge("mtg_sessions_open").increment(1.0);
    }

    /// A gateway-served session ended: `deleted` by its client or `expired` idle.
    pub fn ended(&self, reason: &'static str) {
        self.0
            .counter_with("mtg_sessions_ended_total", "reason", reason)
            .increment(1);
        self.0.gauge("mtg_sessions_open").decrement(1.0);
    }

    /// An `initialize` was refused: the session table was full of sessions in use.
    pub fn refused(&self) {
        self.0.counter("mtg_sessions_refused_total").increment(1);
    }
}
