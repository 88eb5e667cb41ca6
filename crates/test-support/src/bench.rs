//! Processes the benchmarks start: a fixture server of `crates/fixture-servers` in the
//! benchmark's profile, and the gateway binary with its logs quiet. The benches pass the
//! gateway's path (`CARGO_BIN_EXE_…` exists only in their own crate).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Proc, spawn_announcing};

const DEADLINE: Duration = Duration::from_secs(30);

/// The fixture server `name` (`plain_server`, `mrtr_server`) built in the profile next to
/// `gateway` (rebuilt if stale), started on a free port; it and its URL.
pub fn fixture_server(gateway: &Path, name: &str) -> (Proc, String) {
    let profile_dir = gateway.parent().expect("target/<profile>");
    let mut command = Command::new(crate::build::fixture(profile_dir, name));
    command
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "error");
    spawn_announcing(name, command, DEADLINE)
}

/// The gateway in front of `upstream` on a free port, with `flags`; it and its URL.
pub fn gateway(gateway: &Path, upstream: &str, flags: &[String]) -> (Proc, String) {
    let mut command = Command::new(gateway);
    command
        .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
        .args(["--drain-timeout-ms", "0"])
        .args(flags)
        .env("RUST_LOG", "error");
    spawn_announcing("mcp-task-gateway", command, DEADLINE)
}

/// The command line of a `harness = false` bench run as a bench, without cargo's
/// `--bench`; `None` when `cargo test --benches` runs it in test mode (or lists it),
/// where these benches do nothing.
pub fn bench_args() -> Option<Vec<String>> {
    let raw: Vec<String> = std::env::args().collect();
    if raw.iter().any(|a| a == "--list") || !raw.iter().any(|a| a == "--bench") {
        return None;
    }
    Some(raw.into_iter().filter(|a| a != "--bench").collect())
}

/// A `harness = false` bench's arguments, parsed as `A`, and the runtime it runs on
/// (multi-threaded, every driver on); `None` in test mode, where these benches do nothing.
pub fn start<A: clap::Parser>() -> Option<(A, tokio::runtime::Runtime)> {
    let args = A::parse_from(bench_args()?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    Some((args, runtime))
}

/// Redis's own counters since the last `CONFIG RESETSTAT`, less the bench's own requests
/// (`INFO`, `CONFIG`) and the wake-up subscribers' keep-alive `PING`s: what the gateway
/// asked of Redis. `total_reads_processed` counts requests read, a pipeline as one read,
/// so round trips; `total_net_input_bytes` the bytes the gateway wrote to Redis.
pub struct RedisCounters {
    conn: redis::Connection,
    /// Requests this bench sent since the reset (each one read on the server).
    own_reads: u64,
}

impl RedisCounters {
    /// Counters read over `conn` (a connection of the bench's own).
    pub fn new(conn: redis::Connection) -> Self {
        Self { conn, own_reads: 0 }
    }

    pub fn reset(&mut self) {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec(&mut self.conn)
            .expect("Redis answers");
        self.own_reads = 0;
    }

    /// (commands by name, reads) since the reset, without this bench's own.
    pub fn read(&mut self) -> (BTreeMap<String, u64>, u64) {
        let (commands, reads, _) = self.read_with_bytes();
        (commands, reads)
    }

    /// As `read`, with the bytes written to Redis since the reset.
    pub fn read_with_bytes(&mut self) -> (BTreeMap<String, u64>, u64, u64) {
        let mut info_cmd = redis::cmd("INFO");
        info_cmd.arg("commandstats").arg("stats");
        let info: String = info_cmd.query(&mut self.conn).expect("Redis answers");
        self.own_reads += 1;
        let mut commands = BTreeMap::new();
        let mut reads: u64 = 0;
        let mut bytes_in: u64 = 0;
        for line in info.lines() {
            if let Some(rest) = line.strip_prefix("cmdstat_") {
                let (name, stats) = rest.split_once(':').expect("Redis answers");
                let calls: u64 = stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .expect("Redis answers")
                    .parse()
                    .expect("Redis answers");
                commands.insert(name.to_uppercase(), calls);
            } else if let Some(n) = line.strip_prefix("total_reads_processed:") {
                reads = n.trim().parse().expect("Redis answers");
            } else if let Some(n) = line.strip_prefix("total_net_input_bytes:") {
                bytes_in = n.trim().parse().expect("Redis answers");
            }
        }
        // The bench's own INFO and CONFIG, and the wake-up subscriber's keep-alive PING.
        let own_info = self.own_reads;
        if let Some(info) = commands.get_mut("INFO") {
            *info -= own_info.min(*info);
        }
        let pings = commands.remove("PING").unwrap_or(0);
        commands.retain(|name, calls| *calls > 0 && name != "CONFIG|RESETSTAT" && name != "CONFIG");
        commands.remove("INFO");
        let own_bytes = self.own_reads * info_cmd.get_packed_command().len() as u64
            + pings * redis::cmd("PING").get_packed_command().len() as u64;
        (
            commands,
            reads.saturating_sub(self.own_reads + pings),
            bytes_in.saturating_sub(own_bytes),
        )
    }

    /// Waits until Redis has seen `name` at least `count` times since the reset.
    pub fn wait_for(&mut self, name: &str, count: u64) {
        let start = Instant::now();
        loop {
            let (commands, _) = self.read();
            if commands.get(name).copied().unwrap_or(0) >= count {
                return;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "Redis never saw {count} × {name}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
