//! The membership contract: which gateway instances are alive (leases), and what
//! happens to the unfinished tasks of an instance that is gone (lost or stopped): a
//! live instance takes them over where their call can run again, or fails them.

use std::time::Duration;

use async_trait::async_trait;

use super::{Adoption, StoreError, Takeover, TaskRecord};

/// statusMessage of the tasks of an owner whose lease lapsed (crash, kill -9, partition).
pub const INSTANCE_LOST: &str = "gateway instance lost";
/// statusMessage of the tasks still running on an owner that shut down gracefully.
pub const INSTANCE_STOPPED: &str = "gateway instance stopped";

/// What a live instance publishes about itself.
#[derive(Debug, Clone)]
pub struct Lease<'a> {
    pub instance: &'a str,
    /// Where other instances can reach this one (for forwarding), if configured.
    pub advertise_url: Option<&'a str>,
    /// How long the lease lasts without renewal.
    pub ttl: Duration,
}

/// An instance without a lease whose tasks are up for takeover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoneInstance {
    pub instance: String,
    /// It handed its tasks over when it stopped, rather than being lost.
    pub handed_over: bool,
}

#[async_trait]
pub trait MembershipStore: Send + Sync + 'static {
    /// Renews (or takes) the instance's lease; `Ok(false)` when it had lapsed, in which
    /// case other instances may have taken over or failed its tasks.
    async fn renew_lease(&self, lease: &Lease<'_>) -> Result<bool, StoreError>;

    /// Gives the lease up on a graceful stop. With `hand_over`, the instance's
    /// unfinished tasks stay indexed under it, marked as handed over, for live instances
    /// to take over at their next sweep; otherwise they are failed
    /// ([`INSTANCE_STOPPED`]) so every instance reports them at once. Returns how many
    /// were failed.
    async fn release_lease(&self, instance: &str, hand_over: bool) -> Result<usize, StoreError>;

    /// Every other instance whose lease is gone while tasks may still be indexed
    /// under it.
    async fn gone_instances(&self, me: &str) -> Result<Vec<GoneInstance>, StoreError>;

    /// The live, unfinished tasks indexed under `instance`. Ids whose task has ended,
    /// expired or moved are dropped from the index on the way.
    async fn orphans(&self, instance: &str) -> Result<Vec<TaskRecord>, StoreError>;

    /// Takes over `task_ids` (orphans of `takeover.from`) for `takeover.to`, each one
    /// atomically; what happened to each, in order.
    async fn take_over(
        &self,
        task_ids: &[String],
        takeover: &Takeover<'_>,
    ) -> Result<Vec<Adoption>, StoreError>;

    /// Fails `task_ids` (orphans of `instance`) with `message` where `instance` still
    /// owns them; returns how many it failed.
    async fn fail_orphans(
        &self,
        instance: &str,
        task_ids: &[String],
        message: &str,
    ) -> Result<usize, StoreError>;

    /// Forgets a gone instance once nothing is indexed under it any more.
    async fn forget_if_gone(&self, instance: &str) -> Result<(), StoreError>;

    /// One step through this instance's own index of running tasks from `cursor`,
    /// dropping ids that `running` does not claim and whose task is gone (a runner's
    /// own clean-up that failed). Returns the next cursor, 0 when a pass ended, and how
    /// many ids were dropped. Where the store keeps no such index (memory), nothing.
    async fn tidy_own_index(
        &self,
        _cursor: u64,
        _running: &(dyn for<'r> Fn(&'r str) -> bool + Sync),
    ) -> Result<(u64, usize), StoreError> {
        Ok((0, 0))
    }
}
