//! The gateway process under attack: its memory, open files and health.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;

use http_body_util::{BodyExt, Full};

use crate::campaign::connect;

/// Resident memory and open descriptors of a process, from /proc.
#[derive(Clone, Copy)]
pub(crate) struct Memory {
    pub(crate) rss_kib: u64,
    pub(crate) hwm_kib: u64,
    pub(crate) fds: usize,
}

impl Memory {
    pub(crate) fn read(pid: u32) -> Result<Self, String> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("reading /proc/{pid}/status: {e}"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|entries| entries.count())
            .unwrap_or(0);
        Ok(Self {
            rss_kib: field("VmRSS:")?,
            hwm_kib: field("VmHWM:")?,
            fds,
        })
    }
}

/// Prints progress every 10 s and samples the gateway's memory and descriptors.
pub(crate) struct Progress {
    pub(crate) sent: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Peak>,
}

#[derive(Default, Clone, Copy)]
pub(crate) struct Peak {
    pub(crate) rss_kib: u64,
    pub(crate) fds: usize,
}

impl Progress {
    pub(crate) fn start(pid: u32, total: u64) -> Self {
        let sent = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (sent_seen, done_seen) = (sent.clone(), done.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut peak = Peak::default();
            let mut last_print = Instant::now();
            while !done_seen.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let Ok(memory) = Memory::read(pid) else {
                    continue;
                };
                peak.rss_kib = peak.rss_kib.max(memory.rss_kib);
                peak.fds = peak.fds.max(memory.fds);
                if last_print.elapsed() >= Duration::from_secs(10) {
                    last_print = Instant::now();
                    let n = sent_seen.load(Ordering::Relaxed);
                    eprintln!(
                        "{n}/{total} sent, {:.0} req/s, RSS {} MiB, {} fds",
                        n as f64 / started.elapsed().as_secs_f64(),
                        memory.rss_kib / 1024,
                        memory.fds
                    );
                }
            }
            peak
        });
        Self { sent, done, task }
    }

    pub(crate) async fn stop(self) -> Peak {
        self.done.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

pub(crate) async fn health(addr: SocketAddr) -> bool {
    let Ok(mut sender) = connect(addr).await else {
        return false;
    };
    let request = Request::get("/healthz")
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()).boxed_unsync());
    let Ok(request) = request else { return false };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), sender.send_request(request)).await,
        Ok(Ok(response)) if response.status() == 200
    )
}

pub(crate) struct Checks {
    pub(crate) baseline: Memory,
    pub(crate) end: Option<Memory>,
    pub(crate) sampled_peak: Peak,
    pub(crate) slack_kib: u64,
    pub(crate) gateway_alive: bool,
    pub(crate) upstream_alive: bool,
    pub(crate) health: bool,
    pub(crate) panics: usize,
    pub(crate) log_lines: usize,
    pub(crate) log: PathBuf,
}

impl Checks {
    /// The RSS may end above its baseline by the slack or a tenth of the baseline.
    pub(crate) fn rss_returned(&self) -> bool {
        let allowed = self.slack_kib.max(self.baseline.rss_kib / 10);
        self.end
            .is_some_and(|end| end.rss_kib <= self.baseline.rss_kib + allowed)
    }

    pub(crate) fn passed(&self) -> bool {
        self.rss_returned() && self.gateway_alive && self.health && self.panics == 0
    }
}
