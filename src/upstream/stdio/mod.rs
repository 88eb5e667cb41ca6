//! Stdio upstreams: a local MCP server the gateway starts and speaks newline-delimited
//! JSON-RPC with, over its stdin and stdout.
//!
//! - `command`: what to launch; `supervisor` and `process`: keeping it running;
//! - `handshake`: `server/discover` with the `initialize` fallback;
//! - `link`: one process, requests multiplexed under gateway ids, output routed back;
//! - `attribution` and `habits`: which call an upstream request belongs to, and which
//!   tools need a process of their own so that this stays certain;
//! - `pool`: several processes and which call runs where; `exchange`: one call.

mod attribution;
pub(crate) mod command;
mod exchange;
mod framing;
mod habits;
mod handshake;
mod link;
mod pool;
mod process;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub(crate) use command::StdioCommand;
use exchange::StdioExchange;
pub(crate) use pool::Health;

use super::{Caller, Opened, Upstream, UpstreamError};
use link::{Grants, Outgoing};
use pool::{Kind, Pool};

/// Requests that cannot lead the server to ask the client anything; they run on any
/// process and never own an upstream request.
const QUIET_METHODS: [&str; 8] = [
    "ping",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "logging/setLevel",
];

pub(crate) struct StdioUpstream {
    pool: Arc<Pool>,
}

impl StdioUpstream {
    /// Starts the first process at once; up to `pool_size` run when calls need them.
    pub(crate) fn start(command: StdioCommand, pool_size: usize, roots: &[String]) -> Arc<Self> {
        Arc::new(Self {
            pool: Pool::start(command, pool_size, roots),
        })
    }

    /// Ready while at least one process is running; the detail says why not.
    pub(crate) fn health(&self) -> Health {
        self.pool.health()
    }
}

impl Drop for StdioUpstream {
    fn drop(&mut self) {
        self.pool.shutdown.cancel();
    }
}

#[async_trait]
impl Upstream for StdioUpstream {
    /// Sends a request on the process the pool picks for it.
    async fn open_call(&self, caller: &Caller<'_>, method: &str, params: Option<Value>) -> Opened {
        let grants = Grants::from_capabilities(caller.capabilities);
        let kind = if QUIET_METHODS.contains(&method) {
            Kind::Quiet
        } else if grants.can_be_asked()
            && self
                .pool
                .context
                .habits
                .needs_own_process(&habits::key_of(method, params.as_ref()))
        {
            Kind::Exclusive
        } else {
            Kind::Shared
        };
        let lease = self.pool.acquire(kind).await?;
        let (id, events) = lease.link.start(Outgoing {
            method,
            params,
            may_ask: kind != Kind::Quiet,
            grants,
            capabilities: caller.capabilities,
        })?;
        tracing::debug!(
            slot = lease.link.slot,
            pid = lease.link.pid,
            id,
            ?kind,
            method,
            "sent upstream"
        );
        Ok(Box::new(StdioExchange::new(lease, id, events)))
    }

    async fn server_info(&self, _caller: &Caller<'_>) -> Result<Value, UpstreamError> {
        let lease = self.pool.acquire(Kind::Quiet).await?;
        lease.link.server().cloned().ok_or_else(|| {
            UpstreamError::Unreachable("the upstream process is still starting".into())
        })
    }

    fn passthrough_url(&self) -> Option<&::http::Uri> {
        None
    }

    /// Closes every process's stdin, then signals what is left; waits for them.
    async fn shutdown(&self) {
        self.pool.stop().await;
    }

    async fn ready(&self) -> Result<(), UpstreamError> {
        let health = self.health();
        if health.ready {
            Ok(())
        } else {
            Err(UpstreamError::Unreachable(health.detail))
        }
    }
}
