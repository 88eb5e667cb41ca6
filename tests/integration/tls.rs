//! The TLS listener, with certificates of a test CA: HTTP/2 and HTTP/1.1 by ALPN, a
//! client that does not trust the CA fails, a task flows over it, and a renewed
//! certificate (files replaced, as cert-manager does) is served without a restart.

use std::time::Duration;

use crate::common::*;
use serde_json::json;
use test_support::tls::{Issued, TestCa};

fn trusting(ca: &TestCa, http1_only: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem.as_bytes()).unwrap())
        // A new connection (and handshake) per request: a reload shows at once.
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10));
    if http1_only {
        builder = builder.http1_only();
    }
    builder.build().unwrap()
}

/// The gateway with TLS, its log in a file: (process, URL, log path).
fn start_tls_gateway(upstream_url: &str, issued: &Issued) -> (Proc, String, std::path::PathBuf) {
    let log = std::env::temp_dir().join(format!("mtg-tls-{}.log", uuid::Uuid::new_v4()));
    let mut command = gateway_command(
        &["--upstream", upstream_url],
        &[
            "--tls-cert",
            issued.cert.to_str().unwrap(),
            "--tls-key",
            issued.key.to_str().unwrap(),
        ],
        "info",
    );
    command.stderr(std::fs::File::create(&log).unwrap());
    let (proc, url) = test_support::spawn_announcing("mcp-task-gateway", command, DEADLINE);
    (proc, url, log)
}

#[tokio::test]
async fn the_tls_listener_speaks_both_versions_to_clients_that_trust_it() {
    let ca = TestCa::new("listener");
    let issued = ca.issue("gateway");
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url, _log) = start_tls_gateway(&upstream_url, &issued);
    assert!(url.starts_with("https://"), "{url}");
    let health = url.replace("/mcp", "/healthz");

    let h2 = trusting(&ca, false).get(&health).send().await.unwrap();
    assert_eq!(h2.status(), 200);
    assert_eq!(h2.version(), reqwest::Version::HTTP_2, "ALPN offers h2");
    let h1 = trusting(&ca, true).get(&health).send().await.unwrap();
    assert_eq!(h1.status(), 200);
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);

    // A client that trusts only the public roots refuses the test CA's certificate.
    let stranger = reqwest::Client::builder().use_rustls_tls().build().unwrap();
    let refused = stranger.get(&health).send().await;
    assert!(refused.is_err(), "an untrusted certificate was accepted");
    // Plain HTTP on the TLS port gets no answer it could take for one.
    let plain = reqwest::get(health.replace("https://", "http://")).await;
    assert!(plain.map(|r| !r.status().is_success()).unwrap_or(true));

    // A task over TLS.
    let mut client = Client::with_tasks(&url);
    client.http = trusting(&ca, false);
    let task_id = client.start_task("echo", json!({"text": "over tls"})).await;
    let task = client.wait_status(&task_id, "completed").await;
    assert_eq!(
        task["result"]["structuredContent"]["echo"]["text"],
        "over tls"
    );
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let first_ca = TestCa::new("first");
    let issued = first_ca.issue("gateway");
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url, log) = start_tls_gateway(&upstream_url, &issued);
    let health = url.replace("/mcp", "/healthz");
    let status = trusting(&first_ca, false)
        .get(&health)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);

    // The Secret is renewed by another CA: its files are replaced under the same names.
    let second_ca = TestCa::new("second");
    let renewed = second_ca.issue("renewed");
    for (from, to) in [(&renewed.key, &issued.key), (&renewed.cert, &issued.cert)] {
        let next = to.with_extension("next");
        std::fs::copy(from, &next).unwrap();
        std::fs::rename(&next, to).unwrap();
    }

    eventually("the renewed certificate to be served", || async {
        let reply = trusting(&second_ca, false).get(&health).send().await;
        reply.ok().filter(|r| r.status() == 200).map(|_| ())
    })
    .await;
    let old = trusting(&first_ca, false).get(&health).send().await;
    assert!(old.is_err(), "the old certificate is still served");

    // A broken renewal keeps the certificate that works.
    std::fs::write(&issued.cert, "not a certificate").unwrap();
    eventually("the gateway to refuse the broken certificate", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("TLS certificate not reloaded").then_some(())
    })
    .await;
    let status = trusting(&second_ca, false)
        .get(&health)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
}
