//! The wake-up contract: telling the instance that runs a task to look at it again.
//! The stored state is the truth; a wake-up carries nothing but a task id.

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::StoreError;

/// Receives the ids of tasks whose owner must look at them again (answers to forward,
/// a cancel to carry out), or [`WAKE_ALL`].
pub type WakeReceiver = mpsc::UnboundedReceiver<String>;

/// A wake-up for every task the owner runs: sent when wake-ups may have been missed
/// (the receiver started listening, or its channel reconnected), so each runner
/// re-reads the stored state.
pub const WAKE_ALL: &str = "*";

#[async_trait]
pub trait WakeUps: Send + Sync + 'static {
    /// Tells `owner` to look at `task_id` again.
    async fn wake(&self, owner: &str, task_id: &str) -> Result<(), StoreError>;

    /// The wake-ups addressed to `owner`. Called once per instance at start. A
    /// [`WAKE_ALL`] arrives once the receiver listens: a wake-up sent before it may be
    /// lost, none sent after it is.
    fn wakeups(&self, owner: &str) -> WakeReceiver;
}
