//! The answer within the promotion budget: a call that ends (or asks for input) in time
//! is answered inline and its task dropped; a caller that hangs up meanwhile cancels it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use crate::tasks::{TaskService, mrtr_bridge};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::TaskStatus;
use mtg_store::CancelOutcome;

impl TaskService {
    /// Waits up to the promotion budget for the call to finish or to ask for input;
    /// either is the caller's answer, and the task is dropped.
    pub(super) async fn within_budget(
        &self,
        task_id: &str,
        principal: &str,
        budget: Duration,
        done: oneshot::Receiver<()>,
        early_input: Option<oneshot::Receiver<Value>>,
    ) -> Option<Result<Box<RawValue>, ErrorObject>> {
        let Some(mut early_input) = early_input else {
            return match tokio::time::timeout(budget, done).await {
                Ok(_) => self.take_inline(task_id, principal).await,
                Err(_) => None,
            };
        };
        let first = tokio::time::timeout(budget, async {
            tokio::select! {
                // The runner hands input over before it ends, so input wins a tie.
                biased;
                Ok(input) = &mut early_input => Some(input),
                _ = done => None,
            }
        })
        .await;
        let input = match first {
            Ok(Some(input)) => input,
            Ok(None) => {
                self.runners.withdraw_early_input(task_id);
                return self.take_inline(task_id, principal).await;
            }
            Err(_) => {
                // Past the budget, input goes into the task, unless the runner took the
                // hand-over just now: then its input is on the way.
                let nobody_took_it = self.runners.withdraw_early_input(task_id);
                if nobody_took_it {
                    return None;
                }
                early_input.await.ok()?
            }
        };
        // A 2026 upstream's own round: the client's retry is a new call, so this task
        // goes. A question of a call still open (session or stdio upstream) keeps it:
        // the retry resumes the call (`mrtr_bridge`).
        if !mrtr_bridge::carries_gateway_state(&input)
            && let Err(e) = self.store.delete(task_id).await
        {
            tracing::warn!(task_id, error = %e, "could not delete a task answered inline");
        }
        Some(
            serde_json::value::to_raw_value(&input)
                .map_err(|e| ErrorObject::internal(e.to_string())),
        )
    }

    /// The outcome of a task that finished within the promotion budget; the task is
    /// removed, since the client is answered inline and never sees its id.
    async fn take_inline(
        &self,
        task_id: &str,
        principal: &str,
    ) -> Option<Result<Box<RawValue>, ErrorObject>> {
        let record = self.store.get(task_id, principal).await.ok()??;
        let inline = match record.status {
            TaskStatus::Completed => Ok(record.result.clone()?),
            TaskStatus::Failed => Err(record.error.clone()?),
            _ => return None,
        };
        if let Err(e) = self.store.delete(task_id).await {
            tracing::warn!(task_id, error = %e, "could not delete a task answered inline");
        }
        Some(inline)
    }
}

/// A task whose creator waits within the promotion budget; dropped while still set (the
/// client hung up), it is cancelled, so its upstream call stops and its running slot
/// frees.
pub(super) struct Unclaimed {
    pub(super) service: Arc<TaskService>,
    pub(super) task_id: Option<String>,
    pub(super) principal: String,
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        let Some(task_id) = self.task_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let service = self.service.clone();
        let principal = std::mem::take(&mut self.principal);
        runtime.spawn(async move {
            service.runners.withdraw_early_input(&task_id);
            match service
                .cancel_as(&task_id, &principal, CANCELLED_CLIENT_GONE, None)
                .await
            {
                Ok(CancelOutcome::Cancelled { .. }) => {
                    tracing::info!(task_id, "the caller hung up before it learned of the task; cancelled");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(task_id, error = %e.message, "could not cancel a task its caller abandoned"),
            }
        });
    }
}

/// statusMessage of a task whose caller hung up before the task's id reached it.
const CANCELLED_CLIENT_GONE: &str =
    "cancelled: the client disconnected before it learned of the task";
