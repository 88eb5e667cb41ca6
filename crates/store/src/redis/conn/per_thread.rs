//! One connection to a single Redis server for each thread that uses it.
//!
//! The gateway's worker threads each run a runtime of their own and keep a request's
//! work on its thread (`server/edge/workers.rs`). With one shared connection, each
//! command went to the thread that drives that connection and its reply came back: two
//! wake-ups of another thread per operation, which cost a create on Redis about a third
//! of its time over one round trip (docs/benchmarks.md, run 29). A connection made by
//! the thread that first uses it is driven by that thread's runtime, so a request's
//! Redis I/O stays on its thread. Ordering is unchanged where it matters: an operation
//! is acknowledged before anything that depends on it is sent.

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread::ThreadId;

use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub(super) struct PerThread {
    client: redis::Client,
    config: ConnectionManagerConfig,
    by_thread: Mutex<HashMap<ThreadId, ConnectionManager>>,
}

impl PerThread {
    pub(super) fn new(client: redis::Client, config: ConnectionManagerConfig) -> Self {
        Self {
            client,
            config,
            by_thread: Mutex::new(HashMap::new()),
        }
    }

    /// This thread's connection; made on first use without touching the network (it
    /// connects, and reconnects, when a command needs it). Call it on a runtime.
    pub(super) fn get(&self) -> Result<ConnectionManager, RedisError> {
        let thread = std::thread::current().id();
        let mut by_thread = self.by_thread.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(conn) = by_thread.get(&thread) {
            return Ok(conn.clone());
        }
        let conn = self
            .client
            .get_connection_manager_lazy(self.config.clone())?;
        by_thread.insert(thread, conn.clone());
        Ok(conn)
    }
}
