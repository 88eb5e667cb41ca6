//! The gateway as an OAuth resource server: bearer JWTs checked against a JWKS served by
//! a test HTTP server with keys made here (ES256 and EdDSA), the right 401s and their
//! `WWW-Authenticate`, RFC 9728 metadata, tasks bound to (issuer, subject), scopes per
//! method, and what goes upstream as `Authorization`.

use std::sync::{Arc, Mutex};

use crate::common::*;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};

pub(crate) const ISSUER: &str = "https://issuer.test";
const AUDIENCE: &str = "https://gateway.test/mcp";

/// A signing key of the test's issuer, and its public JWK.
pub(crate) struct SigningKey {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    pub(crate) jwk: Value,
}

impl SigningKey {
    pub(crate) fn es256(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        // Uncompressed point: 0x04 ‖ x ‖ y.
        let point = pair.public_key().as_ref();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        });
        Self {
            kid: kid.into(),
            alg: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk,
        }
    }

    fn ed25519(kid: &str) -> Self {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let jwk = json!({
            "kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA",
            "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()),
        });
        Self {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk,
        }
    }

    pub(crate) fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims of a good token for `sub`, valid for an hour.
fn claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now() + 3600, "iat": now(),
           "jti": uuid::Uuid::new_v4().to_string(), "scope": "mcp"})
}

/// The issuer's JWKS endpoint: serves whatever keys the test puts in, counts fetches.
pub(crate) struct Issuer {
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<Mutex<u32>>,
    pub(crate) url: String,
}

impl Issuer {
    pub(crate) async fn start(keys: Vec<Value>) -> Self {
        let keys = Arc::new(Mutex::new(keys));
        let fetches = Arc::new(Mutex::new(0));
        let (served, counted) = (keys.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (served, counted) = (served.clone(), counted.clone());
                async move {
                    *counted.lock().unwrap() += 1;
                    axum::Json(json!({"keys": served.lock().unwrap().clone()}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let url = format!("{base}/jwks");
        // RFC 8414 metadata naming the key set, for issuers found by discovery.
        let metadata = json!({"issuer": base, "jwks_uri": url});
        let app = app.route(
            "/.well-known/oauth-authorization-server",
            axum::routing::get(move || {
                let metadata = metadata.clone();
                async move { axum::Json(metadata) }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { keys, fetches, url }
    }
}

fn auth_flags(issuer: &Issuer) -> Vec<String> {
    [
        "--auth-jwt-issuer",
        ISSUER,
        "--auth-jwt-audience",
        AUDIENCE,
        "--auth-jwt-jwks-url",
        &issuer.url,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// The fixture upstream and a gateway checking `issuer`'s tokens, with `extra` flags: the
/// processes (kept alive by the caller) and the gateway's URL.
fn gateway_for(issuer: &Issuer, extra: &[&str]) -> ((Proc, Proc), String) {
    let (upstream, upstream_url) = start_plain_server();
    let mut flags = auth_flags(issuer);
    flags.extend(extra.iter().map(|s| (*s).to_owned()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (gateway, url) = start_gateway(&upstream_url, &flags);
    ((upstream, gateway), url)
}

fn client_with(url: &str, token: &str) -> Client {
    let mut client = Client::with_tasks(url);
    client.authorization = Some(format!("Bearer {token}"));
    client
}

/// A raw `tools/call` with `authorization`; its status, `WWW-Authenticate` and body.
pub(crate) async fn call_raw(url: &str, authorization: Option<&str>) -> (u16, String, Value) {
    let client = Client::with_tasks(url);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": client.params(json!({"name": "echo", "arguments": {"text": "x"}}))});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "echo")
        .json(&body);
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, challenge, body)
}

#[tokio::test]
async fn bad_tokens_get_the_right_401s() {
    let key = SigningKey::es256("k1");
    let issuer = Issuer::start(vec![key.jwk.clone()]).await;
    let (_processes, url) = gateway_for(&issuer, &[]);
    let metadata_url = "https://gateway.test/.well-known/oauth-protected-resource/mcp";

    let (status, challenge, body) = call_raw(&url, None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    assert_eq!(body["error"]["code"], -32600, "{body}");

    let mut expired = claims("alice");
    expired["exp"] = json!(now() - 120);
    let mut early = claims("alice");
    early["nbf"] = json!(now() + 600);
    let mut other_audience = claims("alice");
    other_audience["aud"] = json!("https://elsewhere.test/mcp");
    let mut other_issuer = claims("alice");
    other_issuer["iss"] = json!("https://evil.test");
    let mut no_subject = claims("alice");
    no_subject.as_object_mut().unwrap().remove("sub");
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims("alice").to_string())
    );
    // HMAC keyed with the issuer's public key: the classic algorithm confusion.
    let confused = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".into());
        let secret = EncodingKey::from_secret(key.jwk.to_string().as_bytes());
        jsonwebtoken::encode(&header, &claims("alice"), &secret).unwrap()
    };
    let stranger = SigningKey::es256("k1");
    let cases = [
        (key.sign(&expired), "expired"),
        (key.sign(&early), "not valid yet"),
        (key.sign(&other_audience), "another audience"),
        (key.sign(&other_issuer), "another issuer"),
        (key.sign(&no_subject), "sub"),
        (unsigned, "malformed"),
        (confused, "not accepted"),
        (stranger.sign(&claims("alice")), "signature"),
        ("not-a-jwt".to_owned(), "malformed"),
    ];
    for (token, why) in cases {
        let (status, challenge, body) = call_raw(&url, Some(&format!("Bearer {token}"))).await;
        assert_eq!(status, 401, "{why}: {body}");
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\""),
            "{why}: {challenge}"
        );
        assert!(challenge.contains(metadata_url), "{challenge}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{why}: {message}");
    }

    // A good token passes; the metadata names the issuer and the resource.
    let (status, _, body) = call_raw(
        &url,
        Some(&format!("Bearer {}", key.sign(&claims("alice")))),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let metadata: Value =
        reqwest::get(url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(metadata["resource"], AUDIENCE);
    assert_eq!(metadata["authorization_servers"], json!([ISSUER]));
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_it_is_named() {
    let first = SigningKey::es256("k1");
    let second = SigningKey::ed25519("k2");
    let issuer = Issuer::start(vec![first.jwk.clone()]).await;
    let (_processes, url) = gateway_for(&issuer, &[]);

    let (status, _, _) =
        call_raw(&url, Some(&format!("Bearer {}", first.sign(&claims("a"))))).await;
    assert_eq!(status, 200);
    // Not published yet: refused, and the set was looked at again at most once.
    let token = second.sign(&claims("a"));
    let (status, _, body) = call_raw(&url, Some(&format!("Bearer {token}"))).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("k2"),
        "{body}"
    );
    // The issuer rotates: the new key is found on a later request (refetches are
    // rate-limited, so a flood of unknown key ids is not a flood on the issuer).
    issuer.keys.lock().unwrap().push(second.jwk.clone());
    let fetches_before = *issuer.fetches.lock().unwrap();
    eventually("the rotated key to be accepted", || async {
        let (status, _, _) = call_raw(&url, Some(&format!("Bearer {token}"))).await;
        (status == 200).then_some(())
    })
    .await;
    let fetches = *issuer.fetches.lock().unwrap() - fetches_before;
    assert!(fetches <= 2, "{fetches} JWKS fetches for one rotation");
}

#[tokio::test]
async fn tasks_belong_to_the_subject_across_tokens() {
    let key = SigningKey::es256("k1");
    let issuer = Issuer::start(vec![key.jwk.clone()]).await;
    let (_processes, url) = gateway_for(&issuer, &[]);

    let first = client_with(&url, &key.sign(&claims("alice")));
    let task_id = first.start_task("sleep", json!({"ms": 100})).await;
    // A refreshed token of the same subject: the task is still hers.
    let refreshed = client_with(&url, &key.sign(&claims("alice")));
    assert_ne!(first.authorization, refreshed.authorization);
    refreshed.wait_status(&task_id, "completed").await;
    // Another subject's token: exactly like an unknown id.
    let bob = client_with(&url, &key.sign(&claims("bob")));
    let reply = bob.request("tasks/get", json!({"taskId": task_id})).await;
    assert_eq!(reply.error_code(), -32602);
    let unknown = bob
        .request(
            "tasks/get",
            json!({"taskId": uuid::Uuid::new_v4().to_string()}),
        )
        .await;
    let strip = |body: &Value| {
        body["error"]["message"]
            .as_str()
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(strip(&reply.body), strip(&unknown.body));
}

#[tokio::test]
async fn methods_need_their_scopes() {
    let key = SigningKey::es256("k1");
    let issuer = Issuer::start(vec![key.jwk.clone()]).await;
    let (_processes, url) = gateway_for(&issuer, &["--auth-scope-tools-call", "tools:call"]);

    let (status, challenge, body) = call_raw(
        &url,
        Some(&format!("Bearer {}", key.sign(&claims("alice")))),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"tools:call\""),
        "{challenge}"
    );
    let mut scoped = claims("alice");
    scoped["scope"] = json!("mcp tools:call");
    let (status, _, body) = call_raw(&url, Some(&format!("Bearer {}", key.sign(&scoped)))).await;
    assert_eq!(status, 200, "{body}");
    let metadata: Value =
        reqwest::get(url.replace("/mcp", "/.well-known/oauth-protected-resource"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(metadata["scopes_supported"], json!(["tools:call"]));
}

#[tokio::test]
async fn the_upstream_gets_the_configured_credential() {
    let key = SigningKey::es256("k1");
    let issuer = Issuer::start(vec![key.jwk.clone()]).await;
    let (_upstream, upstream_url) = start_plain_server();
    let token = key.sign(&claims("alice"));
    let file = std::env::temp_dir().join(format!("mtg-cred-{}", uuid::Uuid::new_v4()));
    std::fs::write(&file, "Bearer service-token\n").unwrap();
    let file = file.to_str().unwrap().to_owned();
    for (mode, expected) in [
        (vec!["client"], format!("found k for Bearer {token}")),
        (vec!["none"], "found k".to_owned()),
        (
            vec!["static", "--upstream-credential-file", &file],
            "found k for Bearer service-token".to_owned(),
        ),
    ] {
        let mut flags = auth_flags(&issuer);
        flags.push("--upstream-credential".into());
        flags.extend(mode.iter().map(|s| (*s).to_owned()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (_gateway, url) = start_gateway(&upstream_url, &flags);
        let client = client_with(&url, &token);
        let task_id = client
            .start_task("lookup", json!({"key": "k", "ms": 0}))
            .await;
        let task = client.wait_status(&task_id, "completed").await;
        assert_eq!(first_text(&task["result"]), expected, "{mode:?}");
    }
}

#[tokio::test]
async fn the_keys_are_found_through_the_issuers_metadata() {
    let key = SigningKey::ed25519("k1");
    let issuer = Issuer::start(vec![key.jwk.clone()]).await;
    let base = issuer.url.trim_end_matches("/jwks").to_owned();
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(
        &upstream_url,
        &["--auth-jwt-issuer", &base, "--auth-jwt-audience", AUDIENCE],
    );
    let mut good = claims("alice");
    good["iss"] = json!(base);
    let (status, _, body) = call_raw(&url, Some(&format!("Bearer {}", key.sign(&good)))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(*issuer.fetches.lock().unwrap(), 1);
}

/// An independent client, rmcp 3.x, sending its bearer token the way it does
/// (`auth_header`): refused without one, served with one, and its task still its own
/// under a refreshed token.
#[tokio::test]
async fn rmcp_clients_work_through_token_checks() {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams,
        Implementation, ProtocolVersion, TaskPayload,
    };
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::{ClientLifecycleMode, ClientServiceExt};

    let key = SigningKey::es256("k1");
    let issuer = Issuer::start(vec![key.jwk.clone()]).await;
    let (_processes, url) = gateway_for(&issuer, &[]);
    let connect = |token: Option<String>| {
        let url = url.clone();
        async move {
            let mut transport = StreamableHttpClientTransportConfig::with_uri(url);
            if let Some(token) = token {
                transport = transport.auth_header(token);
            }
            let config = ClientConfig::new(
                ClientCapabilities::builder()
                    .enable_extensions()
                    .enable_tasks()
                    .build(),
                Implementation::new("rmcp-auth-test", "0.1.0"),
            )
            .with_protocol_version(ProtocolVersion::V_2026_07_28);
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            tokio::time::timeout(
                DEADLINE,
                config.serve_with_lifecycle(
                    StreamableHttpClientTransport::from_config(transport),
                    lifecycle,
                ),
            )
            .await
            .expect("an answer in time")
        }
    };
    assert!(
        connect(None).await.is_err(),
        "rmcp got through without a token"
    );
    let client = connect(Some(key.sign(&claims("alice"))))
        .await
        .expect("rmcp connects");
    let call = CallToolRequestParams::new("sleep".to_owned())
        .with_arguments(serde_json::from_value(json!({"ms": 100})).unwrap());
    let task_id = match client.call_tool_once(call).await.expect("tools/call") {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("expected a task, got {other:?}"),
    };
    let refreshed = connect(Some(key.sign(&claims("alice"))))
        .await
        .expect("rmcp connects");
    eventually(
        "the task to complete, read with a refreshed token",
        || async {
            let got = refreshed
                .get_task(GetTaskParams::new(task_id.clone()))
                .await
                .expect("tasks/get");
            matches!(got.task.payload, TaskPayload::Completed { .. }).then_some(())
        },
    )
    .await;
    let bob = connect(Some(key.sign(&claims("bob"))))
        .await
        .expect("rmcp connects");
    assert!(
        bob.get_task(GetTaskParams::new(task_id.clone()))
            .await
            .is_err(),
        "another subject read alice's task"
    );
}
