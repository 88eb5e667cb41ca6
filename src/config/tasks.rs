//! What becomes a task and how long it lives: per-tool policy, TTLs and polling,
//! promotion, deferred results and progress keep-alives (`settings::tasks`).

use mtg_protocol::task_support::TaskSupport;

use crate::config::{ConfigError, InvalidValue};

/// No task lives shorter than this: a client needs time to read what it asked for.
pub const MIN_TTL_MS: u64 = 1000;

#[derive(Debug, Clone, clap::Args)]
pub struct TaskConfig {
    /// `pollIntervalMs` suggested to clients on every task.
    #[arg(long, env = "MTG_POLL_INTERVAL_MS", default_value_t = 1000)]
    pub poll_interval_ms: u64,

    /// TTL of a task, from creation, in milliseconds.
    #[arg(long, env = "MTG_DEFAULT_TTL_MS", default_value_t = 3_600_000,
          value_parser = clap::value_parser!(u64).range(MIN_TTL_MS..))]
    pub default_ttl_ms: u64,

    /// Upper bound on a task's TTL; `--default-ttl-ms` is capped by it.
    #[arg(long, env = "MTG_MAX_TTL_MS", default_value_t = 86_400_000,
          value_parser = clap::value_parser!(u64).range(MIN_TTL_MS..))]
    pub max_ttl_ms: u64,

    /// Task policy for one tool, `NAME=required|optional|forbidden`. Repeatable
    /// (comma-separated in the environment). Tools not named are `optional`.
    #[arg(long = "tool-policy", env = "MTG_TOOL_POLICY", value_delimiter = ',', value_parser = parse_tool_policy)]
    pub tool_policies: Vec<(String, TaskSupport)>,

    /// With N > 0, wait up to N ms for the upstream and answer inline when it finished;
    /// 0 turns every eligible call into a task at once.
    #[arg(long, env = "MTG_PROMOTE_AFTER_MS", default_value_t = 0)]
    pub promote_after_ms: u64,

    /// With N > 0, a `tools/call` of a 2026-07-28 client without the tasks extension
    /// that has not finished after N ms is answered with a deferred result (a taskId and
    /// words telling a model to call `get_task_result`), and goes on as a task of its
    /// caller; the gateway adds `get_task_result` and `cancel_task` to `tools/list`.
    /// For hosts that give up on a call after a fixed time. 0 is off.
    #[arg(long, env = "MTG_DEFER_AFTER_MS", default_value_t = 0)]
    pub defer_after_ms: u64,

    /// The longest `get_task_result` waits for a deferred call when the caller passes
    /// `waitSeconds` (for hosts that let a tool run longer than --defer-after-ms). 0, or
    /// any value below --defer-after-ms, means --defer-after-ms: one fetch never waits
    /// longer than the deferral budget unless the operator allows it.
    #[arg(long, env = "MTG_DEFERRED_MAX_WAIT_MS", default_value_t = 0)]
    pub deferred_max_wait_ms: u64,

    /// A call the gateway answers on SSE whose client sent `_meta.progressToken` gets a
    /// `notifications/progress` for it whenever N ms passed without one (a value above
    /// any sent before, a message such as "still running (2m 15s)"), so that hosts whose
    /// idle timer resets on progress keep a live call. 0 is off.
    #[arg(long, env = "MTG_PROGRESS_KEEPALIVE_MS", default_value_t = 15_000)]
    pub progress_keepalive_ms: u64,
}

impl TaskConfig {
    /// The TTL given to new tasks: the default, capped by the maximum.
    pub fn task_ttl_ms(&self) -> u64 {
        self.default_ttl_ms.min(self.max_ttl_ms)
    }

    /// A task must live until its client's first poll.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.task_ttl_ms() < self.poll_interval_ms {
            return Err(ConfigError::Inconsistent(format!(
                "the task TTL ({} ms, --default-ttl-ms capped by --max-ttl-ms) is shorter than \
                 --poll-interval-ms ({} ms): tasks would expire before a client's first poll",
                self.task_ttl_ms(),
                self.poll_interval_ms
            )));
        }
        Ok(())
    }
}

fn parse_tool_policy(raw: &str) -> Result<(String, TaskSupport), InvalidValue> {
    let (name, policy) = raw.split_once('=').ok_or_else(|| InvalidValue::NotPair {
        expected: "NAME=required|optional|forbidden",
        got: raw.to_owned(),
    })?;
    if name.is_empty() {
        return Err(InvalidValue::EmptyToolName(raw.to_owned()));
    }
    Ok((name.to_owned(), policy.parse()?))
}
