//! Held calls: the MRTR bridge for 2026-07-28 clients without the tasks extension.
//!
//! When a bridged call's upstream (a 2025-xx session or a stdio server) asks for input,
//! the call stays open as a task the client never sees (its record's principal is
//! `held:<principal>`, so no `tasks/get` finds it), owned by this instance, run by the
//! same runner as any task. The client gets an `InputRequiredResult` whose
//! `requestState` names the call and the round, sealed (`state.rs`). Its retry, on any
//! instance, writes the answers with the store's accept-once transition, wakes the
//! owner, and waits for the call's next round or its end.

mod state;

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use serde_json::{Map, Value, json};

pub use state::{StateKeys, request_digest};

use super::start::{Adopted, Start};
use super::{TaskService, ToolCall, render};
use crate::upstream::forward::Asked;
use crate::upstream::{Exchange, StopReason, UpstreamEvent};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::{InputRequest, ResultType, TaskStatus};
use mtg_store::{TaskRecord, input_key, now_ms};

/// A bridged request as the client sent it and as it went upstream.
pub struct BridgedCall {
    pub method: String,
    /// The params the client sent (the state is bound to them).
    pub client_params: Option<Value>,
    /// The params as the upstream got them.
    pub upstream_params: Option<Value>,
    pub capabilities: Map<String, Value>,
    pub auth: Option<HeaderValue>,
    pub principal: String,
}

/// What a retry of a held call or task's round gets.
pub enum Resumed {
    /// The result, or the next `InputRequiredResult`.
    Reply(Value),
    /// A deferred call still running past its budget.
    StillRunning(Arc<TaskRecord>),
}

/// What a held call's principal starts with.
pub const HELD_PREFIX: &str = "held:";

/// Held calls live apart from tasks: a client's `tasks/get` never finds one.
fn held_principal(principal: &str) -> String {
    format!("{HELD_PREFIX}{principal}")
}

/// Whether a request is a retry of a held call (it carries one of the gateway's states).
pub fn resumes_held_call(params: Option<&Value>) -> bool {
    params.is_some_and(carries_gateway_state)
}

/// Whether a result or params carry a `requestState` of the gateway's own.
pub fn carries_gateway_state(value: &Value) -> bool {
    value
        .get("requestState")
        .and_then(Value::as_str)
        .is_some_and(state::is_ours)
}

/// How often a retry looks at the record while the owner works (on another instance;
/// on this one the runner signals `moved_on`).
const POLL_FIRST: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(100);

/// Held calls of 2026-07-28 clients without the tasks extension.
#[derive(Clone)]
pub struct MrtrBridge {
    tasks: Arc<TaskService>,
}

impl MrtrBridge {
    pub fn new(tasks: Arc<TaskService>) -> Self {
        Self { tasks }
    }
    /// Keeps a bridged call open as a held call; its `InputRequiredResult` for the client.
    pub async fn hold(
        &self,
        call: BridgedCall,
        mut exchange: Box<dyn Exchange>,
        asked: Vec<Asked>,
        later: Vec<UpstreamEvent>,
    ) -> Result<Value, ErrorObject> {
        let digest = state::request_digest(&call.method, call.client_params.as_ref());
        let params = serde_json::value::to_raw_value(&call.upstream_params.unwrap_or_default())
            .map_err(|e| ErrorObject::internal(format!("held call params: {e}")))?;
        let task = ToolCall {
            params,
            capabilities: call.capabilities,
            auth: call.auth,
            principal: held_principal(&call.principal),
            session: None,
            ttl_ms: None,
            relay: None,
        };
        let slot = match self.tasks.running_limit.reserve(&task.principal) {
            Ok(slot) => slot,
            Err(error) => {
                let _ = exchange.stop(StopReason::Refused).await;
                return Err(error);
            }
        };
        let mut record = self.tasks.new_record(&task);
        let mut pending = std::collections::HashMap::new();
        for (n, request) in (0..).zip(asked) {
            // Keys as the store issues them: never reused within the record.
            let key = input_key(n);
            let shown = InputRequest {
                method: request.method,
                params: request.params,
            };
            record.input_requests.insert(key.clone(), shown);
            pending.insert(key, request.id);
        }
        record.status = TaskStatus::InputRequired;
        record.next_input_key = pending.len() as u64;
        let task_id = record.task_id.clone();
        let shown = self.input_required(&record, &call.principal, &digest, false);
        let adopted = Adopted {
            exchange,
            pending,
            later,
            input_wait: Some(self.tasks.settings.input_wait),
        };
        // Stored by the runner, which carries the open call from here on: if the store
        // fails, the call is dropped, and the exchange's safety net stops it upstream.
        let to_store = super::ToStore {
            record,
            stored: |meter| meter.calls().held(),
        };
        let start = Start::New(Some(adopted));
        let mut launched = self
            .tasks
            .spawn_runner(&task_id, task, start, slot, Some(to_store));
        launched.stored().await?;
        tracing::info!(task_id, "bridged call held for the client's answers");
        Ok(shown)
    }

    /// Answers a held call from the client's retry and returns what comes next: the
    /// call's result, its error, or the next `InputRequiredResult`; for a deferred call
    /// (a 2026-07-28 client without the tasks extension, `--defer-after-ms`), the task
    /// when it still runs after that budget.
    pub async fn resume(
        &self,
        principal: &str,
        method: &str,
        params: &Value,
    ) -> Result<Resumed, ErrorObject> {
        let digest = state::request_digest(method, Some(params));
        let claims = self.open_state(principal, &digest, params)?;
        // A task's own call keeps the caller's principal; a held call lives apart.
        let owner = if claims.visible {
            principal.to_owned()
        } else {
            held_principal(principal)
        };
        let record = self.held_record(&claims.task_id, &owner).await?;
        if let Some(ended) = ended(&record) {
            return ended.map(Resumed::Reply);
        }
        self.answer_round(&claims, &owner, &record, params).await?;
        let deferred_after = self.deferred_after(&claims, params);
        let budget = deferred_after.or(claims.visible.then_some(self.tasks.settings.promote_after));
        let Some(record) = self
            .next_round_or_end(&claims.task_id, &owner, budget)
            .await?
        else {
            return self
                .past_budget(&claims.task_id, &owner, deferred_after.is_some())
                .await;
        };
        if let Some(ended) = ended(&record) {
            // The client never saw an id: nobody else will ask for the record.
            if let Err(e) = self.tasks.store.delete(&record.task_id).await {
                tracing::warn!(task_id = record.task_id, error = %e, "could not forget a held call");
            }
            return ended.map(Resumed::Reply);
        }
        Ok(Resumed::Reply(self.input_required(
            &record,
            principal,
            &digest,
            claims.visible,
        )))
    }

    /// The claims of the retry's `requestState`, if it is the gateway's, unexpired, the
    /// caller's and made for this very request.
    fn open_state(
        &self,
        principal: &str,
        digest: &str,
        params: &Value,
    ) -> Result<state::Claims, ErrorObject> {
        let sealed = params
            .get("requestState")
            .and_then(Value::as_str)
            .unwrap_or_default();
        state::open(
            &self.tasks.settings.state_keys,
            sealed,
            principal,
            digest,
            now_ms(),
        )
        .map_err(|e| ErrorObject::invalid_params(e.to_string()))
    }

    /// Writes the retry's answers to the round its state names (accept-once: a round
    /// already answered refuses the state) and wakes the call's owner.
    async fn answer_round(
        &self,
        claims: &state::Claims,
        owner: &str,
        record: &TaskRecord,
        params: &Value,
    ) -> Result<(), ErrorObject> {
        if claims
            .keys
            .iter()
            .any(|key| !record.input_requests.contains_key(key))
        {
            return Err(ErrorObject::invalid_params(
                "requestState was already used: its round has been answered",
            ));
        }
        let responses: Map<String, Value> = params
            .get("inputResponses")
            .and_then(Value::as_object)
            .map(|given| {
                given
                    .iter()
                    .filter(|(key, _)| claims.keys.contains(key))
                    .map(|(key, answer)| (key.clone(), answer.clone()))
                    .collect()
            })
            .unwrap_or_default();
        self.tasks.update(&claims.task_id, owner, responses).await
    }

    /// A task's call answers within the promotion budget, or becomes the task. The
    /// call of a client without the extension (`tasks::deferral`) answers within the
    /// deferral budget, or is deferred again; with deferral off it is a call of a
    /// tool the upstream runs only as a task, answered when it ends. This is that
    /// deferral budget, for such a call.
    fn deferred_after(&self, claims: &state::Claims, params: &Value) -> Option<Duration> {
        (claims.visible && !mtg_protocol::meta::declares_tasks(Some(params))).then(|| {
            self.tasks
                .settings
                .defer_after
                .unwrap_or(crate::tasks::deferral::UNTIL_IT_ENDS)
        })
    }

    /// A call still running when its budget passed: a deferred call's task, else a task
    /// now, answered as one.
    async fn past_budget(
        &self,
        task_id: &str,
        owner: &str,
        deferred: bool,
    ) -> Result<Resumed, ErrorObject> {
        let record = self.held_record(task_id, owner).await?;
        if deferred {
            return Ok(Resumed::StillRunning(record));
        }
        tracing::info!(
            task_id = record.task_id,
            "answered past the promotion budget: now a task"
        );
        Ok(Resumed::Reply(json!(render::task_result(
            &record,
            ResultType::Task
        ))))
    }

    /// For a task's runner, while its creator still waits within the promotion budget:
    /// the task's outstanding input as an `InputRequiredResult` whose retry resumes the
    /// task's call. `None` when the record cannot be read.
    pub(super) async fn early_input_result(
        &self,
        task_id: &str,
        principal: &str,
        digest: &str,
    ) -> Option<Value> {
        let record = self.tasks.store.get(task_id, principal).await.ok()??;
        Some(self.input_required(&record, principal, digest, true))
    }

    async fn held_record(
        &self,
        task_id: &str,
        owner: &str,
    ) -> Result<Arc<TaskRecord>, ErrorObject> {
        self.tasks.store.get(task_id, owner).await?.ok_or_else(|| {
            ErrorObject::invalid_params(
                "the held call this requestState names is gone (answered, expired or cancelled)",
            )
        })
    }

    /// Polls until the owner has moved the call on: a new round or its end; `None` when
    /// `budget` passed first.
    async fn next_round_or_end(
        &self,
        task_id: &str,
        owner: &str,
        budget: Option<Duration>,
    ) -> Result<Option<Arc<TaskRecord>>, ErrorObject> {
        let give_up = budget.map(|b| tokio::time::Instant::now() + b);
        let mut pause = POLL_FIRST;
        loop {
            // Armed before the read, so a change right after it is not missed.
            let moved_on = self.tasks.runners.moved_on.notified();
            tokio::pin!(moved_on);
            moved_on.as_mut().enable();
            let record = self.held_record(task_id, owner).await?;
            if record.status != TaskStatus::Working {
                return Ok(Some(record));
            }
            if give_up.is_some_and(|at| tokio::time::Instant::now() >= at) {
                return Ok(None);
            }
            // The owner may be another instance: poll, and look at once on a local signal.
            tokio::select! {
                () = &mut moved_on => {}
                () = tokio::time::sleep(pause) => pause = (pause * 2).min(POLL_MAX),
            }
        }
    }

    /// The `InputRequiredResult` of a task's pending input for a request of the caller's
    /// (a deferred call's `get_task_result`): the client's retry of that request, with
    /// the answers, resumes the task.
    pub fn ask(
        &self,
        task: &TaskRecord,
        principal: &str,
        method: &str,
        params: Option<&Value>,
    ) -> Value {
        let digest = state::request_digest(method, params);
        self.input_required(task, principal, &digest, true)
    }

    /// The `InputRequiredResult` for the record's outstanding requests.
    fn input_required(
        &self,
        record: &TaskRecord,
        principal: &str,
        digest: &str,
        visible: bool,
    ) -> Value {
        let claims = state::Claims {
            task_id: record.task_id.clone(),
            keys: record.input_requests.keys().cloned().collect(),
            expires_at_ms: now_ms() + self.tasks.settings.input_wait.as_millis() as u64,
            request: digest.to_owned(),
            visible,
        };
        json!({
            "resultType": "input_required",
            "inputRequests": record.input_requests,
            "requestState": state::seal(&self.tasks.settings.state_keys, &claims, principal),
        })
    }
}

/// A held call's end as the client's answer; `None` while it runs.
fn ended(record: &TaskRecord) -> Option<Result<Value, ErrorObject>> {
    match record.status {
        TaskStatus::Completed => {
            let result = record.result.as_ref()?;
            Some(
                serde_json::from_str(result.get())
                    .map_err(|e| ErrorObject::internal(e.to_string())),
            )
        }
        TaskStatus::Failed => Some(Err(record
            .error
            .clone()
            .unwrap_or_else(|| ErrorObject::internal("the held call failed")))),
        TaskStatus::Cancelled => Some(Err(ErrorObject::invalid_params(
            "the held call was cancelled",
        ))),
        TaskStatus::Working | TaskStatus::InputRequired => None,
    }
}
