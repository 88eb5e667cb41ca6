//! The membership contract: which gateway instances are alive (leases), and failing
//! the unfinished tasks of an instance that is gone (lost or stopped).

use std::time::Duration;

use async_trait::async_trait;

use super::StoreError;

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
    /// How long the lease holds without renewal.
    pub ttl: Duration,
}

#[async_trait]
pub trait MembershipStore: Send + Sync + 'static {
    /// Renews (or takes) the instance's lease; `Ok(false)` when it had lapsed, in which
    /// case other instances may have failed its tasks.
    async fn renew_lease(&self, lease: &Lease<'_>) -> Result<bool, StoreError>;

    /// Fails the unfinished tasks indexed under `instance` with `message` (-32603).
    /// Used at start for tasks an earlier process with the same instance id left.
    async fn fail_tasks_of(&self, instance: &str, message: &str) -> Result<usize, StoreError>;

    /// Gives the lease up on a graceful stop and fails the instance's unfinished tasks
    /// ([`INSTANCE_STOPPED`]) so every instance reports them at once. Returns how many.
    async fn release_lease(&self, instance: &str) -> Result<usize, StoreError>;

    /// Fails the unfinished tasks ([`INSTANCE_LOST`]) of every other instance whose lease
    /// lapsed. Returns how many tasks were failed.
    async fn fail_tasks_of_lost_owners(&self, me: &str) -> Result<usize, StoreError>;
}
