//! The 2025-11-25 task dialect's operations on the one task machinery: listing a
//! principal's tasks, waiting for a task's end while delivering its input requests
//! (`tasks/result`), taking a session client's answer to one of them, and cancelling
//! with that dialect's rules. Creating is `TaskService::start_task`, as for every task.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::TaskService;
use crate::upstream::PassThroughSession;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::InputRequest;
use mtg_store::{CANCELLED_BY_CLIENT, CancelOutcome, ListCursor, TaskRecord, UpdateOutcome};

/// A session client's task: the session's id as the client knows it (where its changes
/// are announced) and, for a pass-through upstream, the upstream session the call runs in.
#[derive(Debug, Clone)]
pub struct SessionLink {
    pub client_session: String,
    pub upstream: Option<PassThroughSession>,
    /// SEP-1905 `immediate`: a call that ends within the promotion budget is answered
    /// inline. Otherwise a session client always gets a task (its mode says so).
    pub immediate: bool,
}

/// Tasks per `tasks/list` page.
pub const LIST_PAGE: usize = 50;

/// Reserved key of a stored answer that is a JSON-RPC error (a session client may
/// answer a server request with one; MRTR answers are always results).
const ERROR_ANSWER: &str = "io.modelcontextprotocol/gateway-error";

/// A session client's answer as the store keeps it.
pub fn encode_answer(outcome: Result<Value, ErrorObject>) -> Value {
    match outcome {
        Ok(result) => result,
        Err(error) => json!({ ERROR_ANSWER: error }),
    }
}

/// A stored answer as the upstream gets it.
pub(super) fn decode_answer(answer: Value) -> Result<Value, ErrorObject> {
    match answer.get(ERROR_ANSWER) {
        Some(error) => Err(serde_json::from_value(error.clone())
            .unwrap_or_else(|_| ErrorObject::internal("the client answered with an error"))),
        None => Ok(answer),
    }
}

/// How often a `tasks/result` looks at the record without being told of a change (an
/// owner lost without a word, an announcement lost with a Redis connection).
const LOOK_FIRST: Duration = Duration::from_millis(100);
const LOOK_MAX: Duration = Duration::from_secs(1);

/// The 2025-11-25 task dialect's operations for session clients.
#[derive(Clone)]
pub struct Dialect2025 {
    tasks: Arc<TaskService>,
}

impl Dialect2025 {
    pub fn new(tasks: Arc<TaskService>) -> Self {
        Self { tasks }
    }
    /// A page of `principal`'s tasks, newest first, and the cursor of the next page.
    pub async fn list(
        &self,
        principal: &str,
        cursor: Option<&str>,
    ) -> Result<(Vec<Arc<TaskRecord>>, Option<String>), ErrorObject> {
        let after = cursor.map(decode_cursor).transpose()?;
        // One more than a page tells whether another page exists.
        let mut tasks = self
            .tasks
            .store
            .list(principal, after.as_ref(), LIST_PAGE + 1)
            .await?;
        let next = (tasks.len() > LIST_PAGE).then(|| {
            tasks.truncate(LIST_PAGE);
            tasks.last().map(|t| encode_cursor(&ListCursor::after(t)))
        });
        Ok((tasks, next.flatten()))
    }

    /// Waits until the task ends and returns its final record. Each input request it
    /// shows meanwhile is given to `deliver` once (key, request); `deliver` returns
    /// `false` when the client is gone, which ends the wait.
    pub async fn wait_for_end(
        &self,
        task_id: &str,
        principal: &str,
        mut deliver: impl FnMut(&str, &InputRequest) -> bool,
    ) -> Result<Option<Arc<TaskRecord>>, ErrorObject> {
        let waiter = self.tasks.waiters.wait_on(task_id);
        let mut delivered = std::collections::HashSet::new();
        let mut look_again = LOOK_FIRST;
        loop {
            let changed = waiter.changed();
            let mut local = Box::pin(self.tasks.runners.moved_on.notified());
            local.as_mut().enable();
            let task = self.tasks.get(task_id, principal).await?;
            if task.status.is_terminal() {
                return Ok(Some(task));
            }
            for (key, request) in &task.input_requests {
                if delivered.insert(key.clone()) && !deliver(key, request) {
                    return Ok(None);
                }
            }
            tokio::select! {
                () = changed => look_again = LOOK_FIRST,
                () = local => look_again = LOOK_FIRST,
                () = tokio::time::sleep(look_again) => look_again = (look_again * 2).min(LOOK_MAX),
            }
        }
    }

    /// A session client's answer to input request `key` of a task: accepted once, then
    /// the owner is woken to send it upstream. `false` when the key was not
    /// outstanding (already answered, withdrawn, or the task ended).
    pub async fn answer(
        &self,
        task_id: &str,
        principal: &str,
        key: &str,
        outcome: Result<Value, ErrorObject>,
        session: Option<&str>,
    ) -> Result<bool, ErrorObject> {
        let mut responses = serde_json::Map::new();
        responses.insert(key.to_owned(), encode_answer(outcome));
        match self
            .tasks
            .store
            .accept_input_responses(task_id, principal, responses)
            .await?
        {
            UpdateOutcome::NotFound => Err(super::not_found(task_id)),
            UpdateOutcome::Accepted { keys, .. } if keys.is_empty() => Ok(false),
            UpdateOutcome::Accepted { keys, owner } => {
                self.tasks
                    .meter()
                    .tasks()
                    .input_requests_answered(keys.len());
                self.tasks.wakeups.wake(&owner, task_id).await?;
                self.tasks.announce(task_id, session).await;
                Ok(true)
            }
        }
    }

    /// `tasks/cancel` as 2025-11-25 has it: a task that already ended is refused with
    /// -32602; otherwise the task is `cancelled` before the answer, which is the task.
    pub async fn cancel_session_task(
        &self,
        task_id: &str,
        principal: &str,
        session: Option<&str>,
    ) -> Result<Arc<TaskRecord>, ErrorObject> {
        match self
            .tasks
            .cancel_as(task_id, principal, CANCELLED_BY_CLIENT, session)
            .await?
        {
            CancelOutcome::NotFound => return Err(super::not_found(task_id)),
            CancelOutcome::AlreadyTerminal => {
                let task = self.tasks.get(task_id, principal).await?;
                return Err(ErrorObject::invalid_params(format!(
                    "Cannot cancel task: already in terminal status '{}'",
                    crate::tasks::render::session_task(&task).status.as_str()
                )));
            }
            CancelOutcome::Cancelled { .. } => {}
        }
        self.tasks.get(task_id, principal).await
    }
}

/// Cursors are opaque to clients; inside, the position after the last task shown.
fn encode_cursor(cursor: &ListCursor) -> String {
    format!("{}.{}", cursor.created_at_ms, cursor.task_id)
}

fn decode_cursor(text: &str) -> Result<ListCursor, ErrorObject> {
    let invalid = || {
        ErrorObject::invalid_params(format!(
            "Invalid cursor {text:?}: pass back a nextCursor from tasks/list unchanged"
        ))
    };
    let (created, task_id) = text.split_once('.').ok_or_else(invalid)?;
    let created_at_ms = created.parse().map_err(|_| invalid())?;
    let valid_id = uuid::Uuid::try_parse(task_id).is_ok();
    if !valid_id {
        return Err(invalid());
    }
    Ok(ListCursor {
        created_at_ms,
        task_id: task_id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let cursor = ListCursor {
            created_at_ms: 1_764_066_600_123,
            task_id: "786512e2-9e0d-44bd-8f29-789f320fe840".into(),
        };
        assert_eq!(decode_cursor(&encode_cursor(&cursor)).unwrap(), cursor);
        for garbage in [
            "",
            "x",
            "12",
            "12.",
            "a.786512e2-9e0d-44bd-8f29-789f320fe840",
            "1.{evil}",
        ] {
            let error = decode_cursor(garbage).unwrap_err();
            assert_eq!(
                error.code,
                mtg_protocol::jsonrpc::code::INVALID_PARAMS,
                "{garbage}"
            );
        }
    }

    #[test]
    fn error_answers_survive_the_store() {
        let error = ErrorObject::new(-32601, "no");
        let stored = encode_answer(Err(error.clone()));
        assert_eq!(decode_answer(stored).unwrap_err().message, "no");
        assert_eq!(
            decode_answer(json!({"action": "accept"})).unwrap(),
            json!({"action": "accept"})
        );
    }
}
