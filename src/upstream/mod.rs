//! The plain MCP server behind the gateway.

pub mod forward;
pub mod http;
pub mod legacy;
pub mod stream;

pub use legacy::{LegacyUpstream, Session};
pub use stream::{CallStream, UpstreamEvent};

/// Why talking to the upstream failed. The message is shown to clients in a failed
/// task's `statusMessage`, so it says what happened in plain words.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream unreachable: {0}")]
    Unreachable(String),
    #[error("upstream answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("upstream session expired")]
    SessionExpired,
    #[error("upstream connection lost mid-call: {0}")]
    Lost(String),
    #[error("upstream sent something that is not MCP: {0}")]
    Protocol(String),
    #[error("upstream did not answer within {0} ms")]
    Timeout(u64),
}
