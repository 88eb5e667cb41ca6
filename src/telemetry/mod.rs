//! Logs, traces and metrics.

pub mod metrics;
pub mod traces;

pub use metrics::*;
