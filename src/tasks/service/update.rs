//! `tasks/update`: a client's answers to a task's input requests.

use serde_json::{Map, Value};

use crate::tasks::{TaskService, not_found};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_store::UpdateOutcome;

impl TaskService {
    pub async fn update(
        &self,
        task_id: &str,
        principal: &str,
        responses: Map<String, Value>,
    ) -> Result<(), ErrorObject> {
        match self
            .store
            .accept_input_responses(task_id, principal, responses)
            .await?
        {
            UpdateOutcome::NotFound => Err(not_found(task_id)),
            UpdateOutcome::Accepted { keys, owner } => {
                if !keys.is_empty() {
                    self.settings
                        .meter
                        .tasks()
                        .input_requests_answered(keys.len());
                    tracing::debug!(task_id, ?keys, "accepted input responses");
                    self.wakeups.wake(&owner, task_id).await?;
                    self.announce(task_id, None).await;
                }
                Ok(())
            }
        }
    }
}
