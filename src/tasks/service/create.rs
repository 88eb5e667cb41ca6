//! Creating tasks: a `tools/call` made a task (within a promotion or deferral budget),
//! a pass-through call adopted as one, and the records they start from.

use std::sync::Arc;
use std::time::Duration;

use super::inline::Unclaimed;
use super::launch::ToStore;
use crate::tasks::{Started, TaskService, ToolCall, limits, start, takeover, waiters};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_store::{NewTask, TaskRecord, now_ms};

impl TaskService {
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
            self.expect_session(&link.client_session).await;
        }
        let adopted = start::Adopted {
            exchange,
            pending: Default::default(),
            later: Vec::new(),
            input_wait: None,
        };
        let mut launched = self.spawn_runner(
            &task_id,
            call,
            start::Start::New(Some(adopted)),
            reservation.0,
            Some(ToStore {
                record,
                stored: |meter| meter.tasks().created(),
            }),
        );
        launched.stored().await?;
        Ok(seed)
    }

    /// `session` is about to have a task: its changes queue for its GET stream, and
    /// are heard here before the task starts, so its end reaches the stream.
    async fn expect_session(&self, session: &str) {
        self.waiters.expect_session(session);
        self.waiters.heard(waiters::HEARD_WITHIN).await;
    }

    async fn start_task_within(
        self: &Arc<Self>,
        call: ToolCall,
        promote_after: Duration,
    ) -> Result<Started, ErrorObject> {
        // Kept by the runner; released if the task is never stored.
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
            self.expect_session(&link.client_session).await;
        }
        let mut launched = self.spawn_runner(
            &task_id,
            call,
            start::Start::New(None),
            slot,
            Some(ToStore {
                record,
                stored: |meter| meter.tasks().created(),
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

    /// The TTL a task gets when its client asks for `requested` ms: within the maximum,
    /// and never so short that it expires before the client's first poll.
    pub fn clamp_ttl_ms(&self, requested: u64) -> u64 {
        let shortest = self.settings.min_ttl_ms.max(self.settings.poll_interval_ms);
        requested.min(self.settings.max_ttl_ms).max(shortest)
    }

    /// A new record for `call`, owned by this instance, `working`.
    /// The TTL of `call`'s task: the client's (already clamped) or the default.
    pub(in crate::tasks) fn ttl_of(&self, call: &ToolCall) -> u64 {
        call.ttl_ms.unwrap_or(self.settings.ttl_ms)
    }

    pub(in crate::tasks) fn new_record(&self, call: &ToolCall) -> TaskRecord {
        let new = NewTask {
            task_id: uuid::Uuid::new_v4().to_string(),
            principal: call.principal.clone(),
            owner: self.settings.instance_id.clone(),
            request: call.params.clone(),
            ttl_ms: self.ttl_of(call),
            poll_interval_ms: self.settings.poll_interval_ms,
            keep_arguments: self.settings.keep_arguments,
        };
        TaskRecord::working(new, now_ms())
    }
}

/// A running slot taken for a task not yet made ([`TaskService::reserve`]).
pub struct Reservation(Option<limits::RunningSlot>);
