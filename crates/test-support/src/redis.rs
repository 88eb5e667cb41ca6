//! `redis-server` processes of a run's own, on free loopback ports (never 6379), killed
//! when dropped, with their files in a directory of their own.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{DEADLINE, Proc, free_port};

const NO_PERSISTENCE: [&str; 4] = ["--save", "", "--appendonly", "no"];

pub struct RedisServer {
    proc: Option<Proc>,
    pub port: u16,
    /// The TLS port, for a server started with [`RedisServer::start_tls`].
    pub tls_port: Option<u16>,
    binary: String,
    dir: PathBuf,
    args: Vec<String>,
}

impl RedisServer {
    /// A throwaway server: no persistence.
    pub fn start() -> Self {
        Self::start_binary("redis-server")
    }

    /// A throwaway server from the given `redis-server` binary.
    pub fn start_binary(binary: &str) -> Self {
        Self::launch(binary, None, &NO_PERSISTENCE)
    }

    /// A server that survives `kill -9`: every write is in the append-only file before
    /// Redis answers it.
    pub fn start_durable() -> Self {
        Self::launch(
            "redis-server",
            None,
            &[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
        )
    }

    /// A throwaway server on a given port (e.g. one a gateway already points at).
    pub fn start_on(port: u16) -> Self {
        Self::launch("redis-server", Some(port), &NO_PERSISTENCE)
    }

    /// A throwaway server that also serves TLS on a port of its own, with `cert`/`key`
    /// (clients are not asked for certificates). The plain port stays open for the test's
    /// own checks.
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path, ca: &std::path::Path) -> Self {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let tls_port = free_port();
            let tls: Vec<String> = vec![
                "--tls-port".into(),
                tls_port.to_string(),
                "--tls-cert-file".into(),
                cert.display().to_string(),
                "--tls-key-file".into(),
                key.display().to_string(),
                "--tls-ca-cert-file".into(),
                ca.display().to_string(),
                "--tls-auth-clients".into(),
                "no".into(),
            ];
            let mut server = Self::configured("redis-server", free_port(), &NO_PERSISTENCE, &tls);
            server.tls_port = Some(tls_port);
            match server.try_spawn() {
                Ok(()) => return server,
                Err(Start::Exited(_)) if attempts < 4 => continue,
                Err(failure) => panic!("{failure}"),
            }
        }
    }

    /// `rediss://` on the TLS port of a [`RedisServer::start_tls`] server.
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("started with start_tls");
        format!("rediss://127.0.0.1:{port}")
    }

    /// Starts a server on `port`, or on a free one. A free port can be taken by another
    /// process between the check and Redis's bind; then Redis exits and another port is
    /// tried.
    fn launch(binary: &str, port: Option<u16>, extra: &[&str]) -> Self {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let chosen = port.unwrap_or_else(free_port);
            let mut server = Self::configured(binary, chosen, extra, &[]);
            match server.try_spawn() {
                Ok(()) => return server,
                Err(Start::Exited(_)) if port.is_none() && attempts < 4 => continue,
                Err(failure) => panic!("{failure}"),
            }
        }
    }

    fn configured(binary: &str, port: u16, extra: &[&str], args_first: &[String]) -> Self {
        let dir = std::env::temp_dir().join(format!("mtg-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut args: Vec<String> = args_first.to_vec();
        args.extend([
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.display().to_string(),
            // Redis logs to stdout by default; in a file, a failed start can say why.
            "--logfile".into(),
            dir.join("redis.log").display().to_string(),
        ]);
        args.extend(extra.iter().map(|a| a.to_string()));
        Self {
            proc: None,
            port,
            tls_port: None,
            binary: binary.to_owned(),
            dir,
            args,
        }
    }

    fn spawn(&mut self) {
        if let Err(failure) = self.try_spawn() {
            panic!("{failure}");
        }
    }

    fn try_spawn(&mut self) -> Result<(), Start> {
        let mut command = Command::new(&self.binary);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let proc = Proc::spawn(command, "redis-server").unwrap_or_else(|e| {
            panic!(
                "cannot start {} (Debian: apt-get install redis-server): {e}",
                self.binary
            )
        });
        self.proc = Some(proc);
        self.wait_ready()
    }

    /// Waits until the server answers PING (not LOADING), or has exited.
    fn wait_ready(&mut self) -> Result<(), Start> {
        let start = Instant::now();
        loop {
            if let Ok(mut conn) = self.try_connection()
                && redis::cmd("PING").query::<String>(&mut conn).is_ok()
            {
                return Ok(());
            }
            let exited = self
                .proc
                .as_mut()
                .and_then(|proc| proc.child.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.proc = None;
                return Err(Start::Exited(format!(
                    "redis-server on {} exited ({status}): {}",
                    self.port,
                    self.log_tail()
                )));
            }
            if start.elapsed() > DEADLINE {
                return Err(Start::NotReady(format!(
                    "redis-server on {} never became ready: {}",
                    self.port,
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The end of the server's log, for failures.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// The server's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A plain connection for the test's own checks.
    pub fn connection(&self) -> redis::Connection {
        self.try_connection().expect("redis reachable")
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut proc) = self.proc.take() {
            proc.kill();
        }
    }

    /// Starts the server again on the same port with the same files.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Why a server did not start.
#[derive(Debug)]
enum Start {
    Exited(String),
    NotReady(String),
}

impl std::fmt::Display for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Start::Exited(why) | Start::NotReady(why) => f.write_str(why),
        }
    }
}

/// A Redis Cluster of `masters` primaries without replicas.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(masters: usize) -> Self {
        let nodes: Vec<RedisServer> = (0..masters)
            .map(|_| RedisServer::launch_cluster_node())
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let output = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = Self { nodes };
        cluster.wait_ok();
        cluster
    }

    fn wait_ok(&self) {
        let start = Instant::now();
        for node in &self.nodes {
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.connection())
                    .unwrap_or_default();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    start.elapsed() < DEADLINE,
                    "cluster never became ok: {info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The seed list for `--redis-cluster`.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A cluster-aware connection for the test's own checks.
    pub fn connection(&self) -> redis::cluster::ClusterConnection {
        redis::cluster::ClusterClient::new(self.nodes.iter().map(|n| n.url()).collect::<Vec<_>>())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl RedisServer {
    /// A cluster-enabled node on free ports (retried like [`RedisServer::launch`]).
    fn launch_cluster_node() -> Self {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let port = free_port();
            let bus = free_port().to_string();
            let first = ["--cluster-port", &bus, "--cluster-enabled", "yes"].map(String::from);
            let mut node = Self::configured("redis-server", port, &NO_PERSISTENCE, &first);
            let config = node.dir.join(format!("nodes-{port}.conf"));
            node.args
                .extend(["--cluster-config-file".into(), config.display().to_string()]);
            match node.try_spawn() {
                Ok(()) => return node,
                Err(Start::Exited(_)) if attempts < 4 => continue,
                Err(failure) => panic!("{failure}"),
            }
        }
    }
}
