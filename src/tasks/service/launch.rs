//! Starting a task's runner, which stores a new task's record as its first step.

use std::sync::Arc;

use tokio::sync::{Notify, oneshot};

use crate::tasks::{TaskService, ToolCall, limits, runner, runners, start};
use crate::telemetry;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_store::TaskRecord;

impl TaskService {
    /// Starts the task's runner. A new task's record is stored by the runner itself, as
    /// its first step: the runner is a tokio task of its own from the start, so a caller
    /// whose request is dropped while the store writes (its client hung up) cannot
    /// leave a stored task that nothing runs.
    pub(in crate::tasks) fn spawn_runner(
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
        // What the runner takes, in one box: an async block keeps the space of each
        // value it captured for as long as it lives, even once moved on, and this one
        // lives as long as the call (run 22: the call and start kept four times; run 32:
        // the task's cell 512 -> 384 B once these went into one box).
        let parts = Box::new(RunnerParts {
            call: Box::new(call),
            start: Box::new(start),
            signals,
            done: done_tx,
            stored: stored_tx,
            // Boxed apart: its record is large, and kept for the store's write only.
            to_store: to_store.map(Box::new),
            slot,
        });
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let RunnerParts {
                    call,
                    start,
                    signals,
                    done,
                    stored: stored_tx,
                    to_store,
                    slot,
                } = RunnerParts::take(parts);
                let _slot = slot;
                // `failed` is read off in the arm: a local borrowed later (`is_err`)
                // would stay in this future for its whole life.
                let (stored, failed) = match to_store {
                    None => (Ok(()), false),
                    Some(to_store) => {
                        // The record goes straight into the store's future: bound to a
                        // local here, its 300-odd bytes would stay in this task's cell
                        // for the call's whole life (run 32).
                        let counted = to_store.stored;
                        let created = service.store.create(to_store.record).await;
                        let failed = created.is_err();
                        if !failed {
                            counted(&service.settings.meter);
                        }
                        (created, failed)
                    }
                };
                let awaited = !stored_tx.is_closed();
                let _ = stored_tx.send(stored);
                if awaited && !failed {
                    // Let the request that waits for the task answer first: on the
                    // worker's one thread the call would otherwise go upstream (a write,
                    // and the upstream woken) while the client's answer waits in the
                    // queue (run 31: a create's p50 -38 % on the memory store).
                    tokio::task::yield_now().await;
                }
                if !failed {
                    service.settings.meter.tasks().runner_started();
                    // Boxed, so the spawned task's cell stays small while the call
                    // waits (docs/benchmarks.md, run 17: an inline runner future, kept
                    // twice by the first `scope_runner`, took 6.8 KB a task).
                    let run = Box::pin(runner::run(
                        &service,
                        &runner_task_id,
                        call,
                        start,
                        signals,
                        done,
                    ));
                    service.settings.meter.clone().scope_runner(run).await;
                    service.settings.meter.tasks().runner_ended();
                }
                // An adopted call's exchange, if the task was never stored, is dropped
                // with `start` (the safety net of `Exchange`: it stops the call upstream).
                service.runners.remove(&runner_task_id);
            },
            span,
        ));
        Launched {
            stored: stored_rx,
            done: done_rx,
        }
    }
}

/// What a runner's task takes with it.
struct RunnerParts {
    call: Box<ToolCall>,
    start: Box<start::Start>,
    signals: runner::Signals,
    done: oneshot::Sender<()>,
    stored: oneshot::Sender<Result<(), mtg_store::StoreError>>,
    to_store: Option<Box<ToStore>>,
    /// Held until the runner ends: the principal's running call counts it.
    slot: Option<limits::RunningSlot>,
}

impl RunnerParts {
    /// The parts, their box freed: moved out in place (`*parts`), the box would stay
    /// allocated as long as the async block that captured it.
    #[allow(clippy::boxed_local)] // taken boxed so that the box is freed here
    fn take(parts: Box<Self>) -> Self {
        *parts
    }
}

/// A new task's record, stored by its runner before the call starts.
pub(in crate::tasks) struct ToStore {
    pub(in crate::tasks) record: TaskRecord,
    /// Counts the task once it is stored (a task or a held call).
    pub(in crate::tasks) stored: fn(&telemetry::Meter),
}

/// A runner just started: whether its task was stored, and when it ends.
pub(in crate::tasks) struct Launched {
    stored: oneshot::Receiver<Result<(), mtg_store::StoreError>>,
    pub(in crate::tasks) done: oneshot::Receiver<()>,
}

impl Launched {
    /// Waits until the task is stored (or could not be).
    pub(in crate::tasks) async fn stored(&mut self) -> Result<(), ErrorObject> {
        match (&mut self.stored).await {
            Ok(stored) => Ok(stored?),
            Err(_) => Err(ErrorObject::internal(
                "the task's runner stopped before the task was stored",
            )),
        }
    }
}
