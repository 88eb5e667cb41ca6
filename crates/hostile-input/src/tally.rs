//! Counting: the outcomes per class, and the failures kept for the report.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::case::Case;
use crate::verdict::{Outcome, Verdict};
use crate::{KEPT_FAILURES, log_path};

#[derive(Default)]
pub(crate) struct ClassTally {
    pub(crate) sent: u64,
    pub(crate) answered: u64,
    pub(crate) closed: u64,
    pub(crate) failures: u64,
}

pub(crate) struct Failure {
    pub(crate) class: &'static str,
    pub(crate) index: u64,
    pub(crate) reason: String,
    pub(crate) request: Vec<u8>,
}

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) classes: BTreeMap<&'static str, ClassTally>,
    pub(crate) statuses: BTreeMap<u16, u64>,
    pub(crate) rpc: BTreeMap<String, u64>,
    pub(crate) failures: u64,
    pub(crate) kept: Vec<Failure>,
    pub(crate) slowest: Duration,
}

impl Tally {
    pub(crate) fn record(
        &mut self,
        case: &Case,
        index: u64,
        outcome: &Outcome,
        verdict: Verdict,
        took: Duration,
    ) {
        let class = self.classes.entry(case.class).or_default();
        class.sent += 1;
        match outcome {
            Outcome::Responses(answers) => {
                class.answered += 1;
                for answer in answers {
                    *self.statuses.entry(answer.status).or_default() += 1;
                }
            }
            Outcome::Closed(_) | Outcome::Aborted | Outcome::H2Frames => class.closed += 1,
            _ => {}
        }
        for code in verdict.rpc {
            *self.rpc.entry(code).or_default() += 1;
        }
        self.slowest = self.slowest.max(took);
        if let Some(reason) = verdict.failure {
            class.failures += 1;
            self.failures += 1;
            self.keep(Failure {
                class: case.class,
                index,
                reason,
                request: case.render(),
            });
        }
    }

    pub(crate) fn keep(&mut self, failure: Failure) {
        if self.kept.len() < KEPT_FAILURES {
            self.kept.push(failure);
        }
    }

    pub(crate) fn merge(&mut self, other: Tally) {
        for (name, theirs) in other.classes {
            let mine = self.classes.entry(name).or_default();
            mine.sent += theirs.sent;
            mine.answered += theirs.answered;
            mine.closed += theirs.closed;
            mine.failures += theirs.failures;
        }
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        for (code, n) in other.rpc {
            *self.rpc.entry(code).or_default() += n;
        }
        self.failures += other.failures;
        self.slowest = self.slowest.max(other.slowest);
        for failure in other.kept {
            self.keep(failure);
        }
    }

    pub(crate) fn sent(&self) -> u64 {
        self.classes.values().map(|c| c.sent).sum()
    }
}

/// The failing requests' bytes, one file each, next to the gateway's log.
pub(crate) fn save_failures(tally: &Tally) -> Result<(), String> {
    let dir = log_path()?.with_file_name("failures");
    for failure in &tally.kept {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let file = dir.join(format!("request-{}.bin", failure.index));
        std::fs::write(&file, &failure.request).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(())
}
