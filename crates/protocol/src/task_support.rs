//! The values of a tool's `execution.taskSupport`.

use std::str::FromStr;

/// How a tool may be called, as in its `execution.taskSupport`; also the gateway's
/// per-tool policy (`--tool-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    /// Only callable as a task: clients without the extension get -32021.
    Required,
    /// A task when the client declared the extension, inline otherwise.
    Optional,
    /// Always inline, even for clients that declared the extension.
    Forbidden,
}

#[derive(Debug, thiserror::Error)]
#[error("unknown task policy {0:?}: expected required, optional or forbidden")]
pub struct UnknownTaskSupport(String);

impl FromStr for TaskSupport {
    type Err = UnknownTaskSupport;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "required" => Ok(Self::Required),
            "optional" => Ok(Self::Optional),
            "forbidden" => Ok(Self::Forbidden),
            other => Err(UnknownTaskSupport(other.to_owned())),
        }
    }
}

impl TaskSupport {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::Optional => "optional",
            Self::Forbidden => "forbidden",
        }
    }
}
