//! The upstream-sessions probe (`--spray`).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::STATELESS;
use crate::campaign::{Worker, send_raw};
use crate::case::{Case, Context, Wire};
use crate::classes::{Stateless, stateless_case, to_bytes};
use crate::gateway::Memory;
use crate::tally::Tally;
use crate::verdict::judge;

/// `MAX_SESSIONS` in `src/upstream/session_http/sessions.rs`.
const UPSTREAM_SESSIONS_BOUND: usize = 1024;

/// What `--spray` saw: the gateway before, right after, and after a quiet period.
pub(crate) struct Spray {
    calls: u64,
    tally: Tally,
    before: Memory,
    after: Memory,
    quiet: Memory,
    quiet_secs: u64,
}

/// Bridged calls with an `Authorization` each: `Spray-<i>`.
pub(crate) async fn spray(
    context: &Arc<Context>,
    pid: u32,
    calls: u64,
    concurrency: usize,
    quiet_secs: u64,
) -> Result<Spray, String> {
    let before = Memory::read(pid)?;
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (context, next) = (context.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut worker = Worker::new(context.clone());
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= calls {
                    return worker.tally;
                }
                let case = spray_case(&context, index);
                let started = Instant::now();
                let outcome = match &case.wire {
                    Wire::Http(http) => worker.send_http(http).await,
                    Wire::Raw(raw) => send_raw(context.addr, raw).await,
                };
                let verdict = judge(&case, &outcome);
                worker
                    .tally
                    .record(&case, index, &outcome, verdict, started.elapsed());
            }
        }));
    }
    let mut tally = Tally::default();
    for worker in workers {
        tally.merge(
            worker
                .await
                .map_err(|e| format!("a spray worker died: {e}"))?,
        );
    }
    let after = Memory::read(pid)?;
    tokio::time::sleep(Duration::from_secs(quiet_secs)).await;
    Ok(Spray {
        calls,
        tally,
        before,
        after,
        quiet: Memory::read(pid)?,
        quiet_secs,
    })
}

fn spray_case(context: &Context, index: u64) -> Case {
    let stateless = Stateless {
        body: json!({"jsonrpc": "2.0", "id": index, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {},
        }}}),
        method: "tools/list",
        name: None,
    };
    let mut http = stateless_case(context, &stateless, to_bytes(&stateless.body));
    http.header("authorization", format!("Bearer spray-{index}").as_bytes());
    Case::http("credential spray", http)
}

impl Spray {
    /// Descriptors bounded: the gateway keeps at most 1,024 upstream sessions of its own
    /// (one descriptor each; idle ones close after 5 minutes), so however many
    /// credentials come, they stay within that and 64 more of where they were.
    pub(crate) fn passed(&self) -> bool {
        let bound = self.before.fds + UPSTREAM_SESSIONS_BOUND + 64;
        self.tally.failures == 0 && self.after.fds <= bound && self.quiet.fds <= bound
    }

    pub(crate) fn markdown(&self, out: &mut String) {
        let mib = |m: &Memory| format!("{:.1} MiB", m.rss_kib as f64 / 1024.0);
        let mark = if self.passed() { "✅" } else { "❌" };
        let _ = writeln!(
            out,
            "\n### Upstream sessions: {} bridged calls, each with its own Authorization\n",
            self.calls
        );
        let _ = writeln!(
            out,
            "| | before | after the calls | after {} s quiet | check |\n|---|---:|---:|---:|:---:|",
            self.quiet_secs
        );
        let _ = writeln!(
            out,
            "| gateway open fds | {} | {} | {} | {mark} |",
            self.before.fds, self.after.fds, self.quiet.fds
        );
        let _ = writeln!(
            out,
            "| gateway RSS | {} | {} | {} | |",
            mib(&self.before),
            mib(&self.after),
            mib(&self.quiet)
        );
        let _ = writeln!(out, "| failed calls | | {} | | |", self.tally.failures);
    }
}
