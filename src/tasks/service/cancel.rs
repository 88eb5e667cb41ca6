//! Cancelling tasks: by their client, by an operator, or by the gateway itself.

use crate::tasks::{TaskService, not_found};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_store::{CANCELLED_BY_CLIENT, CANCELLED_BY_OPERATOR, CancelOutcome, TaskRecord};

impl TaskService {
    pub async fn cancel(&self, task_id: &str, principal: &str) -> Result<(), ErrorObject> {
        match self
            .cancel_as(task_id, principal, CANCELLED_BY_CLIENT, None)
            .await?
        {
            CancelOutcome::NotFound => Err(not_found(task_id)),
            CancelOutcome::AlreadyTerminal | CancelOutcome::Cancelled { .. } => Ok(()),
        }
    }

    /// An operator's cancel (admin API): the same as the client's, under the task's own
    /// principal, with a statusMessage that says who did it.
    pub async fn cancel_as_operator(
        &self,
        task: &TaskRecord,
    ) -> Result<CancelOutcome, ErrorObject> {
        self.cancel_as(&task.task_id, &task.principal, CANCELLED_BY_OPERATOR, None)
            .await
    }

    /// Cancels in the store, wakes the owner (which stops the upstream call) and tells
    /// whoever waits on the task; `session` names the session client whose task it is.
    pub(in crate::tasks) async fn cancel_as(
        &self,
        task_id: &str,
        principal: &str,
        message: &str,
        session: Option<&str>,
    ) -> Result<CancelOutcome, ErrorObject> {
        let outcome = self.store.cancel(task_id, principal, message).await?;
        if let CancelOutcome::Cancelled { owner } = &outcome {
            tracing::info!(task_id, message, "task cancelled");
            self.wakeups.wake(owner, task_id).await?;
            self.announce(task_id, session).await;
        }
        Ok(outcome)
    }
}
