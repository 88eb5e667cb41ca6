//! SEP-2663 tasks: creating them from `tools/call`, running them against the upstream,
//! and the `tasks/get`, `tasks/update` and `tasks/cancel` handlers.

mod credential;
pub mod deferral;
pub mod dialect_2025;
mod halt;
pub mod in_flight;
pub mod limits;
pub mod listen;
pub mod mrtr_bridge;
pub mod policy;
pub mod render;
mod runner;
mod runners;
mod start;
pub mod takeover;
mod tool_traits;
pub mod upstream_mrtr;
mod upstream_tasks;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::{Notify, oneshot};

use crate::telemetry;
use crate::upstream::Upstream;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::TaskStatus;
use mtg_store::{
    CANCELLED_BY_CLIENT, CANCELLED_BY_OPERATOR, CancelOutcome, Changes, MembershipStore, Store,
    TaskChange, TaskRecord, TaskStore, UpdateOutcome, WakeUps, now_ms,
};

/// Settings of the task machinery, taken from the config at start.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    pub instance_id: String,
    pub ttl_ms: u64,
    /// The longest TTL a client may ask for (`--max-ttl-ms`).
    pub max_ttl_ms: u64,
    /// The shortest: a client needs time to read what it asked for.
    pub min_ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub upstream_timeout: Option<Duration>,
    pub promote_after: Duration,
    /// `--defer-after-ms`: how long a call of a client that cannot take a task runs
    /// before it is answered with a deferred result instead; `None` is off.
    pub defer_after: Option<Duration>,
    /// `--deferred-max-wait-ms`: the longest a `get_task_result` waits when its caller
    /// asks for longer than `defer_after` (below it, `defer_after` holds).
    pub deferred_max_wait: Duration,
    /// Tasks one principal may have running on this instance; 0 = no limit.
    pub max_running_per_principal: u32,
    /// Where the running tasks are counted: one for every upstream of the gateway.
    pub running_counts: limits::RunningCounts,
    /// How long a held call waits for its client's answers (`--input-wait-timeout-ms`).
    pub input_wait: Duration,
    /// What held calls' `requestState`s are sealed with.
    pub state_keys: mrtr_bridge::StateKeys,
    pub takeover: TakeoverSettings,
    /// This upstream's metrics.
    pub meter: crate::telemetry::Meter,
}

/// When a live instance runs the call of a gone instance's task again.
#[derive(Debug, Clone, Default)]
pub struct TakeoverSettings {
    /// Tools the operator declares safe to run again (`--retry-on-owner-loss`), whatever
    /// the upstream's annotations say.
    pub retry_tools: std::collections::HashSet<String>,
    /// Takeovers after a lost owner a task may have; one more and it fails.
    pub max_takeovers: u32,
}

/// A `tools/call` to run as a task.
pub struct ToolCall {
    /// The call's params as the upstream should see them, as raw JSON: a running task
    /// holds them for its whole life, and as a `Value` tree even a small call's params
    /// take ~2 KB (a B-tree node per object).
    pub params: Box<RawValue>,
    /// Session capabilities the upstream must see (elicitation, sampling, roots).
    pub capabilities: Map<String, Value>,
    pub auth: Option<HeaderValue>,
    pub principal: String,
    /// For a 2025-xx session client's task: where the call runs and whom its changes
    /// concern.
    pub session: Option<dialect_2025::SessionLink>,
    /// The TTL the client asked for, already capped; the default otherwise.
    pub ttl_ms: Option<u64>,
    /// Where the runner also sends the upstream's notifications of the call, while its
    /// caller streams them (a deferrable call within its budget).
    pub relay: Option<NotificationRelay>,
}

/// The upstream's notifications of one call (method, params), for a caller that streams
/// them; a send that finds the channel full or closed is dropped.
pub type NotificationRelay = tokio::sync::mpsc::Sender<(String, Option<Value>)>;

impl ToolCall {
    /// The params as a tree, to change them for one upstream request.
    pub fn params_value(&self) -> Value {
        // They were serialised from a `Value` by the gateway, so they parse.
        serde_json::from_str(self.params.get()).unwrap_or_default()
    }
}

/// What the client gets for a task-eligible `tools/call`.
pub enum Started {
    /// The task exists; reply with `CreateTaskResult`.
    Task(Arc<TaskRecord>),
    /// The upstream answered within the promotion budget; no task was kept.
    Inline(Result<Box<RawValue>, ErrorObject>),
}

pub struct TaskService {
    store: Arc<dyn TaskStore>,
    /// Gone instances' tasks, to take over (`takeover`).
    membership: Arc<dyn MembershipStore>,
    wakeups: Arc<dyn WakeUps>,
    changes: Arc<dyn Changes>,
    /// Who here waits for a task to change (`tasks/result`, session GET streams).
    watchers: watch::Watchers,
    upstream: Arc<dyn Upstream>,
    settings: TaskSettings,
    /// The runners on this instance.
    runners: runners::Runners,
    running_limit: limits::RunningLimit,
    /// What the upstream's tools/list says about its tools.
    tool_traits: tool_traits::ToolTraits,
}

impl TaskService {
    /// This upstream's metrics.
    pub fn meter(&self) -> &telemetry::Meter {
        &self.settings.meter
    }

    pub fn start(store: &Store, upstream: Arc<dyn Upstream>, settings: TaskSettings) -> Arc<Self> {
        let mut wakeups = store.wakeups.wakeups(&settings.instance_id);
        let mut changes = store.changes.changes();
        let running_limit = limits::RunningLimit::new(
            settings.max_running_per_principal,
            settings.running_counts.clone(),
            settings.meter.clone(),
        );
        let service = Arc::new(Self {
            store: store.tasks.clone(),
            membership: store.membership.clone(),
            wakeups: store.wakeups.clone(),
            changes: store.changes.clone(),
            watchers: watch::Watchers::default(),
            upstream,
            settings,
            runners: runners::Runners::default(),
            running_limit,
            tool_traits: tool_traits::ToolTraits::default(),
        });
        let weak = Arc::downgrade(&service);
        tokio::spawn(async move {
            while let Some(task_id) = wakeups.recv().await {
                let Some(service) = weak.upgrade() else {
                    return;
                };
                service.runners.wake(&task_id);
            }
        });
        let weak = Arc::downgrade(&service);
        tokio::spawn(async move {
            while let Some(change) = changes.recv().await {
                let Some(service) = weak.upgrade() else {
                    return;
                };
                service.watchers.dispatch(&change);
            }
        });
        service
    }

    /// The TTL a task gets when its client asks for `requested` ms: within the maximum,
    /// and never so short that it expires before the client's first poll.
    pub fn clamp_ttl_ms(&self, requested: u64) -> u64 {
        let shortest = self.settings.min_ttl_ms.max(self.settings.poll_interval_ms);
        requested.min(self.settings.max_ttl_ms).max(shortest)
    }

    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    /// The ids of a session's tasks as they change, from whichever instance changed
    /// them, for as long as the feed is kept (one per session: a newer one replaces it).
    pub fn feed_session(&self, session: &str) -> watch::SessionFeed {
        self.watchers.feed_session(session)
    }

    /// Creates the task (durably) and starts its runner.
    pub async fn start_task(self: &Arc<Self>, call: ToolCall) -> Result<Started, ErrorObject> {
        self.start_task_within(call, self.settings.promote_after)
            .await
    }

    /// Starts a call of a client that cannot take a task as a task whose promotion budget
    /// is `--defer-after-ms`: within it the client gets the result (or, for a 2026-07-28
    /// client, the upstream's question as MRTR) as if the call were forwarded; past it,
    /// `Started::Task`, which the caller answers with a deferred result.
    pub async fn start_deferrable(
        self: &Arc<Self>,
        call: ToolCall,
        defer_after: Duration,
    ) -> Result<Started, ErrorObject> {
        self.start_task_within(call, defer_after).await
    }

    /// A running slot for a task of `principal`, for [`Self::start_adopted`]: taken
    /// before the call is handed over, so that a refusal leaves the call where it was.
    pub fn reserve(&self, principal: &str) -> Result<Reservation, ErrorObject> {
        Ok(Reservation(self.running_limit.reserve(principal)?))
    }

    /// Makes a call already open upstream a task (a pass-through client's call past
    /// `--defer-after-ms`): the runner carries `exchange` on from where its caller
    /// stopped reading. Returns once the task is stored; if it cannot be, the exchange
    /// is dropped, which cancels the call upstream.
    pub async fn start_adopted(
        self: &Arc<Self>,
        reservation: Reservation,
        call: ToolCall,
        exchange: Box<dyn crate::upstream::Exchange>,
    ) -> Result<Arc<TaskRecord>, ErrorObject> {
        let mut record = self.new_record(&call);
        record.resume = takeover::resume_of(&self.settings.state_keys, &call, &record.task_id);
        let task_id = record.task_id.clone();
        let seed = Arc::new(record.clone());
        if let Some(link) = &call.session {
            self.watchers.expect_session(&link.client_session);
        }
        let held = start::Held {
            exchange,
            pending: Default::default(),
            later: Vec::new(),
            input_wait: None,
        };
        let mut launched = self.spawn_runner(
            &task_id,
            call,
            start::Start::New(Some(held)),
            reservation.0,
            Some(ToStore {
                record,
                stored: telemetry::Meter::task_created,
            }),
        );
        launched.stored().await?;
        Ok(seed)
    }

    async fn start_task_within(
        self: &Arc<Self>,
        call: ToolCall,
        promote_after: Duration,
    ) -> Result<Started, ErrorObject> {
        // Held by the runner; released if the task is never stored.
        let slot = self.running_limit.reserve(&call.principal)?;
        let mut record = self.new_record(&call);
        record.resume = takeover::resume_of(&self.settings.state_keys, &call, &record.task_id);
        let task_id = record.task_id.clone();
        let principal = call.principal.clone();
        // The reply is the seed state just stored: no read back (one store round trip).
        let seed = Arc::new(record.clone());

        // A session client answers no MRTR round: within the budget it can only get
        // the final result, and only if its response mode allows (SEP-1905).
        let (budget, early_input) = match &call.session {
            None => (promote_after, true),
            Some(link) if link.immediate => (promote_after, false),
            Some(_) => (Duration::ZERO, false),
        };
        // Set up before the runner starts, so that its first question finds them.
        let early_input =
            (early_input && !budget.is_zero()).then(|| self.runners.expect_early_input(&task_id));
        if let Some(link) = &call.session {
            self.watchers.expect_session(&link.client_session);
        }
        let mut launched = self.spawn_runner(
            &task_id,
            call,
            start::Start::New(None),
            slot,
            Some(ToStore {
                record,
                stored: telemetry::Meter::task_created,
            }),
        );
        if let Err(error) = launched.stored().await {
            self.runners.withdraw_early_input(&task_id);
            return Err(error);
        }

        if !budget.is_zero() {
            // The caller does not know the task's id until this returns: if it hangs up
            // meanwhile, nobody could ever read or cancel the task.
            let mut unclaimed = Unclaimed {
                service: self.clone(),
                task_id: Some(task_id.clone()),
                principal: principal.clone(),
            };
            let inline = self
                .within_budget(&task_id, &principal, budget, launched.done, early_input)
                .await;
            unclaimed.task_id = None;
            if let Some(inline) = inline {
                return Ok(Started::Inline(inline));
            }
        }
        Ok(Started::Task(seed))
    }

    /// A new record for `call`, owned by this instance, `working`.
    /// The TTL of `call`'s task: the client's (already clamped) or the default.
    fn ttl_of(&self, call: &ToolCall) -> u64 {
        call.ttl_ms.unwrap_or(self.settings.ttl_ms)
    }

    fn new_record(&self, call: &ToolCall) -> TaskRecord {
        let now = now_ms();
        TaskRecord {
            task_id: uuid::Uuid::new_v4().to_string(),
            principal: call.principal.clone(),
            owner: self.settings.instance_id.clone(),
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms: self.ttl_of(call),
            poll_interval_ms: self.settings.poll_interval_ms,
            input_requests: Default::default(),
            answers: Default::default(),
            next_input_key: 0,
            result: None,
            error: None,
            request: call.params.clone(),
            upstream_state: None,
            resume: None,
            takeovers: 0,
        }
    }

    /// Starts the task's runner. A new task's record is stored by the runner itself, as
    /// its first step: the runner is a tokio task of its own from the start, so a caller
    /// whose request is dropped while the store writes (its client hung up) cannot
    /// leave a stored task that nothing runs.
    fn spawn_runner(
        self: &Arc<Self>,
        task_id: &str,
        call: ToolCall,
        start: start::Start,
        slot: Option<limits::RunningSlot>,
        to_store: Option<ToStore>,
    ) -> Launched {
        let signals = runner::Signals {
            wake: Arc::new(Notify::new()),
            stop: tokio_util::sync::CancellationToken::new(),
        };
        let handle = runners::RunnerHandle {
            wake: signals.wake.clone(),
            stop: signals.stop.clone(),
            principal: call.principal.clone(),
        };
        self.runners.insert(task_id, handle);
        let (done_tx, done_rx) = oneshot::channel();
        let (stored_tx, stored_rx) = oneshot::channel();
        // A task outlives its request: its own trace, linked to the request that made it.
        let span = tracing::info_span!(parent: None, "task", task_id = %task_id);
        span.follows_from(tracing::Span::current());
        let service = self.clone();
        let runner_task_id = task_id.to_owned();
        // The call, its start and the record to store are boxed before the task takes
        // them: a future keeps the space of what it captured for as long as it lives,
        // even once moved on, and this one lives as long as the call (run 22: 960 B of
        // task cell and 2,304 B of runner before, the call and start held four times).
        let (call, start) = (Box::new(call), Box::new(start));
        let to_store = to_store.map(Box::new);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let _slot = slot;
                let stored = match to_store {
                    None => Ok(()),
                    Some(to_store) => {
                        let ToStore { record, stored } = *to_store;
                        let created = service.store.create(record).await;
                        if created.is_ok() {
                            stored(&service.settings.meter);
                        }
                        created
                    }
                };
                let failed = stored.is_err();
                let _ = stored_tx.send(stored);
                if !failed {
                    service.settings.meter.task_runner_started();
                    // Boxed, so the spawned task's cell stays small while the call
                    // waits (docs/benchmarks.md, run 17: an inline runner future, held
                    // twice by the first `scope_runner`, took 6.8 KB a task).
                    let run = Box::pin(runner::run(
                        &service,
                        &runner_task_id,
                        call,
                        start,
                        signals,
                        done_tx,
                    ));
                    service.settings.meter.clone().scope_runner(run).await;
                    service.settings.meter.task_runner_ended();
                }
                // A held call's open exchange, if any, is dropped with `start`, which
                // cancels it upstream.
                service.runners.remove(&runner_task_id);
            },
            span,
        ));
        Launched {
            stored: stored_rx,
            done: done_rx,
        }
    }

    /// Waits up to the promotion budget for the call to finish or to ask for input;
    /// either is the caller's answer, and the task is dropped.
    async fn within_budget(
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

    pub async fn get(
        &self,
        task_id: &str,
        principal: &str,
    ) -> Result<Arc<TaskRecord>, ErrorObject> {
        self.store
            .get(task_id, principal)
            .await?
            .ok_or_else(|| not_found(task_id))
    }

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
                    self.settings.meter.input_requests_answered(keys.len());
                    tracing::debug!(task_id, ?keys, "accepted input responses");
                    self.wakeups.wake(&owner, task_id).await?;
                    self.announce(task_id, None).await;
                }
                Ok(())
            }
        }
    }

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
    /// whoever watches the task; `session` names the session client whose task it is.
    async fn cancel_as(
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

    /// Tells watchers on every instance that a task changed (a session's GET stream, a
    /// `tasks/result`, a `subscriptions/listen` stream); `session` names the session
    /// client whose task it is, if any.
    async fn announce(&self, task_id: &str, session: Option<&str>) {
        self.announce_change(task_id, session, None).await;
    }

    /// The same, with the upstream's progress on the task (only a session client hears
    /// progress: SEP-2663 has none on tasks).
    async fn announce_change(&self, task_id: &str, session: Option<&str>, progress: Option<Value>) {
        let change = TaskChange {
            task_id: task_id.to_owned(),
            session: session.map(str::to_owned),
            progress,
        };
        if let Err(e) = self.changes.announce(&change).await {
            tracing::warn!(task_id, error = %e, "could not announce a task's change");
        }
    }
}

/// A running slot taken for a task not yet made ([`TaskService::reserve`]).
pub struct Reservation(Option<limits::RunningSlot>);

/// A new task's record, stored by its runner before the call starts.
struct ToStore {
    record: TaskRecord,
    /// Counts the task once it is stored (a task or a held call).
    stored: fn(&telemetry::Meter),
}

/// A runner just started: whether its task was stored, and when it ends.
struct Launched {
    stored: oneshot::Receiver<Result<(), mtg_store::StoreError>>,
    done: oneshot::Receiver<()>,
}

impl Launched {
    /// Waits until the task is stored (or could not be).
    async fn stored(&mut self) -> Result<(), ErrorObject> {
        match (&mut self.stored).await {
            Ok(stored) => Ok(stored?),
            Err(_) => Err(ErrorObject::internal(
                "the task's runner stopped before the task was stored",
            )),
        }
    }
}

/// A task whose creator waits within the promotion budget; dropped while still set (the
/// client hung up), it is cancelled, so its upstream call stops and its running slot
/// frees.
struct Unclaimed {
    service: Arc<TaskService>,
    task_id: Option<String>,
    principal: String,
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

pub(crate) fn not_found(task_id: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!(
        "Failed to retrieve task: no task {task_id:?} (unknown, expired, or not yours)"
    ))
}
