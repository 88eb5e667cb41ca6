//! Named upstreams (#30): one gateway serving several MCP servers, each at `/mcp/NAME`
//! as its own world (upstream, store namespace, tasks, takeovers, settings, OAuth
//! resource). Real processes: the fixture `plain_server`, the pinned server-everything,
//! the TypeScript fixture server over stdio, Redis, and two gateway instances.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::auth::{ISSUER, Issuer, SigningKey, now};
use crate::common::admin::listed_ids;
use crate::common::session::{SessionClient, read_messages};
use crate::common::*;
use serde_json::{Value, json};
use test_support::RedisServer;

const LEASE_TIMEOUT_MS: u64 = 2000;
const STATE_KEY: &str = "a-shared-secret-of-at-least-32-bytes!";

/// A directory of the test's own (config files, stats files), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("mtg-named-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/fixtures/stop_probe_server.mjs`: a TypeScript SDK server (tools `sleep`, `echo`,
/// `slow_structured`) that counts its calls; over stdio it serves `/stats` on a port.
fn stop_probe_script() -> PathBuf {
    let script = repo_root().join("tests/fixtures/stop_probe_server.mjs");
    assert!(
        repo_root()
            .join("tests/node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "run `npm ci` in tests/ first"
    );
    script
}

/// A stdio stop-probe server's counters, `None` while its stats port is closed.
async fn probe_stats(port: u16) -> Option<Value> {
    let reply = reqwest::get(format!("http://127.0.0.1:{port}/stats"))
        .await
        .ok()?;
    reply.json().await.ok()
}

/// Each client of `names` at `base/NAME` (the gateway's `/mcp` URL as `base`), as one
/// caller.
fn clients(base: &str, names: &[&str], caller: &str) -> Vec<Client> {
    names
        .iter()
        .map(|name| {
            let mut client = Client::with_tasks(&format!("{base}/{name}"));
            client.authorization = Some(format!("Bearer {caller}"));
            client
        })
        .collect()
}

/// The tool names of a `tools/list` result.
fn tool_names(result: &Value) -> BTreeSet<String> {
    result["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {result}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A 2025-11-25 server's own `tools/list` and `serverInfo`, asked directly (with the
/// capabilities the gateway's clients declare: server-everything lists some tools only
/// to clients that can answer them).
async fn upstream_listing(url: &str) -> (BTreeSet<String>, Value) {
    let mut session = SessionClient::new(url);
    let initialized = session
        .initialize(
            "2025-11-25",
            json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}}),
        )
        .await;
    let response = session
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        .await;
    let listed = read_messages(response)
        .await
        .into_iter()
        .find(|m| m["id"] == 1)
        .expect("a tools/list answer");
    (
        tool_names(&listed["result"]),
        initialized["serverInfo"].clone(),
    )
}

/// An error answer's JSON-RPC error with `task_id` replaced by `ID`, and its HTTP status:
/// what must be the same for a task of another path and an id never made.
fn error_shape(reply: &Reply, task_id: &str) -> (u16, Value) {
    assert!(
        reply.body.get("error").is_some(),
        "not an error: {}",
        reply.body
    );
    let text = reply.body["error"].to_string().replace(task_id, "ID");
    (reply.status, serde_json::from_str(&text).unwrap())
}

/// The store key of a task, whatever namespace: `mtg:<ns>:{<id>}`, and its namespace.
fn namespace_of(redis: &RedisServer, task_id: &str) -> String {
    let mut conn = redis.connection();
    let key = task_key(&mut conn, task_id);
    key.strip_suffix(&format!(":{{{task_id}}}"))
        .unwrap_or_else(|| panic!("unexpected key {key}"))
        .to_owned()
}

/// Polls until the task ends; its final state.
async fn wait_terminal(client: &Client, task_id: &str) -> Value {
    client
        .poll_until(task_id, |t| {
            matches!(
                t["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
        })
        .await
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// One instance of the main test's gateway: the config file, an instance id, and the
/// stats port and file of its own stdio stop-probe process (the config's `cmd` reads
/// them from the environment, so that both instances share one config).
struct Instance {
    proc: Proc,
    url: String,
    stats_port: u16,
    stats_file: PathBuf,
}

fn start_instance(config: &Path, id: &str, scratch: &Scratch) -> Instance {
    let stats_port = free_port();
    let stats_file = scratch.0.join(format!("{id}-probe-stats.json"));
    let mut command = gateway_command(
        &["--config", config.to_str().unwrap()],
        &["--instance-id", id],
        "warn",
    );
    command
        .env("NT_STATS_PORT", stats_port.to_string())
        .env("NT_STATS_FILE", &stats_file);
    let (proc, url) = spawn_announcing("mcp-task-gateway", command);
    Instance {
        proc,
        url,
        stats_port,
        stats_file,
    }
}

const PATHS: [&str; 3] = ["plain", "everything", "local"];
const PLAIN: usize = 0;
const EVERYTHING: usize = 1;
const LOCAL: usize = 2;

/// The issue's test: two HTTP upstreams (plain_server, server-everything) and a stdio one
/// (the TypeScript stop-probe server), from one config file, on Redis with two instances.
/// Tasks made on A are answered and cancelled on B; each path lists its own upstream's
/// tools; a task id is unknown on the other paths; and after kill -9 of A, each task
/// that may run again runs again on B against its own upstream only, under its own
/// entry's `retry-on-owner-loss`.
#[tokio::test]
async fn three_upstreams_on_two_instances_keep_tasks_apart_and_take_over_to_their_own_upstream() {
    let redis = RedisServer::start();
    let (_plain, plain_url) = start_plain_server();
    let (_everything, everything_url) = start_everything();
    let scratch = Scratch::new();
    let probe = stop_probe_script();
    let config = scratch.write(
        "gateway.toml",
        &format!(
            r#"
redis = "{redis}"
lease-timeout-ms = {LEASE_TIMEOUT_MS}
request-state-key = "{STATE_KEY}"

[upstreams.plain]
url = "{plain_url}"

[upstreams.everything]
url = "{everything_url}"
retry-on-owner-loss = ["trigger-long-running-operation"]

[upstreams.local]
cmd = "sh -c 'exec node {probe} --mode stdio --stats-port \"$NT_STATS_PORT\" --stats-file \"$NT_STATS_FILE\"'"
pool = 1
retry-on-owner-loss = ["sleep"]
"#,
            redis = redis.url(),
            probe = probe.display(),
        ),
    );
    let mut a = start_instance(&config, "gw-a", &scratch);
    let b = start_instance(&config, "gw-b", &scratch);
    let on_a = clients(&a.url, &PATHS, "alice");
    let on_b = clients(&b.url, &PATHS, "alice");

    // Each path describes its own upstream, on either instance.
    let (plain_tools, plain_info) = upstream_listing(&plain_url).await;
    let (everything_tools, everything_info) = upstream_listing(&everything_url).await;
    let local_tools: BTreeSet<String> = ["echo", "sleep", "slow_structured"]
        .map(str::to_owned)
        .into();
    assert_ne!(plain_tools, everything_tools);
    let expected = [
        (&plain_tools, &plain_info["name"]),
        (&everything_tools, &everything_info["name"]),
        (&local_tools, &json!("stop-probe")),
    ];
    for clients in [&on_a, &on_b] {
        for (client, (tools, server)) in clients.iter().zip(expected) {
            let listed = client.request("tools/list", json!({})).await;
            assert_eq!(&tool_names(listed.result()), tools, "{}", client.url);
            let discover = client.request("server/discover", json!({})).await;
            assert_eq!(
                &discover.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
                server,
                "{}: {}",
                client.url,
                discover.body
            );
        }
    }

    // A task on each path, made on A: two that ask for input, three to cancel.
    let plain_asks = on_a[PLAIN].start_task("ask_name", json!({})).await;
    let everything_asks = on_a[EVERYTHING]
        .start_task("trigger-elicitation-request", json!({}))
        .await;
    let plain_sleeps = on_a[PLAIN].start_task("sleep", json!({"ms": 60000})).await;
    let everything_runs = on_a[EVERYTHING].start_reporting_operation(60).await;
    let local_sleeps = on_a[LOCAL].start_task("sleep", json!({"ms": 60000})).await;
    eventually(
        "the plain and local calls to reach their upstreams",
        || async {
            let plain = upstream_stats(&plain_url).await;
            let local = probe_stats(a.stats_port).await?;
            (plain["callsInFlight"] == 2 && local["callsInFlight"] == 1).then_some(())
        },
    )
    .await;
    let asked_plain = on_b[PLAIN].wait_status(&plain_asks, "input_required").await;
    let asked_everything = on_b[EVERYTHING]
        .wait_status(&everything_asks, "input_required")
        .await;

    // Each task lives in its path's own store namespace.
    let namespaces: BTreeSet<String> = [&plain_asks, &everything_asks, &local_sleeps]
        .iter()
        .map(|id| namespace_of(&redis, id))
        .collect();
    assert_eq!(namespaces.len(), 3, "{namespaces:?}");

    // A task of one path is an unknown id on the others, for the same caller, whatever
    // the method; and what was sent there did nothing to it.
    let made = [
        (PLAIN, &plain_asks),
        (EVERYTHING, &everything_asks),
        (PLAIN, &plain_sleeps),
        (EVERYTHING, &everything_runs),
        (LOCAL, &local_sleeps),
    ];
    let never_made = uuid::Uuid::new_v4().to_string();
    for (home, task_id) in made {
        for (path, client) in on_b.iter().enumerate().filter(|(p, _)| *p != home) {
            let answers = json!({"input-0": accept(json!({"name": "Mallory"}))});
            for (method, params) in [
                ("tasks/get", json!({})),
                ("tasks/update", json!({"inputResponses": answers})),
                ("tasks/cancel", json!({})),
            ] {
                let ask = |id: &str| {
                    let mut params = params.clone();
                    params["taskId"] = json!(id);
                    client.request(method, params)
                };
                let elsewhere = ask(task_id).await;
                let unknown = ask(&never_made).await;
                assert_eq!(
                    error_shape(&elsewhere, task_id),
                    error_shape(&unknown, &never_made),
                    "{method} of a {} task at /mcp/{}",
                    PATHS[home],
                    PATHS[path]
                );
            }
        }
    }
    assert_eq!(
        on_b[PLAIN].get_task(&plain_asks).await["inputRequests"],
        asked_plain["inputRequests"]
    );
    assert_eq!(
        on_b[EVERYTHING].get_task(&everything_asks).await["inputRequests"],
        asked_everything["inputRequests"]
    );
    for (home, task_id) in [
        (PLAIN, &plain_sleeps),
        (EVERYTHING, &everything_runs),
        (LOCAL, &local_sleeps),
    ] {
        assert_eq!(on_b[home].get_task(task_id).await["status"], "working");
    }

    // Input answered on B reaches the call on A; a cancel on B stops A's call upstream.
    let (key, _) = only_input_request(&asked_plain);
    on_b[PLAIN]
        .update(
            &plain_asks,
            json!({key.as_str(): accept(json!({"name": "Ada"}))}),
        )
        .await
        .result();
    let (key, _) = only_input_request(&asked_everything);
    on_b[EVERYTHING]
        .update(
            &everything_asks,
            json!({key.as_str(): accept(json!({"name": "Ada Lovelace", "check": true}))}),
        )
        .await
        .result();
    let done = on_b[PLAIN].wait_status(&plain_asks, "completed").await;
    assert_eq!(first_text(&done["result"]), "Hello, Ada!");
    let done = on_b[EVERYTHING]
        .wait_status(&everything_asks, "completed")
        .await;
    assert!(
        done["result"]["content"]
            .to_string()
            .contains("Ada Lovelace"),
        "{done}"
    );
    for (home, task_id) in [
        (PLAIN, &plain_sleeps),
        (EVERYTHING, &everything_runs),
        (LOCAL, &local_sleeps),
    ] {
        on_b[home].cancel(task_id).await.result();
        on_b[home].wait_status(task_id, "cancelled").await;
    }
    eventually(
        "A's plain and local calls to be cancelled upstream",
        || async {
            let plain = upstream_stats(&plain_url).await;
            let local = probe_stats(a.stats_port).await?;
            let plain_done =
                plain["cancelledReceived"].as_array()?.len() == 1 && plain["callsInFlight"] == 0;
            let local_done =
                local["cancelledReceived"].as_array()?.len() == 1 && local["callsInFlight"] == 0;
            (plain_done && local_done).then_some(())
        },
    )
    .await;
    for task_id in [&plain_asks, &everything_asks, &local_sleeps] {
        assert_eq!(owner_of(&redis, task_id), "gw-a");
    }

    // kill -9 of the owner while a call of each kind runs on A.
    let plain_before = upstream_stats(&plain_url).await["callsStarted"]
        .as_u64()
        .unwrap();
    let b_local_before = eventually("B's stdio upstream to serve its stats", || async {
        probe_stats(b.stats_port).await?["callsStarted"].as_u64()
    })
    .await;
    // Read-only upstream tool: run again.
    let lookup = on_a[PLAIN]
        .start_task("lookup", json!({"key": "k", "ms": 6000}))
        .await;
    // `sleep` is in the local entry's retry-on-owner-loss, not in plain's: fails.
    let plain_sleep = on_a[PLAIN].start_task("sleep", json!({"ms": 60000})).await;
    // In local's retry-on-owner-loss: run again.
    let local_sleep = on_a[LOCAL].start_task("sleep", json!({"ms": 6000})).await;
    // In everything's retry-on-owner-loss: run again.
    let operation = on_a[EVERYTHING].start_reporting_operation(5).await;
    eventually("A's calls to reach their upstreams", || async {
        let plain = upstream_stats(&plain_url).await;
        let local = probe_stats(a.stats_port).await?;
        (plain["callsInFlight"] == 2 && local["callsInFlight"] == 1).then_some(())
    })
    .await;
    for (home, task_id) in [
        (PLAIN, &lookup),
        (PLAIN, &plain_sleep),
        (LOCAL, &local_sleep),
        (EVERYTHING, &operation),
    ] {
        let task = on_a[home].get_task(task_id).await;
        assert_eq!(task["status"], "working", "ended before the kill: {task}");
    }
    a.proc.kill();

    let done = on_b[PLAIN].wait_status(&lookup, "completed").await;
    assert_eq!(first_text(&done["result"]), "found k for Bearer alice");
    let failed = wait_terminal(&on_b[PLAIN], &plain_sleep).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["statusMessage"], "gateway instance lost", "{failed}");
    let done = wait_terminal(&on_b[LOCAL], &local_sleep).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(first_text(&done["result"]), "slept 6000 ms");
    let done = wait_terminal(&on_b[EVERYTHING], &operation).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(
        first_text(&done["result"]).contains("Long running operation completed"),
        "{done}"
    );
    for task_id in [&lookup, &local_sleep, &operation] {
        assert_eq!(owner_of(&redis, task_id), "gw-b");
    }

    // Each re-run went to its own upstream and nowhere else: plain saw its two calls
    // and the lookup's re-run (a local `sleep` re-run there would be one more); B's
    // stdio server saw only the local sleep's re-run; A's stdio server only its own
    // two sleeps (it wrote its counters when A's death closed its stdin).
    let plain_after = upstream_stats(&plain_url).await["callsStarted"]
        .as_u64()
        .unwrap();
    assert_eq!(plain_after, plain_before + 3);
    let b_local = probe_stats(b.stats_port).await.expect("B's stdio upstream");
    assert_eq!(b_local["callsStarted"], b_local_before + 1, "{b_local}");
    let a_local: Value = eventually("A's stdio upstream to write its counters", || async {
        let text = std::fs::read_to_string(&a.stats_file).ok()?;
        serde_json::from_str(&text).ok()
    })
    .await;
    assert_eq!(a_local["callsStarted"], 2, "{a_local}");
}

// ---------------------------------------------------------------------------------
// Config refusals and unknown paths
// ---------------------------------------------------------------------------------

/// Runs the gateway with `args` (and `file` as its `--config`, if any); its output.
fn refused(scratch: &Scratch, args: &[&str], file: Option<&str>) -> Output {
    let mut all: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    if let Some(text) = file {
        let path = scratch.write(&format!("{}.toml", uuid::Uuid::new_v4()), text);
        all.extend(["--config".to_owned(), path.display().to_string()]);
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    gateway_command(&all, &[], "warn").output().unwrap()
}

#[test]
fn bad_upstream_configs_are_refused_naming_the_entry() {
    let says = |texts: &[&str]| -> Vec<String> { texts.iter().map(|t| (*t).to_owned()).collect() };
    let scratch = Scratch::new();
    let url = "http://127.0.0.1:1/mcp";
    let other = "http://127.0.0.1:2/mcp";
    let named = |name: &str| format!("{name}={url}");
    let twice = [named("a"), format!("a={other}")];
    let mut cases: Vec<(Vec<String>, Option<String>, Vec<String>)> = vec![
        // The same name twice: on the command line, or there and in the file.
        (
            vec![
                "--upstream".into(),
                twice[0].clone(),
                "--upstream".into(),
                twice[1].clone(),
            ],
            None,
            says(&["\"a\"", "named twice"]),
        ),
        (
            vec!["--upstream".into(), named("a")],
            Some(format!("[upstreams.a]\nurl = \"{other}\"\n")),
            says(&["\"a\"", "named twice"]),
        ),
        (
            vec![],
            Some(format!(
                "[upstreams.a]\nurl = \"{url}\"\ncmd = \"server\"\n"
            )),
            says(&["upstreams.a", "both url and cmd"]),
        ),
        (
            vec![],
            Some("[upstreams.a]\npool = 2\n".into()),
            says(&["upstreams.a", "needs url or cmd"]),
        ),
        (
            vec![],
            Some(format!(
                "[upstreams.a]\nurl = \"{url}\"\ncolour = \"blue\"\n"
            )),
            says(&["upstreams.a", "colour"]),
        ),
        // One upstream at /mcp: a second plain URL is refused.
        (
            vec![
                "--upstream".into(),
                url.into(),
                "--upstream".into(),
                other.into(),
            ],
            None,
            says(&[other, "a second upstream for /mcp"]),
        ),
    ];
    // Names that are not one lower-case path segment, in the file and on the command line.
    for bad in ["Files", "a/b", "a_b"] {
        cases.push((
            vec![],
            Some(format!("[upstreams.\"{bad}\"]\nurl = \"{url}\"\n")),
            says(&[&format!("upstreams.{bad}"), "not a path segment"]),
        ));
        cases.push((
            vec!["--upstream".into(), named(bad)],
            None,
            says(&[&format!("\"{bad}\""), "not a path segment"]),
        ));
    }
    for (args, file, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = refused(&scratch, &args, file.as_deref());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?} {file:?} was not refused: {stderr}"
        );
        for text in expected {
            assert!(
                stderr.contains(text.as_str()),
                "{args:?} {file:?}: no {text:?} in {stderr}"
            );
        }
    }

    // The same names, well formed, start (the refusals above are about the entries).
    let good = scratch.write(
        "good.toml",
        &format!("[upstreams.files-2]\nurl = \"{url}\"\n[upstreams.b]\nurl = \"{other}\"\n"),
    );
    let mut command = gateway_command(
        &[
            "--upstream",
            &named("a"),
            "--config",
            good.to_str().unwrap(),
        ],
        &[],
        "warn",
    );
    command.stderr(std::process::Stdio::null());
    let (_gateway, _url) = spawn_announcing("mcp-task-gateway", command);
}

#[tokio::test]
async fn a_named_only_gateway_answers_unknown_paths_with_404_naming_the_paths() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, base) = start_gateway(
        &format!("a={upstream_url}"),
        &["--upstream", &format!("b={upstream_url}")],
    );
    let paths = json!(["/mcp/a", "/mcp/b"]);
    // The paths served answer.
    for name in ["a", "b"] {
        let client = Client::with_tasks(&format!("{base}/{name}"));
        let listed = client.request("tools/list", json!({})).await;
        assert!(tool_names(listed.result()).contains("lookup"));
    }
    for (path, says) in [
        ("", "/mcp/a, /mcp/b"),
        ("/zz", "\"zz\""),
        ("/", "/mcp/a, /mcp/b"),
        ("/a/tools", "/mcp/a, /mcp/b"),
    ] {
        let client = Client::with_tasks(&format!("{base}{path}"));
        let reply = client.request("tools/list", json!({})).await;
        assert_eq!(reply.status, 404, "{path}: {}", reply.body);
        assert_eq!(reply.error_code(), -32600, "{path}");
        assert_eq!(reply.body["error"]["data"]["paths"], paths, "{path}");
        reply.assert_message_mentions(says);
        reply.assert_message_mentions("/mcp/a");
    }
    // A session client's initialize at /mcp is refused the same way.
    let mut session = SessionClient::new(&base);
    let refused = session.try_initialize("2025-11-25", json!({})).await;
    assert_eq!(refused.status(), 404);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["data"]["paths"], paths, "{body}");
}

// ---------------------------------------------------------------------------------
// OAuth: each path its own protected resource
// ---------------------------------------------------------------------------------

const GATEWAY_RESOURCE: &str = "https://gw.test/mcp";

fn token_for(key: &SigningKey, audience: &str) -> String {
    key.sign(&json!({
        "iss": ISSUER, "aud": audience, "sub": "alice", "exp": now() + 3600, "iat": now(),
        "jti": uuid::Uuid::new_v4().to_string(), "scope": "mcp",
    }))
}

/// Where RFC 9728 puts the metadata of `resource` (`https://h/p` → `https://h/.well-known/oauth-protected-resource/p`).
fn metadata_of(resource: &str) -> String {
    let (scheme, rest) = resource.split_once("://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    format!("{scheme}://{host}/.well-known/oauth-protected-resource/{path}")
}

/// A raw `tools/call` of plain_server's `echo` at `url` with `token`: status,
/// `WWW-Authenticate`, body.
async fn call_with(url: &str, token: Option<&str>) -> (u16, String, Value) {
    let authorization = token.map(|t| format!("Bearer {t}"));
    crate::auth::call_raw(url, authorization.as_deref()).await
}

#[tokio::test]
async fn each_named_path_is_its_own_protected_resource() {
    let key = SigningKey::es256("k1");
    let issuer = Issuer::start(vec![key.jwk.clone()]).await;
    let (_upstream, upstream_url) = start_plain_server();
    let scratch = Scratch::new();
    // a and b take the default audience (the gateway's + "/NAME"); c names its own.
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "[upstreams.a]\nurl = \"{upstream_url}\"\n\
             [upstreams.b]\nurl = \"{upstream_url}\"\n\
             [upstreams.c]\nurl = \"{upstream_url}\"\nauth-jwt-audience = \"https://tools.test/c\"\n"
        ),
    );
    let command = gateway_command(
        &["--config", config.to_str().unwrap()],
        &[
            "--auth-jwt-issuer",
            ISSUER,
            "--auth-jwt-audience",
            GATEWAY_RESOURCE,
            "--auth-jwt-jwks-url",
            &issuer.url,
        ],
        "warn",
    );
    let (_gateway, base) = spawn_announcing("mcp-task-gateway", command);
    let at = |name: &str| format!("{base}/{name}");

    let for_a = token_for(&key, &format!("{GATEWAY_RESOURCE}/a"));
    let (status, _, body) = call_with(&at("a"), Some(&for_a)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("error").is_none(), "{body}");
    // The same token at b is for another resource.
    let (status, challenge, body) = call_with(&at("b"), Some(&for_a)).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        challenge.starts_with("Bearer error=\"invalid_token\""),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{}\"",
            metadata_of("https://gw.test/mcp/b")
        )),
        "{challenge}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("another audience"),
        "{body}"
    );
    // The gateway's own resource is none of the paths'.
    let for_gateway = token_for(&key, GATEWAY_RESOURCE);
    for name in ["a", "b", "c"] {
        let (status, _, body) = call_with(&at(name), Some(&for_gateway)).await;
        assert_eq!(status, 401, "{name}: {body}");
    }
    // c's own audience works at c only.
    let for_c = token_for(&key, "https://tools.test/c");
    let (status, _, body) = call_with(&at("c"), Some(&for_c)).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = call_with(&at("a"), Some(&for_c)).await;
    assert_eq!(status, 401);

    // Without a token, each path's challenge points at its own metadata, which names
    // the path's resource.
    for (name, resource) in [
        ("a", "https://gw.test/mcp/a".to_owned()),
        ("b", "https://gw.test/mcp/b".to_owned()),
        ("c", "https://tools.test/c".to_owned()),
    ] {
        let (status, challenge, _) = call_with(&at(name), None).await;
        assert_eq!(status, 401);
        assert_eq!(
            challenge,
            format!("Bearer resource_metadata=\"{}\"", metadata_of(&resource)),
            "{name}"
        );
        let metadata: Value = reqwest::get(base.replace(
            "/mcp",
            &format!("/.well-known/oauth-protected-resource/mcp/{name}"),
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(
            metadata["resource"],
            resource.as_str(),
            "{name}: {metadata}"
        );
        assert_eq!(metadata["authorization_servers"], json!([ISSUER]));
    }
    // No metadata for a path not served.
    let missing =
        reqwest::get(base.replace("/mcp", "/.well-known/oauth-protected-resource/mcp/zz"))
            .await
            .unwrap();
    assert_eq!(missing.status(), 404);
}

// ---------------------------------------------------------------------------------
// /readyz per upstream
// ---------------------------------------------------------------------------------

async fn readyz(base: &str) -> (u16, Value) {
    let response = reqwest::get(base.replace("/mcp", "/readyz")).await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text}));
    (status, body)
}

#[tokio::test]
async fn readyz_reports_each_upstream_and_fails_only_when_all_are_down() {
    let (mut upstream_a, url_a) = start_plain_server();
    let (mut upstream_b, url_b) = start_plain_server();
    let (_gateway, base) = start_gateway(
        &format!("a={url_a}"),
        &["--upstream", &format!("b={url_b}")],
    );
    let (status, body) = readyz(&base).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ready"], true, "{body}");
    assert_eq!(
        body["upstreams"],
        json!({"a": "ready", "b": "ready"}),
        "{body}"
    );

    upstream_b.kill();
    let (status, body) = eventually("readyz to report b down", || async {
        let (status, body) = readyz(&base).await;
        (body["upstreams"]["b"] != "ready").then_some((status, body))
    })
    .await;
    assert_eq!(
        status, 200,
        "one upstream down takes only its path out: {body}"
    );
    assert_eq!(body["ready"], true, "{body}");
    assert_eq!(body["upstreams"]["a"], "ready", "{body}");
    let problem = body["upstreams"]["b"].as_str().unwrap_or_default();
    assert!(!problem.is_empty(), "{body}");
    let problems = body["problems"].to_string();
    assert!(problems.contains("upstream b"), "{body}");
    assert!(!problems.contains("upstream a"), "{body}");
    // a still serves.
    let client = Client::with_tasks(&format!("{base}/a"));
    let task_id = client.start_task("echo", json!({"text": "still"})).await;
    client.wait_status(&task_id, "completed").await;

    upstream_a.kill();
    let (status, body) = eventually("readyz to fail with every upstream down", || async {
        let (status, body) = readyz(&base).await;
        (status == 503).then_some((status, body))
    })
    .await;
    assert_eq!(status, 503);
    assert_eq!(body["ready"], false, "{body}");
    assert_ne!(body["upstreams"]["a"], "ready", "{body}");
    assert_ne!(body["upstreams"]["b"], "ready", "{body}");
}

// ---------------------------------------------------------------------------------
// Admin API: ?upstream=NAME
// ---------------------------------------------------------------------------------

const ADMIN_TOKEN: &str = "an-operator-token-of-some-length";

#[tokio::test]
async fn the_admin_api_selects_an_upstreams_tasks() {
    let (_upstream, upstream_url) = start_plain_server();
    let scratch = Scratch::new();
    let token_file = scratch.write("admin-token", &format!("{ADMIN_TOKEN}\n"));
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // Two names in front of one server: still two worlds, each with its own tasks.
    let (_gateway, base) = start_gateway(
        &format!("a={upstream_url}"),
        &[
            "--upstream",
            &format!("b={upstream_url}"),
            "--metrics-listen",
            &listen,
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let admin = format!("http://{listen}/admin");
    let get = |path: String| {
        let url = format!("{admin}/{path}");
        async move { crate::common::admin::request("GET", &url, ADMIN_TOKEN).await }
    };
    let [on_a, on_b] = [0, 1].map(|n| clients(&base, &["a", "b"], "alice").remove(n));
    let a_sleeps = on_a.start_task("sleep", json!({"ms": 60000})).await;
    let b_sleeps = on_b.start_task("sleep", json!({"ms": 60000})).await;
    let b_echo = on_b.start_task("echo", json!({"text": "hi"})).await;
    on_b.wait_status(&b_echo, "completed").await;

    let (status, page) = get("tasks?upstream=a".into()).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(listed_ids(&page), vec![a_sleeps.clone()], "{page}");
    let (status, page) = get("tasks?upstream=b".into()).await;
    assert_eq!(status, 200, "{page}");
    let mut b_tasks = vec![b_sleeps.clone(), b_echo.clone()];
    b_tasks.sort();
    assert_eq!(listed_ids(&page), b_tasks, "{page}");
    // The other filters still apply beside `upstream`.
    let (_, page) = get("tasks?status=working&upstream=b".into()).await;
    assert_eq!(listed_ids(&page), vec![b_sleeps.clone()], "{page}");
    // A task is found under its own upstream only.
    let (status, shown) = get(format!("tasks/{a_sleeps}?upstream=a")).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["tool"], "sleep", "{shown}");
    let (status, shown) = get(format!("tasks/{a_sleeps}?upstream=b")).await;
    assert_eq!(status, 404, "{shown}");

    // An unknown upstream: 404 naming the upstreams; none named, with several: 400.
    let (status, body) = get("tasks?upstream=zz".into()).await;
    assert_eq!(status, 404, "{body}");
    let text = body.to_string();
    assert!(text.contains("zz") && text.contains("a, b"), "{body}");
    let (status, body) = get("tasks".into()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("a, b"), "{body}");
    let (status, _) = get("instances".into()).await;
    assert_eq!(status, 400);

    // The CLI picks the upstream the same way (`--upstream`, before or after the
    // subcommand), and says what to do without it.
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mcp-task-gateway"))
            .arg("admin")
            .args(["--url", &format!("http://{listen}")])
            .args(["--token-file", token_file.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    };
    for (args, expected) in [
        (
            &["--upstream", "a", "--json", "tasks", "list"][..],
            vec![a_sleeps.clone()],
        ),
        (&["--json", "tasks", "list", "--upstream", "b"][..], b_tasks),
    ] {
        let output = cli(args);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let page: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(listed_ids(&page), expected, "{args:?}: {page}");
    }
    let output = cli(&["--json", "tasks", "list"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("400") && stderr.contains("a, b"),
        "{stderr}"
    );

    // A cancel through the right upstream reaches the caller's task.
    let url = format!("{admin}/tasks/{b_sleeps}/cancel?upstream=b");
    let (status, body) = crate::common::admin::request("POST", &url, ADMIN_TOKEN).await;
    assert_eq!(status, 200, "{body}");
    on_b.wait_status(&b_sleeps, "cancelled").await;
    assert_eq!(on_a.get_task(&a_sleeps).await["status"], "working");
}

// ---------------------------------------------------------------------------------
// Each client generation on a named path
// ---------------------------------------------------------------------------------

/// The TypeScript SDK 1.x (a 2025-11-25 session client with tasks), rmcp 3.x (a
/// 2026-07-28 client with the extension) and the Python SDK 2.x (2026-07-28, no
/// extension: a held call answered by MRTR retries), each at a named path, each seeing
/// that path's upstream only.
#[tokio::test]
async fn each_client_generation_works_on_a_named_path() {
    use crate::bridged_clients::python_client;
    use crate::rmcp_client::{connect, poll_payload, start};
    use crate::session_tasks::{line, ts_client_with};
    use rmcp::model::{CallToolResult, TaskPayload};

    let (_plain, plain_url) = start_plain_server();
    let (_everything, everything_url) = start_everything();
    let (_gateway, base) = start_gateway(
        &format!("plain={plain_url}"),
        &["--upstream", &format!("everything={everything_url}")],
    );
    let plain = format!("{base}/plain");
    let everything = format!("{base}/everything");

    // TypeScript SDK 1.x: plain's tools, and a task whose elicitation reaches the
    // client on its tasks/result stream.
    let plan = json!({"url": plain, "steps": [
        {"do": "listTools"},
        {"do": "callToolStream", "name": "ask_name", "task": {}},
    ]});
    let lines = tokio::task::spawn_blocking(move || ts_client_with(plan))
        .await
        .unwrap();
    let tools = line(&lines, "tools")["tools"].as_object().unwrap();
    assert!(
        tools.contains_key("lookup") && !tools.contains_key("get-sum"),
        "{tools:?}"
    );
    let created = &line(&lines, "taskCreated")["taskCreated"];
    let elicited = line(&lines, "elicited");
    assert_eq!(
        elicited["meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        created["taskId"]
    );
    assert_eq!(
        line(&lines, "result")["result"]["content"][0]["text"],
        "Hello, Ada!"
    );

    // rmcp 3.x at the everything path: server-everything's echo as a task.
    let client = connect(&everything).await;
    let task_id = start(&client, "echo", json!({"message": "from rmcp"})).await;
    let payload = poll_payload(&client, &task_id, |p| {
        matches!(p, TaskPayload::Completed { .. })
    })
    .await;
    let TaskPayload::Completed { result } = payload else {
        unreachable!()
    };
    let result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(
        serde_json::to_value(&result.content).unwrap()[0]["text"],
        "Echo: from rmcp"
    );
    // The same id at the plain path is unknown to rmcp too.
    let other = connect(&plain).await;
    assert!(
        other
            .get_task(rmcp::model::GetTaskParams::new(task_id.clone()))
            .await
            .is_err(),
        "a task of /mcp/everything was found at /mcp/plain"
    );

    // Python SDK 2.x, no extension: an elicitation bridged with MRTR rounds, on each
    // path with that path's tool.
    let (plain_for_python, everything_for_python) = (plain.clone(), everything.clone());
    let (named, elicited) = tokio::task::spawn_blocking(move || {
        let named = python_client(
            &plain_for_python,
            "ask_name",
            json!({}),
            &["--elicit", r#"{"name": "Ada"}"#],
        );
        let elicited = python_client(
            &everything_for_python,
            "trigger-elicitation-request",
            json!({}),
            &["--elicit", r#"{"name": "Grace Hopper", "check": true}"#],
        );
        (named, elicited)
    })
    .await
    .unwrap();
    assert_eq!(
        named["result"]["content"][0]["text"], "Hello, Ada!",
        "{named}"
    );
    assert_eq!(named["asked"], json!(["elicitation/create"]));
    assert!(
        elicited["result"].to_string().contains("Grace Hopper"),
        "{elicited}"
    );
}

/// A held call's `requestState` names its path's world (on a shared Redis): retried at another path (in
/// front of the very same server, by the same caller) it resumes nothing there, and it
/// still resumes the call at its own path.
#[tokio::test]
async fn a_held_calls_request_state_is_bound_to_its_path() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, base) = start_gateway(
        &format!("a={upstream_url}"),
        &[
            "--upstream",
            &format!("b={upstream_url}"),
            "--request-state-key",
            STATE_KEY,
            "--redis",
            &redis.url(),
        ],
    );
    let asking = |name: &str| {
        let mut client = Client::new(
            &format!("{base}/{name}"),
            json!({"elicitation": {"form": {}}}),
        );
        client.authorization = Some("Bearer alice".into());
        client
    };
    let (at_a, at_b) = (asking("a"), asking("b"));
    let asked = at_a.call_tool("ask_name", json!({})).await;
    let asked = asked.result().clone();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let answer = json!({"input-0": accept(json!({"name": "Mallory"}))});

    let elsewhere = at_b
        .retry_tool(
            "ask_name",
            json!({}),
            answer.clone(),
            &asked["requestState"],
        )
        .await;
    assert!(
        !elsewhere.body.to_string().contains("Mallory"),
        "a's held call answered through b: {}",
        elsewhere.body
    );
    // What a requestState naming a call that is not there gets.
    assert_eq!(elsewhere.error_code(), -32602, "{}", elsewhere.body);
    elsewhere.assert_message_mentions("the held call this requestState names is gone");
    let stats = upstream_stats(&upstream_url).await;
    assert!(
        responses_received(&stats).is_empty(),
        "b delivered an answer to a's call: {stats}"
    );

    let answer = json!({"input-0": accept(json!({"name": "Ada"}))});
    let resumed = at_a
        .retry_tool("ask_name", json!({}), answer, &asked["requestState"])
        .await;
    assert_eq!(
        first_text(resumed.result()),
        "Hello, Ada!",
        "{}",
        resumed.body
    );
}

// ---------------------------------------------------------------------------------
// Per-entry settings, and a graceful stop
// ---------------------------------------------------------------------------------

/// What an entry sets (tool policy, upstream credential) applies at its path only, even
/// with both names in front of one server.
#[tokio::test]
async fn an_entrys_settings_apply_to_its_path_only() {
    let (_upstream, upstream_url) = start_plain_server();
    let scratch = Scratch::new();
    let credential = scratch.write("credential", "Bearer service-token\n");
    let config = scratch.write(
        "gateway.toml",
        &format!(
            r#"
[upstreams.strict]
url = "{upstream_url}"
tool-policy = {{ echo = "forbidden", lookup = "required" }}
upstream-credential = "static"
upstream-credential-file = "{credential}"

[upstreams.open]
url = "{upstream_url}"
"#,
            credential = credential.display()
        ),
    );
    let command = gateway_command(&["--config", config.to_str().unwrap()], &[], "warn");
    let (_gateway, base) = spawn_announcing("mcp-task-gateway", command);
    let [strict, open] = [0, 1].map(|n| clients(&base, &["strict", "open"], "alice").remove(n));

    // echo is forbidden as a task at strict only: answered inline there.
    let inline = strict.call_tool("echo", json!({"text": "hi"})).await;
    assert_eq!(inline.result()["resultType"], "complete", "{}", inline.body);
    assert_eq!(first_text(inline.result()), "hi");
    open.start_task("echo", json!({"text": "hi"})).await;

    // The upstream hears strict's own credential, and open's caller's.
    for (client, expected) in [
        (&strict, "found k for Bearer service-token"),
        (&open, "found k for Bearer alice"),
    ] {
        let task_id = client
            .start_task("lookup", json!({"key": "k", "ms": 0}))
            .await;
        let done = client.wait_status(&task_id, "completed").await;
        assert_eq!(first_text(&done["result"]), expected, "{}", client.url);
    }
    // lookup is required as a task at strict: a client without the extension is refused
    // there, and served at open.
    let plain_client = |url: &str| Client::new(url, json!({}));
    let refused = plain_client(&strict.url)
        .call_tool("lookup", json!({"key": "k", "ms": 0}))
        .await;
    assert_eq!(refused.error_code(), -32021, "{}", refused.body);
    let served = plain_client(&open.url)
        .call_tool("lookup", json!({"key": "k", "ms": 0}))
        .await;
    assert_eq!(first_text(served.result()), "found k");
}

/// SIGTERM of an instance hands each path's re-runnable tasks to the other instance,
/// each run again against its own upstream.
#[tokio::test]
async fn a_graceful_stop_hands_each_paths_tasks_over_to_its_own_upstream() {
    let redis = RedisServer::start();
    let (_one, one_url) = start_plain_server();
    let (_two, two_url) = start_plain_server();
    let flags = |id: &'static str| {
        vec![
            "--upstream".to_owned(),
            format!("two={two_url}"),
            "--instance-id".into(),
            id.into(),
            "--redis".into(),
            redis.url(),
            "--lease-timeout-ms".into(),
            LEASE_TIMEOUT_MS.to_string(),
            "--drain-timeout-ms".into(),
            "200".into(),
            "--retry-on-owner-loss".into(),
            "sleep".into(),
            "--request-state-key".into(),
            STATE_KEY.into(),
        ]
    };
    let start = |id: &'static str| {
        let flags = flags(id);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        start_gateway(&format!("one={one_url}"), &flags)
    };
    let (mut a, a_url) = start("gw-a");
    let (_b, b_url) = start("gw-b");
    let on_a = clients(&a_url, &["one", "two"], "alice");
    let on_b = clients(&b_url, &["one", "two"], "alice");
    let one = on_a[0].start_task("sleep", json!({"ms": 3000})).await;
    let two = on_a[1].start_task("sleep", json!({"ms": 3000})).await;
    eventually("both calls to reach their upstreams", || async {
        let one = upstream_stats(&one_url).await;
        let two = upstream_stats(&two_url).await;
        (one["callsInFlight"] == 1 && two["callsInFlight"] == 1).then_some(())
    })
    .await;
    sigterm(&a);
    wait_exit(&mut a);
    for (client, task_id) in [(&on_b[0], &one), (&on_b[1], &two)] {
        let done = wait_terminal(client, task_id).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(first_text(&done["result"]), "slept 3000 ms");
        assert_eq!(owner_of(&redis, task_id), "gw-b");
    }
    // Each upstream ran its own call twice (A's, cut short, and B's), nothing more.
    assert_eq!(upstream_stats(&one_url).await["callsStarted"], 2);
    assert_eq!(upstream_stats(&two_url).await["callsStarted"], 2);
}

/// A `subscriptions/listen` stream hears its own path's tasks only: a task id of another
/// path, named by the same caller, is never reported, while that path's own listener
/// hears it.
#[tokio::test]
async fn a_listen_stream_hears_only_its_paths_tasks() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, base) = start_gateway(
        &format!("a={upstream_url}"),
        &[
            "--upstream",
            &format!("b={upstream_url}"),
            "--redis",
            &redis.url(),
        ],
    );
    let [at_a, at_b] = [0, 1].map(|n| clients(&base, &["a", "b"], "alice").remove(n));
    let a_task = at_a.start_task("sleep", json!({"ms": 300})).await;
    let b_task = at_b.start_task("sleep", json!({"ms": 1500})).await;
    let ids = json!({"taskIds": [a_task, b_task]});
    let mut on_a = at_a
        .listen(1, ids.clone())
        .await
        .unwrap_or_else(|reply| panic!("listen refused at a: {}", reply.body));
    let mut on_b = at_b
        .listen(2, ids)
        .await
        .unwrap_or_else(|reply| panic!("listen refused at b: {}", reply.body));

    /// The task notifications of a stream until `last` is reported completed.
    async fn until_completed(stream: &mut mrtr::SseMessages, last: &str) -> Vec<Value> {
        let mut heard = Vec::new();
        loop {
            let message = stream.next().await.expect("the stream to go on");
            if message["method"] != "notifications/tasks" {
                continue;
            }
            let done =
                message["params"]["taskId"] == last && message["params"]["status"] == "completed";
            heard.push(message["params"].clone());
            if done {
                return heard;
            }
        }
    }
    let heard_at_a = until_completed(&mut on_a, &a_task).await;
    assert!(
        heard_at_a.iter().all(|task| task["taskId"] == a_task),
        "a's stream reported b's task: {heard_at_a:?}"
    );
    // a's task ended before b's: b's stream, read to b's task's end, had its chance.
    at_a.wait_status(&a_task, "completed").await;
    let heard_at_b = until_completed(&mut on_b, &b_task).await;
    assert!(
        heard_at_b.iter().all(|task| task["taskId"] == b_task),
        "b's stream reported a's task: {heard_at_b:?}"
    );
}

/// A session the gateway serves itself (a stdio upstream has none of its own) belongs
/// to its path: its id is unknown at another stdio path, and still good at its own.
#[tokio::test]
async fn a_gateway_served_session_belongs_to_its_path() {
    let scratch = Scratch::new();
    let everything = crate::common::stdio::everything_cmd().replace('"', "\\\"");
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "[upstreams.x]\ncmd = \"{everything}\"\npool = 1\n\
             [upstreams.y]\ncmd = \"{everything}\"\npool = 1\n"
        ),
    );
    let command = gateway_command(&["--config", config.to_str().unwrap()], &[], "warn");
    let (_gateway, base) = spawn_announcing("mcp-task-gateway", command);
    let mut at_x = SessionClient::new(&format!("{base}/x"));
    let initialized = at_x.initialize("2025-11-25", json!({})).await;
    assert!(initialized["serverInfo"].is_object(), "{initialized}");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});

    let mut at_y = at_x.clone();
    at_y.url = format!("{base}/y");
    let refused = at_y.post(list.clone()).await;
    assert_eq!(refused.status(), 404);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Session not found"),
        "{body}"
    );

    let listed = read_messages(at_x.post(list).await).await;
    let listed = listed.iter().find(|m| m["id"] == 1).expect("an answer");
    assert!(tool_names(&listed["result"]).contains("echo"), "{listed}");
}

/// `--max-running-tasks-per-principal` is the gateway's: a caller at its limit on one
/// path is refused on another, and the slot a finished task frees is free on every path.
#[tokio::test]
async fn the_running_task_limit_counts_a_callers_tasks_on_every_path() {
    let (_upstream, upstream_url) = start_plain_server();
    let command = gateway_command(
        &[
            "--upstream",
            &format!("a={upstream_url}"),
            "--upstream",
            &format!("b={upstream_url}"),
        ],
        &["--max-running-tasks-per-principal", "1"],
        "warn",
    );
    let (_gateway, base) = spawn_announcing("mcp-task-gateway", command);
    let [a, b] = <[Client; 2]>::try_from(clients(&base, &["a", "b"], "alice"))
        .ok()
        .unwrap();
    let running = a.start_task("sleep", json!({"ms": 60_000})).await;
    let refused = b.call_tool("echo", json!({"text": "one too many"})).await;
    assert_eq!(refused.error_code(), -31429, "{}", refused.body);
    refused.assert_message_mentions("on this gateway");
    // Another caller is not held back by alice's task.
    let bob = clients(&base, &["b"], "bob").remove(0);
    let other = bob.start_task("echo", json!({"text": "bob"})).await;
    bob.wait_status(&other, "completed").await;
    assert!(a.cancel(&running).await.body.get("error").is_none());
    a.wait_status(&running, "cancelled").await;
    eventually("alice's slot to be free on path b", || async {
        let reply = b.call_tool("echo", json!({"text": "now"})).await;
        (reply.body.get("error").is_none()).then_some(())
    })
    .await;
}
