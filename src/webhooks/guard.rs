//! Safe destinations: a webhook URL must not reach loopback, private, link-local or
//! metadata addresses (127.0.0.0/8, 10/8, 172.16/12, 192.168/16, 169.254/16, ::1,
//! fc00::/7, fe80::/10, and the unspecified ones), unless `--webhook-allow-private`.
//! The check runs where the connection's addresses are resolved ([`CheckedResolver`],
//! reqwest's resolver), so the address checked is the address connected to: no second
//! lookup that DNS rebinding could answer differently.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Why an address is refused, or `None` if it may be used.
pub(crate) fn refused(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_private() {
                Some("private")
            } else if v4.is_link_local() {
                Some("link-local or metadata")
            } else if v4.is_unspecified() || v4.is_broadcast() {
                Some("unspecified")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return refused(IpAddr::V4(v4));
            }
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unique_local() {
                Some("private (fc00::/7)")
            } else if v6.is_unicast_link_local() {
                Some("link-local")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else {
                None
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("{host} resolves to {ip}, a {why} address (--webhook-allow-private allows it)")]
    Address {
        host: String,
        ip: IpAddr,
        why: &'static str,
    },
    #[error("cannot resolve {host}: {source}")]
    Lookup {
        host: String,
        source: std::io::Error,
    },
}

/// The addresses of `host`, all of which must be allowed (one refused address refuses
/// the host: a receiver does not get to pick which one the gateway uses).
pub(crate) async fn resolve(host: &str, allow_private: bool) -> Result<Vec<SocketAddr>, Refused> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, 0)],
        Err(_) => tokio::net::lookup_host((bare, 0))
            .await
            .map_err(|source| Refused::Lookup {
                host: host.to_owned(),
                source,
            })?
            .collect(),
    };
    if !allow_private {
        for addr in &addrs {
            if let Some(why) = refused(addr.ip()) {
                return Err(Refused::Address {
                    host: host.to_owned(),
                    ip: addr.ip(),
                    why,
                });
            }
        }
    }
    Ok(addrs)
}

/// reqwest's resolver for webhook deliveries: each connection's addresses, checked.
#[derive(Debug, Clone)]
pub(crate) struct CheckedResolver {
    pub(crate) allow_private: bool,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addrs = resolve(name.as_str(), allow_private)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl CheckedResolver {
    pub(crate) fn shared(allow_private: bool) -> Arc<Self> {
        Arc::new(Self { allow_private })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issues_ranges_are_refused_and_public_ones_pass() {
        for bad in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:10.0.0.1",
            "::",
        ] {
            assert!(refused(bad.parse().unwrap()).is_some(), "{bad} allowed");
        }
        for good in ["8.8.8.8", "172.32.0.1", "2606:4700::1111", "93.184.216.34"] {
            assert!(refused(good.parse().unwrap()).is_none(), "{good} refused");
        }
    }

    #[tokio::test]
    async fn a_literal_or_name_is_checked_unless_allowed() {
        assert!(resolve("10.0.0.1", false).await.is_err());
        assert!(resolve("[::1]", false).await.is_err());
        assert!(resolve("localhost", false).await.is_err());
        assert_eq!(resolve("10.0.0.1", true).await.unwrap().len(), 1);
    }
}
