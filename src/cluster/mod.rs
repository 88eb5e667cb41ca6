//! Instances of one deployment: this instance's lease, and the sweep that finds the
//! instances that are gone and has their tasks taken over or failed (`Sweeper`, the task
//! service's part).
//!
//! Timing, for a lease timeout `T`: the lease is renewed every `T/4` and holds for
//! `3T/4`, so an instance that stops renewing loses it within `3T/4` (two renewals may
//! fail before that). Every instance sweeps every `T/4`, so the tasks of a lost owner
//! are taken over or failed within `T` of its last renewal.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::telemetry;
use mtg_store::{GoneInstance, Lease, MembershipStore, StoreError};

/// What becomes of a gone instance's tasks: decided per task by the task service, which
/// knows which calls can run again.
#[async_trait]
pub(crate) trait Sweeper: Send + Sync + 'static {
    /// Takes over or fails the unfinished tasks of `gone`.
    async fn sweep(self: Arc<Self>, gone: GoneInstance) -> Result<SweepCounts, StoreError>;

    /// This instance's lease had lapsed and is ours again: others may have taken over
    /// its tasks meanwhile.
    async fn lease_regained(self: Arc<Self>);

    /// One step of dropping, from this instance's own index, ids of tasks it no longer
    /// runs and that are gone: the index's count is what operators see as its running
    /// tasks.
    async fn tidy_own_index(self: Arc<Self>);
}

/// What one sweep of one gone instance did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SweepCounts {
    pub taken_over: usize,
    pub failed: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct ClusterSettings {
    pub instance_id: String,
    /// How other instances reach this one; kept in the lease for forwarding.
    pub advertise_url: Option<String>,
    /// Longest time from an instance's disappearance to its tasks being failed.
    pub lease_timeout: Duration,
    /// The metrics of the upstream whose namespace the lease is in.
    pub meter: telemetry::Meter,
}

impl ClusterSettings {
    fn tick(&self) -> Duration {
        (self.lease_timeout / 4).max(Duration::from_millis(25))
    }

    fn lease_ttl(&self) -> Duration {
        self.lease_timeout * 3 / 4
    }
}

/// This instance's membership; ends with [`Membership::shutdown`].
pub(crate) struct Membership {
    store: Arc<dyn MembershipStore>,
    settings: ClusterSettings,
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl Membership {
    /// Takes the lease (or keeps trying in the background) and starts renewing and
    /// sweeping.
    pub(crate) async fn start(
        store: Arc<dyn MembershipStore>,
        sweeper: Arc<dyn Sweeper>,
        settings: ClusterSettings,
    ) -> Self {
        // Tasks still indexed under this id belong to an earlier process with the same
        // id (e.g. a restarted pod that keeps its name): nobody runs them any more. This
        // runs before the first request is served, so none of them is ours yet.
        let earlier = GoneInstance {
            instance: settings.instance_id.clone(),
            handed_over: false,
        };
        match sweeper.clone().sweep(earlier).await {
            Ok(counts) if counts == SweepCounts::default() => {}
            Ok(counts) => tracing::warn!(
                taken_over = counts.taken_over,
                failed = counts.failed,
                "found tasks an earlier process with this instance id left running"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "task store not reachable at start; will keep trying")
            }
        }
        let (stop, stopped) = watch::channel(false);
        let handle = tokio::spawn(run(store.clone(), sweeper, settings.clone(), stopped));
        Self {
            store,
            settings,
            stop,
            handle,
        }
    }

    /// Stops renewing and gives the lease up. With `hand_over`, the tasks left here wait
    /// for live instances to take them over; otherwise the ones still running are failed
    /// at once, so other instances report them without waiting for the lease to lapse.
    pub(crate) async fn shutdown(self, hand_over: bool) {
        let _ = self.stop.send(true);
        let _ = self.handle.await;
        let released = self
            .store
            .release_lease(&self.settings.instance_id, hand_over)
            .await;
        match released {
            Ok(_) if hand_over => {
                tracing::info!("lease released; live instances take over the tasks left here")
            }
            Ok(0) => {}
            Ok(n) => tracing::info!(tasks = n, "failed the tasks still running at shutdown"),
            Err(e) => {
                tracing::warn!(error = %e, "could not release the lease; other instances will sweep this one's tasks")
            }
        }
    }
}

async fn run(
    store: Arc<dyn MembershipStore>,
    sweeper: Arc<dyn Sweeper>,
    settings: ClusterSettings,
    mut stopped: watch::Receiver<bool>,
) {
    let lease = Lease {
        instance: &settings.instance_id,
        advertise_url: settings.advertise_url.as_deref(),
        ttl: settings.lease_ttl(),
    };
    let mut tick = tokio::time::interval(settings.tick());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Since when renewals have succeeded without a break. After an outage the other
    // instances need one lease period to renew too; sweeping before that would take
    // them for lost.
    let mut connected_since: Option<Instant> = None;
    let mut first = true;
    // Sweeps (and the clean-up after a lapsed lease) run beside the renewals: a sweep of
    // thousands of tasks takes a second or more, and a renewal waiting behind it would
    // let this instance's own lease lapse. One at a time.
    let mut background: Option<JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.changed() => {
                // A sweep under way finishes: the tasks it moved get their runners.
                if let Some(running) = background.take() {
                    let _ = running.await;
                }
                return;
            }
        }
        let idle = background.as_ref().is_none_or(JoinHandle::is_finished);
        match store.renew_lease(&lease).await {
            Ok(still_ours) => {
                settings.meter.cluster().lease_held(true);
                if connected_since.is_none() && !first {
                    tracing::info!("task store reachable again; lease renewed");
                }
                if !still_ours && !first {
                    tracing::warn!(
                        "this instance's lease had lapsed; other instances may have taken over or failed its tasks"
                    );
                    if let Some(running) = background.take() {
                        let _ = running.await;
                    }
                    background = Some(tokio::spawn(sweeper.clone().lease_regained()));
                }
                connected_since.get_or_insert_with(Instant::now);
            }
            Err(e) => {
                settings.meter.cluster().lease_held(false);
                if connected_since.is_some() || first {
                    tracing::warn!(error = %e, "could not renew the lease");
                }
                connected_since = None;
            }
        }
        first = false;
        if idle && connected_since.is_some_and(|since| since.elapsed() >= lease.ttl) {
            let (store, sweeper) = (store.clone(), sweeper.clone());
            let me = settings.instance_id.clone();
            background = Some(tokio::spawn(async move {
                sweep(&*store, &sweeper, &me).await;
                sweeper.tidy_own_index().await;
            }));
        }
    }
}

/// Takes over or fails the tasks of every instance that is gone.
async fn sweep(store: &dyn MembershipStore, sweeper: &Arc<dyn Sweeper>, me: &str) {
    let gone = match store.gone_instances(me).await {
        Ok(gone) => gone,
        Err(e) => {
            tracing::debug!(error = %e, "sweep for gone instances failed");
            return;
        }
    };
    for gone in gone {
        let instance = gone.instance.clone();
        if let Err(e) = sweeper.clone().sweep(gone).await {
            tracing::debug!(instance, error = %e, "sweep of a gone instance failed");
            continue;
        }
        if let Err(e) = store.forget_if_gone(&instance).await {
            tracing::debug!(instance, error = %e, "could not forget a gone instance");
        }
    }
}
