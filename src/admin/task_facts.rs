//! What the admin API and the console read off a stored task, the same way for both.

use serde_json::value::RawValue;

use super::wire::OwnerLease;
use mtg_store::{InstanceInfo, TaskRecord};

/// The tool of the task's `tools/call` (its stored params).
pub(crate) fn tool_of(task: &TaskRecord) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        name: Option<String>,
    }
    let request: &RawValue = &task.request;
    serde_json::from_str::<Named>(request.get())
        .ok()
        .and_then(|named| named.name)
}

/// Whether the task's owner still holds its lease, among the store's `instances`.
pub(crate) fn owner_lease(task: &TaskRecord, instances: &[InstanceInfo]) -> OwnerLease {
    match instances.iter().find(|i| i.instance == task.owner) {
        Some(InstanceInfo {
            lease_expires_in_ms: Some(_),
            ..
        }) => OwnerLease::Live,
        Some(_) => OwnerLease::Lapsed,
        None => OwnerLease::None,
    }
}
