//! Sides measured in alternating rounds, and the medians of their runs.
//!
//! One run's p99 on a shared 2-core machine swings with the scheduler (docs/benchmarks.md,
//! run 6 and run 18), so a comparison of tails takes several runs a side, alternating
//! (ABBA…) so that neither side always runs second, and compares their medians.

use crate::Args;
use crate::driver::{Pids, Stats, Target, load};
use crate::report::Report;
use crate::workloads::Workload;

/// One side of a comparison: what is loaded, and whose CPU is counted.
pub(crate) struct Side<'a> {
    /// The report's variant name; each run adds " (run N)".
    pub(crate) label: String,
    pub(crate) target: &'a Target,
    pub(crate) workload: &'a Workload,
    pub(crate) pids: Pids,
}

/// Runs each side `rounds` times at `conns` connections, odd rounds in the sides' order
/// and even rounds in reverse (AB BA …, ABC CBA …), each run a row of the report;
/// returns each side's runs.
pub(crate) async fn alternate<const N: usize>(
    args: &Args,
    scenario: &str,
    sides: [&Side<'_>; N],
    conns: usize,
    rounds: u64,
    report: &mut Report,
) -> [Vec<Stats>; N] {
    alternate_sides(args, scenario, &sides, conns, rounds, report)
        .await
        .try_into()
        .unwrap_or_else(|_| unreachable!("one list of runs a side"))
}

/// [`alternate`] for a number of sides known only at run time.
pub(crate) async fn alternate_sides(
    args: &Args,
    scenario: &str,
    sides: &[&Side<'_>],
    conns: usize,
    rounds: u64,
    report: &mut Report,
) -> Vec<Vec<Stats>> {
    let mut runs: Vec<Vec<Stats>> = sides.iter().map(|_| Vec::new()).collect();
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..sides.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for index in order {
            let side = sides[index];
            let stats = load(args, side.target, side.workload, conns, &side.pids).await;
            let variant = format!("{} (run {round})", side.label);
            report.row(scenario, &variant, conns, &stats);
            runs[index].push(stats);
        }
    }
    runs
}

/// The medians of one side's runs.
#[derive(Clone, Copy)]
pub(crate) struct Medians {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) req_per_s: f64,
    pub(crate) gateway_cpu_us: f64,
    /// Another proxy's, in the gateway's place (NaN where there is none).
    pub(crate) other_cpu_us: f64,
    pub(crate) load_generator_cpu_us: f64,
}

impl Medians {
    pub(crate) fn of(runs: &[Stats]) -> Self {
        let of = |f: &dyn Fn(&Stats) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        Self {
            p50_ms: of(&|s| s.p(50.0)),
            p99_ms: of(&|s| s.p(99.0)),
            req_per_s: of(&|s| s.requests_per_sec()),
            gateway_cpu_us: of(&|s| s.cpu_us_per_request(0).unwrap_or(f64::NAN)),
            other_cpu_us: of(&|s| s.cpu_us_per_request(3).unwrap_or(f64::NAN)),
            load_generator_cpu_us: of(&|s| s.cpu_us_per_request(4).unwrap_or(f64::NAN)),
        }
    }

    /// "p50 A vs B ms (×r); p99 …; req/s …; gateway CPU …", `self` against `base`.
    pub(crate) fn against(&self, base: &Medians) -> String {
        // A side without a gateway (direct) spends none: no ratio to give.
        let cpu = if self.gateway_cpu_us.is_nan() {
            "none on this side".to_owned()
        } else if base.gateway_cpu_us > 0.0 {
            format!(
                "{:.1} vs {:.1} µs/req (×{:.2})",
                self.gateway_cpu_us,
                base.gateway_cpu_us,
                self.gateway_cpu_us / base.gateway_cpu_us
            )
        } else {
            format!("{:.1} µs/req", self.gateway_cpu_us)
        };
        format!(
            "p50 {:.3} vs {:.3} ms (×{:.2}); p99 {:.3} vs {:.3} ms (×{:.2}); req/s {:.0} vs {:.0} \
             (×{:.2}); gateway CPU {cpu}; load generator CPU {:.1} µs/req",
            self.p50_ms,
            base.p50_ms,
            self.p50_ms / base.p50_ms,
            self.p99_ms,
            base.p99_ms,
            self.p99_ms / base.p99_ms,
            self.req_per_s,
            base.req_per_s,
            self.req_per_s / base.req_per_s,
            self.load_generator_cpu_us,
        )
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "req_per_s": self.req_per_s,
            "gateway_cpu_us_per_req": self.gateway_cpu_us,
            "other_cpu_us_per_req": self.other_cpu_us,
            "load_generator_cpu_us_per_req": self.load_generator_cpu_us,
        })
    }
}

pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// "a / b / c" in ms.
pub(crate) fn list_ms(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.3}"))
        .collect::<Vec<_>>()
        .join(" / ")
}
