//! Instances of one deployment: this instance's lease, and the sweep that fails the
//! tasks of instances that are gone.
//!
//! Timing, for a lease timeout `T`: the lease is renewed every `T/4` and holds for
//! `3T/4`, so an instance that stops renewing loses it within `3T/4` (two renewals may
//! fail before that). Every instance sweeps every `T/4`, so the tasks of a lost owner
//! are failed within `T` of its last renewal.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::store::{Changes, INSTANCE_LOST, Lease, MembershipStore, TaskChange};
use crate::telemetry;

#[derive(Debug, Clone)]
pub struct ClusterSettings {
    pub instance_id: String,
    /// How other instances reach this one; kept in the lease for forwarding.
    pub advertise_url: Option<String>,
    /// Longest time from an instance's disappearance to its tasks being failed.
    pub lease_timeout: Duration,
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
pub struct Membership {
    store: Arc<dyn MembershipStore>,
    settings: ClusterSettings,
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl Membership {
    /// Takes the lease (or keeps trying in the background) and starts renewing and
    /// sweeping.
    pub async fn start(
        store: Arc<dyn MembershipStore>,
        changes: Arc<dyn Changes>,
        settings: ClusterSettings,
    ) -> Self {
        // Tasks still indexed under this id belong to an earlier process with the same
        // id (e.g. a restarted pod that keeps its name): nobody runs them any more.
        // This runs before the first request is served, so none of them is ours.
        match store
            .fail_tasks_of(&settings.instance_id, INSTANCE_LOST)
            .await
        {
            Ok(0) => {}
            Ok(n) => {
                telemetry::lost_owner_tasks_failed(n);
                tracing::warn!(
                    tasks = n,
                    "failed the tasks an earlier process with this instance id left running"
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "task store not reachable at start; will keep trying")
            }
        }
        let (stop, stopped) = watch::channel(false);
        let handle = tokio::spawn(run(store.clone(), changes, settings.clone(), stopped));
        Self {
            store,
            settings,
            stop,
            handle,
        }
    }

    /// Stops renewing and gives the lease up: the tasks still running here are failed at
    /// once, so other instances report them without waiting for the lease to lapse.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.handle.await;
        match self.store.release_lease(&self.settings.instance_id).await {
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
    changes: Arc<dyn Changes>,
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
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.changed() => return,
        }
        match store.renew_lease(&lease).await {
            Ok(held) => {
                telemetry::lease_held(true);
                if connected_since.is_none() && !first {
                    tracing::info!("task store reachable again; lease renewed");
                }
                if !held && !first {
                    tracing::warn!(
                        "this instance's lease had lapsed; other instances may have failed its tasks"
                    );
                }
                connected_since.get_or_insert_with(Instant::now);
            }
            Err(e) => {
                telemetry::lease_held(false);
                if connected_since.is_some() || first {
                    tracing::warn!(error = %e, "could not renew the lease");
                }
                connected_since = None;
            }
        }
        first = false;
        if connected_since.is_some_and(|since| since.elapsed() >= lease.ttl) {
            match store.fail_tasks_of_lost_owners(&settings.instance_id).await {
                Ok(0) => {}
                Ok(failed) => {
                    telemetry::lost_owner_tasks_failed(failed);
                    // The sweep knows counts, not ids: whoever watches a task looks again.
                    if let Err(e) = changes.announce(&TaskChange::everything()).await {
                        tracing::debug!(error = %e, "could not announce the failed tasks");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "sweep for lost instances failed"),
            }
        }
    }
}
