//! Metrics: names and recording helpers in one place, and the Prometheus endpoint.
//!
//! Each upstream's world has one [`Meter`], which reaches its series by area:
//! [`Meter::requests`] (served requests and failed ones, by party), [`Meter::tasks`],
//! [`Meter::calls`] (held and deferred calls, the gateway's own tools, keep-alives),
//! [`Meter::sessions`], [`Meter::cluster`] (the lease and takeovers) and
//! [`Meter::webhooks`] (deliveries, outbox depth). The listener's
//! and workers' series belong to the process, not to a world (`edge`).

mod calls;
mod cluster;
mod edge;
mod requests;
mod sessions;
mod tasks;
mod webhooks;

use std::sync::Arc;

use metrics::{Label, SharedString, counter, gauge};
use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};

pub use calls::CallMetrics;
pub use cluster::ClusterMetrics;
pub use edge::{accept_failed, connections_open, idle_polls};
pub use requests::RequestMetrics;
pub use sessions::SessionMetrics;
pub use tasks::TaskMetrics;
pub use webhooks::WebhookMetrics;

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

/// The metrics of one upstream's world. A named upstream's series carry its name as the
/// `upstream` label; the upstream at `/mcp` has none, so a gateway without names exports
/// the series it always did.
#[derive(Debug, Clone)]
pub struct Meter {
    labels: Labels,
    /// Each method's request series, found in the registry on its first request.
    requests: Arc<requests::RequestSeries>,
}

tokio::task_local! {
    /// The meter of the task whose runner this is: an upstream's failure is counted deep
    /// in the runner's steps, where nothing else of the service is at hand.
    static RUNNER_METER: Meter;
}

impl Meter {
    pub fn new(upstream: Option<&str>) -> Self {
        Self {
            labels: Labels {
                upstream: upstream.map(|name| SharedString::from(Arc::<str>::from(name))),
            },
            requests: Arc::new(requests::RequestSeries::default()),
        }
    }

    /// Requests served, and requests that did not get the upstream's answer.
    pub fn requests(&self) -> RequestMetrics<'_> {
        RequestMetrics::new(&self.labels, &self.requests)
    }

    /// Tasks created, running, ended or refused, and the input they asked for.
    pub fn tasks(&self) -> TaskMetrics<'_> {
        TaskMetrics(&self.labels)
    }

    /// Calls answered otherwise than inline: held, deferred, kept alive.
    pub fn calls(&self) -> CallMetrics<'_> {
        CallMetrics(&self.labels)
    }

    /// The client sessions the gateway serves itself.
    pub fn sessions(&self) -> SessionMetrics<'_> {
        SessionMetrics(&self.labels)
    }

    /// This instance among others: its lease, the tasks it took over or failed.
    pub fn cluster(&self) -> ClusterMetrics<'_> {
        ClusterMetrics(&self.labels)
    }

    /// Webhook deliveries and outboxes, per subscription.
    pub fn webhooks(&self) -> WebhookMetrics<'_> {
        WebhookMetrics(&self.labels)
    }

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
        let _ = RUNNER_METER.try_with(|meter| meter.requests().failed(metric, kind));
    }
}

/// A world's labels: its upstream's name, if it has one.
#[derive(Debug, Clone)]
struct Labels {
    upstream: Option<SharedString>,
}

impl Labels {
    /// This upstream's label, then `extra`.
    fn with(&self, extra: &[(&'static str, &'static str)]) -> Vec<Label> {
        let own = self
            .upstream
            .iter()
            .map(|name| Label::new("upstream", name.clone()));
        own.chain(extra.iter().map(|(key, value)| Label::new(*key, *value)))
            .collect()
    }

    fn counter(&self, name: &'static str) -> metrics::Counter {
        counter!(name, self.with(&[]))
    }

    fn counter_with(
        &self,
        name: &'static str,
        key: &'static str,
        value: &'static str,
    ) -> metrics::Counter {
        counter!(name, self.with(&[(key, value)]))
    }

    fn gauge(&self, name: &'static str) -> metrics::Gauge {
        gauge!(name, self.with(&[]))
    }
}
