//! Where and how clients are served: the listening address, TLS, the worker threads,
//! and what the edge accepts from browsers and lax clients (`settings::edge`).

use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct EdgeConfig {
    /// Address the MCP endpoint (`/mcp`) and health check (`/healthz`) listen on.
    #[arg(long, env = "MTG_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Accept 2026-07-28 requests that lack a standard header (`MCP-Protocol-Version`,
    /// `Mcp-Method`, `Mcp-Name`) or an `Mcp-Param-*` header their tool calls for, for
    /// clients known to omit them. Headers that are present must still match the body.
    #[arg(long, env = "MTG_LENIENT_HEADERS", default_value_t = false)]
    pub lenient_headers: bool,

    /// Threads that serve connections, each with a single-threaded runtime of its own
    /// (a connection and its upstream exchanges stay on the thread that accepted it).
    /// Default: the CPUs the process may use (affinity and cgroup quota included).
    #[arg(long, env = "MTG_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,

    /// How long, at most, a worker thread watches for events before it sleeps, in
    /// microseconds: on a VM a sleeping thread's wake-up costs more than the wait, and an
    /// upstream's answer often comes within tens of microseconds. The window adapts per
    /// worker (none while events come far apart) and is skipped while the machine's CPU
    /// pressure (PSI) is above 30 % and for a second after the gateway's cgroup was
    /// throttled (a CPU limit). It spends CPU to cut latency; 0 turns it off.
    #[arg(long, env = "MTG_IDLE_POLL_US", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub idle_poll_us: u64,

    /// PEM certificate chain of the TLS listener: with it (and `--tls-key`), `--listen`
    /// serves HTTPS (HTTP/2 and HTTP/1.1 by ALPN). Read again when the file changes.
    #[arg(long, env = "MTG_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// PEM private key of the TLS listener (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "MTG_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// `Origin` values allowed on browser requests (repeatable). Requests carrying
    /// any other Origin get HTTP 403. Without this flag only loopback origins pass.
    #[arg(
        long = "allowed-origin",
        env = "MTG_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,
}

impl EdgeConfig {
    /// `--idle-poll-us` as a duration.
    pub fn idle_poll(&self) -> Duration {
        Duration::from_micros(self.idle_poll_us)
    }

    /// `--worker-threads`, else the CPUs available to the process.
    pub fn worker_threads(&self) -> std::num::NonZeroUsize {
        self.worker_threads
            .and_then(|n| std::num::NonZeroUsize::new(usize::from(n)))
            .or_else(|| std::thread::available_parallelism().ok())
            .unwrap_or(std::num::NonZeroUsize::MIN)
    }
}
