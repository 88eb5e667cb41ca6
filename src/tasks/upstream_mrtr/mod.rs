//! MRTR rounds of a task on a 2026-07-28 upstream, as answered through the task (the
//! rounds themselves are driven by `driver`). The upstream's
//! `InputRequiredResult` becomes the task's `inputRequests`, under task keys
//! (`input-<n>`) that stay unique over the task's lifetime; once every key of the round
//! is answered, the answers go back under the upstream's keys.
//!
//! The round lives in the task record (`upstream_state`), not in the runner, so that
//! the retry can be rebuilt from the store alone.

pub mod driver;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use async_trait::async_trait;

use super::TaskService;
use super::halt::{Halt, sleep_until, timed_out, upstream_failure};
use crate::upstream::UpstreamError;
use driver::{Round, RoundAnswers};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::mrtr::{self, InputRequired};
use mtg_store::{Outcome, StoreError};

/// A malformed round from the upstream fails the task.
impl From<driver::RoundError> for Halt {
    fn from(error: driver::RoundError) -> Self {
        let detail = match error {
            driver::RoundError::Malformed(e) => e.to_string(),
            other => other.to_string(),
        };
        Halt::Finish(upstream_failure(&UpstreamError::Protocol(detail)))
    }
}

/// How soon to read the task again after the store failed to answer.
const STORE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Key of the round in `TaskRecord::upstream_state`.
const STATE_KEY: &str = "mrtr";

pub(super) fn asks_for_input(result: &Value) -> bool {
    mrtr::is_input_required(result)
}

/// The round a task is in, as stored in its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum RoundState {
    /// Waiting for the client's answers.
    AwaitingInput {
        #[serde(rename = "requestState")]
        request_state: Option<String>,
        /// Upstream key of each of the round's task keys.
        keys: BTreeMap<String, String>,
    },
    /// All answered; the retry (possibly still in flight) carries these.
    Retrying {
        #[serde(rename = "requestState")]
        request_state: Option<String>,
        #[serde(rename = "inputResponses")]
        input_responses: Map<String, Value>,
    },
}

impl RoundState {
    pub fn to_upstream_state(&self) -> Value {
        let mut state = Map::new();
        state.insert(
            STATE_KEY.into(),
            serde_json::to_value(self).expect("round state serializes"),
        );
        Value::Object(state)
    }

    pub fn from_upstream_state(state: Option<&Value>) -> Option<Self> {
        serde_json::from_value(state?.get(STATE_KEY)?.clone()).ok()
    }
}

/// A task's answers to an MRTR round: its requests become the task's `inputRequests`,
/// and the round is answered once the client has answered every one of them.
pub(super) struct TaskAnswers<'a> {
    pub service: &'a TaskService,
    pub task_id: &'a str,
    pub principal: &'a str,
    pub wake: &'a Notify,
    /// The task moved to another instance: stop waiting.
    pub stop: &'a CancellationToken,
    pub deadline: Option<Instant>,
    /// The task's TTL: a round nobody answered stops waiting then.
    pub expires_at: Instant,
}

impl TaskAnswers<'_> {
    /// The first params of a call taken over in `round` (`params` are the original's):
    /// a round still waiting for answers is waited for here, under the same keys (the
    /// upstream keeps nothing between rounds, so any instance may send the retry); a
    /// round already answered is sent again with the same answers and state.
    pub(super) async fn resume(
        &mut self,
        round: RoundState,
        params: &Value,
    ) -> Result<Value, Halt> {
        let (request_state, responses) = match round {
            RoundState::Retrying {
                request_state,
                input_responses,
            } => (request_state, input_responses),
            RoundState::AwaitingInput {
                request_state,
                keys,
            } => {
                let responses = self.wait_for(&keys, true).await?;
                start_retry(
                    self.service,
                    self.task_id,
                    request_state.as_deref(),
                    &responses,
                )
                .await
                .map_err(|e| Halt::Finish(store_failure(&e)))?;
                (request_state, responses)
            }
        };
        tracing::info!("resuming the call in its last round");
        Ok(mrtr::retry_params(
            params,
            responses,
            request_state.as_deref(),
        ))
    }

    /// Waits until every one of `keys` is answered; the answers by upstream key. A
    /// round just asked has no answers yet: it is read first only with `look_first`.
    async fn wait_for(
        &mut self,
        keys: &BTreeMap<String, String>,
        look_first: bool,
    ) -> Result<driver::Answers, Halt> {
        let service = self.service;
        // Set when the store could not be read: look again then, not only at a wake-up.
        let mut look_again: Option<Instant> = None;
        let mut look = look_first;
        loop {
            if look {
                match answers(service, self.task_id, self.principal, keys).await {
                    Ok(Answers::Complete(responses)) => return Ok(responses),
                    Ok(Answers::Partial) => {}
                    Ok(Answers::Ended) => return Err(Halt::Ended),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read the task's answers");
                        look_again = Some(Instant::now() + STORE_RETRY);
                    }
                }
            }
            look = true;
            tokio::select! {
                () = self.wake.notified() => {}
                () = sleep_until(look_again) => {}
                () = self.stop.cancelled() => return Err(Halt::Ended),
                () = sleep_until(self.deadline) => return Err(Halt::Finish(timed_out(service))),
                () = tokio::time::sleep_until(self.expires_at) => return Err(Halt::Expired),
            }
            look_again = None;
        }
    }
}

#[async_trait]
impl RoundAnswers for TaskAnswers<'_> {
    type Stop = Halt;

    async fn answer(&mut self, round: &Round<'_>) -> Result<driver::Answers, Halt> {
        let service = self.service;
        // Input needed before the task is promoted goes to the client as it is (the
        // spec resolves such rounds synchronously, before CreateTaskResult).
        if service
            .runners
            .hand_over_early_input(self.task_id, round.result)
        {
            tracing::info!("input required within the promotion budget; answered inline");
            return Err(Halt::Ended);
        }
        let keys = match record_round(service, self.task_id, &round.asked).await {
            Ok(Some(keys)) => keys,
            Ok(None) => return Err(Halt::Ended),
            Err(e) => return Err(Halt::Finish(store_failure(&e))),
        };
        tracing::info!(keys = ?keys.keys().collect::<Vec<_>>(), "task needs input (MRTR round)");
        let responses = self.wait_for(&keys, false).await?;
        let state = round.asked.request_state.as_deref();
        if let Err(e) = start_retry(service, self.task_id, state, &responses).await {
            return Err(Halt::Finish(store_failure(&e)));
        }
        Ok(responses)
    }
}

/// Adds the round's requests to the task and stores the round; the task keys by
/// upstream key, or `None` when the task has ended.
async fn record_round(
    service: &TaskService,
    task_id: &str,
    round: &InputRequired,
) -> Result<Option<BTreeMap<String, String>>, StoreError> {
    let (upstream_keys, requests): (Vec<_>, Vec<_>) = round
        .input_requests
        .iter()
        .map(|(key, request)| (key.clone(), request.clone()))
        .unzip();
    let Some(task_keys) = service.store.add_input_requests(task_id, requests).await? else {
        return Ok(None);
    };
    let keys: BTreeMap<String, String> = task_keys.into_iter().zip(upstream_keys).collect();
    let state = RoundState::AwaitingInput {
        request_state: round.request_state.clone(),
        keys: keys.clone(),
    };
    service
        .store
        .set_upstream_state(task_id, Some(state.to_upstream_state()))
        .await?;
    service.announce(task_id, None).await;
    Ok(Some(keys))
}

enum Answers {
    /// Every key of the round is answered: the answers under the upstream's keys.
    Complete(Map<String, Value>),
    /// Some keys are still outstanding: the upstream is not called yet.
    Partial,
    Ended,
}

async fn answers(
    service: &TaskService,
    task_id: &str,
    principal: &str,
    keys: &BTreeMap<String, String>,
) -> Result<Answers, StoreError> {
    let Some(task) = service.store.get(task_id, principal).await? else {
        return Ok(Answers::Ended);
    };
    if task.status.is_terminal() {
        return Ok(Answers::Ended);
    }
    let mut responses = Map::new();
    for (task_key, upstream_key) in keys {
        match task.answers.get(task_key) {
            Some(answer) => responses.insert(upstream_key.clone(), answer.clone()),
            None => return Ok(Answers::Partial),
        };
    }
    Ok(Answers::Complete(responses))
}

/// Records that the round is answered, then clears the answers from the record. In that
/// order: until the retry state is stored, the answers stay where a resumer finds them.
async fn start_retry(
    service: &TaskService,
    task_id: &str,
    request_state: Option<&str>,
    input_responses: &Map<String, Value>,
) -> Result<(), StoreError> {
    let state = RoundState::Retrying {
        request_state: request_state.map(str::to_owned),
        input_responses: input_responses.clone(),
    };
    service
        .store
        .set_upstream_state(task_id, Some(state.to_upstream_state()))
        .await?;
    service.store.take_answers(task_id).await?;
    Ok(())
}

fn store_failure(error: &StoreError) -> Outcome {
    let message = format!("the gateway could not record an input round: {error}");
    Outcome::Failed {
        error: ErrorObject::internal(message.clone()),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_state_round_trips_through_the_record() {
        let state = RoundState::AwaitingInput {
            request_state: Some("opaque \u{e9}".into()),
            keys: BTreeMap::from([("input-3".to_owned(), "name".to_owned())]),
        };
        let stored = state.to_upstream_state();
        assert_eq!(
            stored,
            json!({"mrtr": {"phase": "awaiting_input", "requestState": "opaque \u{e9}", "keys": {"input-3": "name"}}})
        );
        assert_eq!(RoundState::from_upstream_state(Some(&stored)), Some(state));
        assert_eq!(RoundState::from_upstream_state(None), None);
    }
}
