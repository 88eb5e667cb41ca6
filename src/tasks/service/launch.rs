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
        // The call, its start and the record to store are boxed before the task takes
        // them: a future keeps the space of what it captured for as long as it lives,
        // even once moved on, and this one lives as long as the call (run 22: 960 B of
        // task cell and 2,304 B of runner before, the call and start kept four times).
        let (call, start) = (Box::new(call), Box::new(start));
        let to_store = to_store.map(Box::new);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let _slot = slot;
                let stored = match to_store {
                    None => Ok(()),
                    Some(to_store) => {
                        // The record goes straight into the store's future: bound to a
                        // local here, its 300-odd bytes would stay in this task's cell
                        // for the call's whole life (run 32).
                        let counted = to_store.stored;
                        let created = service.store.create(to_store.record).await;
                        if created.is_ok() {
                            counted(&service.settings.meter);
                        }
                        created
                    }
                };
                let failed = stored.is_err();
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
                        done_tx,
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
