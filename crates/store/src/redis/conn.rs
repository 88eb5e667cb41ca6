//! The connection to Redis (one server, a Cluster, or a master found through Sentinel):
//! every operation is a list of pipelines, each confined to one hash slot, run with a
//! time limit, timed and counted.

mod per_thread;
mod sentinel;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::{ConnectionLike, ConnectionManagerConfig};
use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, Value};
use tracing::Instrument;

use super::link::Link;
use super::scripts::Scripts;
use crate::{StoreError, Unavailable, metrics};
use per_thread::PerThread;
use sentinel::SentinelConn;
pub use sentinel::{SentinelTarget, SentinelUrlError};

/// Where the store lives.
#[derive(Debug, Clone)]
pub enum Target {
    /// One server (or a primary behind a proxy): `redis://` or `rediss://`.
    Server(String),
    /// Redis Cluster, given one or more seed nodes.
    Cluster(Vec<String>),
    /// The master Sentinel names: `redis+sentinel://` or `rediss+sentinel://`.
    Sentinel(SentinelTarget),
}

impl Target {
    /// `--redis`'s URL: one server, or a master behind Sentinel.
    pub fn from_url(url: &str) -> Result<Self, SentinelUrlError> {
        if SentinelTarget::is_sentinel_url(url) {
            SentinelTarget::parse(url).map(Target::Sentinel)
        } else {
            Ok(Target::Server(url.to_owned()))
        }
    }
}

#[derive(Clone)]
enum Backend {
    Server(Arc<PerThread>),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelConn>),
}

#[derive(Clone)]
pub(super) struct Conn {
    backend: Backend,
    timeout: Duration,
    scripts: &'static Scripts,
    /// Told of every failed operation (answers kept in memory are then dropped).
    link: Arc<Link>,
}

/// A client of one server; `rediss://` servers are checked against `ca_cert` when given.
pub(super) fn client(url: &str, ca_cert: Option<&[u8]>) -> Result<redis::Client, RedisError> {
    match ca_cert {
        Some(pem) => redis::Client::build_with_tls(url, certificates(pem)),
        None => redis::Client::open(url),
    }
}

fn certificates(ca_cert: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca_cert.to_vec()),
    }
}

impl Conn {
    /// Builds the connection without touching the network: the gateway starts (and
    /// answers, with clear errors) while Redis is down, and connects once it is up.
    pub(super) fn new(
        target: &Target,
        timeout: Duration,
        ca_cert: Option<&[u8]>,
        link: Arc<Link>,
    ) -> Result<Self, RedisError> {
        // Connect attempts are bounded by the operation's own limit; one retry inside the
        // client is enough, since every request tries again anyway.
        let connect_timeout = timeout.min(Duration::from_secs(1));
        let backend = match target {
            Target::Server(url) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_millis(200));
                Backend::Server(Arc::new(PerThread::new(client(url, ca_cert)?, config)))
            }
            Target::Cluster(urls) => {
                let mut builder =
                    redis::cluster::ClusterClientBuilder::new(urls.iter().map(String::as_str))
                        .retries(2)
                        .min_retry_wait(20)
                        .max_retry_wait(200);
                if let Some(pem) = ca_cert {
                    builder = builder.certs(certificates(pem));
                }
                let client = builder.build()?;
                let config = ClusterConfig::new()
                    .set_connection_timeout(connect_timeout)
                    .set_response_timeout(timeout);
                Backend::Cluster(client.get_pending_async_connection_with_config(config))
            }
            Target::Sentinel(target) => Backend::Sentinel(Arc::new(SentinelConn::new(
                target,
                ca_cert,
                connect_timeout,
                timeout,
            )?)),
        };
        Ok(Self {
            backend,
            timeout,
            scripts: Scripts::get(),
            link,
        })
    }

    /// Whether the groups of one `run` reach Redis in their order (one connection);
    /// a Cluster sends them to their nodes concurrently.
    pub(super) fn keeps_order(&self) -> bool {
        !matches!(self.backend, Backend::Cluster(_))
    }

    pub(super) fn backend_label(&self) -> &'static str {
        match self.backend {
            Backend::Server(_) => "redis",
            Backend::Cluster(_) => "redis-cluster",
            Backend::Sentinel(_) => "redis-sentinel",
        }
    }

    /// After a timeout on a master found through Sentinel: it may be cut off while
    /// another was promoted, so the next operation asks the sentinels again.
    fn suspect_connection(&self) {
        if let Backend::Sentinel(sentinel) = &self.backend {
            sentinel.forget(None);
        }
    }

    /// One command; its reply.
    pub(super) async fn one(&self, op: &'static str, cmd: Cmd) -> Result<Value, StoreError> {
        let mut pipe = redis::pipe();
        pipe.add_command(cmd);
        let mut replies = self.run(op, vec![pipe]).await?;
        Ok(replies
            .pop()
            .and_then(|mut group| group.pop())
            .unwrap_or(Value::Nil))
    }

    /// Runs `groups` (each a pipeline whose commands share one hash slot) as one round
    /// trip: one pipeline on a single server, one per slot concurrently on a Cluster.
    /// Returns the replies by group. A script Redis lost (restart, failover) is loaded
    /// again and the operation repeated once; every command used here tolerates that.
    pub(super) async fn run(
        &self,
        op: &'static str,
        groups: Vec<Pipeline>,
    ) -> Result<Vec<Vec<Value>>, StoreError> {
        let started = Instant::now();
        let span = tracing::debug_span!("redis", op);
        let result = async {
            match self.attempt(&groups).await {
                Err(Failure::NoScript) => match self.load_scripts().await {
                    Ok(()) => self.attempt(&groups).await,
                    Err(e) => Err(e),
                },
                other => other,
            }
        }
        .instrument(span)
        .await;
        metrics::roundtrip(op, started.elapsed());
        result.map_err(|failure| {
            self.link.faulted();
            metrics::store_error(self.backend_label());
            let error = failure.into_store_error(self.timeout);
            tracing::debug!(op, error = %error, "redis operation failed");
            error
        })
    }

    async fn attempt(&self, groups: &[Pipeline]) -> Result<Vec<Vec<Value>>, Failure> {
        let Ok(replies) = tokio::time::timeout(self.timeout, self.send(groups)).await else {
            self.suspect_connection();
            return Err(Failure::Timeout);
        };
        let replies = replies?;
        for reply in replies.iter().flatten() {
            if let Value::ServerError(e) = reply {
                return Err(if e.code() == "NOSCRIPT" {
                    Failure::NoScript
                } else if e.code() == "READONLY"
                    && let Backend::Sentinel(sentinel) = &self.backend
                {
                    // A demoted master: Sentinel names the new one.
                    sentinel.forget(None);
                    Failure::Redis(e.clone().into())
                } else {
                    Failure::Server(format!("{} {}", e.code(), e.details().unwrap_or("")))
                });
            }
        }
        Ok(replies)
    }

    async fn send(&self, groups: &[Pipeline]) -> Result<Vec<Vec<Value>>, Failure> {
        match &self.backend {
            Backend::Server(conns) => {
                let mut conn = conns.get().map_err(Failure::Redis)?;
                send_merged(&mut conn, groups).await
            }
            Backend::Sentinel(sentinel) => {
                let (id, mut conn) = sentinel.connection().await.map_err(Failure::Redis)?;
                let replies = send_merged(&mut conn, groups).await;
                if let Err(Failure::Redis(e)) = &replies
                    && sentinel::loses_connection(e)
                {
                    sentinel.forget(Some(id));
                }
                replies
            }
            Backend::Cluster(conn) => {
                let sends = groups.iter().map(|group| {
                    let mut conn = conn.clone();
                    let mut group = group.clone();
                    group.ignore_errors();
                    async move { group.query_async::<Vec<Value>>(&mut conn).await }
                });
                join_all(sends)
                    .await
                    .into_iter()
                    .map(|r| r.map_err(Failure::Redis))
                    .collect()
            }
        }
    }

    /// Loads every script (on a Cluster, SCRIPT LOAD goes to every node).
    async fn load_scripts(&self) -> Result<(), Failure> {
        let mut pipe = redis::pipe();
        for script in self.scripts.all() {
            pipe.add_command(script.load_cmd());
        }
        let load = async {
            match &self.backend {
                Backend::Server(conns) => pipe.exec_async(&mut conns.get()?).await,
                Backend::Sentinel(sentinel) => {
                    let (_, mut conn) = sentinel.connection().await?;
                    pipe.exec_async(&mut conn).await
                }
                Backend::Cluster(conn) => {
                    // A Cluster pipeline goes to one node; route each load to all of them.
                    for cmd in pipe.cmd_iter() {
                        cmd.exec_async(&mut conn.clone()).await?;
                    }
                    Ok(())
                }
            }
        };
        tokio::time::timeout(self.timeout, load)
            .await
            .map_err(|_| Failure::Timeout)?
            .map_err(Failure::Redis)
    }
}

/// One pipeline of every group's commands, on one connection; the replies by group.
async fn send_merged(
    conn: &mut impl ConnectionLike,
    groups: &[Pipeline],
) -> Result<Vec<Vec<Value>>, Failure> {
    let mut merged = redis::pipe();
    for group in groups {
        for cmd in group.cmd_iter() {
            merged.add_command(cmd.clone());
        }
    }
    merged.ignore_errors();
    let mut flat: Vec<Value> = merged
        .query_async::<Vec<Value>>(conn)
        .await
        .map_err(Failure::Redis)?
        .into_iter()
        .rev()
        .collect();
    Ok(groups
        .iter()
        .map(|group| (0..group.len()).filter_map(|_| flat.pop()).collect())
        .collect())
}

/// Where a pub/sub subscriber connects: a fixed server, or the master Sentinel names
/// at the time of each (re)connect.
pub(super) enum PubSubSource {
    Url(String),
    Sentinel(SentinelTarget),
}

impl PubSubSource {
    /// One source per node a subscriber may try in turn.
    pub(super) fn all_of(target: &Target) -> Vec<Self> {
        match target {
            Target::Server(url) => vec![Self::Url(url.clone())],
            // PUBLISH on a Cluster reaches every node, so any node can be listened to.
            Target::Cluster(urls) => urls.iter().cloned().map(Self::Url).collect(),
            Target::Sentinel(target) => vec![Self::Sentinel(target.clone())],
        }
    }

    /// A client of the node to subscribe on now. Through Sentinel, a new lookup each
    /// time; its connections to the sentinels close with it (a subscriber reconnects
    /// rarely, so none are kept open for it).
    pub(super) async fn client(&self, ca_cert: Option<&[u8]>) -> Result<redis::Client, RedisError> {
        match self {
            Self::Url(url) => client(url, ca_cert),
            Self::Sentinel(target) => target.client(ca_cert)?.async_get_client().await,
        }
    }
}

enum Failure {
    Timeout,
    NoScript,
    Redis(RedisError),
    Server(String),
}

impl Failure {
    fn into_store_error(self, timeout: Duration) -> StoreError {
        match self {
            Failure::Timeout => Unavailable::TimedOut(timeout.as_millis()).into(),
            Failure::NoScript => Unavailable::ScriptsLost.into(),
            Failure::Redis(e) => Unavailable::Redis(e).into(),
            Failure::Server(e) => {
                StoreError::Corrupt(format!("Redis answered an error: {e}").into())
            }
        }
    }
}
