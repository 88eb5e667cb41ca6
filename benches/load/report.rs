//! results.md and results.jsonl: sections, rows and ratios as they come.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use crate::driver::Stats;

pub(crate) struct Report {
    pub(crate) md: std::fs::File,
    pub(crate) jsonl: std::fs::File,
    pub(crate) table_open: bool,
    pub(crate) pending_notes: Vec<String>,
}

impl Report {
    pub(crate) fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("output directory");
        let md = std::fs::File::create(dir.join("results.md")).expect("results.md");
        let jsonl = std::fs::File::create(dir.join("results.jsonl")).expect("results.jsonl");
        Self {
            md,
            jsonl,
            table_open: false,
            pending_notes: Vec::new(),
        }
    }

    pub(crate) fn out(&mut self, line: &str) {
        println!("{line}");
        let _ = writeln!(self.md, "{line}");
    }

    pub(crate) fn header(&mut self, machine: &str) {
        self.out("# mcp-task-gateway load harness");
        self.out("");
        self.out(machine);
    }

    pub(crate) fn section(&mut self, title: &str) {
        self.flush_notes();
        self.table_open = false;
        self.out("");
        self.out(&format!("## {title}"));
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        self.out(&format!("(load average {})", load.trim()));
    }

    pub(crate) fn row(&mut self, scenario: &str, variant: &str, conns: usize, s: &Stats) {
        if !self.table_open {
            self.out("");
            self.out("| variant | conns | ops | ops/s | req/s | p50 ms | p90 ms | p99 ms | max ms | gateway CPU µs/req | upstream CPU µs/req | redis CPU µs/req | other proxy CPU µs/req | load generator CPU µs/req | errors |");
            self.out("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            self.table_open = true;
        }
        let cpu = |i: usize| {
            s.cpu_us_per_request(i)
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "—".into())
        };
        let max = s
            .latencies
            .last()
            .map(|&n| n as f64 / 1e6)
            .unwrap_or(f64::NAN);
        let errors = match &s.first_error {
            Some(e) if s.errors > 0 || s.ops == 0 => format!("{} ({})", s.errors, shorten(e)),
            _ => s.errors.to_string(),
        };
        self.out(&format!(
            "| {variant} | {conns} | {} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {} | {} | {errors} |",
            s.ops,
            s.ops_per_sec(),
            s.requests_per_sec(),
            s.p(50.0),
            s.p(90.0),
            s.p(99.0),
            max,
            cpu(0),
            cpu(1),
            cpu(2),
            cpu(3),
            cpu(4),
        ));
        let record = json!({
            "scenario": scenario, "variant": variant, "conns": s.conns, "ops": s.ops,
            "requests": s.requests, "errors": s.errors, "window_s": s.window.as_secs_f64(),
            "ops_per_s": s.ops_per_sec(), "req_per_s": s.requests_per_sec(),
            "p50_ms": s.p(50.0), "p90_ms": s.p(90.0), "p99_ms": s.p(99.0), "max_ms": max,
            "gateway_cpu_us_per_req": s.cpu_us_per_request(0),
            "upstream_cpu_us_per_req": s.cpu_us_per_request(1),
            "redis_cpu_us_per_req": s.cpu_us_per_request(2),
            "other_cpu_us_per_req": s.cpu_us_per_request(3),
            "load_generator_cpu_us_per_req": s.cpu_us_per_request(4),
        });
        let _ = writeln!(self.jsonl, "{record}");
    }

    pub(crate) fn compare(&mut self, what: &str, ours: &Stats, base: &Stats) {
        let line = format!(
            "{what} at {} conns: p50 {:.3} vs {:.3} ms (+{:.3} ms, ×{:.2}); p99 ×{:.2}; req/s ×{:.2}",
            ours.conns,
            ours.p(50.0),
            base.p(50.0),
            ours.p(50.0) - base.p(50.0),
            ours.p(50.0) / base.p(50.0),
            ours.p(99.0) / base.p(99.0),
            ours.requests_per_sec() / base.requests_per_sec(),
        );
        self.pending_notes.push(line);
    }

    pub(crate) fn note(&mut self, text: &str) {
        self.pending_notes.push(text.to_owned());
    }

    pub(crate) fn record_extra(&mut self, value: Value) {
        let _ = writeln!(self.jsonl, "{value}");
    }

    pub(crate) fn finish(&mut self) {
        self.flush_notes();
    }
}

pub(crate) fn shorten(text: &str) -> String {
    let one_line: String = text.replace(['\n', '|'], " ");
    one_line.chars().take(120).collect()
}
