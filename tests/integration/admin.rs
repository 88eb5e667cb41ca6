//! The admin API and the `admin` CLI, as an operator uses them: against one gateway with
//! the memory store, and against three sharing Redis (a task on one instance shown and
//! cancelled through another). Calls without the token are refused, and the client port
//! never serves the API.

use std::process::{Command, Output};

use crate::common;
use crate::common::admin::{self, listed_ids, token_file};
use crate::common::*;
use serde_json::{Value, json};
use test_support::RedisServer;

const TOKEN: &str = "an-operator-token-of-some-length";

/// A gateway with its metrics listener and admin API: (process, client URL, admin URL).
fn start_admin_gateway(upstream_url: &str, extra: &[&str]) -> (Proc, String, String) {
    admin::start_admin_gateway(upstream_url, TOKEN, extra)
}

/// `mcp-task-gateway admin <args>` against `admin_url` with the right token.
fn cli(admin_url: &str, args: &[&str]) -> Output {
    cli_with_token(admin_url, TOKEN, args)
}

fn cli_with_token(admin_url: &str, token: &str, args: &[&str]) -> Output {
    let file = token_file(token);
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-task-gateway"))
        .arg("admin")
        .args(["--url", admin_url, "--token-file", file.to_str().unwrap()])
        .args(args)
        .output()
        .expect("the gateway binary runs");
    let _ = std::fs::remove_file(file);
    output
}

/// The CLI's `--json` output of a call that must succeed.
fn cli_json(admin_url: &str, args: &[&str]) -> Value {
    let mut with_json = vec!["--json"];
    with_json.extend_from_slice(args);
    let output = cli(admin_url, &with_json);
    assert!(
        output.status.success(),
        "admin {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "admin {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn sorted(ids: &[&String]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|id| (*id).clone()).collect();
    ids.sort();
    ids
}

fn client_of(url: &str, who: &str) -> Client {
    let mut client = Client::with_tasks(url);
    client.authorization = Some(format!("Bearer {who}"));
    client
}

#[tokio::test]
async fn an_operator_lists_shows_and_cancels_any_callers_task() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url, admin) = start_admin_gateway(&upstream_url, &[]);
    let alice = client_of(&url, "alice");
    let bob = client_of(&url, "bob");
    let stuck = alice.start_task("sleep", json!({"ms": 60000})).await;
    let done = bob.start_task("echo", json!({"text": "hi"})).await;
    bob.wait_status(&done, "completed").await;

    // Every caller's tasks, and each filter keeps what it says.
    let all = cli_json(&admin, &["tasks", "list"]);
    assert_eq!(listed_ids(&all), sorted(&[&stuck, &done]), "{all}");
    assert!(all["nextCursor"].is_null(), "{all}");
    let working = cli_json(&admin, &["tasks", "list", "--status", "working"]);
    assert_eq!(listed_ids(&working), vec![stuck.clone()], "{working}");
    let echoes = cli_json(&admin, &["tasks", "list", "--tool", "echo"]);
    assert_eq!(listed_ids(&echoes), vec![done.clone()], "{echoes}");
    let old = cli_json(&admin, &["tasks", "list", "--older-than", "1h"]);
    assert_eq!(listed_ids(&old), Vec::<String>::new(), "{old}");

    let shown = cli_json(&admin, &["tasks", "show", &stuck]);
    assert_eq!(shown["status"], "working", "{shown}");
    assert_eq!(shown["tool"], "sleep");
    assert_eq!(shown["ownerLease"], "live");
    assert!(
        shown["expiresAt"].as_str().unwrap().ends_with('Z'),
        "{shown}"
    );
    let principal = shown["principal"].as_str().unwrap().to_owned();
    assert!(!principal.contains("alice"), "a hash, never the credential");
    let alices = cli_json(&admin, &["tasks", "list", "--principal", &principal]);
    assert_eq!(listed_ids(&alices), vec![stuck.clone()], "{alices}");

    // The table is for people: the task, its tool and status are there.
    let table = cli(&admin, &["tasks", "list", "--status", "working"]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(
        table.contains(&stuck) && table.contains("sleep") && table.contains("working"),
        "{table}"
    );

    // Cancelling: the client sees who did it, and the upstream call stops.
    let cancelled = cli(&admin, &["tasks", "cancel", &stuck]);
    assert!(cancelled.status.success());
    assert_eq!(
        String::from_utf8(cancelled.stdout).unwrap().trim(),
        format!("task {stuck} cancelled")
    );
    let seen = alice.get_task(&stuck).await;
    assert_eq!(seen["status"], "cancelled", "{seen}");
    assert_eq!(status_message(&seen), "cancelled by an operator");
    eventually("the upstream hears notifications/cancelled", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["cancelledReceived"].as_array()?.len() == 1 && stats["callsInFlight"] == 0)
            .then_some(())
    })
    .await;
    let again = cli_json(&admin, &["tasks", "cancel", &stuck]);
    assert_eq!(again["result"], "alreadyTerminal", "{again}");

    let instances = cli_json(&admin, &["instances"]);
    let only = &instances["instances"].as_array().unwrap()[..];
    assert_eq!(only.len(), 1, "{instances}");
    assert_eq!(only[0]["self"], true);
    assert_eq!(only[0]["leaseLive"], true);
    assert_eq!(only[0]["runningTasks"], 0, "{instances}");
}

#[tokio::test]
async fn pages_follow_the_cursor_to_every_task() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url, admin) = start_admin_gateway(&upstream_url, &[]);
    let client = client_of(&url, "alice");
    let mut created = Vec::new();
    for n in 0..7 {
        created.push(
            client
                .start_task("echo", json!({"text": n.to_string()}))
                .await,
        );
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut args = vec!["tasks", "list", "--limit", "3"];
        if let Some(cursor) = &cursor {
            args.extend(["--cursor", cursor]);
        }
        let page = cli_json(&admin, &args);
        assert!(page["tasks"].as_array().unwrap().len() <= 3, "{page}");
        seen.extend(listed_ids(&page));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    seen.sort();
    created.sort();
    assert_eq!(seen, created, "every task once");
    let everything = cli_json(&admin, &["tasks", "list", "--limit", "2", "--all"]);
    assert_eq!(listed_ids(&everything), created);
}

#[tokio::test]
async fn the_admin_api_needs_its_token_and_says_what_was_wrong() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url, admin) = start_admin_gateway(&upstream_url, &[]);
    let http = reqwest::Client::new();
    let task = client_of(&url, "alice")
        .start_task("sleep", json!({"ms": 60000}))
        .await;

    let bare = http
        .get(format!("{admin}/admin/tasks"))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
    assert!(
        bare.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer"),
    );
    for wrong in [
        "Bearer nope",
        "Basic YWRtaW46YWRtaW4=",
        &format!("Bearer {TOKEN}x"),
    ] {
        let refused = http
            .get(format!("{admin}/admin/tasks/{task}"))
            .header("authorization", wrong)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401, "{wrong}");
    }
    let refused = cli_with_token(&admin, "not-the-token-at-all", &["tasks", "list"]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(
        stderr.contains("401") && stderr.contains("admin token"),
        "{stderr}"
    );

    // The client port does not serve it, with or without the token.
    let client_base = url.trim_end_matches("/mcp");
    let on_client_port = http
        .get(format!("{client_base}/admin/tasks"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(on_client_port.status(), 404);
    // Prometheus needs no token.
    let metrics = http.get(format!("{admin}/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(
        metrics
            .text()
            .await
            .unwrap()
            .contains("mtg_tasks_created_total")
    );

    // Bad requests: each says what was wrong.
    let cases = [
        ("GET", "tasks?status=stuck".to_owned(), 400, "bad status"),
        (
            "GET",
            "tasks?olderThan=soon".to_owned(),
            400,
            "bad olderThan",
        ),
        ("GET", "tasks?colour=red".to_owned(), 400, "unknown field"),
        (
            "GET",
            "tasks?cursor=garbage".to_owned(),
            400,
            "invalid cursor",
        ),
        (
            "GET",
            format!("tasks/{}", uuid::Uuid::new_v4()),
            404,
            "no task",
        ),
        (
            "POST",
            format!("tasks/{}/cancel", uuid::Uuid::new_v4()),
            404,
            "no task",
        ),
        ("DELETE", format!("tasks/{task}"), 405, "use GET"),
        ("GET", "secrets".to_owned(), 404, "unknown admin path"),
    ];
    for (method, path, status, says) in cases {
        let reply = http
            .request(method.parse().unwrap(), format!("{admin}/admin/{path}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), status, "{method} {path}");
        let body: Value = reply.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().contains(says),
            "{method} {path}: {body}"
        );
    }
    let not_an_id = cli(&admin, &["tasks", "show", "../instances"]);
    assert_eq!(not_an_id.status.code(), Some(1));
    assert!(
        String::from_utf8(not_an_id.stderr)
            .unwrap()
            .contains("not a task id")
    );
    let usage = cli(&admin, &["tasks", "frobnicate"]);
    assert_eq!(usage.status.code(), Some(2));
}

#[tokio::test]
async fn the_admin_api_is_off_unless_configured_and_refuses_a_weak_token() {
    let (_upstream, upstream_url) = start_plain_server();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (_gateway, _url) = start_gateway(&upstream_url, &["--metrics-listen", &listen]);
    let off = reqwest::Client::new()
        .get(format!("http://{listen}/admin/tasks"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(off.status(), 404);
    let body: Value = off.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("--admin-token-file"),
        "{body}"
    );

    let weak = token_file("short");
    let refused = gateway_command(
        &["--upstream", &upstream_url],
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--admin-token-file",
            weak.to_str().unwrap(),
        ],
        "warn",
    )
    .output()
    .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(stderr.contains("at least 16"), "{stderr}");

    let without_listener = gateway_command(
        &["--upstream", &upstream_url],
        &["--admin-token-file", weak.to_str().unwrap()],
        "warn",
    )
    .output()
    .unwrap();
    assert_eq!(without_listener.status.code(), Some(2));
    let stderr = String::from_utf8(without_listener.stderr).unwrap();
    assert!(stderr.contains("--metrics-listen"), "{stderr}");
}

#[tokio::test]
async fn on_redis_any_instance_shows_and_cancels_a_task_running_on_another() {
    let redis = RedisServer::start();
    let redis_url = redis.url();
    let (_upstream, upstream_url) = start_plain_server();
    let mut gateways = Vec::new();
    for i in 0..3 {
        let id = format!("gw-{i}");
        let flags = [
            "--redis",
            &redis_url,
            "--instance-id",
            &id,
            "--lease-timeout-ms",
            "2000",
        ];
        gateways.push(start_admin_gateway(&upstream_url, &flags));
    }
    let on_a = client_of(&gateways[0].1, "alice");
    let running: Vec<String> = {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(on_a.start_task("sleep", json!({"ms": 60000})).await);
        }
        ids
    };
    let on_c = client_of(&gateways[2].1, "carol");
    let elsewhere = on_c.start_task("sleep", json!({"ms": 60000})).await;
    let admin_b = &gateways[1].2.clone();

    let of_a = cli_json(
        admin_b,
        &["tasks", "list", "--owner", "gw-0", "--status", "working"],
    );
    let mut expected = running.clone();
    expected.sort();
    assert_eq!(listed_ids(&of_a), expected, "{of_a}");
    let everyone = cli_json(admin_b, &["tasks", "list", "--all"]);
    assert_eq!(listed_ids(&everyone).len(), 4, "{everyone}");
    let shown = cli_json(admin_b, &["tasks", "show", &running[0]]);
    assert_eq!(shown["owner"], "gw-0");
    assert_eq!(shown["ownerLease"], "live");

    let instances = cli_json(admin_b, &["instances"]);
    let by_name: Vec<(String, bool, u64, bool)> = instances["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["instance"].as_str().unwrap().to_owned(),
                i["leaseLive"].as_bool().unwrap(),
                i["runningTasks"].as_u64().unwrap(),
                i["self"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        by_name,
        [
            ("gw-0".to_owned(), true, 3, false),
            ("gw-1".to_owned(), true, 0, true),
            ("gw-2".to_owned(), true, 1, false),
        ],
        "{instances}"
    );

    // Cancelled through B: A's runner stops the call, A's client sees it.
    let cancelled = cli_json(admin_b, &["tasks", "cancel", &running[0]]);
    assert_eq!(cancelled["result"], "cancelled");
    let seen = on_a.wait_status(&running[0], "cancelled").await;
    assert_eq!(status_message(&seen), "cancelled by an operator");
    eventually("the upstream hears notifications/cancelled", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["cancelledReceived"].as_array()?.len() == 1 && stats["callsInFlight"] == 3)
            .then_some(())
    })
    .await;

    // A is lost: its tasks fail, and it leaves the instance list.
    gateways[0].0.kill();
    eventually("the lost instance's tasks to fail", || async {
        let failed = cli_json(
            admin_b,
            &["tasks", "list", "--owner", "gw-0", "--status", "failed"],
        );
        (listed_ids(&failed).len() == 2).then_some(())
    })
    .await;
    let after = cli_json(admin_b, &["tasks", "show", &running[1]]);
    assert_eq!(after["statusMessage"], "gateway instance lost", "{after}");
    eventually("the lost instance to leave the list", || async {
        let instances = cli_json(admin_b, &["instances"]);
        let names: Vec<&str> = instances["instances"]
            .as_array()?
            .iter()
            .filter_map(|i| i["instance"].as_str())
            .collect();
        (names == ["gw-1", "gw-2"]).then_some(())
    })
    .await;
    let untouched = on_c.get_task(&elsewhere).await;
    assert_eq!(untouched["status"], "working");
}

/// One listing's pages of at most `limit` tasks, through the HTTP API and through the
/// CLI: each page holds at most `limit`, no task comes twice; the ids of each walk.
async fn walk_both_ways(admin: &str, filters: &[(&str, &str)], limit: usize) -> [Vec<String>; 2] {
    let mut by_http = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let limit_text = limit.to_string();
        let mut query = vec![("limit", limit_text.as_str())];
        query.extend_from_slice(filters);
        if let Some(cursor) = &cursor {
            query.push(("cursor", cursor));
        }
        let url = format!(
            "{admin}/admin/tasks?{}",
            serde_urlencoded::to_string(&query).unwrap()
        );
        let (status, page) = common::admin::request("GET", &url, TOKEN).await;
        assert_eq!(status, 200, "{page}");
        let ids = listed_ids(&page);
        assert!(ids.len() <= limit, "{filters:?}, limit {limit}: {page}");
        by_http.extend(ids);
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut by_cli = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let limit_text = limit.to_string();
        let mut args = vec!["tasks", "list", "--limit", &limit_text];
        for (name, value) in filters {
            args.extend([cli_flag(name), value]);
        }
        if let Some(cursor) = &cursor {
            args.extend(["--cursor", cursor]);
        }
        let page = cli_json(admin, &args);
        let ids = listed_ids(&page);
        assert!(ids.len() <= limit, "admin {args:?}: {page}");
        by_cli.extend(ids);
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    for ids in [&by_http, &by_cli] {
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "a task listed twice: {ids:?}");
    }
    [by_http, by_cli]
}

fn cli_flag(query_name: &str) -> &'static str {
    match query_name {
        "status" => "--status",
        "owner" => "--owner",
        "principal" => "--principal",
        other => panic!("no CLI flag for {other}"),
    }
}

/// `count` tasks in all, made through `gateways` in turn by alice and bob: every fourth
/// an `echo` (completed once done), the others a long `sleep` (working).
struct Made {
    all: Vec<String>,
    working: Vec<String>,
    alices: Vec<String>,
    /// Working tasks per gateway, in the order of `gateways`.
    working_on: Vec<Vec<String>>,
}

async fn make_tasks(gateways: &[String], made: &mut Made, count: usize) {
    while made.all.len() < count {
        let n = made.all.len();
        let on = n % gateways.len();
        let who = if n.is_multiple_of(3) { "bob" } else { "alice" };
        let client = client_of(&gateways[on], who);
        let id = if n.is_multiple_of(4) {
            let id = client
                .start_task("echo", json!({"text": n.to_string()}))
                .await;
            client.wait_status(&id, "completed").await;
            id
        } else {
            let id = client.start_task("sleep", json!({"ms": 600000})).await;
            made.working.push(id.clone());
            made.working_on[on].push(id.clone());
            id
        };
        if who == "alice" {
            made.alices.push(id.clone());
        }
        made.all.push(id);
    }
}

/// A listing's filters as query parameters, e.g. `("status", "working")`.
type Filters<'a> = Vec<(&'a str, &'a str)>;

/// Pages of 1, 2 and 100 over 7 and then 50 tasks, in every scope: every page holds at
/// most `limit` tasks, and following the cursor lists each task once.
async fn pages_hold_at_most_limit(gateways: &[(Proc, String, String)], owners: &[&str]) {
    let urls: Vec<String> = gateways.iter().map(|g| g.1.clone()).collect();
    let admin = &gateways[0].2;
    let mut made = Made {
        all: Vec::new(),
        working: Vec::new(),
        alices: Vec::new(),
        working_on: vec![Vec::new(); urls.len()],
    };
    for count in [7, 50] {
        make_tasks(&urls, &mut made, count).await;
        let alice = cli_json(admin, &["tasks", "show", &made.alices[0]]);
        let principal = alice["principal"].as_str().unwrap().to_owned();
        let mut cases: Vec<(Filters, &Vec<String>)> = vec![
            (vec![], &made.all),
            (vec![("status", "working")], &made.working),
            (vec![("principal", principal.as_str())], &made.alices),
        ];
        for (owner, working) in owners.iter().zip(&made.working_on) {
            cases.push((vec![("status", "working"), ("owner", owner)], working));
        }
        for (filters, expected) in &cases {
            let expected = sorted(&expected.iter().collect::<Vec<_>>());
            for limit in [1, 2, 100] {
                for mut ids in walk_both_ways(admin, filters, limit).await {
                    ids.sort();
                    assert_eq!(ids, expected, "{count} tasks, {filters:?}, limit {limit}");
                }
            }
        }
    }
}

#[tokio::test]
async fn pages_hold_at_most_limit_tasks_in_memory() {
    let (_upstream, upstream_url) = start_plain_server();
    let gateway = start_admin_gateway(&upstream_url, &[]);
    pages_hold_at_most_limit(&[gateway], &[]).await;
}

#[tokio::test]
async fn pages_hold_at_most_limit_tasks_on_redis() {
    let redis = RedisServer::start();
    let redis_url = redis.url();
    let (_upstream, upstream_url) = start_plain_server();
    let owners = ["gw-0", "gw-1"];
    let gateways: Vec<_> = owners
        .iter()
        .map(|id| {
            let flags = ["--redis", &redis_url, "--instance-id", id];
            start_admin_gateway(&upstream_url, &flags)
        })
        .collect();
    pages_hold_at_most_limit(&gateways, &owners).await;
}
