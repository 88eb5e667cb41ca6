//! The child process around a link: the tasks that pump its stdin, stdout and stderr,
//! and how it is stopped and how its end is described.

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::framing::{Line, LineReader};
use super::link::Link;

/// Results can be large (images, files), but not unbounded.
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;
const MAX_STDERR_LINE_BYTES: usize = 64 * 1024;
/// How long a process gets to exit after its stdin closes, and after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Writes queued lines to stdin until the queue closes, then closes stdin.
pub(super) fn spawn_writer(mut stdin: ChildStdin, mut lines: mpsc::UnboundedReceiver<Vec<u8>>) {
    tokio::spawn(async move {
        while let Some(line) = lines.recv().await {
            if let Err(e) = write_line(&mut stdin, &line).await {
                tracing::debug!(error = %e, "upstream stdin closed");
                return;
            }
        }
    });
}

async fn write_line(stdin: &mut ChildStdin, line: &[u8]) -> std::io::Result<()> {
    stdin.write_all(line).await?;
    stdin.flush().await
}

/// Routes every stdout line to the link; ends at end of stream.
pub(super) fn spawn_reader(link: Arc<Link>, stdout: ChildStdout) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = LineReader::new(BufReader::new(stdout), MAX_LINE_BYTES);
        loop {
            match lines.next().await {
                Ok(Some(Line::Text(line))) => {
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        link.dispatch(&line);
                    }
                }
                Ok(Some(Line::TooLong(length))) => tracing::warn!(
                    target: "upstream_stdout",
                    slot = link.slot,
                    pid = link.pid,
                    length,
                    "skipped a stdout line longer than {MAX_LINE_BYTES} bytes"
                ),
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(slot = link.slot, pid = link.pid, error = %e, "reading upstream stdout failed");
                    return;
                }
            }
        }
    })
}

/// Every stderr line goes to the log (target `upstream_stderr`): servers log there.
pub(super) fn spawn_stderr_logger(slot: usize, pid: u32, stderr: ChildStderr) {
    tokio::spawn(async move {
        let mut lines = LineReader::new(BufReader::new(stderr), MAX_STDERR_LINE_BYTES);
        while let Ok(Some(line)) = lines.next().await {
            match line {
                Line::Text(text) => {
                    tracing::info!(target: "upstream_stderr", slot, pid, "{}", String::from_utf8_lossy(&text));
                }
                Line::TooLong(length) => {
                    tracing::info!(target: "upstream_stderr", slot, pid, "(a stderr line of {length} bytes, not shown)");
                }
            }
        }
    });
}

/// Stops a process: stdin is already closed (the spec's polite request), then SIGTERM,
/// then SIGKILL, each after a grace period. Returns how it ended.
pub(super) async fn stop(child: &mut Child, pid: u32) -> Option<ExitStatus> {
    if let Ok(status) = tokio::time::timeout(STOP_GRACE, child.wait()).await {
        signal_group(pid, Signal::Term);
        return status.ok();
    }
    signal_group(pid, Signal::Term);
    if let Ok(status) = tokio::time::timeout(STOP_GRACE, child.wait()).await {
        signal_group(pid, Signal::Kill);
        return status.ok();
    }
    signal_group(pid, Signal::Kill);
    child.wait().await.ok()
}

#[derive(Clone, Copy)]
pub(super) enum Signal {
    Term,
    Kill,
}

/// Signals the process group the child leads, so what it started (e.g. `npx` and the
/// server it runs) goes too.
pub(super) fn signal_group(pid: u32, signal: Signal) {
    #[cfg(unix)]
    {
        let Ok(pid) = i32::try_from(pid) else {
            return;
        };
        if pid <= 1 {
            return;
        }
        let signal = match signal {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        };
        // SAFETY: kill(2) takes plain integers; a negative pid addresses the group
        // this gateway created for the child (`process_group(0)`).
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(-pid, signal);
        }
    }
    #[cfg(not(unix))]
    let _ = (pid, signal);
}

/// "status 1", or "status 137 (signal 9)" as a shell would put it.
pub(super) fn describe_exit(status: Option<ExitStatus>) -> String {
    let Some(status) = status else {
        return "an unknown status".to_owned();
    };
    if let Some(code) = status.code() {
        return format!("status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("status {} (signal {signal})", 128 + signal);
        }
    }
    format!("{status}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn describes_exits_like_a_shell() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            describe_exit(Some(ExitStatus::from_raw(1 << 8))),
            "status 1"
        );
        assert_eq!(
            describe_exit(Some(ExitStatus::from_raw(9))),
            "status 137 (signal 9)"
        );
        assert_eq!(describe_exit(None), "an unknown status");
    }
}
