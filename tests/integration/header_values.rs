//! Header values as HTTP defines them (#43): what HTTP/1.1 permits in a field value
//! (obs-text 0x80–0xFF, HTAB, SP, visible ASCII) is forwarded unchanged whichever way a
//! request goes upstream (the pinned connection, the HTTP/1.1 pool, the HTTP/2 pool);
//! what it forbids never reaches the upstream; and a failure is blamed on whoever caused
//! it, with its own status, code and metric.

mod raw_http;

use std::io::{Read, Write};

use http::HeaderValue;
use serde_json::{Value, json};

use crate::common::mrtr::MrtrUpstream;
use crate::common::session::initialize_body;
use crate::common::*;

/// A value HTTP permits that is not visible ASCII: the campaign's `Bearer \xff\xfe`,
/// with a tab and a Latin-1 byte.
const OBS_TEXT: &[u8] = b"Bearer \xff\xfe\tcaf\xe9";

fn obs_text() -> HeaderValue {
    HeaderValue::from_bytes(OBS_TEXT).expect("HTTP permits obs-text and HTAB")
}

/// The `Authorization` values the fixture received, as bytes, oldest first.
fn authorizations_seen(stats: &Value) -> Vec<Vec<u8>> {
    serde_json::from_value(stats["authorizationsSeen"].clone()).expect("authorizationsSeen")
}

/// A 2025-11-25 POST with `auth` (and the session's id once there is one).
async fn session_post(
    url: &str,
    session: Option<&str>,
    auth: HeaderValue,
    body: Value,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("authorization", auth)
        .header("x-note", HeaderValue::from_bytes(b"na\xefve\tv").unwrap())
        .json(&body);
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    request.send().await.expect("gateway reachable")
}

/// The last JSON-RPC message of a JSON or SSE answer.
async fn last_message(response: reqwest::Response) -> Value {
    let text = response.text().await.unwrap();
    let data = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .rfind(|data| !data.trim().is_empty())
        .map(str::to_owned)
        .unwrap_or(text);
    serde_json::from_str(data.trim()).unwrap_or_else(|_| json!({"raw": data}))
}

/// Pass-through on the bare pinned socket: a session opened and used with an
/// `Authorization` holding obs-text reaches the upstream byte for byte (it was a 502
/// "upstream unreachable: … authorization header is not a string").
#[tokio::test]
async fn obs_text_in_authorization_passes_through_the_pinned_socket_unchanged() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);

    let opened = session_post(
        &url,
        None,
        obs_text(),
        initialize_body("2025-11-25", json!({})),
    )
    .await;
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let listed = session_post(
        &url,
        Some(&session),
        obs_text(),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(listed.status(), 200);
    let listed = last_message(listed).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");

    let seen = authorizations_seen(&upstream_stats(&upstream_url).await);
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(seen.iter().all(|value| value == OBS_TEXT), "{seen:?}");
}

/// The gateway's own calls, on the HTTP/1.1 pool (`lean_http1`) and on the HTTP/2 pool
/// (`--upstream-http2`): a task whose caller's `Authorization` holds obs-text runs and
/// completes, the credential going upstream unchanged.
#[tokio::test]
async fn obs_text_in_authorization_reaches_the_upstream_through_both_pools() {
    for flags in [&[][..], &["--upstream-http2"][..]] {
        let (_upstream, upstream_url) = start_plain_server();
        let (_gateway, url) = start_gateway(&upstream_url, flags);
        let client = Client::with_tasks(&url);
        let call = |method: &str, params: Value, name: Option<&str>| {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": method,
                "params": client.params(params)});
            let mut request = reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", method)
                .header("authorization", obs_text())
                .json(&body);
            if let Some(name) = name {
                request = request.header("mcp-name", name);
            }
            request.send()
        };
        let created = call(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "obs"}}),
            Some("echo"),
        )
        .await
        .unwrap();
        assert_eq!(created.status(), 200, "{flags:?}");
        let created: Value = created.json().await.unwrap();
        let task_id = created["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{flags:?}: {created}"))
            .to_owned();
        let done = eventually("the task to complete", || async {
            let got: Value = call(
                "tasks/get",
                json!({"taskId": task_id}),
                Some(task_id.as_str()),
            )
            .await
            .ok()?
            .json()
            .await
            .ok()?;
            (got["result"]["status"] == "completed").then_some(got)
        })
        .await;
        assert_eq!(first_text(&done["result"]["result"]), "obs", "{flags:?}");
        let seen = authorizations_seen(&upstream_stats(&upstream_url).await);
        assert!(
            !seen.is_empty() && seen.iter().all(|value| value == OBS_TEXT),
            "{flags:?}: {seen:?}"
        );
    }
}

/// The gateway's address, `host:port`, from its `/mcp` URL.
fn address(url: &str) -> String {
    url.trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// Bytes HTTP forbids in a field value (NUL, other controls, DEL, a bare CR) in
/// `Authorization` or any other header of a pass-through request: the gateway refuses
/// the head before hyper parses it (`server/edge/head_check.rs`; hyper's own answer was
/// a bare 400): HTTP 400, -32600 naming the header and the byte, `Connection: close`,
/// counted as the client's. The upstream receives nothing.
#[tokio::test]
async fn bytes_http_forbids_in_a_header_never_reach_the_upstream() {
    let (_upstream, upstream_url) = start_plain_server();
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let (_gateway, url) = start_gateway(&upstream_url, &["--metrics-listen", &listen]);
    let mut session = crate::common::session::SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;
    let id = session.session.clone().unwrap();
    let before = upstream_stats(&upstream_url).await;
    let addr = address(&url);
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
    let mut refused = 0;
    for byte in [0x00u8, 0x01, 0x08, 0x0b, 0x0c, 0x0d, 0x1b, 0x1f, 0x7f] {
        for (name, start) in [
            ("authorization", "Authorization: Bearer a"),
            ("x-note", "x-note: a"),
            ("mcp-session-id", "mcp-session-id: "),
        ] {
            let mut headers = Vec::new();
            if name != "mcp-session-id" {
                headers.extend_from_slice(format!("mcp-session-id: {id}\r\n").as_bytes());
            }
            headers.extend_from_slice(start.as_bytes());
            headers.push(byte);
            headers.extend_from_slice(b"b\r\n");
            let answers = raw_http::exchange(&addr, &raw_http::post(&addr, &headers, body));
            assert_eq!(answers.len(), 1, "{name} + {byte:#04x}");
            answers[0].assert_refused(name, byte);
            refused += 1;
        }
    }
    let after = upstream_stats(&upstream_url).await;
    assert_eq!(after["postsByVersion"], before["postsByVersion"]);
    assert_eq!(authorizations_seen(&after), authorizations_seen(&before));
    let metrics = scrape_metrics(metrics_port).await;
    let counted = metric_sample(
        &metrics,
        "mtg_client_request_errors_total{kind=\"header_value\"}",
    );
    assert_eq!(counted, Some(f64::from(refused)), "{metrics}");
}

/// On the same kind of raw connection, what HTTP permits (obs-text, HTAB) in
/// `Authorization` reaches the upstream byte for byte.
#[tokio::test]
async fn obs_text_on_a_raw_connection_is_forwarded_unchanged() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let addr = address(&url);
    let headers = [&b"authorization: "[..], OBS_TEXT, b"\r\n"].concat();
    let body = initialize_body("2025-11-25", json!({})).to_string();
    let answers = raw_http::exchange(
        &addr,
        &[
            raw_http::post(&addr, &headers, body.as_bytes()),
            raw_http::post(&addr, b"connection: close\r\n", body.as_bytes()),
        ]
        .concat(),
    );
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0].status, 200);
    assert!(answers[0].message()["result"]["protocolVersion"].is_string());
    let seen = authorizations_seen(&upstream_stats(&upstream_url).await);
    assert!(
        !seen.is_empty() && seen.iter().all(|value| value == OBS_TEXT),
        "{seen:?}"
    );
}

/// A keep-alive connection whose later request holds a forbidden byte: the requests
/// before it get their answers first, in order, then the refusal closes the
/// connection. Pipelined in one write, and one request at a time.
#[tokio::test]
async fn a_keep_alive_connection_answers_the_requests_before_a_refused_head() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let addr = address(&url);
    let good = |id: u64| {
        let mut body = initialize_body("2025-11-25", json!({}));
        body["id"] = json!(id);
        let auth = format!("authorization: Bearer good-{id}\r\n");
        raw_http::post(&addr, auth.as_bytes(), body.to_string().as_bytes())
    };
    let bad = raw_http::post(&addr, b"authorization: Bearer a\0b\r\n", b"{}");

    // Also when the client shuts its side after writing (hyper, without half-close
    // support, would drop an answer it had not written when it saw that).
    for exchange in [raw_http::exchange, raw_http::exchange_then_shut] {
        let answers = exchange(&addr, &[good(1), bad.clone(), good(3)].concat());
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0].status, 200);
        assert_eq!(answers[0].message()["id"], 1);
        answers[1].assert_refused("authorization", 0);
    }

    let mut stream = raw_http::connect(&addr);
    for id in [4, 5] {
        stream.write_all(&good(id)).unwrap();
        let answers = raw_http::read_answers(&mut stream, 1);
        assert_eq!(answers[0].message()["id"], id);
    }
    stream.write_all(&bad).unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let answers = raw_http::answers(&rest);
    assert_eq!(answers.len(), 1);
    answers[0].assert_refused("authorization", 0);

    // Neither the refused requests nor those pipelined after them went upstream.
    let seen: std::collections::BTreeSet<Vec<u8>> =
        authorizations_seen(&upstream_stats(&upstream_url).await)
            .into_iter()
            .collect();
    let expected = [1, 4, 5]
        .iter()
        .map(|id| format!("Bearer good-{id}").into_bytes())
        .collect();
    assert_eq!(seen, expected);
}

/// HTTP/2 (h2c with prior knowledge here; h2 by ALPN on TLS below): a NUL in a
/// header value fails HPACK decoding in the h2 crate, below hyper, and the whole
/// connection gets GOAWAY with PROTOCOL_ERROR; no JSON-RPC answer can be given there
/// (docs/errors.md, "Header values on HTTP/2"). The upstream receives nothing.
#[tokio::test]
async fn a_forbidden_byte_on_http2_is_a_protocol_error_of_the_connection() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let addr = address(&url);
    let before = upstream_stats(&upstream_url).await;
    let block = [
        &[0x83u8, 0x86][..],
        &raw_http::literal(4, b"", b"/mcp"),
        &raw_http::literal(1, b"", addr.as_bytes()),
        &raw_http::literal(0, b"authorization", b"Bearer a\0b"),
    ]
    .concat();
    let mut stream = raw_http::connect(&addr);
    let request = [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        &raw_http::frame(4, 0, 0, b""),
        &raw_http::frame(1, 0x05, 1, &block),
    ]
    .concat();
    stream.write_all(&request).unwrap();
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let frames = raw_http::frames(&bytes);
    let goaway = frames
        .iter()
        .find(|frame| frame.kind == 7)
        .unwrap_or_else(|| panic!("no GOAWAY in {bytes:?}"));
    assert_eq!(&goaway.payload[4..8], &[0, 0, 0, 1], "PROTOCOL_ERROR");
    assert!(
        frames.iter().all(|frame| frame.stream == 0),
        "nothing answered on the stream"
    );
    let after = upstream_stats(&upstream_url).await;
    assert_eq!(after["postsByVersion"], before["postsByVersion"]);
}

/// On the TLS listener the same: HTTP/1.1 gets the named 400, h2 by ALPN the GOAWAY
/// (the head check wraps the TLS stream; HTTP/2 passes it unchecked).
#[tokio::test]
async fn over_tls_a_forbidden_byte_gets_the_same_answers() {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let ca = test_support::tls::TestCa::new("head-check");
    let issued = ca.issue("gateway");
    let (_upstream, upstream_url) = start_plain_server();
    let before = upstream_stats(&upstream_url).await;
    let tls_flags = [
        "--tls-cert",
        issued.cert.to_str().unwrap(),
        "--tls-key",
        issued.key.to_str().unwrap(),
    ];
    let (_gateway, url) = start_gateway(&upstream_url, &tls_flags);
    let addr = address(&url);
    let exchange = |alpn: &'static [u8], request: Vec<u8>| {
        let (addr, ca_pem) = (addr.clone(), ca.cert_pem.clone());
        async move {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![alpn.to_vec()];
            let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
            let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let mut tls = connector.connect(name, tcp).await.unwrap();
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
            tls.write_all(&request).await.unwrap();
            let mut bytes = Vec::new();
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                tls.read_to_end(&mut bytes),
            )
            .await;
            bytes
        }
    };

    let bad = raw_http::post(&addr, b"authorization: Bearer a\0b\r\n", b"{}");
    let answers = raw_http::answers(&exchange(b"http/1.1", bad).await);
    assert_eq!(answers.len(), 1);
    answers[0].assert_refused("authorization", 0);

    let block = [
        &[0x83u8, 0x87][..],
        &raw_http::literal(4, b"", b"/mcp"),
        &raw_http::literal(1, b"", addr.as_bytes()),
        &raw_http::literal(0, b"authorization", b"Bearer a\0b"),
    ]
    .concat();
    let request = [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        &raw_http::frame(4, 0, 0, b""),
        &raw_http::frame(1, 0x05, 1, &block),
    ]
    .concat();
    let frames = raw_http::frames(&exchange(b"h2", request).await);
    let goaway = frames.iter().find(|frame| frame.kind == 7).expect("GOAWAY");
    assert_eq!(&goaway.payload[4..8], &[0, 0, 0, 1], "PROTOCOL_ERROR");

    let after = upstream_stats(&upstream_url).await;
    assert_eq!(after["postsByVersion"], before["postsByVersion"]);
}

/// The client's fault with a JSON-RPC answer: a 2026-07-28 request (headers lenient)
/// whose body's method holds a control character cannot be sent to a 2026-07-28
/// upstream, which needs it as the `Mcp-Method` header: HTTP 400, -32600 naming the
/// header; it was a 502-like "upstream unreachable". The upstream gets nothing.
#[tokio::test]
async fn a_method_no_header_can_carry_is_refused_as_the_clients() {
    let (_upstream, upstream_url) = MrtrUpstream::Rmcp.start();
    let (_gateway, url) = start_gateway(&upstream_url, &["--lenient-headers"]);
    let client = Client::new(&url, json!({}));
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/\u{7}list",
        "params": client.params(json!({}))});
    let reply = client
        .send_raw(serde_json::to_vec(&body).unwrap(), &[])
        .await;
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    assert_eq!(reply.error_code(), -32600, "{:?}", reply.body);
    reply.assert_message_mentions("mcp-method");
    reply.assert_message_mentions("request refused");
}

/// The upstream's fault: pass-through to an upstream that went away is HTTP 502,
/// -32603 "upstream unreachable", counted in `mtg_upstream_errors_total`; nothing is
/// counted as the client's or the gateway's.
#[tokio::test]
async fn an_upstream_that_went_away_is_blamed_on_the_upstream() {
    let (upstream, upstream_url) = start_plain_server();
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let (_gateway, url) = start_gateway(&upstream_url, &["--metrics-listen", &listen]);
    let mut session = crate::common::session::SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;
    drop(upstream);
    let answer = eventually("the upstream to be gone", || async {
        let response = session
            .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .await;
        (response.status() == 502).then_some(response)
    })
    .await;
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32603, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("upstream unreachable"), "{message}");
    let metrics = scrape_metrics(metrics_port).await;
    let upstream_errors: f64 = ["unreachable", "lost"]
        .iter()
        .filter_map(|kind| {
            metric_sample(
                &metrics,
                &format!("mtg_upstream_errors_total{{kind=\"{kind}\"}}"),
            )
        })
        .sum();
    assert!(upstream_errors >= 1.0, "{metrics}");
    assert!(
        !metrics.contains("mtg_client_request_errors_total"),
        "{metrics}"
    );
    assert!(!metrics.contains("mtg_gateway_errors_total"), "{metrics}");
}

/// What the campaign found after part 1: a pass-through request with a method token
/// ureq-proto does not know (`BREW`, a lower-case `post`) or a body on `HEAD` was the
/// gateway's 500 (before: a 502 blaming the upstream). It goes to the upstream as it
/// came, as hyper's client sent it, and the client gets the upstream's answer (405).
#[tokio::test]
async fn any_method_token_reaches_the_upstream_as_it_came() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let mut session = crate::common::session::SessionClient::new(&url);
    session.initialize("2025-11-25", json!({})).await;
    let id = session.session.clone().unwrap();
    for method in ["BREW", "post", "PATCH"] {
        let response = reqwest::Client::new()
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                &url,
            )
            .header("mcp-session-id", id.as_str())
            .header("mcp-protocol-version", "2025-11-25")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method}");
    }
}
