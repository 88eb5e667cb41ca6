//! The TLS listener (`--tls-cert`, `--tls-key`): rustls with ALPN for HTTP/2 and
//! HTTP/1.1. The files are read again when they change (cert-manager renews the Secret
//! they are mounted from); a pair that does not load keeps the previous one in use.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often the files are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(2);
/// A client that does not finish its handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("cannot read the certificate chain {path}: {detail}")]
    Certificates { path: String, detail: String },
    #[error("cannot read the private key {path}: {detail}")]
    Key { path: String, detail: String },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificate and key files.
#[derive(Debug, Clone)]
pub(crate) struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Accepts TLS connections with the current certificate.
#[derive(Clone)]
pub(crate) struct Acceptor {
    current: Arc<RwLock<TlsAcceptor>>,
}

impl Acceptor {
    /// Loads the files (an error here stops the start) and reloads them when they change.
    pub(crate) fn start(files: TlsFiles) -> Result<Self, TlsError> {
        let acceptor = TlsAcceptor::from(Arc::new(load(&files)?));
        let current = Arc::new(RwLock::new(acceptor));
        let weak = Arc::downgrade(&current);
        let mut seen = modified(&files);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(CHECK_EVERY);
            loop {
                tick.tick().await;
                let Some(current) = weak.upgrade() else {
                    return;
                };
                let now = modified(&files);
                if now == seen {
                    continue;
                }
                seen = now;
                match load(&files) {
                    Ok(config) => {
                        *current.write().unwrap_or_else(|p| p.into_inner()) =
                            TlsAcceptor::from(Arc::new(config));
                        tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS certificate not reloaded; keeping the previous one")
                    }
                }
            }
        });
        Ok(Self { current })
    }

    /// The TLS handshake of a new connection.
    pub(crate) async fn accept(&self, stream: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        let acceptor = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
            })?
    }
}

fn load(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let shown = |path: &Path| path.display().to_string();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| TlsError::Certificates {
            path: shown(&files.cert),
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Certificates {
            path: shown(&files.cert),
            detail: "no certificate in it".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::Key {
        path: shown(&files.key),
        detail: e.to_string(),
    })?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// When each file last changed (a renewed Secret swaps the files).
fn modified(files: &TlsFiles) -> (Option<SystemTime>, Option<SystemTime>) {
    let at = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    (at(&files.cert), at(&files.key))
}
