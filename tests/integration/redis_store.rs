//! Several gateway instances sharing task state in a real Redis (and Redis Cluster):
//! any instance serves any follow-up, answers reach the upstream once, a lost owner's
//! tasks fail within the lease timeout, and Redis outages are survived.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};
use test_support::{RedisCluster, RedisServer};

const LEASE_TIMEOUT_MS: u64 = 2000;

struct Deployment {
    _upstream: Proc,
    upstream_url: String,
    gateways: Vec<Proc>,
    clients: Vec<Client>,
}

/// `count` gateways on one upstream, sharing the store named by `store_flags`, with a
/// lease timeout of [`LEASE_TIMEOUT_MS`].
fn deploy(count: usize, store_flags: &[&str], extra: &[&str]) -> Deployment {
    deploy_with_lease(count, LEASE_TIMEOUT_MS, store_flags, extra)
}

fn deploy_with_lease(
    count: usize,
    lease_ms: u64,
    store_flags: &[&str],
    extra: &[&str],
) -> Deployment {
    let (upstream, upstream_url) = start_plain_server();
    let mut gateways = Vec::new();
    let mut clients = Vec::new();
    let lease = lease_ms.to_string();
    for i in 0..count {
        let id = format!("gw-{i}");
        let mut args = vec!["--instance-id", &id, "--lease-timeout-ms", &lease];
        args.extend_from_slice(store_flags);
        args.extend_from_slice(extra);
        let (gateway, url) = start_gateway(&upstream_url, &args);
        gateways.push(gateway);
        clients.push(Client::with_tasks(&url));
    }
    Deployment {
        _upstream: upstream,
        upstream_url,
        gateways,
        clients,
    }
}

/// The key of the only outstanding input request.
fn only_key(task: &Value) -> String {
    let requests = task["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{task}");
    requests.keys().next().unwrap().clone()
}

fn name_answer(key: &str, name: &str) -> Value {
    json!({key: {"action": "accept", "content": {"name": name}}})
}

/// The single-instance task flows, each follow-up sent to a different instance.
async fn cross_instance_flows(d: &Deployment) {
    let [a, b, c] = [&d.clients[0], &d.clients[1], &d.clients[2]];

    let echo = a.start_task("echo", json!({"text": "hi"})).await;
    let done = b.wait_status(&echo, "completed").await;
    assert_eq!(done["resultType"], "complete");
    assert_eq!(first_text(&done["result"]), "hi");
    assert_eq!(done["result"]["structuredContent"]["echo"]["text"], "hi");
    assert_eq!(c.get_task(&echo).await, done);

    let ask = a.start_task("ask_name", json!({})).await;
    let waiting = b.wait_status(&ask, "input_required").await;
    let key = only_key(&waiting);
    assert_eq!(
        waiting["inputRequests"][&key]["params"]["message"],
        "What is your name?"
    );
    let ack = c.update(&ask, name_answer(&key, "Luca")).await;
    assert_eq!(ack.result(), &gateway_ack());
    // The same answer again, elsewhere: ignored.
    b.update(&ask, name_answer(&key, "Luca")).await.result();
    let done = b.wait_status(&ask, "completed").await;
    assert_eq!(first_text(&done["result"]), "Hello, Luca!");
    assert_eq!(
        responses_received(&upstream_stats(&d.upstream_url).await),
        vec![1]
    );

    let progress = a.start_task("sleep", json!({"ms": 1500, "steps": 5})).await;
    let working = c
        .poll_until(&progress, |t| t["statusMessage"].is_string())
        .await;
    assert!(
        working["statusMessage"].as_str().unwrap().contains("of 5"),
        "{working}"
    );

    let started = upstream_stats(&d.upstream_url).await["callsStarted"].as_u64();
    let slow = a.start_task("sleep", json!({"ms": 60000})).await;
    // Cancelled while its call runs upstream (one cancelled before it left the gateway
    // would never reach the upstream).
    eventually("the sleep runs upstream", || async {
        let now = upstream_stats(&d.upstream_url).await["callsStarted"].as_u64();
        (now > started).then_some(())
    })
    .await;
    let ack = b.cancel(&slow).await;
    assert_eq!(ack.result(), &gateway_ack());
    let cancelled = c.wait_status(&slow, "cancelled").await;
    assert!(cancelled.get("result").is_none());
    eventually("notifications/cancelled upstream", || async {
        let stats = upstream_stats(&d.upstream_url).await;
        (stats["cancelledReceived"].as_array().unwrap().len() == 1).then_some(())
    })
    .await;
    // Terminal states never change, whichever instance is asked.
    c.cancel(&slow).await.result();
    assert_eq!(a.get_task(&slow).await["status"], "cancelled");

    let failing = b.start_task("protocol_error", json!({})).await;
    let failed = a.wait_status(&failing, "failed").await;
    assert_eq!(failed["error"]["code"], -32603);

    b.wait_status(&progress, "completed").await;

    // Tasks stay private to their caller on every instance.
    let mut bob = c.clone();
    bob.authorization = Some("Bearer bob".into());
    let reply = bob.request("tasks/get", json!({"taskId": echo})).await;
    assert_eq!(reply.error_code(), -32602);
    assert_eq!(bob.cancel(&ask).await.error_code(), -32602);
}

#[tokio::test]
async fn any_instance_serves_any_follow_up() {
    let redis = RedisServer::start();
    let url = redis.url();
    let d = deploy(3, &["--redis", &url], &[]);
    cross_instance_flows(&d).await;
}

#[tokio::test]
async fn the_same_answer_sent_to_two_instances_reaches_the_upstream_once() {
    let redis = RedisServer::start();
    let url = redis.url();
    let d = deploy(3, &["--redis", &url], &[]);
    let [a, b, c] = [&d.clients[0], &d.clients[1], &d.clients[2]];
    let rounds = 5;
    for round in 0..rounds {
        let task = a.start_task("ask_name", json!({})).await;
        let key = only_key(&a.wait_status(&task, "input_required").await);
        let answer = name_answer(&key, &format!("n{round}"));
        let (first, second) =
            tokio::join!(b.update(&task, answer.clone()), c.update(&task, answer));
        first.result();
        second.result();
        let done = a.wait_status(&task, "completed").await;
        assert_eq!(first_text(&done["result"]), format!("Hello, n{round}!"));
    }
    let received = responses_received(&upstream_stats(&d.upstream_url).await);
    assert_eq!(
        received,
        vec![1; rounds],
        "one response per upstream request"
    );
}

#[tokio::test]
async fn a_killed_owners_tasks_fail_within_the_lease_timeout() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut d = deploy(3, &["--redis", &url], &[]);
    let owner = d.clients[0].clone();
    let survivor = d.clients[1].clone();
    let mut doomed = Vec::new();
    for _ in 0..20 {
        doomed.push(owner.start_task("sleep", json!({"ms": 60000})).await);
    }
    let mut kept = Vec::new();
    for client in &d.clients[1..] {
        kept.push(client.start_task("sleep", json!({"ms": 60000})).await);
    }
    eventually("every call to reach the upstream", || async {
        let stats = upstream_stats(&d.upstream_url).await;
        (stats["callsInFlight"] == 22).then_some(())
    })
    .await;

    let killed_at = Instant::now();
    d.gateways[0].kill();
    for task_id in &doomed {
        let failed = survivor.wait_status(task_id, "failed").await;
        assert_eq!(failed["statusMessage"], "gateway instance lost", "{failed}");
        assert_eq!(failed["error"]["code"], -32603);
    }
    let elapsed = killed_at.elapsed();
    println!(
        "all 20 tasks of the killed owner failed {} ms after kill -9",
        elapsed.as_millis()
    );
    assert!(
        elapsed < Duration::from_millis(LEASE_TIMEOUT_MS + 5000),
        "took {elapsed:?}"
    );
    // The survivors' own tasks are untouched.
    for task_id in &kept {
        assert_eq!(survivor.get_task(task_id).await["status"], "working");
    }
    // A surviving instance still serves new work.
    let task = survivor.start_task("echo", json!({"text": "after"})).await;
    d.clients[2].wait_status(&task, "completed").await;
}

#[tokio::test]
async fn a_stopping_instance_fails_its_running_tasks_at_once() {
    let redis = RedisServer::start();
    let url = redis.url();
    // A lease timeout far beyond the test's deadline: only the release can explain it.
    // SIGTERM first lets running tasks finish for the drain timeout; these never would.
    let d = deploy_with_lease(
        2,
        120_000,
        &["--redis", &url, "--drain-timeout-ms", "300"],
        &[],
    );
    let owner = &d.clients[0];
    let tasks = [
        owner.start_task("sleep", json!({"ms": 60000})).await,
        owner.start_task("ask_name", json!({})).await,
    ];
    owner.wait_status(&tasks[1], "input_required").await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &d.gateways[0].pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    for task_id in &tasks {
        let failed = d.clients[1].wait_status(task_id, "failed").await;
        assert_eq!(
            failed["statusMessage"], "gateway instance stopped",
            "{failed}"
        );
        assert_eq!(failed["error"]["code"], -32603);
        assert!(failed.get("inputRequests").is_none());
    }
}

#[tokio::test]
async fn a_redis_restart_loses_no_result_and_errors_clearly_meanwhile() {
    let mut redis = RedisServer::start_durable();
    let url = redis.url();
    let d = deploy(1, &["--redis", &url, "--redis-timeout-ms", "1000"], &[]);
    let client = &d.clients[0];
    let before = client.start_task("echo", json!({"text": "before"})).await;
    client.wait_status(&before, "completed").await;
    let task = client.start_task("sleep", json!({"ms": 1000})).await;
    eventually("the call to reach the upstream", || async {
        let stats = upstream_stats(&d.upstream_url).await;
        (stats["callsInFlight"] == 1).then_some(())
    })
    .await;

    redis.kill();
    // During the outage: prompt, clear -32603 errors; the process keeps running.
    let started = Instant::now();
    let reply = client.request("tasks/get", json!({"taskId": task})).await;
    assert_eq!(reply.error_code(), -32603, "{}", reply.body);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("task store unavailable: "), "{message}");
    let reply = client.call_tool("echo", json!({"text": "during"})).await;
    assert_eq!(reply.error_code(), -32603, "{}", reply.body);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The upstream finishes while Redis is down; the runner keeps the result.
    eventually("the upstream call to end during the outage", || async {
        let stats = upstream_stats(&d.upstream_url).await;
        (stats["callsInFlight"] == 0).then_some(())
    })
    .await;
    let reply = client.request("tasks/get", json!({"taskId": task})).await;
    assert_eq!(reply.error_code(), -32603);

    redis.restart();
    let done = client.wait_status(&task, "completed").await;
    assert_eq!(first_text(&done["result"]), "slept 1000 ms");
    assert_eq!(client.get_task(&before).await["status"], "completed");
    // Full service again: new tasks, and input requests answered through the wake-ups.
    let ask = client.start_task("ask_name", json!({})).await;
    let key = only_key(&client.wait_status(&ask, "input_required").await);
    client
        .update(&ask, name_answer(&key, "again"))
        .await
        .result();
    let done = client.wait_status(&ask, "completed").await;
    assert_eq!(first_text(&done["result"]), "Hello, again!");
}

#[tokio::test]
async fn redis_down_at_start_then_up() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let d = deploy(1, &["--redis", &url, "--redis-timeout-ms", "500"], &[]);
    let client = &d.clients[0];
    let reply = client.call_tool("echo", json!({"text": "x"})).await;
    assert_eq!(reply.error_code(), -32603);
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("task store unavailable: "), "{message}");
    let health = reqwest::get(client.url.replace("/mcp", "/healthz"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let _redis = RedisServer::start_on(port);
    let task = eventually("the store to come up", || async {
        let reply = client.call_tool("echo", json!({"text": "up"})).await;
        reply
            .body
            .get("result")
            .map(|r| r["taskId"].as_str().unwrap().to_owned())
    })
    .await;
    client.wait_status(&task, "completed").await;
    let ask = client.start_task("ask_name", json!({})).await;
    let key = only_key(&client.wait_status(&ask, "input_required").await);
    client
        .update(&ask, name_answer(&key, "late"))
        .await
        .result();
    client.wait_status(&ask, "completed").await;
}

#[tokio::test]
async fn the_full_flow_works_on_redis_cluster() {
    let cluster = RedisCluster::start(3);
    let urls = cluster.urls();
    let d = deploy(3, &["--redis-cluster", &urls], &[]);
    cross_instance_flows(&d).await;
    // Tasks really are spread over the nodes (20 more, so chance cannot put them all
    // on one node).
    for i in 0..20 {
        let task = d.clients[i % 3]
            .start_task("echo", json!({"text": i.to_string()}))
            .await;
        d.clients[(i + 1) % 3].wait_status(&task, "completed").await;
    }
    let mut nodes_with_tasks = 0;
    for node in &cluster.nodes {
        // Task keys of the namespace derived from the upstream: `mtg:u-<16 hex>:{<id>}`.
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg("mtg:u-????????????????:{*}")
            .query(&mut node.connection())
            .unwrap();
        nodes_with_tasks += usize::from(!keys.is_empty());
    }
    assert!(nodes_with_tasks >= 2, "tasks on {nodes_with_tasks} node(s)");
}

#[tokio::test]
async fn an_expired_task_is_unknown_and_leaves_no_key() {
    let redis = RedisServer::start();
    let url = redis.url();
    let d = deploy(2, &["--redis", &url], &["--default-ttl-ms", "1000"]);
    let task = d.clients[0]
        .start_task("echo", json!({"text": "brief"}))
        .await;
    let done = d.clients[1].wait_status(&task, "completed").await;
    assert_eq!(done["ttlMs"], 1000);
    let waiting = d.clients[0].start_task("ask_name", json!({})).await;
    d.clients[1].wait_status(&waiting, "input_required").await;

    for task_id in [&task, &waiting] {
        let reply = eventually("the task to expire", || async {
            let reply = d.clients[1]
                .request("tasks/get", json!({"taskId": task_id}))
                .await;
            reply.body.get("error").is_some().then_some(reply)
        })
        .await;
        assert_eq!(reply.error_code(), -32602);
        let reply = d.clients[0]
            .update(task_id, json!({"input-0": {"action": "accept"}}))
            .await;
        assert_eq!(reply.error_code(), -32602);
    }
    let mut conn = redis.connection();
    eventually("every key of the tasks to be gone", || {
        let keys: Vec<String> = ::redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        let left: Vec<String> = keys
            .into_iter()
            .filter(|k| k.contains(task.as_str()) || k.contains(waiting.as_str()))
            .collect();
        let members = owner_index(&mut conn, "gw-0");
        let indexed = members.contains(&task) || members.contains(&waiting);
        async move { (left.is_empty() && !indexed).then_some(()) }
    })
    .await;
    let mut conn = redis.connection();
    let mut ttl_less = Vec::new();
    let keys: Vec<String> = ::redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    for key in keys {
        let ttl: i64 = ::redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        if ttl < 0 {
            ttl_less.push(key);
        }
    }
    assert!(ttl_less.is_empty(), "keys without a TTL: {ttl_less:?}");
}

/// An id left in an instance's index after its task is gone (its runner's clean-up
/// failed: Redis was unreachable at that moment) is dropped by the instance itself, while
/// the task it runs stays: the index's size is the running count operators see.
#[tokio::test]
async fn an_instance_drops_ids_of_gone_tasks_from_its_index() {
    let redis = RedisServer::start();
    let url = redis.url();
    let d = deploy(1, &["--redis", &url], &[]);
    let running = d.clients[0].start_task("sleep", json!({"ms": 60000})).await;
    d.clients[0].wait_status(&running, "working").await;
    let mut conn = redis.connection();
    let indexes: Vec<String> = ::redis::cmd("KEYS")
        .arg("mtg:*:owned:{gw-0}")
        .query(&mut conn)
        .unwrap();
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    let left_behind = "00000000-0000-4000-8000-000000000000";
    let _: i64 = ::redis::cmd("SADD")
        .arg(&indexes[0])
        .arg(left_behind)
        .query(&mut conn)
        .unwrap();
    eventually("the left-behind id to be dropped", || {
        let only_running = owner_index(&mut conn, "gw-0") == [running.as_str()];
        async move { only_running.then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn a_restarted_instance_with_the_same_id_fails_what_it_left_running() {
    let redis = RedisServer::start();
    let url = redis.url();
    // Long lease: only the restart's own clean-up can explain a prompt failure.
    let mut d = deploy_with_lease(2, 120_000, &["--redis", &url], &[]);
    let left = d.clients[0].start_task("sleep", json!({"ms": 60000})).await;
    let other = d.clients[1].start_task("sleep", json!({"ms": 60000})).await;
    d.clients[1].wait_status(&left, "working").await;
    d.gateways[0].kill();
    let (_again, url_again) = start_gateway(
        &d.upstream_url,
        &[
            "--instance-id",
            "gw-0",
            "--lease-timeout-ms",
            "120000",
            "--redis",
            &url,
        ],
    );
    let again = Client::with_tasks(&url_again);
    let failed = again.wait_status(&left, "failed").await;
    assert_eq!(failed["statusMessage"], "gateway instance lost", "{failed}");
    assert_eq!(again.get_task(&other).await["status"], "working");
    let task = again.start_task("echo", json!({"text": "fresh"})).await;
    d.clients[1].wait_status(&task, "completed").await;
}
