//! The shared task store: Redis (one server, Sentinel or Cluster), its namespace,
//! replication, time limit and the cache of finished tasks (`settings::redis`).

use crate::config::InvalidValue;
use mtg_store::redis::{StoreNamespace, Target};

#[derive(Debug, Clone, clap::Args)]
pub struct StoreConfig {
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
