//! Running the gateway: the metrics listener and admin API, the drain at SIGTERM,
//! readiness and the log format.

use std::net::SocketAddr;

#[derive(Debug, Clone, clap::Args)]
pub struct OperationsConfig {
    /// Address of the Prometheus `/metrics` endpoint; off when not set.
    #[arg(long, env = "MTG_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// File holding the bearer token of the admin API (`/admin/...` on the metrics
    /// listener: list, show and cancel any task, list instances). Off when not set.
    /// Read once at start; at least 16 characters, surrounding whitespace ignored.
    #[arg(long, env = "MTG_ADMIN_TOKEN_FILE", requires = "metrics_listen")]
    pub admin_token_file: Option<std::path::PathBuf>,

    /// How long a sign-in to the operator's console (`/admin/ui` on the metrics
    /// listener, on with --admin-token-file) lasts.
    #[arg(long, env = "MTG_ADMIN_SESSION_TTL_MS", default_value_t = 8 * 3_600_000, value_parser = clap::value_parser!(u64).range(1_000..=7 * 24 * 3_600_000))]
    pub admin_session_ttl_ms: u64,

    /// The operator's console shows a task's arguments and result (at most 64 KiB of
    /// each); without it, only the result's size. With it, an ended task also keeps its
    /// arguments in the store (without it, only the tool's name and progress token).
    #[arg(long, env = "MTG_ADMIN_SHOW_RESULTS", default_value_t = false)]
    pub admin_show_results: bool,

    /// On SIGTERM, how long running tasks may take to finish before the gateway exits
    /// (unfinished ones are then failed).
    #[arg(long, env = "MTG_DRAIN_TIMEOUT_MS", default_value_t = 30_000)]
    pub drain_timeout_ms: u64,

    /// `/readyz` checks only the store, not the upstream.
    #[arg(long, env = "MTG_READYZ_SKIP_UPSTREAM", default_value_t = false)]
    pub readyz_skip_upstream: bool,

    /// Log format: `pretty` or `json`. Verbosity follows `RUST_LOG` (default `info`).
    #[arg(long, env = "MTG_LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    pub log_format: String,
}
