//! Redis failures under gateways that keep serving: a Sentinel failover (kill -9 of the
//! primary) under steady load, a restart that lost everything, and 30 s of a Redis that
//! does not answer (SIGSTOP). Every request during a failure either succeeds or gets
//! -32603 "task store unavailable" within the store's time limit; nothing hangs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};
use test_support::redis::SENTINEL_MASTER;
use test_support::tls::TestCa;
use test_support::{RedisSentinel, RedisServer, SentinelProcess};

/// `--redis-timeout-ms` of every gateway here.
const STORE_TIMEOUT_MS: u64 = 1000;

/// What a request may cost beyond the store's limit: the HTTP round trip, the
/// gateway's own work, and the one store operation a failed create takes back (`WAIT`
/// not satisfied: the task is deleted again).
const LATENCY_MARGIN: Duration = Duration::from_millis(STORE_TIMEOUT_MS + 500);

/// How a request ended.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Ok(Value),
    /// -32603 "task store unavailable: ...".
    Unavailable(String),
    Other(Value),
}

fn classify(reply: &Reply) -> Answer {
    if let Some(result) = reply.body.get("result") {
        return Answer::Ok(result.clone());
    }
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    if reply.body["error"]["code"] == -32603 && message.starts_with("task store unavailable") {
        Answer::Unavailable(message.to_owned())
    } else {
        Answer::Other(reply.body.clone())
    }
}

/// One request, timed.
struct Timed {
    method: &'static str,
    answer: Answer,
    latency: Duration,
    at: Instant,
}

async fn timed(client: &Client, method: &'static str, params: Value) -> Timed {
    let at = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(30), client.try_request(method, params))
        .await
        .unwrap_or_else(|_| panic!("{method} hung for 30 s"))
        .unwrap_or_else(|| panic!("{method}: gateway unreachable"));
    Timed {
        method,
        answer: classify(&reply),
        latency: at.elapsed(),
        at,
    }
}

fn gateway_on(upstream_url: &str, id: &str, store: &[&str], extra: &[&str]) -> (Proc, Client) {
    let timeout = STORE_TIMEOUT_MS.to_string();
    let mut args = vec!["--instance-id", id, "--redis-timeout-ms", &timeout];
    args.extend_from_slice(store);
    args.extend_from_slice(extra);
    let (proc, url) = start_gateway(upstream_url, &args);
    (proc, Client::with_tasks(&url))
}

/// Every request either succeeded or got "task store unavailable", within the limit.
fn assert_bounded(log: &[Timed]) {
    let bound = Duration::from_millis(STORE_TIMEOUT_MS) + LATENCY_MARGIN;
    for t in log {
        assert!(
            !matches!(t.answer, Answer::Other(_)),
            "{}: unexpected answer {:?}",
            t.method,
            t.answer
        );
        assert!(
            t.latency <= bound,
            "{} took {:?} (bound {bound:?}): {:?}",
            t.method,
            t.latency,
            t.answer
        );
    }
}

fn is_terminal(task: &Value) -> bool {
    matches!(
        task["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// The shared record of a load run: every request, and the tasks acknowledged.
#[derive(Default)]
struct Load {
    log: Vec<Timed>,
    acked: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_failover_loses_no_acknowledged_task_and_the_gateways_follow_it() {
    // Two replicas: after the promotion the new primary still has one, so creates with
    // --redis-wait-replicas 1 can succeed again without the old primary coming back.
    let mut redis = tokio::task::block_in_place(|| RedisSentinel::start(2));
    let url = redis.url();
    let (_upstream, upstream_url) = start_plain_server();
    let store = ["--redis", url.as_str(), "--redis-wait-replicas", "1"];
    let (_gw0, a) = gateway_on(&upstream_url, "gw-0", &store, &[]);
    let (_gw1, b) = gateway_on(&upstream_url, "gw-1", &store, &[]);

    // Tasks that run through the failover: their runners must record an outcome after.
    let mut spanning = Vec::new();
    for (i, client) in [&a, &b].into_iter().enumerate() {
        for _ in 0..3 {
            let task = client.start_task("sleep", json!({"ms": 4000})).await;
            spanning.push((i, task));
        }
    }

    let load = Arc::new(Mutex::new(Load::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut callers = Vec::new();
    for caller in 0..4usize {
        let (me, other) = if caller.is_multiple_of(2) {
            (a.clone(), b.clone())
        } else {
            (b.clone(), a.clone())
        };
        let load = load.clone();
        let stop = stop.clone();
        callers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                n += 1;
                let tool = if n.is_multiple_of(3) { "sleep" } else { "echo" };
                let arguments = if tool == "sleep" {
                    json!({"ms": 200})
                } else {
                    json!({"text": format!("{caller}-{n}")})
                };
                let create = timed(
                    &me,
                    "tools/call",
                    json!({"name": tool, "arguments": arguments}),
                )
                .await;
                let created = match &create.answer {
                    Answer::Ok(result) => {
                        assert_eq!(result["resultType"], "task", "{result}");
                        result["taskId"].as_str().map(str::to_owned)
                    }
                    _ => None,
                };
                let to_read = {
                    let mut load = load.lock().unwrap();
                    load.log.push(create);
                    if let Some(task) = created {
                        load.acked.push(task);
                    }
                    load.acked.last().cloned()
                };
                if let Some(task) = to_read {
                    let get = timed(&other, "tasks/get", json!({"taskId": task})).await;
                    if let Answer::Ok(result) = &get.answer {
                        assert_eq!(result["taskId"], task.as_str(), "{result}");
                    }
                    load.lock().unwrap().log.push(get);
                }
            }
        }));
    }
    let acked = || load.lock().unwrap().acked.len();
    eventually("steady load before the failover", || async {
        (acked() >= 40).then_some(())
    })
    .await;

    let old = redis.master_port().expect("a master");
    redis.node(old).kill();
    let killed_at = Instant::now();
    let acked_at_kill = acked();
    let new = tokio::task::block_in_place(|| redis.wait_promoted(old, Duration::from_secs(30)));
    let promoted_at = Instant::now();
    println!(
        "primary {old} killed; sentinels promoted {new} after {} ms",
        (promoted_at - killed_at).as_millis()
    );
    // The gateways follow without a restart: creates succeed again, and keep doing so.
    let first_success = eventually("a create acknowledged after the promotion", || async {
        let load = load.lock().unwrap();
        load.log
            .iter()
            .find(|t| {
                t.method == "tools/call" && t.at >= promoted_at && matches!(t.answer, Answer::Ok(_))
            })
            .map(|t| t.at + t.latency)
    })
    .await;
    println!(
        "first create acknowledged {} ms after the promotion",
        first_success
            .saturating_duration_since(promoted_at)
            .as_millis()
    );
    let acked_then = acked();
    eventually("steady load after the failover", || async {
        (acked() >= acked_then + 40).then_some(())
    })
    .await;
    stop.cancel();
    for caller in callers {
        caller.await.unwrap();
    }

    let load = std::mem::take(&mut *load.lock().unwrap());
    let unavailable = load
        .log
        .iter()
        .filter(|t| matches!(t.answer, Answer::Unavailable(_)))
        .count();
    let slowest = load.log.iter().map(|t| t.latency).max().unwrap_or_default();
    println!(
        "{} requests ({} tasks acknowledged, {acked_at_kill} before the kill), {unavailable} answered \"task store unavailable\", slowest {} ms",
        load.log.len(),
        load.acked.len(),
        slowest.as_millis()
    );
    assert_bounded(&load.log);

    // Not one acknowledged task is lost, and each reaches its end (its runner's final
    // write landed on the promoted primary, or was retried until it did).
    for task in &load.acked {
        let done = b.poll_until(task, is_terminal).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    for (i, task) in &spanning {
        let client = if *i == 0 { &a } else { &b };
        let done = client.poll_until(task, is_terminal).await;
        match done["status"].as_str() {
            Some("completed") => assert_eq!(first_text(&done["result"]), "slept 4000 ms"),
            _ => assert!(
                !status_message(&done).is_empty(),
                "failed without a reason: {done}"
            ),
        }
    }
    // Nothing still runs upstream for a task that ended.
    eventually("no call left upstream", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["callsInFlight"] == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn after_a_restart_without_persistence_old_tasks_are_unknown_and_their_calls_stop() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let (_upstream, upstream_url) = start_plain_server();
    let (_gw, client) = gateway_on(&upstream_url, "gw-0", &["--redis", &url], &[]);
    let done = client.start_task("echo", json!({"text": "before"})).await;
    client.wait_status(&done, "completed").await;
    let running = client.start_task("sleep", json!({"ms": 60000})).await;
    eventually("the call to reach the upstream", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["callsInFlight"] == 1).then_some(())
    })
    .await;

    // kill -9, and a fresh empty server on the same port.
    redis.restart();
    for task in [&done, &running] {
        let reply = eventually("Redis reachable again", || async {
            let reply = client.request("tasks/get", json!({"taskId": task})).await;
            (reply.body["error"]["code"] != -32603).then_some(reply)
        })
        .await;
        assert_eq!(reply.error_code(), -32602, "{}", reply.body);
    }
    // The runner notices its task is gone and cancels the call upstream; nothing is
    // written back (no task appears again).
    eventually("the upstream call to be cancelled", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["callsInFlight"] == 0 && stats["cancelledReceived"].as_array()?.len() == 1)
            .then_some(())
    })
    .await;
    let reply = client
        .request("tasks/get", json!({"taskId": running}))
        .await;
    assert_eq!(reply.error_code(), -32602, "{}", reply.body);
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("*{running}*"))
        .query(&mut redis.connection())
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    // New work is served as usual, wake-ups included.
    let ask = client.start_task("ask_name", json!({})).await;
    let waiting = client.wait_status(&ask, "input_required").await;
    let (key, _) = only_input_request(&waiting);
    let answer = json!({key: {"action": "accept", "content": {"name": "fresh"}}});
    client.update(&ask, answer).await.result();
    let finished = client.wait_status(&ask, "completed").await;
    assert_eq!(first_text(&finished["result"]), "Hello, fresh!");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_seconds_of_an_unreachable_redis_lose_no_task() {
    const OUTAGE: Duration = Duration::from_secs(30);
    let redis = RedisServer::start();
    let url = redis.url();
    let (_upstream, upstream_url) = start_plain_server();
    // The lease outlives the outage: no instance takes the other's tasks for lost.
    let store = ["--redis", url.as_str(), "--lease-timeout-ms", "60000"];
    let (_gw0, a) = gateway_on(&upstream_url, "gw-0", &store, &[]);
    let (_gw1, b) = gateway_on(&upstream_url, "gw-1", &store, &[]);
    let finished = a.start_task("echo", json!({"text": "before"})).await;
    b.wait_status(&finished, "completed").await;
    // Calls that end during the outage: their runners must write the outcome after it.
    let running = [
        a.start_task("sleep", json!({"ms": 3000})).await,
        b.start_task("sleep", json!({"ms": 3000})).await,
    ];
    let waiting = a.start_task("ask_name", json!({})).await;
    b.wait_status(&waiting, "input_required").await;

    // Stopped, not dead: connections stay open and nothing answers (a network partition,
    // a frozen VM), the case a connection refusal would not show.
    redis.signal(libc::SIGSTOP);
    let stopped_at = Instant::now();
    let mut log = Vec::new();
    let mut n = 0u32;
    // b polled the finished task to its end, so it may answer it from memory until it
    // notices the outage (its first failed operation); a never read it finished.
    let mut b_noticed = false;
    let mut from_memory = 0;
    while stopped_at.elapsed() < OUTAGE {
        n += 1;
        let (client, on_b) = if n.is_multiple_of(2) {
            (&a, false)
        } else {
            (&b, true)
        };
        let get = timed(client, "tasks/get", json!({"taskId": finished})).await;
        match &get.answer {
            Answer::Ok(task) => {
                assert!(
                    on_b && !b_noticed,
                    "answered from memory after a failure: {task}"
                );
                assert_eq!(task["status"], "completed", "{task}");
                assert_eq!(first_text(&task["result"]), "before", "{task}");
                from_memory += 1;
            }
            _ => b_noticed |= on_b,
        }
        log.push(get);
        let call = timed(
            client,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "during"}}),
        )
        .await;
        b_noticed |= on_b;
        log.push(call);
    }
    // The sleeps ended upstream meanwhile.
    assert_eq!(upstream_stats(&upstream_url).await["callsInFlight"], 1);
    redis.signal(libc::SIGCONT);
    let slowest = log.iter().map(|t| t.latency).max().unwrap_or_default();
    println!(
        "{} requests during the {}-s outage, slowest {} ms, {from_memory} finished-task \
         answers from memory",
        log.len(),
        OUTAGE.as_secs(),
        slowest.as_millis()
    );
    assert_bounded(&log);
    assert!(
        log.iter()
            .filter(|t| !matches!(t.answer, Answer::Ok(_)))
            .all(|t| matches!(t.answer, Answer::Unavailable(_))),
        "a request failed otherwise than \"task store unavailable\""
    );
    assert!(
        log.iter()
            .filter(|t| t.method == "tools/call")
            .all(|t| matches!(t.answer, Answer::Unavailable(_))),
        "a call was accepted while Redis was stopped"
    );

    for (task, client) in running.iter().zip([&b, &a]) {
        let done = client.wait_status(task, "completed").await;
        assert_eq!(first_text(&done["result"]), "slept 3000 ms");
    }
    assert_eq!(a.get_task(&finished).await["status"], "completed");
    // The waiting task is still answerable, through either instance.
    let (key, _) = only_input_request(&b.get_task(&waiting).await);
    let answer = json!({key: {"action": "accept", "content": {"name": "after"}}});
    b.update(&waiting, answer).await.result();
    let done = a.wait_status(&waiting, "completed").await;
    assert_eq!(first_text(&done["result"]), "Hello, after!");
    let fresh = b.start_task("echo", json!({"text": "after"})).await;
    a.wait_status(&fresh, "completed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_flow_through_a_tls_sentinel_to_a_tls_primary() {
    let ca = TestCa::new("sentinel");
    let issued = ca.issue("redis");
    let primary = RedisServer::start_tls(&issued.cert, &issued.key, &ca.cert_file());
    let primary_tls = primary.tls_port.expect("a TLS port");
    let sentinel = tokio::task::block_in_place(|| {
        SentinelProcess::start_tls(primary_tls, &issued.cert, &issued.key, &ca.cert_file())
    });
    eventually("the sentinel to know the primary", || {
        let known = sentinel.master_port() == Some(primary_tls);
        async move { known.then_some(()) }
    })
    .await;
    let url = format!(
        "rediss+sentinel://127.0.0.1:{}/{SENTINEL_MASTER}",
        sentinel.tls_port.expect("a TLS port")
    );
    let ca_file = ca.cert_file();
    let store = [
        "--redis",
        url.as_str(),
        "--redis-ca-file",
        ca_file.to_str().unwrap(),
    ];
    let (_upstream, upstream_url) = start_plain_server();
    let (_a, a) = gateway_on(&upstream_url, "gw-a", &store, &[]);
    let (_b, b) = gateway_on(&upstream_url, "gw-b", &store, &[]);
    let echo = a.start_task("echo", json!({"text": "over TLS"})).await;
    assert_eq!(
        first_text(&b.wait_status(&echo, "completed").await["result"]),
        "over TLS"
    );
    // An answer through the other instance: the owner's wake-up subscriber found the
    // primary through the sentinel too.
    let ask = a.start_task("ask_name", json!({})).await;
    let (key, _) = only_input_request(&b.wait_status(&ask, "input_required").await);
    let answer = json!({key: {"action": "accept", "content": {"name": "Tess"}}});
    b.update(&ask, answer).await.result();
    let done = a.wait_status(&ask, "completed").await;
    assert_eq!(first_text(&done["result"]), "Hello, Tess!");
    // The task is on that primary (read over its plain port).
    let mut on_primary = primary.connection();
    let key = task_key(&mut on_primary, &ask);
    let owner: String = ::redis::cmd("HGET")
        .arg(key)
        .arg("owner")
        .query(&mut on_primary)
        .unwrap();
    assert_eq!(owner, "gw-a");
    // Without the CA, neither the sentinel nor the primary is trusted.
    let (_c, c) = gateway_on(&upstream_url, "gw-c", &["--redis", url.as_str()], &[]);
    let reply = c.call_tool("echo", json!({"text": "untrusted"})).await;
    assert_eq!(reply.error_code(), -32603, "{}", reply.body);
    reply.assert_message_mentions("task store unavailable");
}
