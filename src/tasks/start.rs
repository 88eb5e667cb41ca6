//! Where a runner starts a task's call: fresh, from a call already open upstream that a
//! held call hands over (`mrtr_bridge`), or where a lost instance left it (`takeover`).

use std::collections::HashMap;

use serde_json::Value;

use super::upstream_mrtr;
use crate::upstream::{Exchange, UpstreamEvent};

/// A call already open upstream that a task takes over: a bridged call held for a
/// 2026-07-28 client's answers (`mrtr_bridge`), or a pass-through client's call past
/// `--defer-after-ms` ([`super::TaskService::start_adopted`]).
pub(super) struct Held {
    pub exchange: Box<dyn Exchange>,
    /// The upstream's requests already shown to the client, by key.
    pub pending: HashMap<String, Value>,
    /// What the upstream sent after them and nobody has read yet.
    pub later: Vec<UpstreamEvent>,
    /// How long the client may take to answer before the call is cancelled; `None`:
    /// as long as the task lives (a deferred pass-through call's client answers later).
    pub input_wait: Option<std::time::Duration>,
}

/// Where a runner starts the task's call.
pub(super) enum Start {
    /// A new task: the call as its client made it, or a call already open (`mrtr_bridge`).
    New(Option<Held>),
    /// A task taken over from an instance that is gone (`takeover`): from the round
    /// it was in on a 2026-07-28 upstream, else from the start.
    TakenOver {
        round: Option<upstream_mrtr::RoundState>,
        expires_at_ms: u64,
    },
}
