//! mcp-task-gateway: a reverse proxy that gives plain MCP servers the Tasks extension.
//!
//! Data flows one way: `server` (HTTP) → `protocol` (MCP shapes and rules) → `tasks`
//! (task lifecycle) → `store` (task state) and `upstream` (the plain MCP server).

pub mod cluster;
pub mod config;
pub mod protocol;
pub mod server;
pub mod store;
pub mod tasks;
pub mod upstream;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use cluster::{ClusterSettings, Membership};
use config::Config;
use store::TaskStore;
use store::memory::MemoryStore;
use store::redis::{RedisSettings, RedisStore, Target};
use tasks::{TaskService, TaskSettings};

/// Runs the gateway until SIGTERM or Ctrl-C.
pub async fn run(config: Config) -> std::io::Result<()> {
    let listener = TcpListener::bind(config.listen).await?;
    let local = listener.local_addr()?;
    let client = upstream::http::client();
    let upstream =
        upstream::LegacyUpstream::new(client.clone(), config.upstream.clone(), &config.roots);
    let store: Arc<dyn TaskStore> = match config.redis_target() {
        None => MemoryStore::start(),
        Some(target) => {
            let settings = RedisSettings {
                target,
                instance_id: config.instance_id.clone(),
                wait_replicas: config.redis_wait_replicas,
                timeout: Duration::from_millis(config.redis_timeout_ms),
                max_ttl: Duration::from_millis(config.max_ttl_ms),
            };
            RedisStore::connect(settings).map_err(std::io::Error::other)?
        }
    };
    let membership = Membership::start(
        store.clone(),
        ClusterSettings {
            instance_id: config.instance_id.clone(),
            advertise_url: config.advertise_url.as_ref().map(ToString::to_string),
            lease_timeout: Duration::from_millis(config.lease_timeout_ms),
        },
    )
    .await;
    let settings = TaskSettings {
        instance_id: config.instance_id.clone(),
        ttl_ms: config.task_ttl_ms(),
        poll_interval_ms: config.poll_interval_ms,
        upstream_timeout: config.upstream_timeout(),
        promote_after: std::time::Duration::from_millis(config.promote_after_ms),
    };
    let tasks = TaskService::start(store, upstream.clone(), settings);
    let gateway = Arc::new(server::Gateway::new(&config, client, upstream, tasks));
    let store_kind = match config.redis_target() {
        None => "memory",
        Some(Target::Server(_)) => "redis",
        Some(Target::Cluster(_)) => "redis-cluster",
    };
    tracing::info!(listen = %local, upstream = %config.upstream, instance = %config.instance_id, store = store_kind, "mcp-task-gateway ready");
    // Tests and scripts read the bound address from this line (the port may be 0).
    println!("listening on http://{local}/mcp");
    let served = server::serve(listener, gateway, shutdown_signal()).await;
    // Tasks still running here end now, visibly to every instance.
    membership.shutdown().await;
    served
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
