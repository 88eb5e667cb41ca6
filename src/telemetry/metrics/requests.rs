//! Requests served, by JSON-RPC method, and requests that did not get the upstream's
//! answer, by the party to blame.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, histogram};

use super::Labels;

/// Methods get their own label; anything else is `other`, so clients cannot grow the
/// number of series without bound.
const METHOD_LABELS: [&str; 20] = [
    "server/discover",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "subscriptions/listen",
    "ping",
    "initialize",
    "logging/setLevel",
    "notification",
    "legacy_passthrough",
    "invalid",
    "other",
];

/// The index of `method`'s label in [`METHOD_LABELS`].
fn method_label(method: &str) -> usize {
    METHOD_LABELS
        .iter()
        .position(|m| *m == method)
        .unwrap_or(METHOD_LABELS.len() - 1)
}

/// Each method label's series, found in the registry on its first request: every
/// request after that records without building its key and looking it up.
#[derive(Debug)]
pub(super) struct RequestSeries([OnceLock<MethodSeries>; METHOD_LABELS.len()]);

impl Default for RequestSeries {
    fn default() -> Self {
        Self(std::array::from_fn(|_| OnceLock::new()))
    }
}

/// One method label's request series.
#[derive(Debug)]
struct MethodSeries {
    served: metrics::Counter,
    duration: metrics::Histogram,
}

/// [`super::Meter::requests`].
pub struct RequestMetrics<'a> {
    labels: &'a Labels,
    series: &'a RequestSeries,
}

impl<'a> RequestMetrics<'a> {
    pub(super) fn new(labels: &'a Labels, series: &'a RequestSeries) -> Self {
        Self { labels, series }
    }

    pub fn served(&self, method: &str, elapsed: Duration) {
        let label = method_label(method);
        let series = self.series.0[label].get_or_init(|| {
            let labels = self.labels.with(&[("method", METHOD_LABELS[label])]);
            MethodSeries {
                served: counter!("mtg_requests_total", labels.clone()),
                duration: histogram!("mtg_request_duration_seconds", labels),
            }
        });
        series.served.increment(1);
        series.duration.record(elapsed.as_secs_f64());
    }

    /// A request that did not get the upstream's answer, counted in its party's
    /// series (`mtg_transport::Party::metric`) under `kind`.
    pub fn failed(&self, metric: &'static str, kind: &'static str) {
        self.labels.counter_with(metric, "kind", kind).increment(1);
    }
}
