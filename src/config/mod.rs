//! Command-line flags and environment variables, read once at start and passed down.

pub mod file;
pub mod upstreams;

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

use mtg_protocol::task_support::TaskSupport;
use mtg_store::redis::{BadNamespace, StoreNamespace, Target};

/// Every flag has an environment variable of the same name, upper-cased with a `MTG_` prefix.
#[derive(Debug, Clone, Parser)]
#[command(name = "mcp-task-gateway", version, about)]
pub struct Config {
    /// Address the MCP endpoint (`/mcp`) and health check (`/healthz`) listen on.
    #[arg(long, env = "MTG_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// URL of the plain Streamable HTTP MCP server to put tasks in front of, served at
    /// `/mcp`; or `NAME=URL`, served at `/mcp/NAME` (repeatable; NAME is
    /// `[a-z0-9][a-z0-9-]*`). At least one upstream is required: this, `--upstream-cmd`
    /// or the config file's `[upstreams.NAME]`.
    #[arg(id = "upstream", long = "upstream", env = "MTG_UPSTREAM", value_name = "[NAME=]URL", value_parser = upstreams::parse_upstream_arg)]
    pub upstream_args: Vec<upstreams::UpstreamArg>,

    /// The upstream served at `/mcp` (`--upstream URL`), once resolved.
    #[arg(skip)]
    pub upstream: Option<http::Uri>,

    /// The upstreams served at `/mcp/NAME`, from `--upstream NAME=URL` and the config
    /// file, once resolved.
    #[arg(skip)]
    pub upstreams: Vec<upstreams::NamedUpstream>,

    /// In a named upstream's settings (`for_upstream`), its name.
    #[arg(skip)]
    pub upstream_name: Option<String>,

    /// Command line of a local stdio MCP server to start and put tasks in front of,
    /// e.g. "npx -y @modelcontextprotocol/server-everything". Split like a POSIX shell
    /// does (quotes, backslashes) but not run through one. The gateway restarts it
    /// when it exits.
    #[arg(long, env = "MTG_UPSTREAM_CMD", value_parser = parse_upstream_cmd)]
    pub upstream_cmd: Option<CommandLine>,

    /// Environment variable for the `--upstream-cmd` process, `KEY=VALUE`
    /// (repeatable; comma-separated in the environment). The process inherits the
    /// gateway's environment otherwise.
    #[arg(long = "upstream-env", env = "MTG_UPSTREAM_ENV", value_delimiter = ',', value_parser = parse_env_pair)]
    pub upstream_env: Vec<(String, String)>,

    /// Working directory of the `--upstream-cmd` process (default: the gateway's).
    #[arg(long, env = "MTG_UPSTREAM_CWD")]
    pub upstream_cwd: Option<std::path::PathBuf>,

    /// Most `--upstream-cmd` processes to run. A call that may ask the client for
    /// input gets a process to itself while it runs (a stdio server's requests carry
    /// no link to the call they belong to), so more processes let other calls go on
    /// meanwhile. Processes after the first start only when needed.
    #[arg(long, env = "MTG_UPSTREAM_POOL", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub upstream_pool: u16,

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

    /// Time limit for one upstream call, from sending it to its final answer
    /// (time spent waiting for a client's `tasks/update` included). 0 means no limit.
    #[arg(long, env = "MTG_UPSTREAM_TIMEOUT_MS", default_value_t = 0)]
    pub upstream_timeout_ms: u64,

    /// Task policy for one tool, `NAME=required|optional|forbidden`. Repeatable
    /// (comma-separated in the environment). Tools not named are `optional`.
    #[arg(long = "tool-policy", env = "MTG_TOOL_POLICY", value_delimiter = ',', value_parser = parse_tool_policy)]
    pub tool_policies: Vec<(String, TaskSupport)>,

    /// A tool whose call may run again when the gateway instance running it is lost
    /// (repeatable; comma-separated in the environment), besides the ones the upstream
    /// annotates `readOnlyHint` or `idempotentHint`. Another instance then takes the
    /// task over and calls the tool again.
    #[arg(
        long = "retry-on-owner-loss",
        env = "MTG_RETRY_ON_OWNER_LOSS",
        value_delimiter = ',',
        value_name = "TOOL"
    )]
    pub retry_on_owner_loss: Vec<String>,

    /// Most times one task is taken over after the instance running it was lost; the
    /// next loss fails it (a call that brings down every instance that runs it must not
    /// take the fleet down). Hand-overs at a graceful stop do not count. 0: never.
    #[arg(long, env = "MTG_MAX_TAKEOVERS", default_value_t = 2)]
    pub max_takeovers: u32,

    /// How long a bridged call held for a 2026-07-28 client's answers (MRTR bridge) waits
    /// for the client's retry; then it is cancelled upstream and a late retry is refused.
    #[arg(long, env = "MTG_INPUT_WAIT_TIMEOUT_MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub input_wait_timeout_ms: u64,

    /// The secret that seals the `requestState` of held calls (at least 32 bytes), the
    /// same on every instance. Unset: a random key of this process, so retries must come
    /// back to the instance that held the call.
    #[arg(long, env = "MTG_REQUEST_STATE_KEY", hide_env_values = true, value_parser = parse_state_key)]
    pub request_state_key: Option<String>,

    /// The key before the current one, accepted (not used to seal) during a rotation.
    #[arg(long, env = "MTG_REQUEST_STATE_PREVIOUS_KEY", hide_env_values = true, value_parser = parse_state_key)]
    pub request_state_previous_key: Option<String>,

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

    /// Accept 2026-07-28 requests that lack a standard header (`MCP-Protocol-Version`,
    /// `Mcp-Method`, `Mcp-Name`) or an `Mcp-Param-*` header their tool calls for, for
    /// clients known to omit them. Headers that are present must still match the body.
    #[arg(long, env = "MTG_LENIENT_HEADERS", default_value_t = false)]
    pub lenient_headers: bool,

    /// How much each upstream connection the gateway's own calls use (tasks, bridged
    /// requests) reads at a time, in bytes. A running task holds one connection, mostly
    /// idle, for its whole call: on `http://` upstreams the buffer exists only while
    /// bytes are read; on `https://` ones it is hyper's, held for the connection's life.
    /// Larger answers still arrive whole, in more reads. Pass-through is not affected.
    #[arg(long, env = "MTG_UPSTREAM_READ_BUFFER_BYTES", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(512..=1_048_576))]
    pub upstream_read_buffer_bytes: u32,

    /// The gateway's own calls to an HTTP upstream (tasks, bridged requests) go as
    /// HTTP/2 streams on a pool of connections instead of one HTTP/1.1 connection per
    /// call in flight: prior-knowledge h2c for `http://`, and for `https://` whenever
    /// TLS's ALPN chooses h2. Much less memory per held call; the upstream must speak
    /// HTTP/2 (an HTTP/1.1-only `http://` upstream fails its calls). Pass-through
    /// traffic is not affected.
    #[arg(long, env = "MTG_UPSTREAM_HTTP2", default_value_t = false)]
    pub upstream_http2: bool,

    /// With `--upstream-http2`, the most calls (streams) put on one HTTP/2 connection;
    /// past it another connection is opened. At most the upstream's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (often 100 to 250; hyper servers: 200): calls
    /// over the server's cap would wait for others to end.
    #[arg(long, env = "MTG_UPSTREAM_HTTP2_MAX_STREAMS", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub upstream_http2_max_streams: u32,

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

    /// Largest request body accepted, in bytes; larger bodies get HTTP 413.
    #[arg(long, env = "MTG_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Header whose value identifies the caller; tasks are bound to it. Without it,
    /// the caller is identified by a hash of the `Authorization` header.
    #[arg(long, env = "MTG_IDENTITY_HEADER")]
    pub identity_header: Option<http::HeaderName>,

    /// PEM certificate chain of the TLS listener: with it (and `--tls-key`), `--listen`
    /// serves HTTPS (HTTP/2 and HTTP/1.1 by ALPN). Read again when the file changes.
    #[arg(long, env = "MTG_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// PEM private key of the TLS listener (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "MTG_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// Issuer of the bearer JWTs the gateway accepts: with it set, every `/mcp` request
    /// needs a valid token (the gateway is an OAuth 2.1 resource server), and tasks
    /// belong to the token's (issuer, subject). Its keys come from
    /// `--auth-jwt-jwks-url`, else from its metadata (RFC 8414 / OpenID discovery).
    #[arg(long, env = "MTG_AUTH_JWT_ISSUER", requires = "auth_jwt_audience")]
    pub auth_jwt_issuer: Option<String>,

    /// The gateway's resource URI (RFC 8707), e.g. `https://mcp.example.com/mcp`: tokens
    /// must name it in `aud`; the protected resource metadata says it is the resource.
    #[arg(long, env = "MTG_AUTH_JWT_AUDIENCE", requires = "auth_jwt_issuer")]
    pub auth_jwt_audience: Option<String>,

    /// The issuer's JSON Web Key Set URL (default: found through the issuer's metadata).
    #[arg(long, env = "MTG_AUTH_JWT_JWKS_URL", requires = "auth_jwt_issuer")]
    pub auth_jwt_jwks_url: Option<String>,

    /// Signature algorithms accepted (comma-separated). `none` and HMAC are refused.
    #[arg(long, env = "MTG_AUTH_JWT_ALGORITHMS", value_delimiter = ',',
          default_value = "RS256,RS384,RS512,PS256,PS384,PS512,ES256,ES384,EdDSA",
          value_parser = crate::auth::parse_algorithm)]
    pub auth_jwt_algorithms: Vec<jsonwebtoken::Algorithm>,

    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    #[arg(long, env = "MTG_AUTH_JWT_LEEWAY_S", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(..=300))]
    pub auth_jwt_leeway_s: u64,

    /// A scope every `tools/call` needs (repeatable; comma-separated in the environment).
    #[arg(
        long = "auth-scope-tools-call",
        env = "MTG_AUTH_SCOPES_TOOLS_CALL",
        value_delimiter = ',',
        requires = "auth_jwt_issuer"
    )]
    pub auth_scopes_tools_call: Vec<String>,

    /// A scope every `tasks/*` request needs (repeatable; comma-separated in the
    /// environment).
    #[arg(
        long = "auth-scope-tasks",
        env = "MTG_AUTH_SCOPES_TASKS",
        value_delimiter = ',',
        requires = "auth_jwt_issuer"
    )]
    pub auth_scopes_tasks: Vec<String>,

    /// What the gateway sends upstream as `Authorization`: `client` (the caller's own
    /// header, as it came), `none`, or `static` (the value in
    /// `--upstream-credential-file`, e.g. `Bearer <service token>`).
    #[arg(long, env = "MTG_UPSTREAM_CREDENTIAL", default_value = "client",
          value_parser = ["client", "none", "static"])]
    pub upstream_credential: String,

    /// File holding the `Authorization` value for `--upstream-credential static`; read
    /// once at start, surrounding whitespace ignored.
    #[arg(long, env = "MTG_UPSTREAM_CREDENTIAL_FILE")]
    pub upstream_credential_file: Option<std::path::PathBuf>,

    /// `Origin` values allowed on browser requests (repeatable). Requests carrying
    /// any other Origin get HTTP 403. Without this flag only loopback origins pass.
    #[arg(
        long = "allowed-origin",
        env = "MTG_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,

    /// Roots the gateway reports when an upstream asks `roots/list` outside any call
    /// (repeatable, `file://` URIs).
    #[arg(long = "root", env = "MTG_ROOTS", value_delimiter = ',')]
    pub roots: Vec<String>,

    /// Name of this gateway instance; owner of the tasks it runs. Unique per instance
    /// (default: hostname and a random suffix).
    #[arg(long, env = "MTG_INSTANCE_ID", default_value_t = default_instance_id(), value_parser = parse_instance_id)]
    pub instance_id: String,

    /// TOML or YAML file mirroring these flags (keys are flag names). Flags and
    /// environment variables override it.
    #[arg(long, env = "MTG_CONFIG")]
    pub config: Option<std::path::PathBuf>,

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
    /// each); without it, only the result's size.
    #[arg(long, env = "MTG_ADMIN_SHOW_RESULTS", default_value_t = false)]
    pub admin_show_results: bool,

    /// On SIGTERM, how long running tasks may take to finish before the gateway exits
    /// (unfinished ones are then failed).
    #[arg(long, env = "MTG_DRAIN_TIMEOUT_MS", default_value_t = 30_000)]
    pub drain_timeout_ms: u64,

    /// `/readyz` checks only the store, not the upstream.
    #[arg(long, env = "MTG_READYZ_SKIP_UPSTREAM", default_value_t = false)]
    pub readyz_skip_upstream: bool,
    /// Shared task store: a Redis URL (`redis://` or `rediss://` for TLS), or the
    /// sentinels of a master (`redis+sentinel://host1:26379,host2:26379/<master-name>`,
    /// `rediss+sentinel://` for TLS). Without it (or --redis-cluster), tasks live in this
    /// process's memory and only it serves them.
    #[arg(long, env = "MTG_REDIS", value_parser = parse_redis_url, conflicts_with = "redis_cluster")]
    pub redis: Option<String>,

    /// Shared task store on Redis Cluster: seed node URLs, comma-separated.
    #[arg(long, env = "MTG_REDIS_CLUSTER", value_delimiter = ',', value_parser = parse_redis_node_url)]
    pub redis_cluster: Vec<String>,

    /// With N > 0, a task is created (and its id returned) only once N Redis replicas
    /// acknowledged it (WAIT); otherwise the call fails with -32603.
    #[arg(long, env = "MTG_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_wait_replicas: u32,

    /// PEM file of the CA certificate(s) that sign the `rediss://` server's certificate
    /// (default: the public web roots). Read once at start.
    #[arg(long, env = "MTG_REDIS_CA_FILE")]
    pub redis_ca_file: Option<std::path::PathBuf>,

    /// Namespace of this deployment's keys and channels in a shared Redis
    /// (`mtg:<NAME>:...`): gateways with different namespaces never see each other's
    /// tasks, instances or wake-ups. 1-64 characters of A-Z a-z 0-9 . _ -. Default:
    /// derived from the upstream (`u-` and 16 hex digits of a SHA-256 of
    /// `--upstream`/`--upstream-cmd`). "" selects the legacy layout without a
    /// namespace, which isolates nothing: only to keep an existing deployment's tasks
    /// while upgrading (docs/redis.md, "Upgrading").
    #[arg(long, env = "MTG_STORE_NAMESPACE", value_name = "NAME", value_parser = parse_store_namespace)]
    pub store_namespace: Option<StoreNamespace>,

    /// Memory for finished tasks' records, in bytes, per process: a poll of a finished
    /// task is then answered without a Redis round trip (a finished task never changes;
    /// expiry is checked on each answer). Dropped whenever the link to Redis drops or an
    /// operation fails. 0 turns it off. Only with Redis.
    #[arg(long, env = "MTG_TERMINAL_CACHE_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub terminal_cache_bytes: u64,

    /// Time limit for one Redis operation, connecting included. Past it the request
    /// gets -32603 "task store unavailable".
    #[arg(long, env = "MTG_REDIS_TIMEOUT_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_timeout_ms: u64,

    /// URL other instances can reach this one at (e.g. `http://<pod-ip>:8080/mcp`);
    /// published with its lease. Wake-ups travel through Redis, so nothing requires
    /// it yet; it is there for routing requests to a task's owner.
    #[arg(long, env = "MTG_ADVERTISE_URL", value_parser = parse_upstream_url)]
    pub advertise_url: Option<http::Uri>,

    /// With a shared store: longest time from an instance's disappearance (crash,
    /// kill -9, partition) until its unfinished tasks are failed ("gateway instance
    /// lost"). Shorter detects faster but tolerates shorter stalls.
    #[arg(long, env = "MTG_LEASE_TIMEOUT_MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub lease_timeout_ms: u64,

    /// Log format: `pretty` or `json`. Verbosity follows `RUST_LOG` (default `info`).
    #[arg(long, env = "MTG_LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    pub log_format: String,
}

impl Config {
    /// Flags, environment and `--config` file, in that order of precedence.
    pub fn load() -> Result<Self, ConfigError> {
        Self::from_args(std::env::args_os())
    }

    /// `load` for the given command line (the program's name first).
    pub fn from_args<I, T>(args: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        let merged =
            crate::config::file::merge_into_args(args.into_iter().map(Into::into).collect())?;
        let mut config = Self::try_parse_from(merged.args)?;
        config.resolve_upstreams(merged.upstreams)?;
        config.check()?;
        Ok(config)
    }

    /// Sorts `--upstream` into the one at `/mcp` and the named ones, adds the config
    /// file's, and refuses what cannot be served.
    fn resolve_upstreams(
        &mut self,
        from_file: Vec<upstreams::NamedUpstream>,
    ) -> Result<(), ConfigError> {
        let inconsistent = |text: String| Err(ConfigError::Inconsistent(text));
        for arg in std::mem::take(&mut self.upstream_args) {
            match arg {
                upstreams::UpstreamArg::Plain(url) => {
                    if self.upstream.is_some() {
                        return inconsistent(format!(
                            "--upstream {url}: a second upstream for /mcp; name it (--upstream NAME=URL) to serve it at /mcp/NAME"
                        ));
                    }
                    self.upstream = Some(url);
                }
                upstreams::UpstreamArg::Named(name, url) => {
                    self.upstreams.push(upstreams::from_arg(name, url));
                }
            }
        }
        self.upstreams.extend(from_file);
        let mut seen = std::collections::HashSet::new();
        for named in &self.upstreams {
            if !seen.insert(named.name.as_str()) {
                return inconsistent(format!(
                    "upstream {:?} is named twice (on the command line or in the config file)",
                    named.name
                ));
            }
        }
        match (&self.upstream, &self.upstream_cmd) {
            (Some(_), Some(_)) => {
                return inconsistent(
                    "--upstream URL and --upstream-cmd both name the upstream at /mcp; give one"
                        .into(),
                );
            }
            (None, None) if self.upstreams.is_empty() => {
                return inconsistent(
                    "no upstream: give --upstream URL, --upstream-cmd CMD, --upstream NAME=URL \
                     or the config file's [upstreams.NAME]"
                        .into(),
                );
            }
            _ => {}
        }
        if self.upstream_cmd.is_none()
            && (!self.upstream_env.is_empty() || self.upstream_cwd.is_some())
        {
            return inconsistent(
                "--upstream-env and --upstream-cwd are for --upstream-cmd's process".into(),
            );
        }
        if !self.upstreams.is_empty()
            && matches!(self.store_namespace, Some(StoreNamespace::Unprefixed))
        {
            return inconsistent(
                "--store-namespace \"\" (the legacy layout) cannot keep named upstreams apart; \
                 choose a namespace"
                    .into(),
            );
        }
        Ok(())
    }

    /// The settings of one named upstream's world: this configuration with the upstream
    /// and what its entry sets replaced; the rest (listen, store, auth, limits) is the
    /// gateway's.
    pub fn for_upstream(&self, named: &upstreams::NamedUpstream) -> Config {
        let mut world = self.clone();
        world.upstreams = Vec::new();
        world.upstream_name = Some(named.name.clone());
        match &named.source {
            upstreams::Source::Url(url) => {
                world.upstream = Some(url.clone());
                world.upstream_cmd = None;
                world.upstream_env = Vec::new();
                world.upstream_cwd = None;
            }
            upstreams::Source::Cmd {
                command,
                env,
                cwd,
                pool,
            } => {
                world.upstream = None;
                world.upstream_cmd = Some(command.clone());
                world.upstream_env = env.clone();
                world.upstream_cwd = cwd.clone();
                world.upstream_pool = pool.unwrap_or(self.upstream_pool);
            }
        }
        let or = |own: Option<u64>, gateway: u64| own.unwrap_or(gateway);
        world.promote_after_ms = or(named.promote_after_ms, self.promote_after_ms);
        world.upstream_timeout_ms = or(named.upstream_timeout_ms, self.upstream_timeout_ms);
        world.defer_after_ms = or(named.defer_after_ms, self.defer_after_ms);
        world.deferred_max_wait_ms = or(named.deferred_max_wait_ms, self.deferred_max_wait_ms);
        world.upstream_http2 = named.upstream_http2.unwrap_or(self.upstream_http2);
        world.upstream_http2_max_streams = named
            .upstream_http2_max_streams
            .unwrap_or(self.upstream_http2_max_streams);
        if let Some(policies) = &named.tool_policies {
            world.tool_policies = policies.clone();
        }
        if let Some(tools) = &named.retry_on_owner_loss {
            world.retry_on_owner_loss = tools.clone();
        }
        if let Some(credential) = &named.upstream_credential {
            world.upstream_credential = credential.clone();
            world.upstream_credential_file = named.upstream_credential_file.clone();
        }
        // Each path is its own protected resource (RFC 8707): by default the gateway's
        // resource URI with the name appended, e.g. https://gw.example/mcp/files.
        world.auth_jwt_audience = named.auth_jwt_audience.clone().or_else(|| {
            self.auth_jwt_audience
                .as_ref()
                .map(|audience| format!("{}/{}", audience.trim_end_matches('/'), named.name))
        });
        world
    }

    /// Rules across flags, which clap checks one at a time.
    pub fn check(&self) -> Result<(), ConfigError> {
        match (
            self.upstream_credential.as_str(),
            &self.upstream_credential_file,
        ) {
            ("static", None) => {
                return Err(ConfigError::Inconsistent(
                    "--upstream-credential static needs --upstream-credential-file".into(),
                ));
            }
            ("client" | "none", Some(_)) => {
                return Err(ConfigError::Inconsistent(
                    "--upstream-credential-file is only read with --upstream-credential static"
                        .into(),
                ));
            }
            _ => {}
        }
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

    /// The TTL given to new tasks: the default, capped by the maximum.
    pub fn task_ttl_ms(&self) -> u64 {
        self.default_ttl_ms.min(self.max_ttl_ms)
    }

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

    pub fn upstream_timeout(&self) -> Option<Duration> {
        (self.upstream_timeout_ms > 0).then(|| Duration::from_millis(self.upstream_timeout_ms))
    }
}

/// Why the gateway cannot start with the configuration it was given.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    File(#[from] crate::config::file::ConfigFileError),
    /// Also `--help` and `--version`, which clap reports as errors; [`clap::Error::exit`]
    /// prints them where they belong.
    #[error(transparent)]
    Flags(#[from] clap::Error),
    #[error("{0}")]
    Inconsistent(String),
}

/// No task lives shorter than this: a client needs time to read what it asked for.
pub const MIN_TTL_MS: u64 = 1000;

/// Why a flag's value was refused; clap names the flag before it.
#[derive(Debug, thiserror::Error)]
pub enum InvalidValue {
    #[error("not a URL: {0}")]
    NotUrl(#[source] http::uri::InvalidUri),
    #[error("expected an http:// or https:// URL with a host")]
    NotHttpUrl,
    #[error("expected a redis:// or rediss:// URL")]
    NotRedisUrl,
    #[error("expected a redis://, rediss://, redis+sentinel:// or rediss+sentinel:// URL")]
    NotRedisOrSentinelUrl,
    #[error(transparent)]
    Sentinel(#[from] mtg_store::redis::SentinelUrlError),
    #[error("cannot split {0:?} into words: unbalanced quotes or a trailing backslash")]
    Unsplittable(String),
    #[error("the command is empty")]
    EmptyCommand,
    #[error("expected {expected}, got {got:?}")]
    NotPair { expected: &'static str, got: String },
    #[error("tool name is empty in {0:?}")]
    EmptyToolName(String),
    #[error(transparent)]
    Policy(#[from] mtg_protocol::task_support::UnknownTaskSupport),
    #[error("expected 1-200 characters, without braces or whitespace")]
    BadInstanceId,
    #[error("a key needs at least 32 bytes")]
    ShortKey,
    #[error(transparent)]
    Namespace(#[from] BadNamespace),
    #[error(
        "{0:?} is not a path segment: expected 1-63 of a-z, 0-9 and '-', starting with a letter or digit"
    )]
    BadUpstreamName(String),
}

/// A program and its arguments, as split from `--upstream-cmd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine(pub Vec<String>);

fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "gateway".to_owned());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
}

fn parse_upstream_url(raw: &str) -> Result<http::Uri, InvalidValue> {
    let uri: http::Uri = raw.parse().map_err(InvalidValue::NotUrl)?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some_and(|host| !host.is_empty()) => Ok(uri),
        _ => Err(InvalidValue::NotHttpUrl),
    }
}

/// The command line split into program and arguments; `shlex` follows POSIX shell
/// quoting, so paths with spaces can be quoted.
fn parse_upstream_cmd(raw: &str) -> Result<CommandLine, InvalidValue> {
    let words = shlex::split(raw).ok_or_else(|| InvalidValue::Unsplittable(raw.to_owned()))?;
    if words.is_empty() {
        return Err(InvalidValue::EmptyCommand);
    }
    Ok(CommandLine(words))
}

fn parse_env_pair(raw: &str) -> Result<(String, String), InvalidValue> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(InvalidValue::NotPair {
            expected: "KEY=VALUE",
            got: raw.to_owned(),
        }),
    }
}

fn parse_state_key(raw: &str) -> Result<String, InvalidValue> {
    if raw.len() < 32 {
        return Err(InvalidValue::ShortKey);
    }
    Ok(raw.to_owned())
}

/// `--redis`: one server, or a master behind Sentinel.
fn parse_redis_url(raw: &str) -> Result<String, InvalidValue> {
    match raw.split_once("://") {
        Some(("redis" | "rediss", rest)) if !rest.is_empty() => Ok(raw.to_owned()),
        Some(("redis+sentinel" | "rediss+sentinel", _)) => {
            Target::from_url(raw)?;
            Ok(raw.to_owned())
        }
        _ => Err(InvalidValue::NotRedisOrSentinelUrl),
    }
}

/// A Cluster seed node: a server's own URL.
fn parse_redis_node_url(raw: &str) -> Result<String, InvalidValue> {
    match raw.split_once("://") {
        Some(("redis" | "rediss", rest)) if !rest.is_empty() => Ok(raw.to_owned()),
        _ => Err(InvalidValue::NotRedisUrl),
    }
}

fn parse_store_namespace(raw: &str) -> Result<StoreNamespace, InvalidValue> {
    Ok(StoreNamespace::parse(raw)?)
}

/// Instance ids become part of Redis key names (as hash tags), so braces are out.
fn parse_instance_id(raw: &str) -> Result<String, InvalidValue> {
    if raw.is_empty()
        || raw.len() > 200
        || raw.contains(['{', '}'])
        || raw.chars().any(char::is_whitespace)
    {
        return Err(InvalidValue::BadInstanceId);
    }
    Ok(raw.to_owned())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags_and_caps_ttl() {
        let config = Config::from_args([
            "mcp-task-gateway",
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--tool-policy",
            "slow=required",
            "--tool-policy",
            "fast=forbidden",
            "--default-ttl-ms",
            "5000",
            "--max-ttl-ms",
            "2000",
        ])
        .unwrap();
        assert_eq!(config.task_ttl_ms(), 2000);
        assert_eq!(
            config.tool_policies,
            [
                ("slow".to_owned(), TaskSupport::Required),
                ("fast".to_owned(), TaskSupport::Forbidden)
            ]
        );
    }

    #[test]
    fn rejects_bad_policy_and_url() {
        let bad_policy = Config::from_args([
            "mcp-task-gateway",
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--tool-policy",
            "slow=sometimes",
        ]);
        assert!(bad_policy.is_err());
        let bad_url = Config::from_args(["mcp-task-gateway", "--upstream", "ftp://x/mcp"]);
        assert!(bad_url.is_err());
    }

    #[test]
    fn takes_exactly_one_upstream_source() {
        let neither = Config::from_args(["mcp-task-gateway"]);
        assert!(neither.is_err());
        let both = Config::from_args([
            "mcp-task-gateway",
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--upstream-cmd",
            "server",
        ]);
        assert!(both.is_err());
        let env_without_cmd = Config::from_args([
            "mcp-task-gateway",
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--upstream-env",
            "A=1",
        ]);
        assert!(env_without_cmd.is_err());
    }

    #[test]
    fn splits_the_command_like_a_shell() {
        let config = Config::from_args([
            "mcp-task-gateway",
            "--upstream-cmd",
            r#"node "/opt/my server/index.js" stdio --name='a b'"#,
            "--upstream-env",
            "TOKEN=x=y",
            "--upstream-env",
            "MODE=fast",
            "--upstream-cwd",
            "/tmp",
        ])
        .unwrap();
        assert!(config.upstream.is_none());
        assert_eq!(
            config.upstream_cmd.unwrap().0,
            ["node", "/opt/my server/index.js", "stdio", "--name=a b"]
        );
        assert_eq!(
            config.upstream_env,
            [
                ("TOKEN".into(), "x=y".into()),
                ("MODE".into(), "fast".into())
            ]
        );
        assert_eq!(config.upstream_pool, 2);
        assert_eq!(config.upstream_read_buffer_bytes, 2048);
        for bad in ["0", "511", "1048577"] {
            let parsed = Config::from_args([
                "mcp-task-gateway",
                "--upstream",
                "http://127.0.0.1:1/mcp",
                "--upstream-read-buffer-bytes",
                bad,
            ]);
            assert!(parsed.is_err(), "{bad:?} accepted");
        }
        for bad in [r#"node "unclosed"#, "   "] {
            let parsed = Config::from_args(["mcp-task-gateway", "--upstream-cmd", bad]);
            assert!(parsed.is_err(), "{bad:?}");
        }
    }
}
