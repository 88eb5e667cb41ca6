//! Command-line flags and environment variables, read once at start and passed down.
//!
//! [`Config`] gathers one group of flags per concern, each in its own file and
//! flattened into the command line: `edge` (listening, TLS, workers), `upstream`,
//! `tasks`, `bridge` (MRTR), `limits`, `auth`, `store`, `cluster` (instances and
//! takeover), `operations` (metrics, admin, drain, logs) and `webhooks`. `file` reads `--config`,
//! `upstreams` the named upstreams; `settings` turns all of it into each part's settings.

pub mod auth;
pub mod bridge;
pub mod cluster;
pub mod edge;
pub mod file;
pub mod limits;
pub mod operations;
pub mod store;
pub mod tasks;
pub mod upstream;
pub mod upstreams;
pub mod webhooks;

use clap::Parser;

use mtg_store::redis::{BadNamespace, StoreNamespace};

pub use tasks::MIN_TTL_MS;

/// Every flag has an environment variable of the same name, upper-cased with a `MTG_` prefix.
#[derive(Debug, Clone, Parser)]
#[command(name = "mcp-task-gateway", version, about, mut_args = in_help_order)]
pub struct Config {
    #[command(flatten)]
    pub edge: edge::EdgeConfig,

    #[command(flatten)]
    pub upstream: upstream::UpstreamConfig,

    #[command(flatten)]
    pub tasks: tasks::TaskConfig,

    #[command(flatten)]
    pub bridge: bridge::BridgeConfig,

    #[command(flatten)]
    pub limits: limits::LimitsConfig,

    #[command(flatten)]
    pub auth: auth::AuthConfig,

    #[command(flatten)]
    pub store: store::StoreConfig,

    #[command(flatten)]
    pub cluster: cluster::ClusterConfig,

    #[command(flatten)]
    pub operations: operations::OperationsConfig,

    #[command(flatten)]
    pub webhooks: webhooks::WebhookConfig,

    /// TOML or YAML file mirroring these flags (keys are flag names). Flags and
    /// environment variables override it.
    #[arg(long, env = "MTG_CONFIG")]
    pub config: Option<std::path::PathBuf>,
}

/// The order `--help` lists the flags in, whichever group declares them: the order they
/// were added in, before the flags were grouped.
const HELP_ORDER: [&str; 71] = [
    "listen",
    "upstream",
    "upstream-cmd",
    "upstream-env",
    "upstream-cwd",
    "upstream-pool",
    "poll-interval-ms",
    "default-ttl-ms",
    "max-ttl-ms",
    "upstream-timeout-ms",
    "tool-policy",
    "retry-on-owner-loss",
    "max-takeovers",
    "input-wait-timeout-ms",
    "request-state-key",
    "request-state-previous-key",
    "promote-after-ms",
    "defer-after-ms",
    "deferred-max-wait-ms",
    "progress-keepalive-ms",
    "max-running-tasks-per-principal",
    "max-task-requests-per-second",
    "session-idle-timeout-ms",
    "max-sessions",
    "lenient-headers",
    "upstream-read-buffer-bytes",
    "upstream-http2",
    "upstream-http2-max-streams",
    "worker-threads",
    "idle-poll-us",
    "max-body-bytes",
    "identity-header",
    "tls-cert",
    "tls-key",
    "auth-jwt-issuer",
    "auth-jwt-audience",
    "auth-jwt-jwks-url",
    "auth-jwt-algorithms",
    "auth-jwt-leeway-s",
    "auth-scope-tools-call",
    "auth-scope-tasks",
    "upstream-credential",
    "upstream-credential-file",
    "allowed-origin",
    "root",
    "instance-id",
    "config",
    "metrics-listen",
    "admin-token-file",
    "admin-session-ttl-ms",
    "admin-show-results",
    "drain-timeout-ms",
    "readyz-skip-upstream",
    "redis",
    "redis-cluster",
    "redis-wait-replicas",
    "redis-ca-file",
    "store-namespace",
    "terminal-cache-bytes",
    "redis-timeout-ms",
    "advertise-url",
    "lease-timeout-ms",
    "log-format",
    "webhook",
    "webhook-secret-file",
    "webhook-max-body-bytes",
    "webhook-retry-hours",
    "webhook-retry-first-ms",
    "webhook-retry-max-ms",
    "webhook-allow-private",
    "webhook-ca-file",
];

/// Places a flag in `--help` by [`HELP_ORDER`] (a flag missing there goes last).
fn in_help_order(arg: clap::Arg) -> clap::Arg {
    let place = HELP_ORDER
        .iter()
        .position(|long| arg.get_long() == Some(long))
        .unwrap_or(HELP_ORDER.len());
    arg.display_order(place)
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
        config.webhooks.tables = merged.webhooks;
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
        self.upstream.resolve(from_file)?;
        if !self.upstream.named.is_empty()
            && matches!(self.store.store_namespace, Some(StoreNamespace::Unprefixed))
        {
            return Err(ConfigError::Inconsistent(
                "--store-namespace \"\" (the legacy layout) cannot keep named upstreams apart; \
                 choose a namespace"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The settings of one named upstream's world: this configuration with the upstream
    /// and what its entry sets replaced; the rest (listen, store, auth, limits) is the
    /// gateway's.
    pub fn for_upstream(&self, named: &upstreams::NamedUpstream) -> Config {
        let mut world = self.clone();
        world.upstream.named = Vec::new();
        world.upstream.name = Some(named.name.clone());
        world.webhooks.tables = self.webhooks.tables_for(Some(&named.name));
        world.webhooks.tables.extend(named.webhooks.iter().cloned());
        let upstream = &mut world.upstream;
        match &named.source {
            upstreams::Source::Url(url) => {
                upstream.url = Some(url.clone());
                upstream.upstream_cmd = None;
                upstream.upstream_env = Vec::new();
                upstream.upstream_cwd = None;
            }
            upstreams::Source::Cmd {
                command,
                env,
                cwd,
                pool,
            } => {
                upstream.url = None;
                upstream.upstream_cmd = Some(command.clone());
                upstream.upstream_env = env.clone();
                upstream.upstream_cwd = cwd.clone();
                upstream.upstream_pool = pool.unwrap_or(self.upstream.upstream_pool);
            }
        }
        let or = |own: Option<u64>, gateway: u64| own.unwrap_or(gateway);
        let (gateway, tasks) = (&self.upstream, &self.tasks);
        upstream.upstream_timeout_ms = or(named.upstream_timeout_ms, gateway.upstream_timeout_ms);
        upstream.upstream_http2 = named.upstream_http2.unwrap_or(gateway.upstream_http2);
        upstream.upstream_http2_max_streams = named
            .upstream_http2_max_streams
            .unwrap_or(gateway.upstream_http2_max_streams);
        world.tasks.promote_after_ms = or(named.promote_after_ms, tasks.promote_after_ms);
        world.tasks.defer_after_ms = or(named.defer_after_ms, tasks.defer_after_ms);
        world.tasks.deferred_max_wait_ms =
            or(named.deferred_max_wait_ms, tasks.deferred_max_wait_ms);
        if let Some(policies) = &named.tool_policies {
            world.tasks.tool_policies = policies.clone();
        }
        if let Some(tools) = &named.retry_on_owner_loss {
            world.cluster.retry_on_owner_loss = tools.clone();
        }
        if let Some(credential) = &named.upstream_credential {
            world.auth.upstream_credential = credential.clone();
            world.auth.upstream_credential_file = named.upstream_credential_file.clone();
        }
        // Each path is its own protected resource (RFC 8707): by default the gateway's
        // resource URI with the name appended, e.g. https://gw.example/mcp/files.
        world.auth.auth_jwt_audience = named.auth_jwt_audience.clone().or_else(|| {
            self.auth
                .auth_jwt_audience
                .as_ref()
                .map(|audience| format!("{}/{}", audience.trim_end_matches('/'), named.name))
        });
        world
    }

    /// Rules across flags, which clap checks one at a time.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.auth.check()?;
        self.webhooks.check()?;
        if !self.store.redis_cluster.is_empty() && self.webhooks.any() {
            // A transition and its events are one script; on a Cluster the outbox's keys
            // would sit in other slots than the task's.
            return Err(ConfigError::Inconsistent(
                "webhooks are not supported with --redis-cluster (use one Redis server or                  Sentinel)"
                    .into(),
            ));
        }
        self.tasks.check()
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

#[cfg(test)]
mod tests {
    use mtg_protocol::task_support::TaskSupport;

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
        assert_eq!(config.tasks.task_ttl_ms(), 2000);
        assert_eq!(
            config.tasks.tool_policies,
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
        assert!(config.upstream.url.is_none());
        assert_eq!(
            config.upstream.upstream_cmd.unwrap().0,
            ["node", "/opt/my server/index.js", "stdio", "--name=a b"]
        );
        assert_eq!(
            config.upstream.upstream_env,
            [
                ("TOKEN".into(), "x=y".into()),
                ("MODE".into(), "fast".into())
            ]
        );
        assert_eq!(config.upstream.upstream_pool, 2);
        assert_eq!(config.upstream.upstream_read_buffer_bytes, 2048);
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

    #[test]
    fn help_places_every_flag() {
        use clap::CommandFactory;
        let command = Config::command();
        let longs: Vec<&str> = command
            .get_arguments()
            .filter_map(clap::Arg::get_long)
            .collect();
        for long in &longs {
            assert!(
                HELP_ORDER.contains(long),
                "--{long} is missing from HELP_ORDER"
            );
        }
        for long in HELP_ORDER {
            assert!(longs.contains(&long), "HELP_ORDER names no flag --{long}");
        }
    }
}
