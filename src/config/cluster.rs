//! This instance among others sharing a store: its name, address and lease, and which
//! of a lost instance's tasks it may take over (`settings::cluster`, `settings::tasks`).

use crate::config::InvalidValue;

#[derive(Debug, Clone, clap::Args)]
pub struct ClusterConfig {
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

    /// Name of this gateway instance; owner of the tasks it runs. Unique per instance
    /// (default: hostname and a random suffix).
    #[arg(long, env = "MTG_INSTANCE_ID", default_value_t = default_instance_id(), value_parser = parse_instance_id)]
    pub instance_id: String,

    /// URL other instances can reach this one at (e.g. `http://<pod-ip>:8080/mcp`);
    /// published with its lease. Wake-ups travel through Redis, so nothing requires
    /// it yet; it is there for routing requests to a task's owner.
    #[arg(long, env = "MTG_ADVERTISE_URL", value_parser = super::parse_upstream_url)]
    pub advertise_url: Option<http::Uri>,

    /// With a shared store: longest time from an instance's disappearance (crash,
    /// kill -9, partition) until its unfinished tasks are failed ("gateway instance
    /// lost"). Shorter detects faster but tolerates shorter stalls.
    #[arg(long, env = "MTG_LEASE_TIMEOUT_MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub lease_timeout_ms: u64,
}

fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "gateway".to_owned());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
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
