//! # mtg-store
//!
//! The task state of mcp-task-gateway: every task's record and every change of it, behind
//! one contract that two stores implement. The stored record is the truth. Every
//! transition is a compare-and-set against it, and terminal states are final, so a late
//! upstream answer after a cancel is dropped.
//!
//! ## What it offers
//!
//! [`Store`] is one store seen through its six contracts, as the gateway holds it:
//! - [`TaskStore`] (`task_state.rs`): the task records ([`TaskRecord`], `record.rs`) and
//!   every state transition of them: create, read, list a principal's tasks, input
//!   requests and their answers, messages, finish, cancel, delete;
//! - [`WakeUps`] (`wakeups.rs`): telling the instance that owns a task to look at it again;
//! - [`Changes`] (`changes.rs`): the change feed, announcing that a task changed to
//!   whoever watches it on any instance;
//! - [`MembershipStore`] (`membership.rs`): instance leases, and taking over or failing
//!   the unfinished tasks of instances that are gone;
//! - [`TaskInspection`] (`inspect.rs`): every task and instance, for operators, by scope
//!   or newest first;
//! - [`Outbox`] (`outbox.rs`): task events for webhook subscriptions, written in the same
//!   step as the transition that causes them, until delivered or given up.
//!
//! ## Two implementations
//!
//! - [`memory::MemoryStore`]: one process, nothing shared. The transition rules are the
//!   Rust ones of `record.rs`.
//! - [`redis::RedisStore`]: shared by every instance of a deployment, on one Redis
//!   server, a Redis Cluster or a master behind Sentinel ([`redis::Target`]), over TLS
//!   or not. The key layout is in the module doc of `redis.rs`; `redis/keys.rs` builds
//!   every key and channel name under the deployment's namespace
//!   ([`redis::StoreNamespace`]). Every change of a task is one Lua script of `lua/`
//!   (with `lua/prelude.lua` in front), compiled in by `redis/scripts.rs` and called by
//!   its SHA; a create that no webhook hears is a `MULTI` instead (a script call costs
//!   Redis more than the commands it runs).
//!
//! Both count what they do through the `metrics` facade (`metrics.rs` names the series):
//! no-ops until the gateway installs a recorder.
//!
//! ## Contract tests
//!
//! The contract is written once, as tests in `contract_tests/`, and run against both
//! stores: `memory.rs` and `redis/tests.rs` each call `contract_tests::suite!` with a
//! subject of their own. The Redis tests start their own `redis-server` on a free port
//! (`test_support::RedisServer`), so `cargo nextest run -p mtg-store` needs nothing but
//! `redis-server` on the `PATH`. A rule both stores must keep belongs in the contract;
//! what only one of them has (key TTLs, reconnecting, the terminal cache, the sweep of
//! expired tasks) stays in that store's own tests.
//!
//! ## What it does not know
//!
//! Nothing of the gateway that uses it: no HTTP, no client or upstream connection, no
//! session. Of MCP it knows only what `mtg-protocol` defines (task status, input requests,
//! JSON-RPC errors), kept as data: what a client sees of a record is rendered by the
//! gateway (`tasks::render`). A principal is an opaque string it compares, never checks.

// A store failure is an error value here, never a panic; unit tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod changes;
mod inspect;
mod membership;
pub mod memory;
mod metrics;
pub mod outbox;
mod record;
pub mod redis;
mod task_state;
mod wakeups;

#[cfg(test)]
pub(crate) mod contract_tests;

use std::sync::Arc;

pub(crate) use changes::LocalChanges;
pub use changes::{ChangeReceiver, Changes, TaskChange};
pub use inspect::{
    BadCursor, InspectError, InstanceInfo, Newest, ScanPage, Scanned, Scope, TaskInspection,
};
pub use membership::{GoneInstance, INSTANCE_LOST, INSTANCE_STOPPED, Lease, MembershipStore};
pub use outbox::{
    Attempts, Claimed, EventType, Outbox, OutboxEntry, OutboxPlan, OutboxStats, Route, StoredEvent,
};
pub use record::{Adoption, NewTask, Outcome, Takeover, TaskRecord, input_key};
pub use task_state::{
    CANCELLED_BY_CLIENT, CANCELLED_BY_OPERATOR, CancelOutcome, ListCursor, StoreError, TaskStore,
    Unavailable, UpdateOutcome, finish_with_retry,
};
pub use wakeups::{WAKE_ALL, WakeReceiver, WakeUps};

/// One store seen through its six contracts, as the gateway holds it.
#[derive(Clone)]
pub struct Store {
    pub tasks: Arc<dyn TaskStore>,
    pub wakeups: Arc<dyn WakeUps>,
    pub membership: Arc<dyn MembershipStore>,
    pub changes: Arc<dyn Changes>,
    pub inspection: Arc<dyn TaskInspection>,
    pub outbox: Arc<dyn Outbox>,
}

impl Store {
    pub fn new<S: TaskStore + WakeUps + MembershipStore + Changes + TaskInspection + Outbox>(
        store: Arc<S>,
    ) -> Self {
        Self {
            tasks: store.clone(),
            outbox: store.clone(),
            inspection: store.clone(),
            wakeups: store.clone(),
            changes: store.clone(),
            membership: store,
        }
    }
}

/// Milliseconds since the Unix epoch: the clock of every time in a record (0 before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
