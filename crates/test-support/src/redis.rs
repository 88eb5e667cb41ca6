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

    /// Sends `signal` (e.g. SIGSTOP, SIGCONT) to the running server.
    pub fn signal(&self, signal: libc::c_int) {
        if let Some(proc) = &self.proc {
            proc.signal_group(signal);
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
        remove_unless_kept(&self.dir);
    }
}

/// With `MTG_KEEP_REDIS_DIRS` set, the servers' and sentinels' directories (logs,
/// sentinel.conf) stay for a post-mortem.
fn remove_unless_kept(dir: &std::path::Path) {
    if std::env::var_os("MTG_KEEP_REDIS_DIRS").is_some() {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(dir);
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

/// The name the sentinels of a [`RedisSentinel`] know their master by.
pub const SENTINEL_MASTER: &str = "mtg";

/// A primary, its replicas (`--replicaof`) and three sentinels (quorum 2), each on a
/// free port, none persistent. Failure detection is quick: `down-after-milliseconds`
/// 1000, `failover-timeout` 3000.
pub struct RedisSentinel {
    /// The data nodes; the first started as the primary (it may not be one any more).
    pub nodes: Vec<RedisServer>,
    pub sentinels: Vec<SentinelProcess>,
}

/// One `redis-server --sentinel`, with its config file in a directory of its own
/// (Sentinel rewrites it).
pub struct SentinelProcess {
    proc: Option<Proc>,
    pub port: u16,
    /// The TLS port, for a sentinel started with [`SentinelProcess::start_tls`].
    pub tls_port: Option<u16>,
    dir: PathBuf,
}

impl RedisSentinel {
    /// Starts everything and waits until the replicas are in sync and every sentinel
    /// knows the master, its replicas and the other sentinels (else no failover).
    pub fn start(replicas: usize) -> Self {
        let primary = RedisServer::start();
        let replica_of = [
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            primary.port.to_string(),
        ];
        let mut nodes = vec![primary];
        for _ in 0..replicas {
            let mut attempts = 0;
            let node = loop {
                attempts += 1;
                let mut node = RedisServer::configured(
                    "redis-server",
                    free_port(),
                    &NO_PERSISTENCE,
                    &replica_of,
                );
                match node.try_spawn() {
                    Ok(()) => break node,
                    Err(Start::Exited(_)) if attempts < 4 => continue,
                    Err(failure) => panic!("{failure}"),
                }
            };
            nodes.push(node);
        }
        let primary_port = nodes[0].port;
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start(primary_port))
            .collect();
        let deployment = Self { nodes, sentinels };
        deployment.wait_settled(primary_port, replicas);
        deployment
    }

    /// `--redis` for the gateway.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER}", hosts.join(","))
    }

    /// The master's port as the first answering sentinel names it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(SentinelProcess::master_port)
    }

    /// The data node on `port`.
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no data node on {port}"))
    }

    /// Waits (up to `limit`) until every running sentinel names a master other than
    /// `old_port` and that node says it is a master; its port.
    pub fn wait_promoted(&self, old_port: u16, limit: Duration) -> u16 {
        let start = Instant::now();
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .filter(|s| s.proc.is_some())
                .map(SentinelProcess::master_port)
                .collect();
            if let Some(Some(port)) = named.first()
                && *port != old_port
                && named.iter().all(|p| *p == Some(*port))
                && self
                    .nodes
                    .iter()
                    .find(|n| n.port == *port)
                    .is_some_and(|n| n.role().as_deref() == Some("master"))
            {
                return *port;
            }
            assert!(
                start.elapsed() < limit,
                "no replica promoted within {limit:?}; sentinels name {named:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the master on `master_port` has `replicas` replicas in sync.
    pub fn wait_replicas_synced(&self, master_port: u16, replicas: usize, limit: Duration) {
        let start = Instant::now();
        loop {
            let in_sync = self
                .nodes
                .iter()
                .filter(|n| n.port != master_port && n.pid().is_some())
                .filter(|n| {
                    let info = n.info_replication();
                    info.contains(&format!("master_port:{master_port}"))
                        && info.contains("master_link_status:up")
                })
                .count();
            if in_sync >= replicas {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{in_sync} of {replicas} replicas in sync with {master_port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_settled(&self, primary_port: u16, replicas: usize) {
        self.wait_replicas_synced(primary_port, replicas, DEADLINE);
        let start = Instant::now();
        for sentinel in &self.sentinels {
            loop {
                let master = sentinel.master_info();
                let known = |field: &str| {
                    master
                        .get(field)
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0)
                };
                if sentinel.master_port() == Some(primary_port)
                    && known("num-slaves") == replicas
                    && known("num-other-sentinels") == 2
                {
                    break;
                }
                assert!(
                    start.elapsed() < DEADLINE,
                    "sentinel {} never learnt the deployment: {master:?}",
                    sentinel.port
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl RedisServer {
    /// `role:` from `INFO replication`, while the server answers.
    pub fn role(&self) -> Option<String> {
        self.info_replication()
            .lines()
            .find_map(|l| l.strip_prefix("role:"))
            .map(|r| r.trim().to_owned())
    }

    /// `INFO replication`, or "" when the server does not answer.
    pub fn info_replication(&self) -> String {
        self.try_connection()
            .and_then(|mut c| {
                redis::cmd("INFO")
                    .arg("replication")
                    .query::<String>(&mut c)
            })
            .unwrap_or_default()
    }
}

impl SentinelProcess {
    fn start(primary_port: u16) -> Self {
        Self::launch(primary_port, 2, None)
    }

    /// One sentinel (quorum 1) that also serves TLS on a port of its own with
    /// `cert`/`key`, and watches the primary on its TLS port (`tls-replication yes`).
    pub fn start_tls(
        primary_tls_port: u16,
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
    ) -> Self {
        Self::launch(primary_tls_port, 1, Some([cert, key, ca]))
    }

    fn launch(primary_port: u16, quorum: u32, tls: Option<[&std::path::Path; 3]>) -> Self {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let port = free_port();
            let tls_port = tls.map(|_| free_port());
            let dir =
                std::env::temp_dir().join(format!("mtg-sentinel-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("a temporary directory");
            let tls_config = match (tls, tls_port) {
                (Some([cert, key, ca]), Some(tls_port)) => format!(
                    "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\n\
                     tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n",
                    cert.display(),
                    key.display(),
                    ca.display()
                ),
                _ => String::new(),
            };
            let config = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n{tls_config}\
                 sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {primary_port} {quorum}\n\
                 sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
                 sentinel failover-timeout {SENTINEL_MASTER} 3000\n\
                 sentinel parallel-syncs {SENTINEL_MASTER} 1\n",
                dir = dir.display()
            );
            let file = dir.join("sentinel.conf");
            std::fs::write(&file, config).expect("sentinel.conf");
            let mut command = Command::new("redis-server");
            command
                .arg(&file)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            let proc = Proc::spawn(command, "redis-sentinel")
                .unwrap_or_else(|e| panic!("cannot start redis-server --sentinel: {e}"));
            let mut sentinel = Self {
                proc: Some(proc),
                port,
                tls_port,
                dir,
            };
            match sentinel.wait_ready() {
                Ok(()) => return sentinel,
                Err(_) if attempts < 4 => continue,
                Err(why) => panic!("{why}"),
            }
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if self.connection().is_some() {
                return Ok(());
            }
            if let Some(status) = self
                .proc
                .as_mut()
                .and_then(|p| p.child.try_wait().ok().flatten())
            {
                self.proc = None;
                let log =
                    std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
                return Err(format!(
                    "sentinel on {} exited ({status}): {log}",
                    self.port
                ));
            }
            if start.elapsed() > DEADLINE {
                return Err(format!("sentinel on {} never answered", self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn connection(&self) -> Option<redis::Connection> {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{}", self.port))
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        redis::cmd("PING").query::<String>(&mut conn).ok()?;
        Some(conn)
    }

    /// `SENTINEL get-master-addr-by-name`'s port.
    pub fn master_port(&self) -> Option<u16> {
        let mut conn = self.connection()?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(SENTINEL_MASTER)
            .query(&mut conn)
            .ok()?;
        addr.map(|(_, port)| port)
    }

    /// `SENTINEL master <name>` as fields.
    pub fn master_info(&self) -> std::collections::HashMap<String, String> {
        self.connection()
            .and_then(|mut c| {
                redis::cmd("SENTINEL")
                    .arg("master")
                    .arg(SENTINEL_MASTER)
                    .query(&mut c)
                    .ok()
            })
            .unwrap_or_default()
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut proc) = self.proc.take() {
            proc.kill();
        }
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.kill();
        remove_unless_kept(&self.dir);
    }
}
