//! Metrics: names and recording helpers in one place, and the Prometheus endpoint.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Label, SharedString, counter, gauge, histogram};
use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};

/// Installs the Prometheus recorder; the handle renders `/metrics` (served by
/// `crate::admin`, beside the admin API).
pub fn install_metrics() -> Result<PrometheusHandle, BuildError> {
    PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0, 60.0, 300.0,
        ])?
        .install_recorder()
}

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

/// One method label's request series.
#[derive(Debug)]
struct RequestSeries {
    served: metrics::Counter,
    duration: metrics::Histogram,
}

/// The metrics of one upstream's world. A named upstream's series carry its name as the
/// `upstream` label; the upstream at `/mcp` has none, so a gateway without names exports
/// the series it always did.
#[derive(Debug, Clone)]
pub struct Meter {
    upstream: Option<SharedString>,
    /// Each method's request series, found in the registry on its first request: every
    /// request after that records without building its key and looking it up.
    requests: Arc<[OnceLock<RequestSeries>; METHOD_LABELS.len()]>,
}

tokio::task_local! {
    /// The meter of the task whose runner this is: an upstream's failure is counted deep
    /// in the runner's steps, where nothing else of the service is at hand.
    static RUNNER_METER: Meter;
}

impl Meter {
    /// Runs a task's runner with this meter as the one its upstream errors count in.
    /// Not an `async fn`: that would hold `runner` and the scope made of it both.
    pub fn scope_runner<F: std::future::Future>(
        self,
        runner: F,
    ) -> tokio::task::futures::TaskLocalFuture<Meter, F> {
        RUNNER_METER.scope(self, runner)
    }

    /// A failed call of the runner this is called in, in its party's series.
    pub fn runner_failure(metric: &'static str, kind: &'static str) {
        let _ = RUNNER_METER.try_with(|meter| meter.failure(metric, kind));
    }

    pub fn new(upstream: Option<&str>) -> Self {
        Self {
            upstream: upstream.map(|name| SharedString::from(Arc::<str>::from(name))),
            requests: Arc::new(std::array::from_fn(|_| OnceLock::new())),
        }
    }

    /// This upstream's label, then `extra`.
    fn labels(&self, extra: &[(&'static str, &'static str)]) -> Vec<Label> {
        let own = self
            .upstream
            .iter()
            .map(|name| Label::new("upstream", name.clone()));
        own.chain(extra.iter().map(|(key, value)| Label::new(*key, *value)))
            .collect()
    }

    pub fn request_served(&self, method: &str, elapsed: Duration) {
        let label = method_label(method);
        let series = self.requests[label].get_or_init(|| {
            let labels = self.labels(&[("method", METHOD_LABELS[label])]);
            RequestSeries {
                served: counter!("mtg_requests_total", labels.clone()),
                duration: histogram!("mtg_request_duration_seconds", labels),
            }
        });
        series.served.increment(1);
        series.duration.record(elapsed.as_secs_f64());
    }

    fn counter(&self, name: &'static str) -> metrics::Counter {
        counter!(name, self.labels(&[]))
    }

    fn counter_with(
        &self,
        name: &'static str,
        key: &'static str,
        value: &'static str,
    ) -> metrics::Counter {
        counter!(name, self.labels(&[(key, value)]))
    }

    fn gauge(&self, name: &'static str) -> metrics::Gauge {
        gauge!(name, self.labels(&[]))
    }

    /// A bridged call was held for a 2026-07-28 client's answers (MRTR bridge).
    pub fn held_call_started(&self) {
        self.counter("mtg_held_calls_total").increment(1);
    }

    /// A call outlived `--defer-after-ms` and was answered with a deferred result.
    pub fn call_deferred(&self) {
        self.counter("mtg_deferred_calls_total").increment(1);
    }

    /// A progress keep-alive went to a client (`--progress-keepalive-ms`).
    pub fn progress_keepalive_sent(&self) {
        self.counter("mtg_progress_keepalives_total").increment(1);
    }

    /// A call of one of the gateway's own tools (`get_task_result`, `cancel_task`).
    pub fn gateway_tool_called(&self, tool: &'static str) {
        self.counter_with("mtg_gateway_tool_calls_total", "tool", tool)
            .increment(1);
    }

    pub fn task_created(&self) {
        self.counter("mtg_tasks_created_total").increment(1);
    }

    /// A task reached a terminal status after `age` (creation to the end).
    pub fn task_finished(&self, status: &'static str, age: Duration) {
        self.counter_with("mtg_tasks_finished_total", "status", status)
            .increment(1);
        histogram!(
            "mtg_task_time_to_terminal_seconds",
            self.labels(&[("status", status)])
        )
        .record(age.as_secs_f64());
    }

    /// A `tools/call` was refused a task: its caller had as many running as it may.
    pub fn task_refused_at_limit(&self) {
        self.counter_with("mtg_tasks_refused_total", "reason", "principal_limit")
            .increment(1);
    }

    pub fn task_runner_started(&self) {
        self.gauge("mtg_tasks_in_flight").increment(1.0);
    }

    pub fn task_runner_ended(&self) {
        self.gauge("mtg_tasks_in_flight").decrement(1.0);
    }

    pub fn input_request_issued(&self) {
        self.counter("mtg_input_requests_issued_total").increment(1);
    }

    pub fn input_requests_answered(&self, count: usize) {
        self.counter("mtg_input_requests_answered_total")
            .increment(count as u64);
    }

    /// A request that did not get the upstream's answer, counted in its party's
    /// series (`mtg_transport::Party::metric`) under `kind`.
    pub fn failure(&self, metric: &'static str, kind: &'static str) {
        self.counter_with(metric, "kind", kind).increment(1);
    }

    /// A client session the gateway serves itself was opened (`initialize`).
    pub fn session_opened(&self) {
        self.counter("mtg_sessions_opened_total").increment(1);
        self.gauge("mtg_sessions_open").increment(1.0);
    }

    /// A gateway-served session ended: `deleted` by its client or `expired` idle.
    pub fn session_ended(&self, reason: &'static str) {
        self.counter_with("mtg_sessions_ended_total", "reason", reason)
            .increment(1);
        self.gauge("mtg_sessions_open").decrement(1.0);
    }

    /// An `initialize` was refused: the session table was full of sessions in use.
    pub fn session_refused(&self) {
        self.counter("mtg_sessions_refused_total").increment(1);
    }

    /// Tasks failed because the instance running them disappeared (its lease lapsed)
    /// and their call could not run again, or had been taken over too often (`reason`:
    /// `not_resumable`, `max_takeovers`).
    pub fn lost_owner_tasks_failed(&self, reason: &'static str, count: usize) {
        self.counter_with("mtg_lost_owner_tasks_failed_total", "reason", reason)
            .increment(count as u64);
    }

    /// Tasks this instance took over from a gone one (`reason`: `lost`, its lease
    /// lapsed; `stopped`, it handed them over at shutdown).
    pub fn tasks_taken_over(&self, reason: &'static str, count: usize) {
        self.counter_with("mtg_tasks_taken_over_total", "reason", reason)
            .increment(count as u64);
    }

    /// A task that was taken over ended (`status`: completed, failed, cancelled).
    pub fn taken_over_task_finished(&self, status: &'static str) {
        self.counter_with("mtg_taken_over_tasks_finished_total", "status", status)
            .increment(1);
    }

    /// Whether this instance's last lease renewal for this upstream's namespace reached
    /// the store (1) or not (0): with Redis, 0 means every instance may soon take this
    /// one for lost.
    pub fn lease_held(&self, renewed: bool) {
        self.gauge("mtg_lease_held")
            .set(if renewed { 1.0 } else { 0.0 });
    }
}

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
