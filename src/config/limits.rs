//! Per-caller and per-instance limits: running tasks, `tasks/*` rate, body size, and
//! the sessions the gateway serves itself (`settings::edge`, `settings::gateway`).

#[derive(Debug, Clone, clap::Args)]
pub struct LimitsConfig {
    /// With N > 0, one caller (principal) may have at most N tasks running on this
    /// instance; a `tools/call` that would start one more gets error -31429. 0 means no
    /// limit. Each instance counts the tasks it runs.
    #[arg(long, env = "MTG_MAX_RUNNING_TASKS_PER_PRINCIPAL", default_value_t = 0)]
    pub max_running_tasks_per_principal: u32,

    /// With N > 0, one caller (principal) may send at most N `tasks/*` requests a second
    /// to this instance (bursts of N); more get HTTP 429, error -31430, with
    /// `Retry-After`. 0 means no limit.
    #[arg(long, env = "MTG_MAX_TASK_REQUESTS_PER_SECOND", default_value_t = 0)]
    pub max_task_requests_per_second: u32,

    /// A 2025-xx client session the gateway serves itself (stdio and 2026-07-28
    /// upstreams) is forgotten after this long without a request, in ms (a call in
    /// flight keeps it). Clients that never send DELETE would otherwise fill the table.
    #[arg(long, env = "MTG_SESSION_IDLE_TIMEOUT_MS", default_value_t = 3_600_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub session_idle_timeout_ms: u64,

    /// Most client sessions the gateway serves itself at once, per instance; one more
    /// `initialize` gets HTTP 503 until idle sessions expire or clients end theirs.
    #[arg(long, env = "MTG_MAX_SESSIONS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions: u64,

    /// Largest request body accepted, in bytes; larger bodies get HTTP 413.
    #[arg(long, env = "MTG_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
}
