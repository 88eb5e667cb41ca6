//! The report (Markdown), and the replay of one request.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::Args;
use crate::campaign::{Worker, send_raw};
use crate::case::{Context, Wire};
use crate::classes::generate;
use crate::gateway::Checks;
use crate::spray::Spray;
use crate::tally::Tally;
use crate::verdict::{Outcome, judge};

pub(crate) struct Report<'a> {
    pub(crate) args: &'a Args,
    pub(crate) warmup: &'a Tally,
    pub(crate) tally: &'a Tally,
    pub(crate) duration: Duration,
    pub(crate) checks: &'a Checks,
    pub(crate) spray: Option<&'a Spray>,
}

impl Report<'_> {
    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        self.summary(&mut out);
        self.classes(&mut out);
        self.statuses(&mut out);
        if let Some(spray) = self.spray {
            spray.markdown(&mut out);
        }
        self.failures(&mut out);
        out
    }

    fn summary(&self, out: &mut String) {
        let c = self.checks;
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        let mark = |ok: bool| if ok { "✅" } else { "❌" };
        let sent = self.tally.sent();
        let _ = writeln!(out, "## Hostile input campaign\n");
        let _ = writeln!(out, "| measure | value | check |\n|---|---:|:---:|");
        let rows: Vec<(String, String, String)> = vec![
            (
                "requests (after a warm-up of {w})".replace("{w}", &self.warmup.sent().to_string()),
                sent.to_string(),
                mark(sent >= self.args.requests).into(),
            ),
            (
                "concurrency (connections)".into(),
                self.args.concurrency.to_string(),
                String::new(),
            ),
            ("seed".into(), self.args.seed.to_string(), String::new()),
            (
                "duration".into(),
                format!("{:.1} s", self.duration.as_secs_f64()),
                String::new(),
            ),
            (
                "throughput".into(),
                format!("{:.0} req/s", sent as f64 / self.duration.as_secs_f64()),
                String::new(),
            ),
            (
                "slowest answer".into(),
                format!("{:.2} s", self.tally.slowest.as_secs_f64()),
                String::new(),
            ),
            (
                "failed checks (campaign + warm-up)".into(),
                format!("{} + {}", self.tally.failures, self.warmup.failures),
                mark(self.tally.failures + self.warmup.failures == 0).into(),
            ),
            (
                "gateway RSS, baseline after warm-up".into(),
                mib(c.baseline.rss_kib),
                String::new(),
            ),
            (
                "gateway RSS, peak (VmHWM)".into(),
                format!(
                    "{} (sampled: {})",
                    mib(c.end.map_or(c.baseline.hwm_kib, |e| e.hwm_kib)),
                    mib(c.sampled_peak.rss_kib)
                ),
                String::new(),
            ),
            (
                format!("gateway RSS, end ({} s quiet)", self.args.quiet_secs),
                c.end.map_or("gone".into(), |e| mib(e.rss_kib)),
                mark(c.rss_returned()).into(),
            ),
            (
                "gateway open fds, baseline / peak / end".into(),
                format!(
                    "{} / {} / {}",
                    c.baseline.fds,
                    c.sampled_peak.fds,
                    c.end.map_or(0, |e| e.fds)
                ),
                String::new(),
            ),
            (
                "gateway alive, /healthz 200".into(),
                format!("{} / {}", c.gateway_alive, c.health),
                mark(c.gateway_alive && c.health).into(),
            ),
            (
                "upstream fixture alive".into(),
                c.upstream_alive.to_string(),
                String::new(),
            ),
            (
                "\"panicked\" in the gateway's log".into(),
                format!(
                    "{} ({} log lines, {})",
                    c.panics,
                    c.log_lines,
                    c.log.display()
                ),
                mark(c.panics == 0).into(),
            ),
        ];
        for (measure, value, check) in rows {
            let _ = writeln!(out, "| {measure} | {value} | {check} |");
        }
    }

    fn classes(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n| class | sent | HTTP answers | closed without answer | failed |\n|---|---:|---:|---:|---:|"
        );
        for (name, class) in &self.tally.classes {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} |",
                class.sent, class.answered, class.closed, class.failures
            );
        }
    }

    fn statuses(&self, out: &mut String) {
        let _ = writeln!(out, "\n| HTTP status | responses |\n|---|---:|");
        for (status, n) in &self.tally.statuses {
            let _ = writeln!(out, "| {status} | {n} |");
        }
        let _ = writeln!(out, "\n| JSON-RPC outcome | responses |\n|---|---:|");
        for (code, n) in &self.tally.rpc {
            let _ = writeln!(out, "| {code} | {n} |");
        }
    }

    fn failures(&self, out: &mut String) {
        let kept = self.tally.kept.iter().chain(&self.warmup.kept);
        for failure in kept {
            let _ = writeln!(
                out,
                "\n**failure** request {} ({}): {}\n\n```\n{}\n```",
                failure.index,
                failure.class,
                failure.reason,
                escape(&failure.request, 600)
            );
        }
    }
}

/// Bytes as readable text: printable ASCII as it is, the rest escaped.
fn escape(bytes: &[u8], limit: usize) -> String {
    let mut out: String = bytes
        .iter()
        .take(limit)
        .flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect();
    if bytes.len() > limit {
        let _ = write!(out, "… ({} bytes)", bytes.len());
    }
    out
}

pub(crate) async fn replay(context: Arc<Context>, index: u64) {
    let case = generate(&context, index);
    println!(
        "request {index} ({}):\n{}\n",
        case.class,
        escape(&case.render(), 4000)
    );
    let mut worker = Worker::new(context.clone());
    let outcome = match &case.wire {
        Wire::Http(http) => worker.send_http(http).await,
        Wire::Raw(raw) => send_raw(context.addr, raw).await,
    };
    match &outcome {
        Outcome::Responses(answers) => {
            for answer in answers {
                println!(
                    "HTTP {} {:?}\n{}",
                    answer.status,
                    answer.content_type,
                    escape(&answer.body, 4000)
                );
            }
        }
        Outcome::Malformed(why, bytes) => println!("malformed: {why}\n{}", escape(bytes, 4000)),
        Outcome::Closed(why) => println!("closed: {why}"),
        Outcome::BrokenBody(why) => println!("broken body: {why}"),
        Outcome::H2Frames => println!("HTTP/2 frames"),
        Outcome::Aborted => println!("aborted by the client"),
        Outcome::TimedOut => println!("timed out"),
        Outcome::ClientError(why) => println!("client error: {why}"),
    }
    let verdict = judge(&case, &outcome);
    println!(
        "verdict: {}",
        verdict.failure.unwrap_or_else(|| "ok".into())
    );
}
