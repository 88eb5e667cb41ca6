//! mcp-task-gateway: a reverse proxy that gives plain MCP servers the Tasks extension.
//!
//! Data flows one way: `server` (HTTP) → `protocol` (MCP shapes and rules) → `tasks`
//! (task lifecycle) → `store` (task state) and `upstream` (the plain MCP server).

pub mod config;
pub mod protocol;
pub mod server;
pub mod store;
pub mod tasks;
pub mod upstream;

use std::sync::Arc;

use tokio::net::TcpListener;

use config::Config;
use store::memory::MemoryStore;
use tasks::{TaskService, TaskSettings};

/// Runs the gateway until SIGTERM or Ctrl-C.
pub async fn run(config: Config) -> std::io::Result<()> {
    let listener = TcpListener::bind(config.listen).await?;
    let local = listener.local_addr()?;
    let client = upstream::http::client();
    let upstream =
        upstream::detect::AutoUpstream::new(client.clone(), config.upstream.clone(), &config.roots);
    let store = MemoryStore::start();
    let settings = TaskSettings {
        instance_id: config.instance_id.clone(),
        ttl_ms: config.task_ttl_ms(),
        poll_interval_ms: config.poll_interval_ms,
        upstream_timeout: config.upstream_timeout(),
        promote_after: std::time::Duration::from_millis(config.promote_after_ms),
    };
    let upstream: Arc<dyn upstream::Upstream> = upstream;
    let tasks = TaskService::start(store, upstream.clone(), settings);
    let gateway = Arc::new(server::Gateway::new(&config, client, upstream, tasks));
    tracing::info!(listen = %local, upstream = %config.upstream, instance = %config.instance_id, "mcp-task-gateway ready");
    // Tests and scripts read the bound address from this line (the port may be 0).
    println!("listening on http://{local}/mcp");
    server::serve(listener, gateway, shutdown_signal()).await
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
