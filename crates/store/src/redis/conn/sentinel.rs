//! Redis behind Sentinel. The master is looked up through the sentinels on every
//! (re)connect, so a failover is followed without a restart: a connection that fails,
//! times out or meets a demoted master (`READONLY`) is dropped, and the next operation
//! asks the sentinels again.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, ConnectionAddr, RedisError, TlsMode};

/// The port sentinels listen on unless the URL says otherwise.
const SENTINEL_PORT: u16 = 26379;

/// `redis+sentinel://[user[:password]@]host1[:port],host2[:port]/<master-name>[/<db>]`;
/// `rediss+sentinel://` speaks TLS to the sentinels and to the master.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    pub sentinels: Vec<(String, u16)>,
    pub master: String,
    pub(crate) tls: bool,
    /// Credentials and database of the master (the sentinels are asked without).
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

// Hand-written so a password never reaches a log line.
impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelTarget")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("db", &self.db)
            .finish()
    }
}

/// Why a Sentinel URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SentinelUrlError {
    #[error("expected redis+sentinel:// or rediss+sentinel://")]
    Scheme,
    #[error("no sentinel address before the master name")]
    NoSentinels,
    #[error("bad sentinel address {0:?}: expected host or host:port")]
    BadAddress(String),
    #[error("no master name: expected .../<master-name>")]
    NoMaster,
    #[error("bad database number {0:?}")]
    BadDb(String),
}

impl SentinelTarget {
    pub(crate) fn is_sentinel_url(url: &str) -> bool {
        url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://")
    }

    pub(crate) fn parse(url: &str) -> Result<Self, SentinelUrlError> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
            (true, rest)
        } else {
            return Err(SentinelUrlError::Scheme);
        };
        let (authority, path) = rest.split_once('/').ok_or(SentinelUrlError::NoMaster)?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (username, password) = match userinfo.map(|u| u.split_once(':').unwrap_or((u, ""))) {
            None => (None, None),
            Some((user, pass)) => (
                (!user.is_empty()).then(|| user.to_owned()),
                (!pass.is_empty()).then(|| pass.to_owned()),
            ),
        };
        if hosts.is_empty() {
            return Err(SentinelUrlError::NoSentinels);
        }
        let sentinels = hosts
            .split(',')
            .map(host_port)
            .collect::<Result<Vec<_>, _>>()?;
        let (master, db) = match path.split_once('/') {
            Some((master, "")) => (master, 0),
            Some((master, db)) => (
                master,
                db.parse::<i64>()
                    .ok()
                    .filter(|db| *db >= 0)
                    .ok_or_else(|| SentinelUrlError::BadDb(db.to_owned()))?,
            ),
            None => (path, 0),
        };
        if master.is_empty() {
            return Err(SentinelUrlError::NoMaster);
        }
        Ok(Self {
            sentinels,
            master: master.to_owned(),
            tls,
            username,
            password,
            db,
        })
    }

    /// A client that names the current master on each lookup.
    pub(crate) fn client(&self, ca_cert: Option<&[u8]>) -> Result<SentinelClient, RedisError> {
        let sentinels = self.sentinels.iter().map(|(host, port)| {
            if self.tls {
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        });
        let mut builder =
            SentinelClientBuilder::new(sentinels, &self.master, SentinelServerType::Master)?
                .set_client_to_redis_db(self.db);
        if let Some(username) = &self.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if self.tls {
            builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
            if let Some(pem) = ca_cert {
                builder = builder
                    .set_client_to_redis_certificates(super::certificates(pem))
                    .set_client_to_sentinel_certificates(super::certificates(pem));
            }
        }
        builder.build()
    }
}

fn host_port(raw: &str) -> Result<(String, u16), SentinelUrlError> {
    let bad = || SentinelUrlError::BadAddress(raw.to_owned());
    // `[::1]:26379`, `[::1]`, `host:26379`, `host`.
    let (host, port) = if let Some(rest) = raw.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match raw.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (raw, None),
        }
    };
    if host.is_empty() || host.contains(['/', '@', ' ']) {
        return Err(bad());
    }
    let port = match port {
        None => SENTINEL_PORT,
        Some(port) => port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?,
    };
    Ok((host.to_owned(), port))
}

/// The connection to the current master, made again after it was dropped.
pub(super) struct SentinelConn {
    /// Lookups one at a time: a failover makes every request want one, one is enough.
    resolver: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    next_id: AtomicU64,
    config: AsyncConnectionConfig,
}

impl SentinelConn {
    pub(super) fn new(
        target: &SentinelTarget,
        ca_cert: Option<&[u8]>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Self, RedisError> {
        Ok(Self {
            resolver: tokio::sync::Mutex::new(target.client(ca_cert)?),
            current: Mutex::new(None),
            next_id: AtomicU64::new(1),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(response_timeout)),
        })
    }

    fn cached(&self) -> Option<(u64, MultiplexedConnection)> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The connection to the master, with an id to [`SentinelConn::forget`] it by.
    /// Unbounded here: the caller's time limit covers the lookup too.
    pub(super) async fn connection(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        if let Some(current) = self.cached() {
            return Ok(current);
        }
        let mut resolver = self.resolver.lock().await;
        // Another request may have connected while this one waited.
        if let Some(current) = self.cached() {
            return Ok(current);
        }
        let client = resolver.async_get_client().await?;
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        tracing::info!(master = ?client.get_connection_info().addr(), "connected to the Redis master named by Sentinel");
        *self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((id, conn.clone()));
        Ok((id, conn))
    }

    /// Drops connection `id` (or whichever is current, with `None`) so the next
    /// operation looks the master up again.
    pub(super) fn forget(&self, id: Option<u64>) {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current
            .as_ref()
            .is_some_and(|(current_id, _)| id.is_none_or(|id| id == *current_id))
        {
            tracing::debug!("dropping the connection to the Redis master; asking Sentinel again");
            *current = None;
        }
    }
}

/// Whether an error means the connection (or the node's role) is no longer good.
pub(super) fn loses_connection(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_unrecoverable_error()
        || e.is_timeout()
        || e.is_connection_refusal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sentinel_urls() {
        let t = SentinelTarget::parse("redis+sentinel://a:26380,b,[::1]:7/mymaster").unwrap();
        assert_eq!(
            t.sentinels,
            vec![
                ("a".into(), 26380),
                ("b".into(), SENTINEL_PORT),
                ("::1".into(), 7)
            ]
        );
        assert_eq!((t.master.as_str(), t.tls, t.db), ("mymaster", false, 0));
        assert_eq!((t.username, t.password), (None, None));

        let t = SentinelTarget::parse("rediss+sentinel://u:p@s1:1/m/3").unwrap();
        assert!(t.tls);
        assert_eq!(
            (t.username.as_deref(), t.password.as_deref()),
            (Some("u"), Some("p"))
        );
        assert_eq!((t.master.as_str(), t.db), ("m", 3));
        assert!(!format!("{t:?}").contains("\"p\""));
        let t = SentinelTarget::parse("redis+sentinel://:secret@s1/m/").unwrap();
        assert_eq!((t.username, t.password.as_deref()), (None, Some("secret")));

        for (bad, why) in [
            ("redis://a/m", SentinelUrlError::Scheme),
            ("redis+sentinel://a:1", SentinelUrlError::NoMaster),
            ("redis+sentinel://a:1/", SentinelUrlError::NoMaster),
            ("redis+sentinel:///m", SentinelUrlError::NoSentinels),
            (
                "redis+sentinel://a:x/m",
                SentinelUrlError::BadAddress("a:x".into()),
            ),
            (
                "redis+sentinel://a,,b/m",
                SentinelUrlError::BadAddress(String::new()),
            ),
            (
                "redis+sentinel://a/m/x",
                SentinelUrlError::BadDb("x".into()),
            ),
        ] {
            assert_eq!(SentinelTarget::parse(bad), Err(why), "{bad}");
        }
    }
}
