//! The one place the configuration becomes each part's settings: the task service's,
//! the store's, the edge's (JWT validation, the upstream credential, per-tool policy).
//! `config` only parses and checks flags.

use std::time::Duration;

use crate::config::{CommandLine, Config};
use crate::tasks::TaskSettings;
use crate::tasks::limits::RunningCounts;
use crate::tasks::policy::Policies;
use mtg_store::redis::{RedisSettings, StoreNamespace, Target};

/// The edge's settings, shared by every upstream's path.
pub(crate) fn edge(config: &Config) -> crate::server::EdgeSettings {
    let tls = match (&config.edge.tls_cert, &config.edge.tls_key) {
        (Some(cert), Some(key)) => Some(crate::server::edge::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => None,
    };
    crate::server::EdgeSettings {
        tls,
        max_task_requests_per_second: config.limits.max_task_requests_per_second,
        allowed_origins: config.edge.allowed_origins.clone(),
        max_body_bytes: config.limits.max_body_bytes,
        strict_headers: !config.edge.lenient_headers,
        identity_header: config.auth.identity_header.clone(),
    }
}

/// The settings of one upstream's services behind the edge (reads
/// `--upstream-credential-file`).
pub(crate) fn gateway(config: &Config) -> std::io::Result<crate::server::GatewaySettings> {
    Ok(crate::server::GatewaySettings {
        name: config.upstream.name.clone(),
        upstream_credential: upstream_credential(config)?,
        policies: policies(config),
        upstream_timeout: config.upstream.upstream_timeout(),
        check_upstream_readiness: !config.operations.readyz_skip_upstream,
        session_limits: crate::server::session::served::SessionLimits {
            idle_timeout: Duration::from_millis(config.limits.session_idle_timeout_ms),
            max_sessions: usize::try_from(config.limits.max_sessions).unwrap_or(usize::MAX),
        },
        progress_keepalive: (config.tasks.progress_keepalive_ms > 0)
            .then(|| Duration::from_millis(config.tasks.progress_keepalive_ms)),
    })
}

/// This instance's part in the cluster: its lease and how others reach it.
pub(crate) fn cluster(config: &Config) -> crate::cluster::ClusterSettings {
    crate::cluster::ClusterSettings {
        instance_id: config.cluster.instance_id.clone(),
        advertise_url: config
            .cluster
            .advertise_url
            .as_ref()
            .map(ToString::to_string),
        lease_timeout: Duration::from_millis(config.cluster.lease_timeout_ms),
        meter: crate::telemetry::Meter::new(config.upstream.name.as_deref()),
    }
}

/// The operator's console (`/admin/ui`, beside the admin API).
pub(crate) fn console(config: &Config) -> crate::admin::console::ConsoleSettings {
    crate::admin::console::ConsoleSettings {
        session_ttl: Duration::from_millis(config.operations.admin_session_ttl_ms),
        show_results: config.operations.admin_show_results,
        // The admin listener serves plain HTTP (reached by port-forward): never `Secure`.
        tls: false,
        instance_id: config.cluster.instance_id.clone(),
        lease_ttl: Duration::from_millis(config.cluster.lease_timeout_ms),
    }
}

/// The task service's settings; `running_counts` is shared by every upstream's.
pub(crate) fn tasks(config: &Config, running_counts: &RunningCounts) -> TaskSettings {
    TaskSettings {
        instance_id: config.cluster.instance_id.clone(),
        ttl_ms: config.tasks.task_ttl_ms(),
        max_ttl_ms: config.tasks.max_ttl_ms,
        min_ttl_ms: crate::config::MIN_TTL_MS,
        poll_interval_ms: config.tasks.poll_interval_ms,
        upstream_timeout: config.upstream.upstream_timeout(),
        promote_after: Duration::from_millis(config.tasks.promote_after_ms),
        defer_after: (config.tasks.defer_after_ms > 0)
            .then(|| Duration::from_millis(config.tasks.defer_after_ms)),
        deferred_max_wait: Duration::from_millis(config.tasks.deferred_max_wait_ms),
        max_running_per_principal: config.limits.max_running_tasks_per_principal,
        running_counts: running_counts.clone(),
        input_wait: Duration::from_millis(config.bridge.input_wait_timeout_ms),
        state_keys: state_keys(config),
        takeover: takeover(config),
        keep_arguments: config.operations.admin_show_results,
        meter: crate::telemetry::Meter::new(config.upstream.name.as_deref()),
    }
}

/// The shared store's settings, if one is configured (reads `--redis-ca-file`).
pub(crate) fn redis(config: &Config) -> std::io::Result<Option<RedisSettings>> {
    let Some(target) = redis_target(config) else {
        return Ok(None);
    };
    Ok(Some(RedisSettings {
        namespace: store_namespace(config),
        target,
        instance_id: config.cluster.instance_id.clone(),
        wait_replicas: config.store.redis_wait_replicas,
        timeout: Duration::from_millis(config.store.redis_timeout_ms),
        max_ttl: Duration::from_millis(config.tasks.max_ttl_ms),
        terminal_cache_bytes: config.store.terminal_cache_bytes,
        ca_cert: config
            .store
            .redis_ca_file
            .as_ref()
            .map(std::fs::read)
            .transpose()?,
    }))
}

/// JWT validation, when `--auth-jwt-issuer` is set.
pub(crate) fn auth(config: &Config) -> Option<crate::auth::AuthSettings> {
    let issuer = config.auth.auth_jwt_issuer.clone()?;
    let keys = match &config.auth.auth_jwt_jwks_url {
        Some(url) => crate::auth::jwks::KeySource::Url(url.clone()),
        None => crate::auth::jwks::KeySource::Discovery {
            issuer: issuer.clone(),
        },
    };
    Some(crate::auth::AuthSettings {
        audience: config.auth.auth_jwt_audience.clone().unwrap_or_default(),
        issuer,
        keys,
        algorithms: config.auth.auth_jwt_algorithms.clone(),
        leeway: Duration::from_secs(config.auth.auth_jwt_leeway_s),
        tools_call_scopes: config.auth.auth_scopes_tools_call.clone(),
        tasks_scopes: config.auth.auth_scopes_tasks.clone(),
    })
}

/// What goes upstream as `Authorization` (reads `--upstream-credential-file`).
pub(crate) fn upstream_credential(
    config: &Config,
) -> std::io::Result<crate::auth::UpstreamCredential> {
    use crate::auth::UpstreamCredential;
    Ok(
        match (
            config.auth.upstream_credential.as_str(),
            &config.auth.upstream_credential_file,
        ) {
            ("none", _) => UpstreamCredential::None,
            ("static", Some(path)) => {
                let text = std::fs::read_to_string(path)?;
                let value = http::HeaderValue::from_str(text.trim()).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: not a header value: {e}", path.display()),
                    )
                })?;
                UpstreamCredential::Static(value)
            }
            _ => UpstreamCredential::Client,
        },
    )
}

fn takeover(config: &Config) -> crate::tasks::TakeoverSettings {
    crate::tasks::TakeoverSettings {
        retry_tools: config
            .cluster
            .retry_on_owner_loss
            .iter()
            .filter(|tool| !tool.is_empty())
            .cloned()
            .collect(),
        max_takeovers: config.cluster.max_takeovers,
    }
}

pub(crate) fn policies(config: &Config) -> Policies {
    Policies::new(config.tasks.tool_policies.iter().cloned().collect())
}

/// The keys that seal held calls' `requestState`.
fn state_keys(config: &Config) -> crate::tasks::mrtr_bridge::StateKeys {
    match &config.bridge.request_state_key {
        Some(key) => crate::tasks::mrtr_bridge::StateKeys::new(
            key.as_bytes().to_vec(),
            config
                .bridge
                .request_state_previous_key
                .as_ref()
                .map(|k| k.as_bytes().to_vec()),
        ),
        None => crate::tasks::mrtr_bridge::StateKeys::random(),
    }
}

/// `--store-namespace`, else the one derived from the upstream; a named upstream's
/// own (`named_store_namespace`).
pub(crate) fn store_namespace(config: &Config) -> StoreNamespace {
    if let Some(name) = &config.upstream.name {
        return named_store_namespace(config, name);
    }
    config.store.store_namespace.clone().unwrap_or_else(|| {
        StoreNamespace::derived_from(&canonical_upstream(
            config.upstream.url.as_ref(),
            config.upstream.upstream_cmd.as_ref(),
        ))
    })
}

/// A named upstream's namespace (`world` is its `Config::for_upstream`):
/// `--store-namespace` with `.NAME` appended, else one derived from the name and the
/// upstream, so two names never share tasks, even in front of one server.
fn named_store_namespace(world: &Config, name: &str) -> StoreNamespace {
    if let Some(StoreNamespace::Named(base)) = &world.store.store_namespace {
        return StoreNamespace::Named(format!("{base}.{name}"));
    }
    let canonical = canonical_upstream(
        world.upstream.url.as_ref(),
        world.upstream.upstream_cmd.as_ref(),
    );
    StoreNamespace::derived_from(&format!("name {name}\0{canonical}"))
}

/// The upstream as one string that does not change with how it was spelled (case of
/// scheme and host, a default port written or not); replicas of one deployment are
/// given the same upstream, so they derive the same namespace.
fn canonical_upstream(url: Option<&http::Uri>, command: Option<&CommandLine>) -> String {
    match (url, command) {
        (Some(uri), _) => {
            let scheme = uri.scheme_str().unwrap_or("http").to_ascii_lowercase();
            let host = uri.host().unwrap_or_default().to_ascii_lowercase();
            let default_port = if scheme == "https" { 443 } else { 80 };
            let port = uri.port_u16().unwrap_or(default_port);
            let path = uri.path_and_query().map_or("/", |p| p.as_str());
            format!("url {scheme}://{host}:{port}{path}")
        }
        // NUL cannot occur in an argument, so the words stay apart.
        (None, Some(command)) => format!("cmd {}", command.0.join("\0")),
        (None, None) => String::new(),
    }
}

/// The shared store, if one is configured.
pub(crate) fn redis_target(config: &Config) -> Option<Target> {
    match (&config.store.redis, config.store.redis_cluster.is_empty()) {
        // Checked when parsed; were it not, Redis would refuse it as an address.
        (Some(url), _) => {
            Some(Target::from_url(url).unwrap_or_else(|_| Target::Server(url.clone())))
        }
        (None, false) => Some(Target::Cluster(config.store.redis_cluster.clone())),
        (None, true) => None,
    }
}

/// A world's webhook subscriptions: the `--webhook` URLs (the default events, the
/// `--webhook-secret-file` secrets) and the `[[webhooks]]` tables that hear this
/// upstream. Reads the secret files; refuses a URL without a secret or given twice.
pub(crate) fn webhooks(config: &Config) -> std::io::Result<crate::webhooks::WebhookSettings> {
    use crate::config::webhooks::{DEFAULT_EVENTS, DEFAULT_TIMEOUT_MS, WebhookTable};
    use crate::webhooks::{Subscription, WebhookSettings};
    let hooks = &config.webhooks;
    let from_flags = hooks.webhooks.iter().map(|url| WebhookTable {
        url: url.clone(),
        events: DEFAULT_EVENTS.to_vec(),
        upstreams: Vec::new(),
        secret_files: hooks.webhook_secret_file.clone(),
        timeout_ms: DEFAULT_TIMEOUT_MS,
        include_result: false,
    });
    let tables = from_flags.chain(hooks.tables_for(config.upstream.name.as_deref()));
    let mut subscriptions: Vec<Subscription> = Vec::new();
    for table in tables {
        let id = Subscription::id_of(&table.url);
        if subscriptions.iter().any(|s| s.id == id) {
            return Err(std::io::Error::other(format!(
                "webhook {} is configured twice",
                table.url
            )));
        }
        subscriptions.push(Subscription {
            id,
            secrets: webhook_secrets(&table)?,
            url: table.url,
            events: table.events,
            timeout: Duration::from_millis(table.timeout_ms),
            include_result: table.include_result,
        });
    }
    Ok(WebhookSettings {
        subscriptions,
        max_result_bytes: hooks.webhook_max_body_bytes,
        retry_first: Duration::from_millis(hooks.webhook_retry_first_ms),
        retry_max: Duration::from_millis(hooks.webhook_retry_max_ms),
        retry_window: Duration::from_secs_f64(hooks.webhook_retry_hours * 3600.0),
        allow_private: hooks.webhook_allow_private,
        ca: hooks
            .webhook_ca_file
            .as_ref()
            .map(std::fs::read)
            .transpose()?,
    })
}

fn webhook_secrets(
    table: &crate::config::webhooks::WebhookTable,
) -> std::io::Result<Vec<crate::webhooks::Secret>> {
    if table.secret_files.is_empty() {
        return Err(std::io::Error::other(format!(
            "webhook {} has no secret (--webhook-secret-file, or secret-file in its table)",
            table.url
        )));
    }
    table
        .secret_files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).map_err(|e| {
                std::io::Error::other(format!("webhook secret file {}: {e}", path.display()))
            })?;
            crate::webhooks::Secret::parse(&text).map_err(|e| {
                std::io::Error::other(format!("webhook secret file {}: {e}", path.display()))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takeover_settings_name_tools_and_a_limit() {
        let base = ["mcp-task-gateway", "--upstream", "http://127.0.0.1:9/mcp"];
        let defaults = takeover(&Config::from_args(base).unwrap());
        assert!(defaults.retry_tools.is_empty());
        assert_eq!(defaults.max_takeovers, 2);
        let config = Config::from_args(
            [
                &base[..],
                &[
                    "--retry-on-owner-loss",
                    "report,export",
                    "--retry-on-owner-loss",
                    "sync",
                    "--max-takeovers",
                    "0",
                ],
            ]
            .concat(),
        )
        .unwrap();
        let settings = takeover(&config);
        let mut tools: Vec<_> = settings.retry_tools.into_iter().collect();
        tools.sort();
        assert_eq!(tools, ["export", "report", "sync"]);
        assert_eq!(settings.max_takeovers, 0);
    }

    #[test]
    fn the_store_namespace_is_given_or_derived_from_the_upstream() {
        let parse = |args: &[&str]| {
            Config::from_args([&["mcp-task-gateway"][..], args].concat())
                .map(|config| store_namespace(&config))
        };
        let given = parse(&["--upstream", "http://a:1/mcp", "--store-namespace", "prod"]);
        assert_eq!(given.unwrap(), StoreNamespace::Named("prod".into()));
        let unprefixed = parse(&["--upstream", "http://a:1/mcp", "--store-namespace", ""]);
        assert_eq!(unprefixed.unwrap(), StoreNamespace::Unprefixed);
        let unprefixed = parse(&["--upstream", "http://a:1/mcp", "--store-namespace="]);
        assert_eq!(unprefixed.unwrap(), StoreNamespace::Unprefixed);

        // Spelled differently, the same upstream; another path, port or host is not.
        let derived = parse(&["--upstream", "http://mcp.example:80/mcp"]).unwrap();
        assert_eq!(
            parse(&["--upstream", "HTTP://MCP.Example/mcp"]).unwrap(),
            derived
        );
        for other in [
            "http://mcp.example/other",
            "http://mcp.example:8080/mcp",
            "https://mcp.example/mcp",
            "http://mcp.example.org/mcp",
        ] {
            assert_ne!(parse(&["--upstream", other]).unwrap(), derived, "{other}");
        }
        let command = parse(&["--upstream-cmd", "server --port 1"]).unwrap();
        assert_eq!(
            parse(&["--upstream-cmd", "server  '--port' 1"]).unwrap(),
            command
        );
        assert_ne!(
            parse(&["--upstream-cmd", "server --port 2"]).unwrap(),
            command
        );
        assert_ne!(
            parse(&["--upstream-cmd", "server '--port 1'"]).unwrap(),
            command
        );
        assert!(command.to_string().starts_with("u-"));

        for bad in [
            "a b",
            "a*",
            "x{y}",
            "a:b",
            "owned",
            "changes",
            &"n".repeat(65),
        ] {
            let refused = parse(&["--upstream", "http://a:1/mcp", "--store-namespace", bad]);
            let error = refused.expect_err(bad).to_string();
            assert!(error.contains("--store-namespace"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn each_named_upstream_has_a_namespace_of_its_own() {
        let namespaces = |extra: &[&str]| {
            let base = ["mcp-task-gateway", "--upstream", "a=http://h/mcp"];
            let args = [&base[..], &["--upstream", "b=http://h/mcp"], extra].concat();
            let config = Config::from_args(args).unwrap();
            let of = |i: usize| store_namespace(&config.for_upstream(&config.upstream.named[i]));
            (of(0), of(1))
        };
        // One server behind two names: still two namespaces, the same on every replica.
        let (a, b) = namespaces(&[]);
        assert_ne!(a, b);
        assert_eq!(namespaces(&[]), (a.clone(), b));
        assert_ne!(a, StoreNamespace::derived_from("url http://h:80/mcp"));
        let (a, b) = namespaces(&["--store-namespace", "prod"]);
        assert_eq!(a, StoreNamespace::Named("prod.a".into()));
        assert_eq!(b, StoreNamespace::Named("prod.b".into()));
        let legacy = Config::from_args([
            "mcp-task-gateway",
            "--upstream",
            "a=http://h/mcp",
            "--store-namespace=",
        ]);
        assert!(legacy.is_err());
    }

    #[test]
    fn selects_the_store() {
        let base = ["mcp-task-gateway", "--upstream", "http://127.0.0.1:9/mcp"];
        let memory = Config::from_args(base).unwrap();
        assert!(redis_target(&memory).is_none());
        assert_eq!(memory.cluster.lease_timeout_ms, 15_000);

        let single =
            Config::from_args([&base[..], &["--redis", "rediss://cache:6380/0"]].concat()).unwrap();
        assert!(
            matches!(redis_target(&single), Some(Target::Server(u)) if u == "rediss://cache:6380/0")
        );

        let cluster = Config::from_args(
            [
                &base[..],
                &["--redis-cluster", "redis://a:7000,redis://b:7001"],
            ]
            .concat(),
        )
        .unwrap();
        assert!(matches!(redis_target(&cluster), Some(Target::Cluster(urls)) if urls.len() == 2));

        let sentinel = Config::from_args(
            [
                &base[..],
                &["--redis", "redis+sentinel://s1:26379,s2:26380/mymaster"],
            ]
            .concat(),
        )
        .unwrap();
        assert!(matches!(
            redis_target(&sentinel),
            Some(Target::Sentinel(t)) if t.master == "mymaster" && t.sentinels.len() == 2
        ));

        for bad in [
            &["--redis", "http://cache:6379"][..],
            &["--redis", "redis://a", "--redis-cluster", "redis://b"],
            &["--redis", "redis+sentinel://s1:26379"],
            &["--redis", "redis+sentinel://s1:x/m"],
            &["--redis-cluster", "redis+sentinel://s1:26379/m"],
            &["--instance-id", "gw-{1}"],
            &["--lease-timeout-ms", "5"],
        ] {
            assert!(
                Config::from_args([&base[..], bad].concat()).is_err(),
                "{bad:?}"
            );
        }
    }
}
