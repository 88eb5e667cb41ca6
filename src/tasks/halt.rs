//! Why a task's call stopped before the upstream's final answer, and the outcomes of
//! the stops every part of a run shares (time limit, upstream failure).

use tokio::time::Instant;

use super::TaskService;
use crate::telemetry;
use crate::upstream::UpstreamError;
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_store::Outcome;

/// Why a task's call stopped before the upstream's final answer.
pub(super) enum Halt {
    /// The task ends with this outcome (a failure of the gateway's or the upstream's).
    Finish(Outcome),
    /// The task ended elsewhere (cancelled, expired), or its input went to the client
    /// within the promotion budget: nothing more to record.
    Ended,
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
