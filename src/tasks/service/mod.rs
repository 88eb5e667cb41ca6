//! [`TaskService`]'s verbs, one group a file: `create` (a `tools/call` becomes a task,
//! or a held or adopted call does), `launch` (its runner), `inline` (the answer within
//! the promotion budget), `read`, `update` (a client's answers), `cancel` and
//! `announce` (telling waiters on every instance), `in_flight` (what runs here, for the
//! operator's console). Here: starting the service.

mod announce;
mod cancel;
mod create;
mod in_flight;
mod inline;
mod launch;
mod read;
mod update;

use std::sync::Arc;

pub use create::Reservation;
pub use in_flight::{InFlight, Readiness};
pub(in crate::tasks) use launch::ToStore;

use super::{TaskService, TaskSettings, change_feed, limits, runners, tool_traits, waiters};
use crate::telemetry;
use crate::upstream::Upstream;
use mtg_store::Store;

impl TaskService {
    /// This upstream's metrics.
    pub fn meter(&self) -> &telemetry::Meter {
        &self.settings.meter
    }

    pub fn start(store: &Store, upstream: Arc<dyn Upstream>, settings: TaskSettings) -> Arc<Self> {
        let mut wakeups = store.wakeups.wakeups(&settings.instance_id);
        let running_limit = limits::RunningLimit::new(
            settings.max_running_per_principal,
            settings.running_counts.clone(),
            settings.meter.clone(),
        );
        let service = Arc::new(Self {
            store: store.tasks.clone(),
            membership: store.membership.clone(),
            wakeups: store.wakeups.clone(),
            changes: store.changes.clone(),
            waiters: waiters::Waiters::default(),
            upstream,
            settings,
            runners: runners::Runners::default(),
            running_limit,
            tool_traits: tool_traits::ToolTraits::default(),
        });
        let weak = Arc::downgrade(&service);
        tokio::spawn(async move {
            while let Some(task_id) = wakeups.recv().await {
                let Some(service) = weak.upgrade() else {
                    return;
                };
                service.runners.wake(&task_id);
            }
        });
        change_feed::spawn(&service, store.changes.clone());
        service
    }
}
