//! Telling waiters on every instance that a task changed.

use serde_json::Value;

use crate::tasks::TaskService;
use mtg_store::TaskChange;

impl TaskService {
    /// Tells waiters on every instance that a task changed (a session's GET stream, a
    /// `tasks/result`, a `subscriptions/listen` stream); `session` names the session
    /// client whose task it is, if any.
    pub(in crate::tasks) async fn announce(&self, task_id: &str, session: Option<&str>) {
        self.announce_change(task_id, session, None).await;
    }

    /// The same, with the upstream's progress on the task (only a session client hears
    /// progress: SEP-2663 has none on tasks).
    pub(in crate::tasks) async fn announce_change(
        &self,
        task_id: &str,
        session: Option<&str>,
        progress: Option<Value>,
    ) {
        let change = TaskChange {
            task_id: task_id.to_owned(),
            session: session.map(str::to_owned),
            progress,
        };
        self.announce_built(&change).await;
    }

    /// Announces a change already built (the runner's end, when the store did not send
    /// it with the finish).
    pub(in crate::tasks) async fn announce_built(&self, change: &TaskChange) {
        if let Err(e) = self.changes.announce(change).await {
            tracing::warn!(task_id = %change.task_id, error = %e, "could not announce a task's change");
        }
    }
}
