//! A certificate authority of a test's own, and certificates it issues for loopback
//! (`localhost`, `127.0.0.1`), written as PEM files in a directory of the test's.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};

pub struct TestCa {
    dir: PathBuf,
    /// The CA certificate, PEM (what a client trusts).
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and key issued by a [`TestCa`], as files.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA; its files go in a new directory under the system's temp dir.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mtg-ca-{name}-{}", std::process::id()));
        let dir = dir.join(format!("{}", rand_suffix()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("mcp-task-gateway test CA {name}"),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).expect("a CA certificate");
        let cert_pem = cert.pem();
        std::fs::write(dir.join("ca.pem"), &cert_pem).expect("ca.pem written");
        Self {
            dir,
            cert_pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate's file.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A server certificate for loopback, written as `<name>.pem` and `<name>.key`.
    pub fn issue(&self, name: &str) -> Issued {
        let key = KeyPair::generate().expect("a key");
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("leaf params");
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        let issued = Issued {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        };
        write_atomically(&issued.cert, &cert.pem());
        write_atomically(&issued.key, &key.serialize_pem());
        issued
    }
}

/// Writes through a rename, as a renewed Secret's files appear: never half-written.
fn write_atomically(path: &Path, text: &str) {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).expect("file written");
    std::fs::rename(&partial, path).expect("file renamed");
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
