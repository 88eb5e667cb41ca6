//! For operators: the listener beside the client port (Prometheus `/metrics` and the
//! admin API: list, show and cancel any task, list instances), and the `admin` CLI that
//! calls that API.
//!
//! The API is off unless a token file is configured, and every call must carry the
//! token; with it comes the operator's console at `/admin/ui` (`console/`), signed in
//! with the same token. It reads through the store's inspection contract, so on Redis an instance shows
//! and cancels tasks that run on any other.

pub mod cli;
pub mod console;
mod listener;
mod paging;
mod service;
mod task_facts;
mod webhooks;
pub mod wire;

pub use listener::{AdminApi, bind, serve};
pub use service::Admin;
pub(crate) use webhooks::AdminWebhooks;

/// The token in `path`: read once at start, surrounding whitespace dropped (a Secret
/// mounted from a file often ends with a newline).
pub fn read_token(path: &std::path::Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot read admin token file {}: {e}", path.display()),
        )
    })?;
    let token = text.trim().to_owned();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "admin token file {} holds {} characters; at least {MIN_TOKEN_CHARS} are needed",
                path.display(),
                token.chars().count()
            ),
        ));
    }
    Ok(token)
}

/// A guessable token would open every task to whoever reaches the metrics port.
const MIN_TOKEN_CHARS: usize = 16;
