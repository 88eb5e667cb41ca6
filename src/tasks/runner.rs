//! The background half of a task: sends the `tools/call` upstream and records what
//! comes back until the call ends, the client cancels, or the time limit passes.

use mtg_protocol::names::method;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use async_trait::async_trait;

use super::halt::{Halt, halt_for, upstream_failure};
use super::start::{Adopted, Start};
use super::{TaskService, ToolCall, upstream_mrtr};
use crate::tasks::upstream_mrtr::driver::{self, Reply, RoundTrip};
use crate::upstream::{Caller, Exchange, StopReason, UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::{ErrorObject, code};
use mtg_protocol::wire::InputRequest;
use mtg_store::{Outcome, now_ms};

/// How the runner is told to stop.
pub(super) struct Signals {
    /// Look at the task again: answers arrived, or it was cancelled.
    pub wake: Arc<Notify>,
    /// Stop without recording anything: the task is another instance's now (it
    /// was handed over at shutdown, or taken over while this one was cut off).
    pub stop: CancellationToken,
}

/// `call` and `start` come boxed: an async fn's arguments stay in its future for its
/// whole life, and this one lives as long as the task's call.
pub(super) async fn run(
    service: &Arc<TaskService>,
    task_id: &str,
    mut call: Box<ToolCall>,
    start: Box<Start>,
    signals: Signals,
    done: oneshot::Sender<()>,
) {
    let started = std::time::Instant::now();
    let session = call.session.as_ref().map(|s| s.client_session.clone());
    let taken_over = matches!(*start, Start::TakenOver { .. });
    let driven = drive(service, task_id, &mut call, start, &signals).await;
    let change = mtg_store::TaskChange {
        task_id: task_id.to_owned(),
        session,
        progress: None,
    };
    let mut announced = false;
    if matches!(driven, Err(Halt::Expired)) {
        tracing::info!("task expired unfinished");
        if let Err(e) = Box::pin(service.store.let_go_expired(task_id)).await {
            tracing::warn!(error = %e, "could not let go of the expired task");
        }
    }
    if let Ok(outcome) = driven {
        let label = outcome_label(&outcome);
        // The TTL bounds the retries: a short store outage loses no upstream result.
        let ttl = std::time::Duration::from_millis(service.settings.ttl_ms);
        // Boxed, like every step below that runs briefly: the future that waits for the
        // upstream stays small, and it is resident for as long as the task runs.
        // The change is announced in the same round trip where the store can.
        let (finished, sent) = Box::pin(mtg_store::finish_with_retry(
            &*service.store,
            task_id,
            outcome,
            &change,
            ttl,
        ))
        .await;
        announced = sent;
        match finished {
            Ok(true) => {
                service.meter().tasks().finished(label, started.elapsed());
                if taken_over {
                    service.meter().cluster().taken_over_task_finished(label);
                }
                tracing::info!(outcome = label, "task finished");
            }
            Ok(false) => tracing::info!(outcome = label, "task had already ended; result dropped"),
            Err(e) => tracing::error!(error = %e, "could not record the task's outcome"),
        }
    }
    service.runners.moved_on.notify_waiters();
    // Also after a cancel or expiry seen on a wake-up: the task ended either way.
    if !announced {
        Box::pin(service.announce_built(&change)).await;
    }
    let _ = done.send(());
}

/// Runs the call: the outcome to record, or why there is none (never `Halt::Finish`).
async fn drive(
    service: &Arc<TaskService>,
    task_id: &str,
    call: &mut ToolCall,
    start: Box<Start>,
    signals: &Signals,
) -> Result<Outcome, Halt> {
    let wake = signals.wake.as_ref();
    let deadline = service
        .settings
        .upstream_timeout
        .map(|t| Instant::now() + t);
    let params = with_progress_token(call, task_id);
    // Bound by value and moved, never borrowed: a local borrowed in an async fn keeps
    // its bytes in the future until the scope ends, here the call's whole life.
    let StartingPoint {
        adopted,
        input_wait,
        round,
        expires_at,
    } = starting_point(service, call, start);
    let mut trip = TaskTrip {
        service,
        task_id,
        call,
        wake,
        stop: &signals.stop,
        deadline,
        expires_at,
        adopted,
        input_wait,
    };
    let mut answers = upstream_mrtr::TaskAnswers {
        service,
        task_id,
        principal: &call.principal,
        wake,
        stop: &signals.stop,
        deadline,
        expires_at,
    };
    // `params` is moved into the first request, never borrowed here: the call's wait
    // holds only the raw `call.params` (the retries' original), and none of the
    // preparation's values (run 32).
    let first = match round {
        None => Ok(params),
        Some(round) => Box::pin(resume_round(&mut answers, round, params)).await,
    };
    let driven = match first {
        Ok(first) => driver::drive_from(&mut trip, &mut answers, &call.params, first).await,
        Err(halt) => Err(halt),
    };
    match driven {
        Ok(outcome) | Err(Halt::Finish(outcome)) => Ok(outcome),
        Err(ended) => Err(ended),
    }
}

/// The call's params with a progress token of the gateway's own (progress for tasks
/// lands in statusMessage); `call.params` becomes them too, where MRTR retries start.
fn with_progress_token(call: &mut ToolCall, task_id: &str) -> Value {
    let mut params = call.params_value();
    if let Some(object) = params.as_object_mut() {
        let meta = object.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("progressToken".into(), Value::from(task_id));
        }
    }
    if let Ok(raw) = serde_json::value::to_raw_value(&params) {
        call.params = raw;
    }
    params
}

/// Where a task's call starts.
struct StartingPoint {
    /// The call already open upstream, if one was adopted.
    adopted: Option<Box<Adopted>>,
    /// How long an adopted held call's input may wait for the client.
    input_wait: Option<std::time::Duration>,
    /// The round a taken-over task was in.
    round: Option<upstream_mrtr::RoundState>,
    expires_at: Instant,
}

/// Where the call starts; `start`'s box is freed here, not kept for the call's life.
#[allow(clippy::boxed_local)] // taken boxed so that the box is freed here
fn starting_point(service: &TaskService, call: &ToolCall, start: Box<Start>) -> StartingPoint {
    match *start {
        // Created just before the runner started: this is at most a little late.
        Start::New(adopted) => {
            let ttl = std::time::Duration::from_millis(service.ttl_of(call));
            StartingPoint {
                input_wait: adopted.as_ref().and_then(|a| a.input_wait),
                adopted: adopted.map(Box::new),
                round: None,
                expires_at: Instant::now() + ttl,
            }
        }
        Start::TakenOver {
            round,
            expires_at_ms,
        } => {
            let left = expires_at_ms.saturating_sub(now_ms());
            StartingPoint {
                adopted: None,
                input_wait: None,
                round,
                expires_at: Instant::now() + std::time::Duration::from_millis(left),
            }
        }
    }
}

/// A taken-over task's first params: its round's answers, resumed.
async fn resume_round(
    answers: &mut upstream_mrtr::TaskAnswers<'_>,
    round: upstream_mrtr::RoundState,
    params: Value,
) -> Result<Value, Halt> {
    answers.resume(round, &params).await
}

/// Sends the task's call upstream, once per MRTR round.
struct TaskTrip<'a> {
    service: &'a Arc<TaskService>,
    task_id: &'a str,
    call: &'a ToolCall,
    wake: &'a Notify,
    stop: &'a CancellationToken,
    deadline: Option<Instant>,
    /// When the task expires: nobody can read its outcome after that.
    expires_at: Instant,
    /// The adopted call to carry on instead of opening one, for the first round. Boxed:
    /// few calls are adopted, and every call's wait would keep its 104 bytes.
    adopted: Option<Box<Adopted>>,
    /// For a held call: how long outstanding input may wait for the client.
    input_wait: Option<std::time::Duration>,
}

/// What stops a task's call before its answer: a wake-up that finds the task ended
/// (cancelled), the stop token (the task moved), the upstream timeout, the task's expiry,
/// and a held call's unanswered input. Each is a [`StopReason`]; the runner stops the
/// call upstream through its exchange (`Call::stop`), the one way for every transport
/// (`upstream::stop`), and records what the reason says (`halt::halt_for`).
struct Stops<'a> {
    service: &'a Arc<TaskService>,
    task_id: &'a str,
    principal: &'a str,
    wake: &'a Notify,
    stop: &'a CancellationToken,
    deadline: Option<Instant>,
    expires_at: Instant,
}

impl Stops<'_> {
    /// `work`'s output, unless the call must stop first: then why. For the steps before
    /// a request is sent upstream (an upstream session opening, a stdio process
    /// leased), where a stop has nothing to reach and the step is dropped.
    async fn race<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, StopReason> {
        tokio::pin!(work);
        let mut recheck = None;
        loop {
            let (at, due) = self.next_due(None, recheck);
            tokio::select! {
                output = &mut work => return Ok(output),
                () = self.wake.notified() => {}
                () = self.stop.cancelled() => return Err(StopReason::Moved),
                () = tokio::time::sleep_until(at) => {
                    if let Due::Stop(reason) = due {
                        return Err(reason);
                    }
                }
            }
            // Nothing can be answered before the call is open: a wake-up here can only
            // mean the task ended (cancelled, expired).
            match Box::pin(still_running(self.service, self.task_id, self.principal)).await {
                Some(true) => recheck = None,
                Some(false) => return Err(StopReason::Cancelled),
                None => recheck = recheck_after_failure(),
            }
        }
    }

    /// What the clock brings first, and when: the upstream timeout, the task's expiry,
    /// a held call's outstanding input waiting too long (`unanswered_at`), or a look
    /// at the task again after the store failed to answer (`recheck_at`). One timer for
    /// all of them: each costs its 112 bytes in the future that waits for the upstream,
    /// for as long as the call lasts (docs/benchmarks.md, run 32).
    fn next_due(
        &self,
        unanswered_at: Option<Instant>,
        recheck_at: Option<Instant>,
    ) -> (Instant, Due) {
        let mut soonest = (self.expires_at, Due::Stop(StopReason::Expired));
        let others = [
            (self.deadline, Due::Stop(StopReason::TimedOut)),
            (unanswered_at, Due::Stop(StopReason::Unanswered)),
            (recheck_at, Due::Recheck),
        ];
        for (at, due) in others {
            if let Some(at) = at
                && at < soonest.0
            {
                soonest = (at, due);
            }
        }
        soonest
    }
}

/// What a runner's timer is set for.
#[derive(Clone, Copy)]
enum Due {
    Stop(StopReason),
    /// Look at the task again, as on a wake-up.
    Recheck,
}

/// Whether the task is still there and not terminal; `None` when the store could not
/// say (an outage must not stop a call, and the look is tried again: [`RECHECK`]).
async fn still_running(service: &TaskService, task_id: &str, principal: &str) -> Option<bool> {
    match service.store.get(task_id, principal).await {
        Ok(Some(task)) if task.status.is_terminal() => {
            let age = now_ms().saturating_sub(task.created_at_ms);
            service
                .meter()
                .tasks()
                .finished(task.status.as_str(), std::time::Duration::from_millis(age));
            Some(false)
        }
        Ok(Some(_)) => Some(true),
        Ok(None) => Some(false),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the task after a wake-up");
            None
        }
    }
}

/// How soon a runner looks at its task again after the store failed to answer: a
/// wake-up is a signal, not a queue, so what it announced (a cancel, accepted answers)
/// would otherwise wait for the next one, which may never come.
const RECHECK: std::time::Duration = std::time::Duration::from_millis(500);

fn recheck_after_failure() -> Option<Instant> {
    Some(Instant::now() + RECHECK)
}

#[async_trait]
impl RoundTrip for TaskTrip<'_> {
    type Done = Outcome;
    type Stop = Halt;

    async fn send(&mut self, params: Value) -> Result<Reply<Outcome>, Halt> {
        let stops = self.stops();
        // Boxed: opening waits on more than carrying does (run 32: 616 against 432 B),
        // and this future lives as long as the call.
        let (mut call, later) = match Box::pin(self.open(params, &stops)).await {
            Ok(opened) => opened,
            // Nothing was sent upstream: there is nothing to stop there.
            Err(Ok(reason)) => return Err(self.halt(reason)),
            Err(Err(failed)) => return Err(failed),
        };
        for event in later {
            if let Some(reply) = Box::pin(call.on_event(Some(Ok(event)))).await {
                return Ok(reply);
            }
        }
        let reason = match self.carry(&mut call, &stops).await {
            Ok(reply) => return Ok(reply),
            Err(Ok(reason)) => reason,
            Err(Err(failed)) => return Err(failed),
        };
        tracing::info!(reason = reason.words(), "stopping the task's call upstream");
        Box::pin(call.stop(reason)).await;
        Err(self.halt(reason))
    }
}

/// Why a step ends the call early: a reason to stop it, or an outcome it already has.
type EarlyEnd = Result<StopReason, Halt>;

impl<'a> TaskTrip<'a> {
    fn stops(&self) -> Stops<'a> {
        let call: &'a ToolCall = self.call;
        Stops {
            service: self.service,
            task_id: self.task_id,
            principal: &call.principal,
            wake: self.wake,
            stop: self.stop,
            deadline: self.deadline,
            expires_at: self.expires_at,
        }
    }

    /// What the task records when its call stops for `reason`.
    fn halt(&self, reason: StopReason) -> Halt {
        halt_for(self.service, reason, self.input_wait)
    }

    /// The call in flight: the adopted one, or a request sent now (as a task of the
    /// upstream's own for a tool it runs only as one); and what the adopted call's
    /// upstream sent that nobody has read yet.
    async fn open(
        &mut self,
        mut params: Value,
        stops: &Stops<'a>,
    ) -> Result<(Call<'a>, Vec<UpstreamEvent>), EarlyEnd> {
        let call: &'a ToolCall = self.call;
        let caller = Caller {
            capabilities: &call.capabilities,
            auth: call.auth.as_ref(),
            session: call.session.as_ref().and_then(|s| s.upstream.as_ref()),
        };
        let adopted = self.adopted.take();
        let upstream_task = adopted.is_none()
            && stops
                .race(Box::pin(self.own_task_only(&caller, &params)))
                .await
                .map_err(Ok)?;
        if upstream_task && let Some(object) = params.as_object_mut() {
            object.insert("task".into(), json!({}));
        }
        let (exchange, pending, later) = match adopted {
            Some(adopted) => (adopted.exchange, adopted.pending, adopted.later),
            None => {
                let opening =
                    self.service
                        .upstream
                        .open_call(&caller, method::TOOLS_CALL, Some(params));
                let exchange = stops
                    .race(opening)
                    .await
                    .map_err(Ok)?
                    .map_err(|e| Err(Halt::Finish(upstream_failure(&e))))?;
                (exchange, HashMap::new(), Vec::new())
            }
        };
        let call = Call {
            service: self.service,
            task_id: self.task_id,
            session: call.session.as_ref().map(|s| s.client_session.as_str()),
            principal: &call.principal,
            original: &call.params,
            exchange,
            pending,
            waiting_since: Instant::now(),
            own_task: upstream_task.then(UpstreamTask::default),
            caller,
            recheck_at: None,
            relay: call.relay.as_ref(),
        };
        Ok((call, later))
    }

    /// Carries the call to the upstream's reply, or to the first reason to stop it.
    async fn carry(
        &self,
        call: &mut Call<'_>,
        stops: &Stops<'_>,
    ) -> Result<Reply<Outcome>, EarlyEnd> {
        loop {
            let unanswered_at = self
                .input_wait
                .filter(|_| !call.pending.is_empty())
                .map(|wait| call.waiting_since + wait);
            let (at, due) = stops.next_due(unanswered_at, call.recheck_at);
            // The wake, the token and the timer inline, as in `Stops::race`: a helper
            // future around the three cost 64 B more in this wait (run 32).
            tokio::select! {
                event = call.exchange.next() => {
                    if let Some(reply) = Box::pin(call.on_event(event)).await {
                        return Ok(reply);
                    }
                    Box::pin(call.follow_upstream_task(stops)).await?;
                    continue;
                }
                () = self.wake.notified() => {}
                () = stops.stop.cancelled() => return Err(Ok(StopReason::Moved)),
                () = tokio::time::sleep_until(at) => {
                    if let Due::Stop(reason) = due {
                        return Err(Ok(reason));
                    }
                }
            }
            // Woken, or the time to look again after a failed look came.
            if !Box::pin(call.on_wake()).await {
                return Err(Ok(StopReason::Cancelled));
            }
        }
    }

    /// Whether the upstream runs this tool only as a task of its own (`upstream_tasks`).
    async fn own_task_only(&self, caller: &Caller<'_>, params: &Value) -> bool {
        let Some(tool) = params.get("name").and_then(Value::as_str) else {
            return false;
        };
        self.service
            .tool_traits
            .own_task_only(self.service.upstream.as_ref(), caller, tool)
            .await
    }
}

/// An upstream task the call created (`upstream_tasks`): the upstream's task id once it
/// answered, and whether its `tasks/result` is the exchange now.
#[derive(Default)]
struct UpstreamTask {
    created: Option<String>,
    following: bool,
}

/// One task's call in flight.
struct Call<'a> {
    service: &'a Arc<TaskService>,
    task_id: &'a str,
    /// The session client whose task this is: its waiters hear of each change.
    session: Option<&'a str>,
    principal: &'a str,
    exchange: Box<dyn Exchange>,
    /// Upstream request ids of outstanding input requests, by key.
    pending: HashMap<String, Value>,
    /// Since when the outstanding input has waited (a held call gives up after a while).
    waiting_since: Instant,
    /// The call's params as first sent (the retries' original), from which an
    /// early `requestState` is bound to the client's request.
    original: &'a serde_json::value::RawValue,
    /// The upstream's own task behind this call, for tools it runs only as tasks.
    own_task: Option<UpstreamTask>,
    /// Who the call is made for (the follow-up requests of an upstream task too).
    caller: Caller<'a>,
    /// When to look at the task again because the store failed to answer the last look.
    recheck_at: Option<Instant>,
    /// Who else hears the upstream's notifications of the call (`ToolCall::relay`).
    relay: Option<&'a super::NotificationRelay>,
}

impl Call<'_> {
    async fn on_event(
        &mut self,
        event: Option<Result<UpstreamEvent, UpstreamError>>,
    ) -> Option<Reply<Outcome>> {
        let event = match event {
            None => {
                return Some(Reply::Done(upstream_failure(&UpstreamError::Lost(
                    "the stream ended without a result".into(),
                ))));
            }
            Some(Err(e)) => return Some(Reply::Done(upstream_failure(&e))),
            Some(Ok(event)) => event,
        };
        match event {
            UpstreamEvent::Response { id, outcome } if &id == self.exchange.request_id() => {
                if let Some(own) = self.own_task.as_mut()
                    && !own.following
                    && let Ok(result) = &outcome
                    && let Some(upstream_task) = super::upstream_tasks::created_task_id(result)
                {
                    // Not the result yet: the upstream's task, to follow.
                    own.created = Some(upstream_task.to_owned());
                    return None;
                }
                let outcome = match (&self.own_task, outcome) {
                    (Some(_), Ok(result)) => {
                        Ok(super::upstream_tasks::without_upstream_task(result))
                    }
                    (_, outcome) => outcome,
                };
                return Some(match outcome {
                    Ok(result) if upstream_mrtr::asks_for_input(&result) => {
                        Reply::InputRequired(result)
                    }
                    Ok(result) => Reply::Done(completed(result, self.session.is_none())),
                    Err(error) => Reply::Done(Outcome::Failed {
                        message: format!("the tool call failed upstream: {}", error.message),
                        error,
                    }),
                });
            }
            UpstreamEvent::Response { .. } => {}
            UpstreamEvent::Notification { method, params } => {
                if let Some(relay) = self.relay {
                    let _ = relay.try_send((method.clone(), params.clone()));
                }
                self.on_notification(method, params).await;
            }
            UpstreamEvent::Request { id, method, params } => {
                self.on_request(id, method, params).await
            }
        }
        None
    }

    async fn on_notification(&mut self, method: String, params: Option<Value>) {
        match method.as_str() {
            method::PROGRESS => {
                if let Some(message) = progress_message(params.as_ref())
                    && let Err(e) = self
                        .service
                        .store
                        .set_status_message(self.task_id, &message)
                        .await
                {
                    tracing::warn!(error = %e, "could not record progress");
                }
                // A session client hears it too, under its own progress token.
                if self.session.is_some() {
                    self.service
                        .announce_change(self.task_id, self.session, params)
                        .await;
                }
            }
            // The upstream gave up on one of its requests (e.g. its own timeout).
            method::CANCELLED => {
                let request_id = params.as_ref().and_then(|p| p.get("requestId"));
                let key = self
                    .pending
                    .iter()
                    .find(|(_, id)| Some(*id) == request_id)
                    .map(|(k, _)| k.clone());
                if let Some(key) = key {
                    self.pending.remove(&key);
                    if let Err(e) = self
                        .service
                        .store
                        .withdraw_input_request(self.task_id, &key)
                        .await
                    {
                        tracing::warn!(error = %e, "could not withdraw an input request");
                    }
                    self.service.announce(self.task_id, self.session).await;
                }
            }
            _ => {}
        }
    }

    async fn on_request(&mut self, id: Value, method: String, params: Option<Value>) {
        if !method::INPUT_REQUESTS.contains(&method.as_str()) {
            let refusal = if method == method::PING {
                Ok(json!({}))
            } else {
                Err(ErrorObject::new(
                    code::METHOD_NOT_FOUND,
                    format!("{method} is not supported in a task"),
                ))
            };
            self.reply(id, refusal).await;
            return;
        }
        let request = InputRequest { method, params };
        match self
            .service
            .store
            .add_input_request(self.task_id, request)
            .await
        {
            Ok(Some(key)) => {
                self.service.meter().tasks().input_request_issued();
                tracing::info!(%key, "task needs input");
                if self.pending.is_empty() {
                    self.waiting_since = Instant::now();
                }
                self.pending.insert(key, id);
                self.service.runners.moved_on.notify_waiters();
                self.service.announce(self.task_id, self.session).await;
                self.hand_over_if_early().await;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, "could not record an input request");
                self.reply(
                    id,
                    Err(ErrorObject::internal(format!(
                        "gateway could not store the request: {e}"
                    ))),
                )
                .await;
            }
        }
    }

    /// Within the promotion budget a question goes to the caller as MRTR: an
    /// `InputRequiredResult` whose retry resumes this call, which stays open.
    async fn hand_over_if_early(&self) {
        if !self.service.runners.early_input_waiting(self.task_id) {
            return;
        }
        // Every round's params hash alike (the digest leaves out `_meta` and MRTR's own
        // fields), so the digest is made from the original, only when it is needed:
        // kept with each call, it cost 67 bytes and a hash of the params a task.
        let original: Value = serde_json::from_str(self.original.get()).unwrap_or_default();
        let digest = super::mrtr_bridge::request_digest(method::TOOLS_CALL, Some(&original));
        let result = super::mrtr_bridge::MrtrBridge::new(self.service.clone())
            .early_input_result(self.task_id, self.principal, &digest)
            .await;
        if let Some(result) = result
            && self
                .service
                .runners
                .hand_over_early_input(self.task_id, &result)
        {
            tracing::info!("input required within the promotion budget; asked as MRTR");
        }
    }

    /// Forwards newly accepted answers; `false` when the task is over.
    async fn on_wake(&mut self) -> bool {
        self.recheck_at = None;
        match still_running(self.service, self.task_id, self.principal).await {
            Some(true) => {}
            Some(false) => return false,
            None => {
                self.recheck_at = recheck_after_failure();
                return true;
            }
        }
        match self.service.store.take_answers(self.task_id).await {
            Ok(answers) => {
                for (key, answer) in answers {
                    if let Some(id) = self.pending.remove(&key) {
                        self.reply(id, super::dialect_2025::decode_answer(answer))
                            .await;
                        self.waiting_since = Instant::now();
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not take the task's answers");
                self.recheck_at = recheck_after_failure();
            }
        }
        true
    }

    async fn reply(&self, id: Value, outcome: Result<Value, ErrorObject>) {
        if let Err(e) = self.exchange.reply(id, outcome).await {
            tracing::warn!(error = %e, "could not answer the upstream's request");
        }
    }

    /// Stops the call upstream for `reason` (`upstream::stop`), and the upstream's own
    /// task behind it, if there is one.
    async fn stop(&mut self, reason: StopReason) {
        if let Err(e) = self.exchange.stop(reason).await {
            tracing::warn!(error = %e, "could not stop the call upstream");
        }
        if let Some(upstream_task) = self.own_task.as_ref().and_then(|n| n.created.as_deref()) {
            let params = json!({ "taskId": upstream_task });
            let cancelled = crate::upstream::forward::request(
                self.service.upstream.as_ref(),
                &self.caller,
                method::TASKS_CANCEL,
                Some(params),
                Some(std::time::Duration::from_secs(10)),
            )
            .await;
            if let Err(e) = cancelled {
                tracing::warn!(error = %e, "could not cancel the upstream's task");
            }
        }
    }

    /// Once the upstream answered with its own task, the call goes on as that task's
    /// `tasks/result`, which delivers its input requests and ends with the result.
    async fn follow_upstream_task(&mut self, stops: &Stops<'_>) -> Result<(), EarlyEnd> {
        let Some(own) = self.own_task.as_mut() else {
            return Ok(());
        };
        let Some(upstream_task) = own.created.clone().filter(|_| !own.following) else {
            return Ok(());
        };
        own.following = true;
        tracing::info!(upstream_task, "following the upstream's own task");
        let opening = self.service.upstream.open_call(
            &self.caller,
            method::TASKS_RESULT,
            Some(json!({ "taskId": upstream_task })),
        );
        // A stop here reaches the upstream's task too (`stop`), which would otherwise
        // run on without its result being read.
        let opened = stops.race(opening).await.map_err(Ok)?;
        self.exchange = opened.map_err(|e| Err(Halt::Finish(upstream_failure(&e))))?;
        Ok(())
    }
}

/// The upstream's result as the task's `result`; for 2026-07-28 clients completed with
/// `resultType` (a session client's result has none).
fn completed(mut result: Value, for_2026: bool) -> Outcome {
    if for_2026 && let Some(obj) = result.as_object_mut() {
        obj.entry("resultType").or_insert_with(|| "complete".into());
    }
    match serde_json::value::to_raw_value(&result) {
        Ok(raw) => Outcome::Completed(raw),
        Err(e) => upstream_failure(&UpstreamError::Protocol(e.to_string())),
    }
}

fn progress_message(params: Option<&Value>) -> Option<String> {
    let params = params?;
    if let Some(message) = params.get("message").and_then(Value::as_str) {
        return Some(message.to_owned());
    }
    let progress = params.get("progress")?;
    Some(match params.get("total") {
        Some(total) => format!("progress {progress} of {total}"),
        None => format!("progress {progress}"),
    })
}

fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Completed(_) => "completed",
        Outcome::Failed { .. } => "failed",
        Outcome::Cancelled { .. } => "cancelled",
    }
}
