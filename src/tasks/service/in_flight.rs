//! What this instance runs right now and whether it can serve, for the operator's
//! console: counted here, where the runners are, rather than read back from metrics.

use std::time::Duration;

use crate::tasks::TaskService;

/// Longest a readiness check waits for the store or the upstream.
const READY_WITHIN: Duration = Duration::from_secs(3);

/// This instance's calls in flight for one upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Runners of tasks (and of held calls) here.
    pub runners: usize,
    /// Held MRTR calls (`mrtr_bridge`): hidden tasks waiting for a client's retry.
    pub held_calls: usize,
    /// Plain calls answered with a deferred result whose runner is still here.
    pub deferred_calls: usize,
}

/// Whether the store and the upstream answer, as `/readyz` asks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub store: Result<(), String>,
    /// `None` when the upstream is not asked (`--readyz-skip-upstream`).
    pub upstream: Option<Result<(), String>>,
}

impl TaskService {
    pub fn in_flight(&self) -> InFlight {
        let (runners, held_calls, deferred_calls) = self
            .runners
            .counts(|principal| principal.starts_with(crate::tasks::mrtr_bridge::HELD_PREFIX));
        InFlight {
            runners,
            held_calls,
            deferred_calls,
        }
    }

    /// A plain call was answered with a deferred result; its task runs on.
    pub fn call_deferred(&self, task_id: &str) {
        self.meter().calls().deferred();
        self.runners.mark_deferred(task_id);
    }

    pub async fn readiness(&self, ask_upstream: bool) -> Readiness {
        let late = |what: &str| format!("{what} did not answer within {READY_WITHIN:?}");
        let store = async {
            match tokio::time::timeout(READY_WITHIN, self.store.ping()).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                Err(_) => Err(late("the store")),
            }
        };
        let upstream = async {
            if !ask_upstream {
                return None;
            }
            Some(
                match tokio::time::timeout(READY_WITHIN, self.upstream.ready()).await {
                    Ok(answer) => answer.map_err(|e| e.to_string()),
                    Err(_) => Err(late("the upstream")),
                },
            )
        };
        let (store, upstream) = tokio::join!(store, upstream);
        Readiness { store, upstream }
    }
}
