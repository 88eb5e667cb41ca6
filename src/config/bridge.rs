//! The MRTR bridge: how long a call held for a 2026-07-28 client's answers waits, and
//! the keys that seal its `requestState` (`settings::tasks`).

use crate::config::InvalidValue;

#[derive(Debug, Clone, clap::Args)]
pub struct BridgeConfig {
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
}

fn parse_state_key(raw: &str) -> Result<String, InvalidValue> {
    if raw.len() < 32 {
        return Err(InvalidValue::ShortKey);
    }
    Ok(raw.to_owned())
}
