//! Task state and the bookkeeping around it, split by concern into three contracts that
//! each store implements:
//! - [`TaskStore`]: the tasks and every change of them (`task_state.rs`);
//! - [`WakeUps`]: telling a task's owner to look at it again (`wakeups.rs`);
//! - [`MembershipStore`]: instance leases, and taking over or failing the tasks of
//!   instances that are gone (`membership.rs`);
//! - [`Changes`]: announcing that a task changed, to whoever watches it on any instance
//!   (`changes.rs`);
//! - [`TaskInspection`]: every task and instance, for operators (`inspect.rs`).
//!
//! The stored record is the truth. Every transition is a compare-and-set against it, and
//! terminal states are final, so a late upstream answer after a cancel is dropped. The
//! store returns records; what a client sees of them is rendered by `tasks::render`.

mod changes;
mod inspect;
mod membership;
pub mod memory;
pub mod metrics;
mod record;
pub mod redis;
mod task_state;
mod wakeups;

#[cfg(test)]
pub(crate) mod contract_tests;

use std::sync::Arc;

pub use changes::{ChangeReceiver, Changes, LocalChanges, TaskChange};
pub use inspect::{
    BadCursor, InspectError, InstanceInfo, ScanPage, Scanned, Scope, TaskInspection,
};
pub use membership::{GoneInstance, INSTANCE_LOST, INSTANCE_STOPPED, Lease, MembershipStore};
pub use record::{Adoption, Outcome, Takeover, TaskRecord, input_key};
pub use task_state::{
    CANCELLED_BY_CLIENT, CANCELLED_BY_OPERATOR, CancelOutcome, ListCursor, StoreError, TaskStore,
    Unavailable, UpdateOutcome, finish_with_retry,
};
pub use wakeups::{WAKE_ALL, WakeReceiver, WakeUps};

/// One store seen through its three contracts, as the rest of the gateway holds it.
#[derive(Clone)]
pub struct Store {
    pub tasks: Arc<dyn TaskStore>,
    pub wakeups: Arc<dyn WakeUps>,
    pub membership: Arc<dyn MembershipStore>,
    pub changes: Arc<dyn Changes>,
    pub inspection: Arc<dyn TaskInspection>,
}

impl Store {
    pub fn new<S: TaskStore + WakeUps + MembershipStore + Changes + TaskInspection>(
        store: Arc<S>,
    ) -> Self {
        Self {
            tasks: store.clone(),
            inspection: store.clone(),
            wakeups: store.clone(),
            changes: store.clone(),
            membership: store,
        }
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
