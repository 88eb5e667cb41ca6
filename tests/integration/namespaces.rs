//! Two deployments on one Redis: X (two instances in front of one upstream) and Y (one
//! instance in front of another). Each gets its own store namespace from its upstream,
//! so X never sweeps, takes over, fails, shows, lists or cancels Y's tasks, even for a
//! caller with the same Authorization, while X's own takeover works as before.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::common;
use crate::common::*;
use serde_json::{Value, json};
use test_support::RedisServer;

const LEASE_TIMEOUT_MS: &str = "2000";
const TOKEN: &str = "an-operator-token-of-some-length";
const CALLER: &str = "Bearer the-same-caller";

struct Instance {
    proc: Proc,
    client: Client,
    admin: String,
}

fn token_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("mtg-ns-admin-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, TOKEN).unwrap();
    path
}

/// Instance `id` in front of `upstream_url` on `redis`, with its admin API; the store
/// namespace is the default one, derived from the upstream.
fn instance(upstream_url: &str, redis: &RedisServer, id: &str) -> Instance {
    let metrics = format!("127.0.0.1:{}", free_port());
    let token = token_file();
    let redis_url = redis.url();
    let (proc, url) = start_gateway(
        upstream_url,
        &[
            "--instance-id",
            id,
            "--lease-timeout-ms",
            LEASE_TIMEOUT_MS,
            "--redis",
            &redis_url,
            "--metrics-listen",
            &metrics,
            "--admin-token-file",
            token.to_str().unwrap(),
            // A rerun carries the caller's credential, sealed with the deployment's key.
            "--request-state-key",
            "a-shared-secret-of-at-least-32-bytes!",
        ],
    );
    let mut client = Client::with_tasks(&url);
    client.authorization = Some(CALLER.into());
    Instance {
        proc,
        client,
        admin: format!("http://{metrics}/admin"),
    }
}

/// `GET`/`POST` on the admin API: (status, body).
async fn admin(method: &str, url: String) -> (u16, Value) {
    common::admin::request(method, &url, TOKEN).await
}

async fn listed(admin_url: &str, query: &str) -> Vec<String> {
    let (status, body) = admin("GET", format!("{admin_url}/tasks?{query}")).await;
    assert_eq!(status, 200, "{body}");
    common::admin::listed_ids(&body)
}

fn record(redis: &RedisServer, task_id: &str) -> HashMap<String, String> {
    let mut conn = redis.connection();
    let key = task_key(&mut conn, task_id);
    redis::cmd("HGETALL").arg(key).query(&mut conn).unwrap()
}

fn key_exists(redis: &RedisServer, pattern: &str) -> bool {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut redis.connection())
        .unwrap();
    !keys.is_empty()
}

#[tokio::test]
async fn deployments_sharing_a_redis_never_touch_each_others_tasks() {
    let redis = RedisServer::start();
    let (_u1, u1) = start_plain_server();
    let (_u2, u2) = start_plain_server();
    let mut x0 = instance(&u1, &redis, "x-0");
    let x1 = instance(&u1, &redis, "x-1");
    let mut y0 = instance(&u2, &redis, "y-0");

    // Y's tasks: calls that may not run twice, and a read-only one another instance of
    // the same deployment would take over.
    let mut ys = Vec::new();
    for _ in 0..3 {
        ys.push(y0.client.start_task("sleep", json!({"ms": 600000})).await);
    }
    let y_lookup = y0
        .client
        .start_task("lookup", json!({"key": "y", "ms": 600000}))
        .await;
    ys.push(y_lookup.clone());
    // X's: a read-only call on x-0 (taken over by x-1 once x-0 dies), a sleep on x-1.
    let x_lookup = x0
        .client
        .start_task("lookup", json!({"key": "x", "ms": 3000}))
        .await;
    let x_sleep = x1.client.start_task("sleep", json!({"ms": 600000})).await;
    eventually("every call to reach its upstream", || async {
        let in_flight = |stats: Value| stats["callsInFlight"].as_u64();
        (in_flight(upstream_stats(&u1).await) == Some(2)
            && in_flight(upstream_stats(&u2).await) == Some(4))
        .then_some(())
    })
    .await;

    // The two deployments' namespaces differ; the admin API says which.
    let (_, x_instances) = admin("GET", format!("{}/instances", x1.admin)).await;
    let (_, y_instances) = admin("GET", format!("{}/instances", y0.admin)).await;
    let x_ns = x_instances["storeNamespace"].as_str().unwrap().to_owned();
    let y_ns = y_instances["storeNamespace"].as_str().unwrap().to_owned();
    assert!(
        x_ns.starts_with("u-") && y_ns.starts_with("u-"),
        "{x_ns} {y_ns}"
    );
    assert_ne!(x_ns, y_ns);
    assert!(key_exists(&redis, &format!("mtg:{y_ns}:{{{y_lookup}}}")));

    // Y is lost; once its lease lapsed, X loses x-0 too.
    y0.proc.kill();
    eventually("y-0's lease to lapse", || async {
        (!key_exists(&redis, &format!("mtg:{y_ns}:lease:{{y-0}}"))).then_some(())
    })
    .await;
    let y_records: Vec<_> = ys.iter().map(|id| record(&redis, id)).collect();
    x0.proc.kill();
    // x-1 sweeps x-0 (so y-0 too, were they in one namespace) and runs the lookup again.
    let done = x1.client.wait_status(&x_lookup, "completed").await;
    assert_eq!(first_text(&done["result"]), format!("found x for {CALLER}"));
    eventually("x-0 to leave X's instances once swept", || async {
        let (_, body) = admin("GET", format!("{}/instances", x1.admin)).await;
        let names: Vec<&str> = body["instances"]
            .as_array()?
            .iter()
            .filter_map(|i| i["instance"].as_str())
            .collect();
        (names == ["x-1"]).then_some(())
    })
    .await;

    // Y's records are as y-0 left them: not failed, not taken over, not cancelled.
    for (id, before) in ys.iter().zip(&y_records) {
        assert_eq!(&record(&redis, id), before, "task {id} changed");
        assert_eq!(before["owner"], "y-0");
        assert_eq!(before["status"], "working");
    }
    // Nothing of Y ran on X's upstream: x's lookup twice, x's sleep once.
    assert_eq!(upstream_stats(&u1).await["callsStarted"], 3);
    assert_eq!(upstream_stats(&u2).await["callsStarted"], 4);

    // X's clients, with Y's caller's very Authorization, know no such task.
    for id in &ys {
        for reply in [
            x1.client.request("tasks/get", json!({"taskId": id})).await,
            x1.client.cancel(id).await,
            x1.client
                .update(id, json!({"input-0": {"action": "accept"}}))
                .await,
        ] {
            assert_eq!(reply.error_code(), -32602, "{}", reply.body);
        }
    }
    // X's admin API neither lists, shows nor cancels them.
    let principal = y_records[0]["principal"].clone();
    let mut xs = vec![x_lookup.clone(), x_sleep.clone()];
    xs.sort();
    assert_eq!(listed(&x1.admin, "limit=1000").await, xs);
    assert_eq!(
        listed(&x1.admin, "status=working").await,
        [x_sleep.as_str()]
    );
    let by_caller = format!("principal={principal}");
    assert_eq!(listed(&x1.admin, &by_caller).await, xs);
    for id in &ys {
        let (status, body) = admin("GET", format!("{}/tasks/{id}", x1.admin)).await;
        assert_eq!(status, 404, "{body}");
        let (status, body) = admin("POST", format!("{}/tasks/{id}/cancel", x1.admin)).await;
        assert_eq!(status, 404, "{body}");
    }
    // X's own sleep is untouched.
    let mine = x1.client.get_task(&x_sleep).await;
    assert_eq!(mine["status"], "working", "{mine}");
    for (id, before) in ys.iter().zip(&y_records) {
        assert_eq!(&record(&redis, id), before, "task {id} changed");
    }

    // Y comes back under the same id: its own start-up sweep finds its tasks where y-0
    // left them, fails the sleeps and runs the lookup again on Y's upstream.
    let y_again = instance(&u2, &redis, "y-0");
    for id in &ys[..3] {
        let failed = y_again.client.wait_status(id, "failed").await;
        assert_eq!(failed["statusMessage"], "gateway instance lost", "{failed}");
    }
    let resumed = y_again
        .client
        .poll_until(&y_lookup, |t| {
            status_message(t).starts_with("resumed on another gateway instance")
        })
        .await;
    assert_eq!(resumed["status"], "working", "{resumed}");
    assert_eq!(upstream_stats(&u1).await["callsStarted"], 3);
    eventually("Y's lookup to run again on Y's upstream", || async {
        (upstream_stats(&u2).await["callsStarted"] == 5).then_some(())
    })
    .await;
}

#[test]
fn a_bad_namespace_is_refused_at_start_naming_the_flag() {
    let upstream = ["--upstream", "http://127.0.0.1:1/mcp"];
    let by_flag = gateway_command(&upstream, &["--store-namespace", "a*b"], "warn");
    let mut by_env = gateway_command(&upstream, &[], "warn");
    by_env.env("MTG_STORE_NAMESPACE", "changes");
    for (mut command, says) in [(by_flag, "characters"), (by_env, "legacy key layout")] {
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(
            stderr.contains("--store-namespace") && stderr.contains(says),
            "{stderr}"
        );
    }
}
