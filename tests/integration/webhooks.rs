//! Signed webhooks from the durable outbox (#46), against real processes: the gateway,
//! `plain_server`, `redis-server`, and a Python receiver that verifies every request
//! with the PyPI `standardwebhooks` package (tests/fixtures/webhook_receiver.py).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use test_support::RedisServer;

use crate::common::*;

const TOKEN: &str = "an-operator-token-of-some-length";

/// A file of this test's own holding `text`.
fn temp_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("mtg-{name}-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).unwrap();
    path
}

/// A fresh signing secret, `whsec_<base64>`, and the file holding it.
fn secret() -> (String, PathBuf) {
    let key: Vec<u8> = uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .chain(uuid::Uuid::new_v4().as_bytes())
        .copied()
        .collect();
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    let file = temp_file("webhook-secret", &format!("{secret}\n"));
    (secret, file)
}

/// The Python receiver, verifying with `secret`.
struct Receiver {
    _proc: Proc,
    /// `http://127.0.0.1:PORT/` (or `https://`)
    base: String,
    /// The test's own client to it (trusting its CA over https).
    http: reqwest::Client,
}

impl Receiver {
    fn start(secret: &str) -> Self {
        Self::start_with(secret, &[], reqwest::Client::new())
    }

    /// Over `https://` with `tls`'s certificate and key, issued by `ca`.
    fn start_tls(
        secret: &str,
        ca: &test_support::tls::TestCa,
        tls: &test_support::tls::Issued,
    ) -> Self {
        let root = reqwest::Certificate::from_pem(ca.cert_pem.as_bytes()).unwrap();
        let http = reqwest::Client::builder()
            .add_root_certificate(root)
            .build()
            .unwrap();
        Self::start_with(secret, &[&tls.cert, &tls.key], http)
    }

    fn start_with(secret: &str, tls: &[&PathBuf], http: reqwest::Client) -> Self {
        let mut command = Command::new(mrtr::python());
        command
            .arg(repo_path("tests/fixtures/webhook_receiver.py"))
            .arg(secret)
            .args(tls);
        let (proc, base) = spawn_announcing("webhook_receiver", command);
        Self {
            _proc: proc,
            base,
            http,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn control(&self, rules: Value) {
        let reply = self
            .http
            .post(self.url("control"))
            .json(&rules)
            .send()
            .await
            .unwrap();
        assert!(reply.status().is_success());
    }

    async fn record(&self) -> Value {
        self.http
            .get(self.url("record"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn verify(&self, asked: Value) -> Value {
        self.http
            .post(self.url("verify"))
            .json(&asked)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Waits until `done` holds of the record; the record.
    async fn until(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        eventually(what, || async {
            let record = self.record().await;
            if done(&record) {
                return Some(record);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        })
        .await
    }
}

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The acked events of `record`, as (taskId, type) in the order they were acked.
fn acked(record: &Value) -> Vec<(String, String)> {
    record["acked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["taskId"].as_str().unwrap().to_owned(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The admin flags for a gateway on a fresh metrics port; the admin URL.
fn admin_flags() -> (Vec<String>, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let token = temp_file("admin-token", &format!("{TOKEN}\n"));
    let flags = vec![
        "--metrics-listen".to_owned(),
        listen.clone(),
        "--admin-token-file".to_owned(),
        token.to_str().unwrap().to_owned(),
    ];
    (flags, format!("http://{listen}"))
}

/// `mcp-task-gateway admin --json <args>` against `admin_url`.
fn cli(admin_url: &str, args: &[&str]) -> Output {
    let token = temp_file("admin-token", &format!("{TOKEN}\n"));
    Command::new(env!("CARGO_BIN_EXE_mcp-task-gateway"))
        .arg("admin")
        .args(["--url", admin_url, "--token-file", token.to_str().unwrap()])
        .args(args)
        .output()
        .expect("the gateway binary runs")
}

fn start(upstream_url: &str, flags: &[String]) -> (Proc, String) {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    start_gateway(upstream_url, &flags)
}

#[tokio::test]
async fn a_receiver_verifies_input_required_then_completed_with_the_standard_library() {
    let (_upstream, upstream_url) = start_plain_server();
    let (secret, secret_file) = secret();
    let receiver = Receiver::start(&secret);
    let flags = [
        "--webhook".to_owned(),
        receiver.url("hook"),
        "--webhook-secret-file".to_owned(),
        secret_file.to_str().unwrap().to_owned(),
        "--webhook-allow-private".to_owned(),
    ];
    let (_gateway, url) = start(&upstream_url, &flags);
    let client = Client::with_tasks(&url);
    let task_id = client.start_task("ask_name", json!({})).await;
    let waiting = client.wait_status(&task_id, "input_required").await;
    let (key, _) = only_input_request(&waiting);
    receiver
        .until("the input_required event", |r| !acked(r).is_empty())
        .await;
    let answer = json!({key.as_str(): {"action": "accept", "content": {"name": "Luca"}}});
    client.update(&task_id, answer).await.result();
    client.wait_status(&task_id, "completed").await;
    let record = receiver
        .until("the completed event", |r| acked(r).len() == 2)
        .await;
    assert_eq!(
        acked(&record),
        [
            (task_id.clone(), "task.input_required".to_owned()),
            (task_id.clone(), "task.completed".to_owned())
        ]
    );
    assert_eq!(record["rejected"], json!([]), "every signature verified");
    let first = &record["acked"][0]["data"];
    assert_eq!(first["tool"], "ask_name");
    assert_eq!(first["status"], "input_required");
    assert_eq!(
        first["inputRequests"],
        json!([{"method": "elicitation/create", "message": "What is your name?"}])
    );
    let done = &record["acked"][1]["data"];
    assert_eq!(done["status"], "completed");
    assert!(done.get("result").is_none(), "no result unless included");

    // The check is real: the library refuses a tampered body and an old timestamp.
    let id = record["acked"][0]["id"].as_str().unwrap();
    let raw = &record["raw"][id];
    let genuine = receiver.verify(raw.clone()).await;
    assert_eq!(genuine["ok"], true, "{genuine}");
    let mut tampered = raw.clone();
    tampered["body"] = json!(
        raw["body"]
            .as_str()
            .unwrap()
            .replace("ask_name", "ask_nams")
    );
    let verdict = receiver.verify(tampered).await;
    assert_eq!(verdict["ok"], false, "{verdict}");
    let mut old = raw.clone();
    let an_hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 3600;
    old["resign_at"] = json!(an_hour_ago);
    let verdict = receiver.verify(old).await;
    assert_eq!(verdict["ok"], false, "{verdict}");
    assert!(
        verdict["error"].as_str().unwrap().contains("too old"),
        "{verdict}"
    );
}

#[tokio::test]
async fn include_result_sends_the_arguments_and_result_up_to_the_cap() {
    let (_upstream, upstream_url) = start_plain_server();
    let (secret, secret_file) = secret();
    let receiver = Receiver::start(&secret);
    // One subscription with the result, one without, both to the same receiver.
    let config = temp_file(
        "webhooks.toml",
        &format!(
            "[[webhooks]]\nurl = \"{with}\"\nsecret-file = \"{file}\"\nevents = [\"task.completed\"]\ninclude-result = true\n\n\
             [[webhooks]]\nurl = \"{without}\"\nsecret-file = \"{file}\"\nevents = [\"task.completed\"]\n",
            with = receiver.url("with"),
            without = receiver.url("without"),
            file = secret_file.display()
        ),
    );
    let flags = [
        "--config".to_owned(),
        config.to_str().unwrap().to_owned(),
        "--webhook-allow-private".to_owned(),
        "--webhook-max-body-bytes".to_owned(),
        "2048".to_owned(),
    ];
    let (_gateway, url) = start(&upstream_url, &flags);
    let client = Client::with_tasks(&url);
    let small = client.start_task("echo", json!({"text": "small"})).await;
    client.wait_status(&small, "completed").await;
    let large = client
        .start_task("echo", json!({"text": "L".repeat(4096)}))
        .await;
    client.wait_status(&large, "completed").await;
    let record = receiver
        .until("four completed events", |r| acked(r).len() == 4)
        .await;
    assert_eq!(record["rejected"], json!([]), "every signature verified");
    let event = |path: &str, task: &str| {
        record["acked"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == path && e["taskId"] == task)
            .unwrap_or_else(|| panic!("no event for {task} at {path}: {record}"))["data"]
            .clone()
    };
    let included = event("/with", &small);
    assert_eq!(
        included["arguments"],
        json!({"text": "small"}),
        "{included}"
    );
    assert_eq!(first_text(&included["result"]), "small", "{included}");
    assert!(included.get("resultTruncated").is_none(), "{included}");
    let cut = event("/with", &large);
    assert!(cut.get("result").is_none(), "over the cap: {cut}");
    assert_eq!(cut["resultTruncated"], true, "{cut}");
    for task in [&small, &large] {
        let plain = event("/without", task);
        for field in ["arguments", "result", "resultTruncated"] {
            assert!(
                plain.get(field).is_none(),
                "{field} without include-result: {plain}"
            );
        }
    }
}

#[tokio::test]
async fn an_https_receiver_is_trusted_through_the_ca_file_and_only_so() {
    let (_upstream, upstream_url) = start_plain_server();
    let (secret, secret_file) = secret();
    let ca = test_support::tls::TestCa::new("webhooks");
    let receiver = Receiver::start_tls(&secret, &ca, &ca.issue("receiver"));
    let hook = receiver.url("hook");
    assert!(hook.starts_with("https://"), "{hook}");
    let flags = |ca_file: Option<&PathBuf>| {
        let (mut flags, admin) = admin_flags();
        flags.extend(
            [
                "--webhook",
                &hook,
                "--webhook-secret-file",
                secret_file.to_str().unwrap(),
                "--webhook-allow-private",
            ]
            .map(str::to_owned),
        );
        if let Some(ca_file) = ca_file {
            flags.extend([
                "--webhook-ca-file".to_owned(),
                ca_file.to_str().unwrap().to_owned(),
            ]);
        }
        (flags, admin)
    };

    // Without the CA file, the receiver's certificate is not trusted: nothing arrives,
    // and the outbox says why.
    let (untrusting, admin) = flags(None);
    let (_gateway, url) = start(&upstream_url, &untrusting);
    let client = Client::with_tasks(&url);
    let task_id = client.start_task("echo", json!({"text": "x"})).await;
    client.wait_status(&task_id, "completed").await;
    let last_error = eventually("a failed attempt in the outbox", || async {
        let (_, list) = admin::request("GET", &format!("{admin}/admin/webhooks"), TOKEN).await;
        let id = list["subscriptions"][0]["id"].as_str()?.to_owned();
        let (_, detail) =
            admin::request("GET", &format!("{admin}/admin/webhooks/{id}"), TOKEN).await;
        detail["pending"][0]["lastError"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    assert!(
        last_error.to_lowercase().contains("certificate"),
        "{last_error}"
    );
    assert_eq!(receiver.record().await["attempts"], json!([]));

    // With it, the completed event arrives over TLS, signed.
    let (trusting, _) = flags(Some(&ca.cert_file()));
    let (_gateway, url) = start(&upstream_url, &trusting);
    let client = Client::with_tasks(&url);
    let task_id = client.start_task("echo", json!({"text": "y"})).await;
    client.wait_status(&task_id, "completed").await;
    let record = receiver
        .until("the completed event over https", |r| {
            acked(r).contains(&(task_id.clone(), "task.completed".to_owned()))
        })
        .await;
    assert_eq!(record["rejected"], json!([]), "every signature verified");
}

#[tokio::test]
async fn a_private_destination_is_refused_at_start_naming_it() {
    let (_secret, secret_file) = secret();
    let output = gateway_command(
        &["--upstream", "http://127.0.0.1:9/mcp"],
        &[
            "--webhook",
            "http://10.0.0.1/",
            "--webhook-secret-file",
            secret_file.to_str().unwrap(),
        ],
        "warn",
    )
    .output()
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("http://10.0.0.1/") && stderr.contains("--webhook-allow-private"),
        "{stderr}"
    );
}

#[tokio::test]
async fn mtg_webhooks_takes_comma_separated_urls_each_checked() {
    let (_secret, secret_file) = secret();
    let output = gateway_command(&["--upstream", "http://127.0.0.1:9/mcp"], &[], "warn")
        .env("MTG_WEBHOOKS", "http://8.8.8.8/a,http://192.168.7.7/b")
        .env("MTG_WEBHOOK_SECRET_FILE", &secret_file)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Both were read: the first (public, an address literal: no lookup) passes, the
    // second is refused, named.
    assert!(
        stderr.contains("http://192.168.7.7/b") && stderr.contains("private"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_redirect_or_410_lands_in_dead_letters_and_the_cli_redelivers_it() {
    let (_upstream, upstream_url) = start_plain_server();
    let (secret, secret_file) = secret();
    let receiver = Receiver::start(&secret);
    receiver
        .control(json!({"paths": {
            "/moved": {"status": 302, "location": "http://127.0.0.1:9/elsewhere"},
            "/gone": {"status": 410},
        }}))
        .await;
    let (mut flags, admin) = admin_flags();
    for path in ["moved", "gone"] {
        flags.extend(["--webhook".to_owned(), receiver.url(path)]);
    }
    flags.extend([
        "--webhook-secret-file".to_owned(),
        secret_file.to_str().unwrap().to_owned(),
        "--webhook-allow-private".to_owned(),
    ]);
    let (_gateway, url) = start(&upstream_url, &flags);
    let client = Client::with_tasks(&url);
    let task_id = client.start_task("echo", json!({"text": "x"})).await;
    client.wait_status(&task_id, "completed").await;

    let listed = eventually("two dead letters", || async {
        let (status, list) = admin::request("GET", &format!("{admin}/admin/webhooks"), TOKEN).await;
        assert_eq!(status, 200, "{list}");
        let dead: u64 = list["subscriptions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["deadLetters"].as_u64().unwrap())
            .sum();
        if dead == 2 {
            return Some(list);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        None
    })
    .await;
    let record = receiver.record().await;
    assert!(acked(&record).is_empty());
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "given up at once, not retried: {record}");
    for subscription in listed["subscriptions"].as_array().unwrap() {
        let id = subscription["id"].as_str().unwrap();
        let shown = cli(&admin, &["--json", "webhooks", "show", id]);
        assert!(shown.status.success(), "{shown:?}");
        let detail: Value = serde_json::from_slice(&shown.stdout).unwrap();
        let dead = &detail["deadLetters"][0];
        assert_eq!(dead["taskId"], task_id.as_str());
        assert_eq!(dead["type"], "task.completed");
        let error = dead["lastError"].as_str().unwrap();
        assert!(
            error.contains("HTTP 302") || error.contains("HTTP 410"),
            "{error}"
        );
    }

    // The receiver is fixed; an operator redelivers from the CLI.
    receiver.control(json!({})).await;
    for subscription in listed["subscriptions"].as_array().unwrap() {
        let id = subscription["id"].as_str().unwrap();
        let out = cli(&admin, &["webhooks", "redeliver", id]);
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("1 dead letter"), "{stdout}");
    }
    let record = receiver
        .until("both redelivered", |r| acked(r).len() == 2)
        .await;
    let mut paths: Vec<&str> = record["acked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    paths.sort_unstable();
    assert_eq!(paths, ["/gone", "/moved"]);
}

/// Gateway `id` on `upstream_url` sharing `redis`, reading `config`: its process,
/// client and admin URL.
fn instance(
    upstream_url: &str,
    redis: &RedisServer,
    id: &str,
    config: &std::path::Path,
) -> (Proc, Client, String) {
    let (mut flags, admin) = admin_flags();
    flags.extend(
        [
            "--instance-id",
            id,
            "--redis",
            &redis.url(),
            "--lease-timeout-ms",
            "1500",
            "--config",
            config.to_str().unwrap(),
            "--webhook-allow-private",
            "--webhook-retry-first-ms",
            "300",
            "--webhook-retry-max-ms",
            "600",
        ]
        .map(str::to_owned),
    );
    let (proc, url) = start(upstream_url, &flags);
    (proc, Client::with_tasks(&url), admin)
}

/// How long the receiver answers 503 in the kill -9 test (the issue's 20 s).
const FAILING_MS: u64 = 20_000;

#[tokio::test]
async fn the_other_instance_delivers_after_a_kill_9_with_the_same_webhook_id() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let (secret, secret_file) = secret();
    let receiver = Receiver::start(&secret);
    // 503, each after 200 ms, for 20 s from the first delivery; then 204.
    receiver
        .control(json!({"default": {"status": 503, "delay_ms": 200, "for_ms": FAILING_MS}}))
        .await;
    let config = temp_file(
        "webhooks.toml",
        &format!(
            "[[webhooks]]\nurl = \"{}\"\nsecret-file = \"{}\"\ntimeout-ms = 1000\n",
            receiver.url("hook"),
            secret_file.display()
        ),
    );
    let (a, client, admin_a) = instance(&upstream_url, &redis, "gw-a", &config);
    let (b, _client_b, admin_b) = instance(&upstream_url, &redis, "gw-b", &config);
    let task_id = client.start_task("echo", json!({"text": "x"})).await;
    client.wait_status(&task_id, "completed").await;

    // Both instances have tried it; the one that holds it now is killed.
    let record = receiver
        .until("a few 503s", |r| {
            r["attempts"].as_array().unwrap().len() >= 3
        })
        .await;
    let event_id = record["attempts"][0]["id"].as_str().unwrap().to_owned();
    let (_, list) = admin::request("GET", &format!("{admin_a}/admin/webhooks"), TOKEN).await;
    let subscription = list["subscriptions"][0]["id"].as_str().unwrap().to_owned();
    let (_, detail) = admin::request(
        "GET",
        &format!("{admin_a}/admin/webhooks/{subscription}"),
        TOKEN,
    )
    .await;
    let pending = &detail["pending"][0];
    assert_eq!(pending["eventId"], event_id.as_str(), "{detail}");
    assert!(pending["attempts"].as_u64().unwrap() >= 1, "{detail}");
    assert!(
        pending["lastError"].as_str().unwrap().contains("503"),
        "{detail}"
    );
    let holder = pending["claimedBy"].as_str().unwrap().to_owned();
    let (mut killed, survivor_admin) = if holder == "gw-a" {
        (a, admin_b)
    } else {
        (b, admin_a)
    };
    killed.kill();
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // The receiver fails for 20 s; the survivor keeps retrying through it.
    let deadline = Instant::now() + Duration::from_millis(FAILING_MS + 40_000);
    let record = loop {
        let record = receiver.record().await;
        if !acked(&record).is_empty() {
            break record;
        }
        assert!(
            Instant::now() < deadline,
            "no acknowledged delivery: {record}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let delivered = &record["acked"][0];
    assert_eq!(delivered["id"], event_id.as_str(), "the same webhook-id");
    assert_eq!(delivered["taskId"], task_id.as_str());
    assert!(
        delivered["at"].as_f64().unwrap() > killed_at,
        "after the kill"
    );
    let failing_since = record["rules_first_used"].as_f64().unwrap();
    assert!(
        delivered["at"].as_f64().unwrap() - failing_since >= FAILING_MS as f64 / 1000.0,
        "acknowledged only once the receiver's 20 s of 503s were over"
    );
    assert_eq!(record["acked"].as_array().unwrap().len(), 1);
    // Once acknowledged, it leaves the outbox for good.
    eventually("an empty outbox", || async {
        let (_, list) =
            admin::request("GET", &format!("{survivor_admin}/admin/webhooks"), TOKEN).await;
        (list["subscriptions"][0]["pending"] == 0).then_some(())
    })
    .await;
    assert_eq!(receiver.record().await["resent_after_ack"], json!([]));
}

#[tokio::test]
async fn a_thousand_tasks_reach_a_slow_flaky_receiver_in_order_and_once() {
    let (_upstream, upstream_url) = start_plain_server();
    let (secret, secret_file) = secret();
    let receiver = Receiver::start(&secret);
    receiver
        .control(json!({"default": {"delay_ms": 200, "fail_rate": 0.3, "fail_status": 503}}))
        .await;
    let config = temp_file(
        "webhooks.toml",
        &format!(
            "[[webhooks]]\nurl = \"{}\"\nsecret-file = \"{}\"\nevents = [\"task.created\", \"task.completed\"]\n",
            receiver.url("hook"),
            secret_file.display()
        ),
    );
    let flags = [
        "--config".to_owned(),
        config.to_str().unwrap().to_owned(),
        "--webhook-allow-private".to_owned(),
        "--webhook-retry-first-ms".to_owned(),
        "200".to_owned(),
        "--webhook-retry-max-ms".to_owned(),
        "1000".to_owned(),
    ];
    let (_gateway, url) = start(&upstream_url, &flags);
    let client = Client::with_tasks(&url);
    const TASKS: usize = 1000;
    let started = Instant::now();
    let mut ids = std::collections::BTreeSet::new();
    for chunk in 0..TASKS / 50 {
        let calls = (0..50).map(|i| {
            let client = client.clone();
            async move {
                client
                    .start_task("echo", json!({"text": format!("{chunk}-{i}")}))
                    .await
            }
        });
        ids.extend(futures_util::future::join_all(calls).await);
    }
    assert_eq!(ids.len(), TASKS);
    let record = receiver
        .until("every event acknowledged", |r| {
            r["acked"].as_array().unwrap().len() >= 2 * TASKS
        })
        .await;
    let acked = acked(&record);
    assert_eq!(acked.len(), 2 * TASKS, "no event twice");
    let mut per_task: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (task, kind) in &acked {
        per_task.entry(task).or_default().push(kind);
    }
    assert_eq!(per_task.len(), TASKS);
    for (task, kinds) in &per_task {
        assert!(ids.contains(*task));
        assert_eq!(kinds, &["task.created", "task.completed"], "{task}");
    }
    assert_eq!(
        record["resent_after_ack"],
        json!([]),
        "no re-send after a 2xx"
    );
    assert_eq!(record["rejected"], json!([]));
    let attempts = record["attempts"].as_array().unwrap().len();
    assert!(attempts > 2 * TASKS, "the receiver failed some: {attempts}");
    eprintln!(
        "{TASKS} tasks, {} events, {attempts} attempts in {:?}",
        2 * TASKS,
        started.elapsed()
    );
}
