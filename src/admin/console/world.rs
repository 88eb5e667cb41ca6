//! One upstream's world as the console sees it: its tasks in the store, and its task
//! service on this instance (readiness, calls in flight, cancel).

use std::sync::Arc;

use crate::admin::Admin;
use crate::tasks::TaskService;
use mtg_store::TaskInspection;

pub struct WorldView {
    /// `""` for the upstream at `/mcp`.
    pub name: String,
    pub inspection: Arc<dyn TaskInspection>,
    pub tasks: Arc<TaskService>,
    /// Cancels as the admin API does.
    pub admin: Admin,
    /// Whether readiness asks the upstream (not `--readyz-skip-upstream`).
    pub ask_upstream: bool,
}

impl WorldView {
    pub fn path(&self) -> String {
        if self.name.is_empty() {
            "/mcp".to_owned()
        } else {
            format!("/mcp/{}", self.name)
        }
    }
}

/// The world `name` picks (`None`: the one at `/mcp`, else the first).
pub(super) fn select<'a>(worlds: &'a [WorldView], name: Option<&str>) -> Option<&'a WorldView> {
    match name {
        Some(name) => worlds.iter().find(|world| world.name == name),
        None => worlds
            .iter()
            .find(|world| world.name.is_empty())
            .or(worlds.first()),
    }
}
