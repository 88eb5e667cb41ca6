//! mcp-task-gateway: a reverse proxy that gives plain MCP servers the Tasks extension.
//!
//! Requests flow one way: `server` (HTTP) → `tasks` (task lifecycle) → `store` (task
//! state) and `upstream` (the plain MCP server). The `mtg_protocol` crate (MCP shapes,
//! names and rules) is a leaf every layer uses.

// A panic in a request or a runner is a bug; unit tests may unwrap. (unsafe_code is
// denied in Cargo.toml's [lints].)
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod admin;
mod auth;
mod cluster;
pub mod config;
mod http_client;
mod server;
mod settings;
pub mod store;
pub mod tasks;
pub mod telemetry;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use cluster::Membership;
use config::Config;
use store::Store;
use store::memory::MemoryStore;
use store::redis::{RedisStore, StoreNamespace, Target};
use tasks::TaskService;
use tasks::takeover::Takeovers;

/// Runs the gateway until SIGTERM or Ctrl-C. Call it on a current-thread runtime: it
/// is the first of the worker threads (`server::edge::workers`).
pub async fn run(config: Config) -> std::io::Result<()> {
    // Two rustls providers are linked (ring, and aws-lc-rs through a dependency), so
    // none is the default until one is named: `rediss://` connections need it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let admin_token = config
        .admin_token_file
        .as_deref()
        .map(admin::read_token)
        .transpose()?;
    let operators = match config.metrics_listen {
        Some(addr) => {
            let listener = admin::bind(addr).await?;
            let metrics = telemetry::install_metrics().map_err(std::io::Error::other)?;
            Some((listener, metrics))
        }
        None => None,
    };
    let listener = TcpListener::bind(config.listen).await?;
    let local = listener.local_addr()?;
    let client = http_client::client();
    let call_client = http_client::call_client(config.upstream_read_buffer_bytes as usize);
    let upstream = select_upstream(&config, &call_client);
    // Only a shared store has a namespace; the admin API shows it.
    let mut store_namespace = None;
    let store = match settings::redis(&config)? {
        None => Store::new(MemoryStore::start()),
        Some(redis) => {
            log_namespace(&redis.namespace, config.store_namespace.is_some());
            store_namespace = Some(redis.namespace.to_string());
            Store::new(RedisStore::connect(redis).map_err(std::io::Error::other)?)
        }
    };
    let settings = settings::tasks(&config);
    if config.request_state_key.is_none() && settings::redis_target(&config).is_some() {
        tracing::warn!(
            "no --request-state-key: held calls can be resumed only on the instance that \
             holds them; set the same key on every instance"
        );
    }
    let tasks = TaskService::start(&store, upstream.clone(), settings);
    let takeovers = Arc::new(Takeovers::new(tasks.clone()));
    let membership = Membership::start(
        store.membership.clone(),
        takeovers.clone(),
        settings::cluster(&config),
    )
    .await;
    if let Some((listener, metrics)) = operators {
        let addr = listener.local_addr()?;
        let api = admin_token.map(|token| admin::AdminApi {
            admin: admin::Admin::new(
                store.inspection.clone(),
                tasks.clone(),
                config.instance_id.clone(),
                store_namespace,
            ),
            token,
        });
        tracing::info!(%addr, admin = api.is_some(), "serving Prometheus metrics at /metrics");
        admin::serve(listener, metrics, api);
    }
    let closing = tokio_util::sync::CancellationToken::new();
    let edge = server::Edge::start(settings::edge(&config)?, &client)?;
    let gateway = Arc::new(server::Gateway::new(
        settings::gateway(&config),
        client,
        upstream.clone(),
        tasks.clone(),
        closing.clone(),
        edge,
    ));
    let store_kind = match settings::redis_target(&config) {
        None => "memory",
        Some(Target::Server(_)) => "redis",
        Some(Target::Cluster(_)) => "redis-cluster",
        Some(Target::Sentinel(_)) => "redis-sentinel",
    };
    tracing::info!(listen = %local, upstream = %describe_upstream(&config), instance = %config.instance_id, store = store_kind, "mcp-task-gateway ready");
    // Tests and scripts read the bound address from this line (the port may be 0).
    let scheme = if config.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    println!("listening on {scheme}://{local}/mcp");
    let stop = async move {
        shutdown_signal().await;
        closing.cancel();
    };
    let workers =
        server::edge::workers::serve(listener, gateway, config.worker_threads(), stop).await?;
    let peers_alive = peers_alive(&store, &config.instance_id).await;
    let handed_over = takeovers
        .drain(Duration::from_millis(config.drain_timeout_ms), peers_alive)
        .await;
    // Tasks still running here end now, visibly to every instance, or wait for a live
    // instance to take them over.
    membership.shutdown(handed_over).await;
    upstream.shutdown().await;
    workers.stop().await;
    tracing::info!("stopped");
    Ok(())
}

fn log_namespace(namespace: &StoreNamespace, given: bool) {
    match namespace {
        StoreNamespace::Legacy => tracing::warn!(
            "--store-namespace \"\": the legacy key layout (mtg:...), shared with every \
             other gateway that uses it: no isolation. Meant only for upgrading; see \
             docs/redis.md, \"Upgrading\""
        ),
        StoreNamespace::Named(name) => tracing::info!(
            namespace = %name,
            derived = !given,
            "task store keys under mtg:{name}:"
        ),
    }
}

/// Whether another instance holds a live lease: only then can tasks be handed over.
async fn peers_alive(store: &Store, me: &str) -> bool {
    match store.inspection.instances().await {
        Ok(instances) => instances
            .iter()
            .any(|i| i.instance != me && i.lease_expires_in_ms.is_some_and(|left| left > 0)),
        Err(e) => {
            tracing::warn!(error = %e, "could not list the live instances; failing the tasks left");
            false
        }
    }
}

/// The upstream the flags name: a URL, or a command to run over stdio.
fn select_upstream(
    config: &Config,
    client: &http_client::HttpClient,
) -> Arc<dyn upstream::Upstream> {
    let command = config
        .upstream_cmd
        .as_ref()
        .and_then(|words| upstream::stdio::StdioCommand::new(&words.0));
    match (command, &config.upstream) {
        (Some(mut command), _) => {
            command.env = config.upstream_env.clone();
            command.cwd = config.upstream_cwd.clone();
            upstream::stdio::StdioUpstream::start(
                command,
                usize::from(config.upstream_pool),
                &config.roots,
            )
        }
        (None, Some(url)) => {
            upstream::detect::AutoUpstream::new(client.clone(), url.clone(), &config.roots)
        }
        // clap requires one of the two.
        (None, None) => unreachable!("--upstream or --upstream-cmd is required"),
    }
}

fn describe_upstream(config: &Config) -> String {
    match (&config.upstream_cmd, &config.upstream) {
        (Some(words), _) => format!("stdio: {}", words.0.join(" ")),
        (None, Some(url)) => url.to_string(),
        (None, None) => String::new(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
