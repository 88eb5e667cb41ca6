//! Why a task's call stopped before the upstream's final answer, and what the task
//! records for it: each stop's reason (`upstream::StopReason`, the one list of them)
//! as an outcome, and the outcomes every part of a run shares (time limit, upstream
//! failure).

use tokio::time::Instant;

use super::TaskService;
use crate::telemetry;
use crate::upstream::{StopReason, UpstreamError};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_store::Outcome;

/// Why a task's call stopped before the upstream's final answer.
pub(super) enum Halt {
    /// The task ends with this outcome (a failure of the gateway's or the upstream's).
    Finish(Outcome),
    /// The task ended elsewhere (cancelled), is another instance's now, or its input went
    /// to the client within the promotion budget: nothing more to record.
    Ended,
    /// The task reached its TTL unfinished: nothing to record, but the owner lets go of
    /// it (`TaskStore::let_go_expired`), as no end of the task will.
    Expired,
}

/// What the task records when the runner stops its call for `reason`; `input_wait` is
/// how long a held call waits for its client's answers.
pub(super) fn halt_for(
    service: &TaskService,
    reason: StopReason,
    input_wait: Option<std::time::Duration>,
) -> Halt {
    match reason {
        StopReason::TimedOut => Halt::Finish(timed_out(service)),
        StopReason::Unanswered => Halt::Finish(abandoned(input_wait.unwrap_or_default())),
        StopReason::Expired => Halt::Expired,
        // Ended elsewhere (cancelled) or another instance's now: nothing to record. The
        // rest are not the runner's stops.
        StopReason::Cancelled
        | StopReason::Moved
        | StopReason::ClientLeft
        | StopReason::ShuttingDown
        | StopReason::ClientCancelled
        | StopReason::Refused
        | StopReason::Abandoned => Halt::Ended,
    }
}

/// A held call whose client did not come back with its answers.
fn abandoned(wait: std::time::Duration) -> Outcome {
    let message = format!(
        "the client did not answer within {} ms; the call was cancelled upstream",
        wait.as_millis()
    );
    Outcome::Failed {
        error: ErrorObject::invalid_params(message.clone()),
        message,
    }
}

pub(super) fn timed_out(service: &TaskService) -> Outcome {
    let limit = service.settings.upstream_timeout.unwrap_or_default();
    upstream_failure(&UpstreamError::Timeout(limit.as_millis() as u64))
}

pub(super) fn upstream_failure(error: &UpstreamError) -> Outcome {
    telemetry::Meter::runner_failure(error.party().metric(), error.kind());
    let message = error.to_string();
    Outcome::Failed {
        error: ErrorObject::internal(message.clone()),
        message,
    }
}

pub(super) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
