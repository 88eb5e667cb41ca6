//! Keeps one process of the pool running: start, handshake, serve, and restart with
//! exponential backoff when it exits.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use super::{CRASH_LOOP, Pool};
use crate::upstream::UpstreamError;
use crate::upstream::stdio::handshake;
use crate::upstream::stdio::link::Link;
use crate::upstream::stdio::process::{self, Signal};

const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A process that served this long resets the backoff.
const STABLE_RUN: Duration = Duration::from_secs(10);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(90);
/// After the process exits, how long its last stdout lines may take to be read.
const DRAIN_WAIT: Duration = Duration::from_secs(1);
/// After stdout closes, how long the process may take to exit before it is killed.
const EXIT_WAIT: Duration = Duration::from_secs(2);

pub(super) async fn supervise(pool: Arc<Pool>, slot: usize) {
    let span = tracing::info_span!("upstream_process", slot);
    async move {
        let mut delay = FIRST_BACKOFF;
        loop {
            let run = run_once(&pool, slot).await;
            if pool.shutdown.is_cancelled() {
                return;
            }
            let stable = run.served_for >= STABLE_RUN;
            if stable {
                delay = FIRST_BACKOFF;
            }
            let failures = pool.record_exit(slot, &run.reason, stable);
            let delay_ms = delay.as_millis() as u64;
            if failures >= CRASH_LOOP {
                tracing::error!(failures, delay_ms, reason = %run.reason, "the upstream process is crash-looping; restarting it");
            } else {
                tracing::warn!(failures, delay_ms, reason = %run.reason, "restarting the upstream process");
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = pool.shutdown.cancelled() => return,
            }
            delay = (delay * 2).min(MAX_BACKOFF);
        }
    }
    .instrument(span)
    .await
}

/// How one process's life ended.
struct Run {
    reason: String,
    served_for: Duration,
}

impl Run {
    fn failed(reason: String) -> Self {
        Self {
            reason,
            served_for: Duration::ZERO,
        }
    }
}

/// A process just started, its standard streams tied to its link.
struct Started {
    child: tokio::process::Child,
    pid: u32,
    link: Arc<Link>,
    /// Reads the process's stdout into the link; ends when stdout closes.
    reader: tokio::task::JoinHandle<()>,
}

fn start_process(pool: &Arc<Pool>, slot: usize) -> Result<Started, Run> {
    let mut child = pool
        .command
        .spawn()
        .map_err(|e| Run::failed(format!("cannot start `{}`: {e}", pool.command.display())))?;
    let pid = child.id().unwrap_or(0);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(Run::failed(
            "the process's standard streams were not piped".into(),
        ));
    };
    tracing::info!(pid, command = %pool.command.display(), "upstream process started");
    let (lines, queue) = mpsc::unbounded_channel();
    process::spawn_writer(stdin, queue);
    let link = Arc::new(Link::new(slot, pid, pool.context.clone(), lines));
    let reader = process::spawn_reader(link.clone(), stdout);
    process::spawn_stderr_logger(slot, pid, stderr);
    Ok(Started {
        child,
        pid,
        link,
        reader,
    })
}

async fn run_once(pool: &Arc<Pool>, slot: usize) -> Run {
    let Started {
        mut child,
        pid,
        link,
        mut reader,
    } = match start_process(pool, slot) {
        Ok(started) => started,
        Err(run) => return run,
    };
    let handshake = tokio::select! {
        result = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake::handshake(&link)) => {
            result.unwrap_or(Err(UpstreamError::Timeout(HANDSHAKE_TIMEOUT.as_millis() as u64)))
        }
        status = child.wait() => {
            let _ = tokio::time::timeout(DRAIN_WAIT, &mut reader).await;
            Err(UpstreamError::Exited(process::describe_exit(status.ok())))
        }
        () = pool.shutdown.cancelled() => Err(UpstreamError::Unreachable("shutting down".into())),
    };
    let server = match handshake {
        Ok(server) => server,
        Err(e) => {
            link.close_stdin();
            process::signal_group(pid, Signal::Kill);
            let _ = child.wait().await;
            process::signal_group(pid, Signal::Kill);
            link.close(e.clone());
            reader.abort();
            return Run::failed(format!("handshake failed: {e}"));
        }
    };
    link.set_server(server);
    pool.publish(slot, link.clone());
    let ready_at = Instant::now();

    let status = tokio::select! {
        status = child.wait() => {
            let _ = tokio::time::timeout(DRAIN_WAIT, &mut reader).await;
            status.ok()
        }
        _ = &mut reader => {
            tracing::warn!(pid, "upstream process closed its stdout");
            match tokio::time::timeout(EXIT_WAIT, child.wait()).await {
                Ok(status) => status.ok(),
                Err(_) => {
                    process::signal_group(pid, Signal::Kill);
                    child.wait().await.ok()
                }
            }
        }
        () = pool.shutdown.cancelled() => {
            link.close_stdin();
            let status = process::stop(&mut child, pid).await;
            tracing::info!(pid, status = %process::describe_exit(status), "upstream process stopped");
            link.close(UpstreamError::Unreachable("the gateway is shutting down".into()));
            return Run::failed("stopped".into());
        }
    };
    // What the process started (e.g. under `npx`) goes with it.
    process::signal_group(pid, Signal::Kill);
    let reason = process::describe_exit(status);
    tracing::warn!(pid, status = %reason, "upstream process exited");
    // No new call may pick it; then the calls in flight fail, naming the status.
    pool.unpublish(slot, &link);
    link.close(UpstreamError::Exited(reason.clone()));
    Run {
        reason: format!("exited with {reason}"),
        served_for: ready_at.elapsed(),
    }
}
