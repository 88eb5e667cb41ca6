//! The processes a run starts: the fixture upstream, the gateway (possibly wrapped), Redis,
//! and the other proxies of scenario f.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use test_support::{Proc, RedisServer, free_port, spawn_announcing, wait_for_port};

use crate::{ANNOUNCE_DEADLINE, Args};

pub(crate) struct Binaries {
    pub(crate) root: PathBuf,
    pub(crate) gateway: PathBuf,
    pub(crate) fixture: PathBuf,
    pub(crate) wrap: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
}

impl Binaries {
    /// The gateway is the bench profile's own build of the binary; the fixture is
    /// `plain_server` of `crates/fixture-servers`, built in the same profile if needed.
    pub(crate) fn locate(args: &Args) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let built = PathBuf::from(env!("CARGO_BIN_EXE_mcp-task-gateway"));
        let profile_dir = built.parent().expect("target/<profile>").to_path_buf();
        let gateway = args.gateway_bin.clone().unwrap_or(built);
        let fixture = test_support::build::fixture(&profile_dir, "plain_server");
        let wrap = args
            .gateway_wrap
            .as_deref()
            .map(|w| w.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let env = args
            .gateway_env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self {
            root,
            gateway,
            fixture,
            wrap,
            env,
        }
    }

    /// The gateway binary, under `--gateway-wrap` if given.
    pub(crate) fn gateway_command(&self) -> Command {
        let mut command = match self.wrap.split_first() {
            Some((program, wrap_args)) => {
                let mut command = Command::new(program);
                command.args(wrap_args).arg(&self.gateway);
                command
            }
            None => Command::new(&self.gateway),
        };
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    pub(crate) fn gateway_supports(&self, flag: &str) -> bool {
        Command::new(&self.gateway)
            .arg("--help")
            .output()
            // Help goes to stdout now; gateways built before 2026-11 printed it on stderr.
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).contains(flag)
                    || String::from_utf8_lossy(&o.stderr).contains(flag)
            })
            .unwrap_or(false)
    }

    pub(crate) fn fixture(&self) -> (Proc, String) {
        let mut command = Command::new(&self.fixture);
        command.args(["--listen", "127.0.0.1:0"]);
        command.env("RUST_LOG", "error");
        spawn_announcing("plain_server", command, ANNOUNCE_DEADLINE)
    }

    pub(crate) fn gateway(&self, upstream: &str, extra: &[String]) -> (Proc, String) {
        let mut command = self.gateway_command();
        command
            .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
            .args(extra);
        gateway_env(&mut command);
        self.graced(spawn_announcing(
            "mcp-task-gateway",
            command,
            ANNOUNCE_DEADLINE,
        ))
    }

    pub(crate) fn gateway_cmd(&self, upstream_cmd: &str) -> (Proc, String) {
        let mut command = self.gateway_command();
        command.args(["--listen", "127.0.0.1:0", "--upstream-cmd", upstream_cmd]);
        command.current_dir(self.root.join("tests"));
        gateway_env(&mut command);
        self.graced(spawn_announcing(
            "mcp-task-gateway",
            command,
            ANNOUNCE_DEADLINE,
        ))
    }

    /// A wrapped gateway gets SIGTERM and time to exit (and write its report).
    pub(crate) fn graced(&self, (mut proc, url): (Proc, String)) -> (Proc, String) {
        if !self.wrap.is_empty() {
            proc.grace = Duration::from_secs(120);
        }
        (proc, url)
    }

    pub(crate) fn everything_entry(&self) -> Option<PathBuf> {
        let entry = self
            .root
            .join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        entry.exists().then_some(entry)
    }

    /// A byte relay in front of `upstream` (`socat`, if on the PATH): it parses nothing,
    /// so what it adds over direct is the floor of any proxy's latency on this machine.
    /// Both of its sockets set TCP_NODELAY, as the gateway's do.
    pub(crate) fn byte_relay(&self, upstream: &str) -> Option<(Proc, String)> {
        let (target, path) = upstream.strip_prefix("http://")?.split_once('/')?;
        let port = free_port();
        let mut command = Command::new("socat");
        command
            .arg(format!(
                "TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,nodelay"
            ))
            .arg(format!("TCP:{target},nodelay"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = Proc::spawn(command, "socat").ok()?;
        wait_for_port(port, ANNOUNCE_DEADLINE).ok()?;
        Some((proc, format!("http://127.0.0.1:{port}/{path}")))
    }

    /// Starts the other proxy of scenario f in front of server-everything over stdio.
    pub(crate) fn other_proxy(&self, which: &str, everything: &Path) -> Option<(Proc, String)> {
        let peers = self.root.join("benches/peers/node_modules");
        let port = free_port();
        let mut command = Command::new("node");
        match which {
            "mcp-proxy" => {
                let entry = peers.join("mcp-proxy/dist/bin/mcp-proxy.mjs");
                if !entry.exists() {
                    return None;
                }
                command
                    .arg(entry)
                    .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
                    .args(["--server", "stream", "--", "node"])
                    .arg(everything)
                    .arg("stdio");
            }
            "supergateway" => {
                let entry = peers.join("supergateway/dist/index.js");
                if !entry.exists() {
                    return None;
                }
                command
                    .arg(entry)
                    .args(["--stdio", &format!("node {} stdio", everything.display())])
                    .args(["--outputTransport", "streamableHttp", "--stateful"])
                    .args(["--port", &port.to_string(), "--logLevel", "none"]);
            }
            _ => return None,
        }
        command
            .current_dir(self.root.join("tests"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = Proc::spawn(command, which).ok()?;
        wait_for_port(port, ANNOUNCE_DEADLINE).ok()?;
        Some((proc, format!("http://127.0.0.1:{port}/mcp")))
    }
}

pub(crate) fn gateway_env(command: &mut Command) {
    command
        .args(["--drain-timeout-ms", "0"])
        .env("RUST_LOG", "error")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("MTG_LOG_FORMAT", "json");
}

#[derive(Clone, Copy)]
pub(crate) enum Store {
    Memory,
    Redis,
}

pub(crate) fn stores(redis_ok: bool) -> Vec<Store> {
    if redis_ok {
        vec![Store::Memory, Store::Redis]
    } else {
        vec![Store::Memory]
    }
}

impl Store {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Redis => "Redis",
        }
    }

    pub(crate) fn start(self, args: &Args) -> Redis {
        match self {
            Store::Memory => Redis(None),
            Store::Redis => Redis(Some(RedisServer::start_binary(&args.redis_server))),
        }
    }
}

/// A Redis server of this run, or none for the memory store.
pub(crate) struct Redis(Option<RedisServer>);

impl Redis {
    pub(crate) fn flags(&self) -> Vec<String> {
        match &self.0 {
            Some(server) => vec!["--redis".into(), server.url()],
            None => Vec::new(),
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.0.as_ref().and_then(RedisServer::pid)
    }
}

/// Children inherit the limit: 10,000 tasks in flight need 10,000 upstream sockets in
/// the gateway and as many in the fixture.
pub(crate) fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    #[allow(unsafe_code)]
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
