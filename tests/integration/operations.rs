//! Operations: Prometheus metrics for one task lifecycle, /readyz, SIGTERM draining,
//! and the config file.

use std::process::{Command, Stdio};
use std::time::Instant;

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn metrics_count_one_task_lifecycle() {
    let (_upstream, upstream_url) = start_plain_server();
    let port = free_port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let (_gateway, url) = start_gateway(&upstream_url, &["--metrics-listen", &metrics_addr]);
    let client = Client::with_tasks(&url);

    let task_id = client.start_task("ask_name", json!({})).await;
    let waiting = client.wait_status(&task_id, "input_required").await;
    let (key, _) = only_input_request(&waiting);
    client
        .update(
            &task_id,
            json!({key: {"action": "accept", "content": {"name": "M"}}}),
        )
        .await
        .result();
    client.wait_status(&task_id, "completed").await;

    let metrics = eventually("the runner to end", || async {
        let metrics = scrape_metrics(port).await;
        (metric_sample(&metrics, "mtg_tasks_in_flight") == Some(0.0)).then_some(metrics)
    })
    .await;
    assert_eq!(
        metric_sample(&metrics, "mtg_tasks_created_total"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric_sample(&metrics, r#"mtg_tasks_finished_total{status="completed"}"#),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric_sample(&metrics, "mtg_input_requests_issued_total"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric_sample(&metrics, "mtg_input_requests_answered_total"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric_sample(&metrics, r#"mtg_requests_total{method="tools/call"}"#),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric_sample(&metrics, r#"mtg_requests_total{method="tasks/update"}"#),
        Some(1.0),
        "{metrics}"
    );
    assert!(metric_sample(&metrics, r#"mtg_requests_total{method="tasks/get"}"#).unwrap() >= 2.0);
    assert_eq!(
        metric_sample(
            &metrics,
            r#"mtg_task_time_to_terminal_seconds_count{status="completed"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    assert!(metric_sample(&metrics, r#"mtg_upstream_errors_total{kind="lost"}"#).is_none());
}

/// With `--idle-poll-us`, tasks run and answer as without it, and the workers account
/// for their parks. Whether a park polled, or was kept from it by the machine's CPU
/// pressure, depends on the machine's load: the test counts every outcome.
#[tokio::test]
async fn a_gateway_that_polls_before_sleeping_serves_tasks_and_counts_its_parks() {
    let (_upstream, upstream_url) = start_plain_server();
    let port = free_port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let (_gateway, url) = start_gateway(
        &upstream_url,
        &["--metrics-listen", &metrics_addr, "--idle-poll-us", "10000"],
    );
    let client = Client::with_tasks(&url);
    for n in 0..5 {
        let text = format!("poll {n}");
        let task_id = client.start_task("echo", json!({"text": text})).await;
        let done = client.wait_status(&task_id, "completed").await;
        assert_eq!(first_text(&done["result"]), text, "{done}");
    }
    let parks = |metrics: &str| {
        ["caught", "missed", "pressure"]
            .iter()
            .filter_map(|o| {
                metric_sample(
                    metrics,
                    &format!(r#"mtg_idle_polls_total{{outcome="{o}"}}"#),
                )
            })
            .sum::<f64>()
    };
    eventually("the workers to count their parks", || async {
        // Requests keep the workers parking and waking, so each adds its tally.
        client.call_tool("echo", json!({"text": "again"})).await;
        let metrics = scrape_metrics(port).await;
        (parks(&metrics) >= 1.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn readyz_follows_the_upstream() {
    let (mut upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let (_lenient, lenient_url) = start_gateway(&upstream_url, &["--readyz-skip-upstream"]);
    let readyz = |base: &str| {
        let url = base.replace("/mcp", "/readyz");
        async move { reqwest::get(url).await.unwrap() }
    };
    assert_eq!(readyz(&url).await.status(), 200);
    upstream.kill();
    let not_ready = readyz(&url).await;
    assert_eq!(not_ready.status(), 503);
    let body: serde_json::Value = not_ready.json().await.unwrap();
    assert!(
        body["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("upstream:"),
        "{body}"
    );
    assert_eq!(readyz(&lenient_url).await.status(), 200);
    let health = reqwest::get(url.replace("/mcp", "/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
}

/// Starts the gateway with its log captured in a file; returns the process, URL, log path.
fn gateway_with_log(upstream: &str, extra: &[&str]) -> (Proc, String, std::path::PathBuf) {
    let log = std::env::temp_dir().join(format!("mtg-{}.log", uuid::Uuid::new_v4()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-task-gateway"));
    command
        .args(["--listen", "127.0.0.1:0", "--upstream", upstream])
        .args(extra)
        .env("RUST_LOG", "info")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    let (proc, url) = spawn_announcing("mcp-task-gateway", command);
    (proc, url, log)
}

#[tokio::test]
async fn sigterm_lets_a_running_task_finish() {
    let (_upstream, upstream_url) = start_plain_server();
    let (mut gateway, url, log) = gateway_with_log(&upstream_url, &["--drain-timeout-ms", "20000"]);
    let client = Client::with_tasks(&url);
    let task_id = client
        .start_task("sleep", json!({"ms": 1500, "steps": 3}))
        .await;
    client
        .poll_until(&task_id, |t| t["statusMessage"].is_string())
        .await;
    sigterm(&gateway);
    let status = wait_exit(&mut gateway);
    assert!(status.success(), "{status:?}");
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("waiting for running tasks to finish"), "{log}");
    assert!(
        log.contains(r#"task finished outcome="completed""#),
        "{log}"
    );
    assert!(!log.contains("failing the tasks still running"), "{log}");
}

#[tokio::test]
async fn sigterm_fails_tasks_still_running_after_the_drain_timeout() {
    let (_upstream, upstream_url) = start_plain_server();
    let (mut gateway, url, log) = gateway_with_log(&upstream_url, &["--drain-timeout-ms", "300"]);
    let client = Client::with_tasks(&url);
    let task_id = client.start_task("sleep", json!({"ms": 60000})).await;
    client
        .poll_until(&task_id, |t| t["statusMessage"].is_string())
        .await;
    let signalled = Instant::now();
    sigterm(&gateway);
    let status = wait_exit(&mut gateway);
    assert!(status.success(), "{status:?}");
    assert!(signalled.elapsed() < std::time::Duration::from_secs(10));
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("failing the tasks still running"), "{log}");
}

#[tokio::test]
async fn config_file_settings_apply() {
    let (_upstream, upstream_url) = start_plain_server();
    let dir = std::env::temp_dir().join(format!("mtg-cfg-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gateway.yaml");
    std::fs::write(
        &path,
        format!(
            "upstream: {upstream_url}\npoll-interval-ms: 250\ntool-policy:\n  echo: forbidden\n"
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-task-gateway"));
    command.args([
        "--listen",
        "127.0.0.1:0",
        "--config",
        path.to_str().unwrap(),
    ]);
    let (_gateway, url) = spawn_announcing("mcp-task-gateway", command);
    let client = Client::with_tasks(&url);
    let inline = client
        .call_tool("echo", json!({"text": "from config"}))
        .await;
    assert_eq!(inline.result()["resultType"], "complete");
    let created = client.call_tool("sleep", json!({"ms": 1})).await;
    assert_eq!(created.result()["pollIntervalMs"], 250);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn readyz_flips_when_redis_stops_and_recovers_when_it_returns() {
    let mut redis = test_support::RedisServer::start();
    let (_upstream, upstream_url) = start_plain_server();
    let redis_url = redis.url();
    let (_gateway, url) = start_gateway(
        &upstream_url,
        &["--redis", &redis_url, "--redis-timeout-ms", "500"],
    );
    let readyz_url = url.replace("/mcp", "/readyz");
    let status = || {
        let readyz_url = readyz_url.clone();
        async move { reqwest::get(readyz_url).await.unwrap().status().as_u16() }
    };
    eventually("ready with Redis up", || async {
        (status().await == 200).then_some(())
    })
    .await;

    redis.kill();
    let body: serde_json::Value = eventually("not ready without Redis", || async {
        let response = reqwest::get(&readyz_url).await.unwrap();
        (response.status() == 503).then_some(response)
    })
    .await
    .json()
    .await
    .unwrap();
    assert!(
        body["problems"][0].as_str().unwrap().starts_with("store:"),
        "{body}"
    );
    // The process keeps running: liveness stays green.
    let health = reqwest::get(url.replace("/mcp", "/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);

    redis.restart();
    eventually("ready again once Redis is back", || async {
        (status().await == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn sigterm_drains_the_connections_of_every_worker_thread() {
    const WORKERS: usize = 3;
    const CALLS: usize = 12;
    let (_upstream, upstream_url) = start_plain_server();
    let port = free_port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let workers = WORKERS.to_string();
    let (mut gateway, url, log) = gateway_with_log(
        &upstream_url,
        &[
            "--worker-threads",
            &workers,
            "--metrics-listen",
            &metrics_addr,
        ],
    );
    let open_on = |metrics: &str, worker: usize| {
        metric_sample(
            metrics,
            &format!("mtg_http_connections_open{{worker=\"{worker}\"}}"),
        )
    };
    let idle = scrape_metrics(port).await;
    for worker in 0..WORKERS {
        assert_eq!(open_on(&idle, worker), Some(0.0), "worker {worker}: {idle}");
    }

    // One connection per client; each call (bridged, no tasks) takes 1.5 s upstream.
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let client = Client::new(&url, json!({}));
            tokio::spawn(async move { client.call_tool("sleep", json!({"ms": 1500})).await })
        })
        .collect();
    eventually("every call to reach the upstream", || async {
        let stats = upstream_stats(&upstream_url).await;
        (stats["callsInFlight"] == CALLS as u64).then_some(())
    })
    .await;
    let busy = scrape_metrics(port).await;
    let per_worker: Vec<f64> = (0..WORKERS)
        .map(|worker| open_on(&busy, worker).unwrap())
        .collect();
    // Handed to the worker with the fewest, whichever accepted them.
    assert_eq!(
        per_worker,
        vec![(CALLS / WORKERS) as f64; WORKERS],
        "{busy}"
    );

    sigterm(&gateway);
    for call in calls {
        let reply = call.await.unwrap();
        assert_eq!(first_text(reply.result()), "slept 1500 ms");
    }
    let status = wait_exit(&mut gateway);
    assert!(status.success(), "{status:?}");
    let log = std::fs::read_to_string(log).unwrap();
    assert!(!log.contains("still open after the grace period"), "{log}");
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn ticks_per_second() -> u64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn out_of_descriptors_the_gateway_pauses_accepting_and_recovers() {
    let (_upstream, upstream_url) = start_plain_server();
    let log_path = std::env::temp_dir().join(format!("mtg-{}.log", uuid::Uuid::new_v4()));
    let metrics_port = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    // A soft limit of 40 descriptors: the idle gateway uses about 15.
    let mut command = Command::new("sh");
    command
        .args(["-c", r#"ulimit -n 40 && exec "$0" "$@""#])
        .arg(env!("CARGO_BIN_EXE_mcp-task-gateway"))
        .args(["--listen", "127.0.0.1:0", "--upstream", &upstream_url])
        .args(["--worker-threads", "1", "--metrics-listen", &metrics_addr])
        .env("RUST_LOG", "info")
        .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()));
    let (gateway, url) = spawn_announcing("mcp-task-gateway", command);
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();

    // More connections than descriptors: the rest wait in the listen backlog.
    let held: Vec<std::net::TcpStream> = (0..60)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    let log = |path: &std::path::Path| std::fs::read_to_string(path).unwrap();
    eventually("the gateway to run out of descriptors", || async {
        log(&log_path)
            .contains("cannot accept connections; pausing")
            .then_some(())
    })
    .await;
    let (ticks_before, since) = (cpu_ticks(gateway.pid()), Instant::now());
    // The pause doubles from 10 ms to its cap of 1 s: the capped one is the 8th.
    eventually("the pause to reach 1 s", || async {
        log(&log_path).contains("pause_ms=1000").then_some(())
    })
    .await;
    let cpu = (cpu_ticks(gateway.pid()) - ticks_before) as f64 / ticks_per_second() as f64;
    let wall = since.elapsed().as_secs_f64();
    let pauses = log(&log_path).matches("cannot accept connections").count();
    assert!(pauses <= 10, "{pauses} failed accepts logged");
    assert!(
        cpu < wall / 4.0,
        "the gateway used {cpu:.2} s of CPU in {wall:.2} s while out of descriptors"
    );

    drop(held);
    let client = Client::new(&url, json!({}));
    let reply = eventually("the gateway to serve again", || async {
        let reply = client
            .try_request(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "back"}}),
            )
            .await?;
        // A body that is not JSON comes back as {"raw": ...}: not served yet.
        Some(reply.body).filter(|body| body.get("raw").is_none())
    })
    .await;
    assert_eq!(first_text(&reply["result"]), "back", "{reply}");
    let failed = metric_sample(
        &scrape_metrics(metrics_port).await,
        "mtg_accept_errors_total",
    )
    .unwrap();
    assert!(
        (1.0..=pauses as f64 + 30.0).contains(&failed),
        "{failed} accept errors counted"
    );
}
