//! Tasks outlive their instance: several gateways on a real Redis, one of them killed
//! (kill -9) or stopped (SIGTERM) while its tasks run. Tasks whose call can run again
//! (a read-only tool, a tool the operator names, a 2026-07-28 upstream's MRTR round)
//! are taken over by a live instance and complete; the others fail as before; a call
//! that loses every instance that runs it fails after `--max-takeovers`.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::mrtr::{MrtrUpstream, upstream_calls};
use crate::common::*;
use serde_json::{Value, json};
use test_support::RedisServer;

const LEASE_TIMEOUT_MS: u64 = 2000;

/// Gateway `id` on `upstream_url`, sharing `redis`; its process and client.
fn gateway(upstream_url: &str, redis: &RedisServer, id: &str, extra: &[&str]) -> (Proc, Client) {
    let url = redis.url();
    let lease = LEASE_TIMEOUT_MS.to_string();
    let mut args = vec![
        "--instance-id",
        id,
        "--lease-timeout-ms",
        &lease,
        "--redis",
        &url,
    ];
    args.extend_from_slice(extra);
    let (proc, url) = start_gateway(upstream_url, &args);
    (proc, Client::with_tasks(&url))
}

/// Polls until the task ends; panics if it fails or is cancelled.
async fn wait_completed(client: &Client, task_id: &str) -> Value {
    let task = client
        .poll_until(task_id, |t| {
            matches!(
                t["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
        })
        .await;
    assert_eq!(task["status"], "completed", "{task}");
    task
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

#[tokio::test]
async fn a_killed_owners_rerunnable_tasks_complete_elsewhere_and_the_others_fail() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let metrics: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut gateways = Vec::new();
    let mut clients = Vec::new();
    for (n, port) in metrics.iter().enumerate() {
        let listen = format!("127.0.0.1:{port}");
        let (proc, client) = gateway(
            &upstream_url,
            &redis,
            &format!("gw-{n}"),
            &["--metrics-listen", &listen],
        );
        gateways.push(proc);
        clients.push(client);
    }
    let owner = &clients[0];
    // `lookup` is annotated readOnlyHint by the upstream; `sleep` is not.
    let mut lookups = Vec::new();
    let mut sleeps = Vec::new();
    for n in 0..20 {
        let args = json!({"key": format!("k{n}"), "ms": 8000});
        lookups.push(owner.start_task("lookup", args).await);
        sleeps.push(owner.start_task("sleep", json!({"ms": 60000})).await);
    }
    eventually("every call to reach the upstream", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["callsInFlight"] == 40).then_some(())
    })
    .await;

    let killed_at = Instant::now();
    gateways[0].kill();
    let survivor = &clients[1];
    for task_id in &sleeps {
        let failed = survivor.wait_status(task_id, "failed").await;
        assert_eq!(failed["statusMessage"], "gateway instance lost", "{failed}");
        assert_eq!(failed["error"]["code"], -32603);
    }
    let failed_after = killed_at.elapsed();
    assert!(
        failed_after < Duration::from_millis(LEASE_TIMEOUT_MS + 5000),
        "the non-rerunnable tasks failed only after {failed_after:?}"
    );
    for (n, task_id) in lookups.iter().enumerate() {
        let task = wait_completed(survivor, task_id).await;
        assert_eq!(first_text(&task["result"]), format!("found k{n}"));
    }
    println!(
        "20 sleeps failed {} ms and 20 lookups completed {} ms after kill -9",
        failed_after.as_millis(),
        killed_at.elapsed().as_millis()
    );
    // Each lookup ran twice upstream (the lost run and the resumed one), each sleep once.
    let stats = upstream_stats(&upstream_url).await;
    assert_eq!(stats["callsStarted"], 60, "{stats}");
    // The survivors count what they took over, between them exactly the 20.
    let mut taken = 0.0;
    for port in &metrics[1..] {
        let page = scrape_metrics(*port).await;
        taken +=
            metric_sample(&page, r#"mtg_tasks_taken_over_total{reason="lost"}"#).unwrap_or(0.0);
    }
    assert_eq!(taken, 20.0);
}

/// A 2026-07-28 upstream keeps nothing between rounds: a task in a round resumes on
/// another instance from the round the record holds.
#[tokio::test]
async fn a_2026_task_resumes_in_its_round_on_another_instance() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = MrtrUpstream::Python.start();
    let (mut a, client_a) = gateway(&upstream_url, &redis, "gw-a", &[]);
    let (_b, client_b) = gateway(&upstream_url, &redis, "gw-b", &[]);

    // Killed while waiting for round 2's answer: the question stays, under its key.
    let waiting = client_a.start_task("two_rounds", json!({})).await;
    let round_1 = client_a.wait_status(&waiting, "input_required").await;
    let keys: Vec<&String> = round_1["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    let answers: serde_json::Map<String, Value> = keys
        .iter()
        .map(|key| {
            let message = &round_1["inputRequests"][key.as_str()]["params"]["message"];
            let content = if message == "Your name?" {
                json!({"name": "Ada"})
            } else {
                json!({"color": "green"})
            };
            ((*key).clone(), accept(content))
        })
        .collect();
    client_a
        .update(&waiting, Value::Object(answers))
        .await
        .result();
    let round_2 = client_a
        .poll_until(&waiting, |t| {
            t["status"] == "input_required" && t["inputRequests"].get("input-2").is_some()
        })
        .await;
    assert_eq!(
        round_2["inputRequests"]["input-2"]["params"]["message"],
        "Ada likes green, right?"
    );

    // Killed while the answered round's retry runs upstream (its last round is slow).
    let retrying = client_a
        .start_task("confirm_delete", json!({"path": "/x", "delay_ms": 3000}))
        .await;
    client_a.wait_status(&retrying, "input_required").await;
    client_a
        .update(
            &retrying,
            json!({"input-0": accept(json!({"confirm": true}))}),
        )
        .await
        .result();
    eventually("the retry to reach the upstream", || async {
        (upstream_calls(&upstream_url, "confirm_delete").await == 2).then_some(())
    })
    .await;
    a.kill();

    let resumed = client_b
        .poll_until(&waiting, |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("resumed on another gateway instance"))
        })
        .await;
    assert_eq!(resumed["status"], "input_required", "{resumed}");
    assert_eq!(
        resumed["inputRequests"]["input-2"]["params"]["message"], "Ada likes green, right?",
        "the same question under the same key"
    );
    client_b
        .update(&waiting, json!({"input-2": accept(json!({"ok": true}))}))
        .await
        .result();
    let done = wait_completed(&client_b, &waiting).await;
    assert_eq!(first_text(&done["result"]), "Ada likes green");
    // One call per round; the resumed instance sent only the last one.
    assert_eq!(upstream_calls(&upstream_url, "two_rounds").await, 3);

    let done = wait_completed(&client_b, &retrying).await;
    assert_eq!(first_text(&done["result"]), "deleted /x");
    // The first call, the lost retry, and the same retry again from the other instance.
    assert_eq!(upstream_calls(&upstream_url, "confirm_delete").await, 3);
    assert_eq!(owner_of(&redis, &retrying), "gw-b");
}

#[tokio::test]
async fn a_call_that_loses_every_instance_that_runs_it_fails_after_max_takeovers() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let mut gateways = Vec::new();
    let mut clients = Vec::new();
    for n in 0..4 {
        let (proc, client) = gateway(
            &upstream_url,
            &redis,
            &format!("gw-{n}"),
            &["--max-takeovers", "2"],
        );
        gateways.push(proc);
        clients.push(client);
    }
    let task_id = clients[0]
        .start_task("lookup", json!({"key": "poison", "ms": 600000}))
        .await;
    let mut owners = vec!["gw-0".to_owned()];
    for round in 0..3 {
        let owner = owners.last().unwrap().clone();
        let index: usize = owner.trim_start_matches("gw-").parse().unwrap();
        gateways[index].kill();
        if round == 2 {
            break;
        }
        let next = eventually("another instance to take the task over", || async {
            let now = owner_of(&redis, &task_id);
            (now != owner).then_some(now)
        })
        .await;
        owners.push(next);
    }
    let alive = (0..4)
        .find(|n| !owners.contains(&format!("gw-{n}")))
        .unwrap();
    let failed = clients[alive].wait_status(&task_id, "failed").await;
    let message = failed["statusMessage"].as_str().unwrap();
    assert!(message.contains("taken over 2 times"), "{message}");
    assert_eq!(failed["error"]["code"], -32603);
}

/// A rolling restart: each of three instances is replaced and stopped in turn (SIGTERM
/// with a short drain) while tasks keep coming. Tasks of a tool the operator names are
/// handed over at each stop; every task completes.
#[tokio::test]
async fn a_rolling_restart_loses_no_task() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let flags = [
        "--drain-timeout-ms",
        "200",
        "--retry-on-owner-loss",
        "sleep",
    ];
    let mut gateways = Vec::new();
    let live: Arc<Mutex<Vec<Client>>> = Arc::default();
    for n in 0..3 {
        let (proc, client) = gateway(&upstream_url, &redis, &format!("gw-{n}"), &flags);
        gateways.push(proc);
        live.lock().unwrap().push(client);
    }
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let load = {
        let (live, created, stop) = (live.clone(), created.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.is_cancelled() {
                let client = {
                    let live = live.lock().unwrap();
                    live[n % live.len()].clone()
                };
                n += 1;
                let call = client.try_request(
                    "tools/call",
                    json!({"name": "sleep", "arguments": {"ms": 1500, "steps": 1}}),
                );
                // An instance stopping right now may refuse it: only tasks made count.
                if let Some(reply) = call.await
                    && let Some(task_id) = reply.body["result"]["taskId"].as_str()
                {
                    created.lock().unwrap().push(task_id.to_owned());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    for n in 0..3 {
        let (proc, client) = gateway(&upstream_url, &redis, &format!("gw-{n}-new"), &flags);
        live.lock().unwrap().push(client);
        // Let tasks land on every instance, the one to stop too, before it goes.
        let enough = 10 * (n + 1);
        eventually("tasks to be made before the next stop", || async {
            (created.lock().unwrap().len() >= enough).then_some(())
        })
        .await;
        // The oldest client in the list is the one of the instance stopped now.
        live.lock().unwrap().remove(0);
        sigterm(&gateways[n]);
        wait_exit(&mut gateways[n]);
        gateways.push(proc);
    }
    stop.cancel();
    load.await.unwrap();
    let tasks = created.lock().unwrap().clone();
    assert!(tasks.len() >= 20, "only {} tasks were made", tasks.len());
    let reader = live.lock().unwrap()[0].clone();
    for task_id in &tasks {
        wait_completed(&reader, task_id).await;
    }
    // Some ran twice: they were handed over mid-call.
    let started = upstream_stats(&upstream_url).await["callsStarted"]
        .as_u64()
        .unwrap();
    assert!(
        started > tasks.len() as u64,
        "{started} calls for {} tasks: nothing was handed over",
        tasks.len()
    );
}

/// A task taken over runs again with its caller's credential, which the store holds
/// only sealed with the key every instance shares.
#[tokio::test]
async fn the_rerun_carries_the_callers_credential() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let key = [
        "--request-state-key",
        "a-shared-secret-of-at-least-32-bytes!",
    ];
    let (mut a, mut client_a) = gateway(&upstream_url, &redis, "gw-a", &key);
    let (_b, mut client_b) = gateway(&upstream_url, &redis, "gw-b", &key);
    client_a.authorization = Some("Bearer token-of-alice".into());
    client_b.authorization = Some("Bearer token-of-alice".into());
    let task_id = client_a
        .start_task("lookup", json!({"key": "k", "ms": 3000}))
        .await;
    eventually("the call to reach the upstream", || async {
        (upstream_stats(&upstream_url).await["callsInFlight"] == 1).then_some(())
    })
    .await;
    let mut conn = redis.connection();
    let record: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(task_key(&mut conn, &task_id))
        .query(&mut conn)
        .unwrap();
    assert!(record["resume"].contains("mtgc1."), "{record:?}");
    assert!(
        record.values().all(|v| !v.contains("token-of-alice")),
        "the credential is stored in the clear: {record:?}"
    );
    a.kill();
    let done = wait_completed(&client_b, &task_id).await;
    assert_eq!(
        first_text(&done["result"]),
        "found k for Bearer token-of-alice"
    );
    assert_eq!(owner_of(&redis, &task_id), "gw-b");
}

/// An instance that was only frozen (not dead) and comes back after its tasks moved
/// stops its own runs of them: only the new owner's call goes on.
#[tokio::test]
async fn an_instance_that_comes_back_stops_the_calls_it_lost() {
    let redis = RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let (a, client_a) = gateway(&upstream_url, &redis, "gw-a", &[]);
    let (_b, client_b) = gateway(&upstream_url, &redis, "gw-b", &[]);
    let task_id = client_a
        .start_task("lookup", json!({"key": "k", "ms": 6000}))
        .await;
    eventually("the call to reach the upstream", || async {
        (upstream_stats(&upstream_url).await["callsInFlight"] == 1).then_some(())
    })
    .await;
    let signal = |name: &str| {
        let status = Command::new("kill")
            .args([name, &a.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    eventually("another instance to take the task over", || async {
        (owner_of(&redis, &task_id) == "gw-b").then_some(())
    })
    .await;
    eventually("the re-run to reach the upstream", || async {
        (upstream_stats(&upstream_url).await["callsInFlight"] == 2).then_some(())
    })
    .await;
    signal("-CONT");
    // A's next renewal finds its lease had lapsed: it cancels its own call upstream.
    eventually("the frozen instance to cancel its call", || async {
        let stats = upstream_stats(&upstream_url).await;
        let cancelled = stats["cancelledReceived"].as_array()?.len();
        (cancelled == 1 && stats["callsInFlight"] == 1).then_some(())
    })
    .await;
    let done = wait_completed(&client_b, &task_id).await;
    assert_eq!(first_text(&done["result"]), "found k");
    assert_eq!(owner_of(&redis, &task_id), "gw-b");
    assert_eq!(client_a.get_task(&task_id).await["status"], "completed");
}
