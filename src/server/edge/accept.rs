//! Accepting client connections without spinning when the process runs out of
//! descriptors or memory.
//!
//! A listener with connections waiting stays readable, so retrying a failed `accept` at
//! once would burn a core (and flood the log) for as long as the shortage lasts. Errors
//! of one connection (reset or aborted before it was accepted) are skipped; any other
//! error pauses accepting, doubling the pause up to [`MAX_PAUSE`] while it persists.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The next connection on `listener`; waits out errors as described above.
pub(super) async fn next_connection(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    let mut pause = FIRST_PAUSE;
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(e) if concerns_one_connection(&e) => {
                tracing::debug!(error = %e, "a connection ended before it was accepted");
            }
            Err(e) => {
                crate::telemetry::accept_failed();
                tracing::error!(
                    error = %e,
                    pause_ms = pause.as_millis() as u64,
                    "cannot accept connections; pausing"
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

fn concerns_one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}
