//! Where a runner starts a task's call: fresh, from a call already open upstream that it
//! adopts (an MRTR held call, `mrtr_bridge`; a deferred pass-through call), or where a
//! lost instance left it (`takeover`).

use std::collections::HashMap;

use serde_json::Value;

use super::upstream_mrtr;
use crate::upstream::{Exchange, UpstreamEvent};

/// An adopted call: one already open upstream that a task's runner carries on, rather
/// than open its own: a bridged call held for a 2026-07-28 client's answers (a held
/// call, `mrtr_bridge`), or a pass-through client's call past `--defer-after-ms`
/// ([`super::TaskService::start_adopted`]).
pub(super) struct Adopted {
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
    /// A new task: the call as its client made it, or an adopted call.
    New(Option<Adopted>),
    /// A task taken over from an instance that is gone (`takeover`): from the round
    /// it was in on a 2026-07-28 upstream, else from the start.
    TakenOver {
        round: Option<upstream_mrtr::RoundState>,
        expires_at_ms: u64,
    },
}
