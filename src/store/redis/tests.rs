//! The Redis store against a real `redis-server` on a free port.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use serde_json::value::RawValue;

use super::*;
use crate::store::{INSTANCE_LOST, WAKE_ALL};

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis_server() -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server must be installed for these tests");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Server { child, port }
}

fn store(server: &Server, instance: &str) -> Arc<RedisStore> {
    RedisStore::connect(RedisSettings {
        target: Target::Server(format!("redis://127.0.0.1:{}", server.port)),
        instance_id: instance.into(),
        wait_replicas: 0,
        timeout: Duration::from_millis(1000),
        max_ttl: Duration::from_secs(60),
    })
    .unwrap()
}

fn record(owner: &str, ttl_ms: u64) -> TaskRecord {
    let now = now_ms();
    TaskRecord {
        task_id: uuid::Uuid::new_v4().to_string(),
        principal: "alice".into(),
        owner: owner.into(),
        status: TaskStatus::Working,
        status_message: None,
        created_at_ms: now,
        last_updated_at_ms: now,
        ttl_ms,
        poll_interval_ms: 1000,
        input_requests: Default::default(),
        answers: Default::default(),
        next_input_key: 0,
        result: None,
        error: None,
        request: serde_json::value::to_raw_value(&json!({"name": "echo"})).unwrap(),
        upstream_state: None,
    }
}

fn elicit() -> InputRequest {
    InputRequest {
        method: "elicitation/create".into(),
        params: Some(json!({"message": "?"})),
    }
}

fn answer(key: &str) -> Map<String, Json> {
    Map::from_iter([(key.to_owned(), json!({"action": "accept"}))])
}

#[tokio::test]
async fn create_get_and_privacy() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let task = record("gw-1", 60_000);
    let id = task.task_id.clone();
    store.create(task.clone()).await.unwrap();
    assert!(matches!(
        store.create(task).await,
        Err(StoreError::Duplicate(_))
    ));
    let got = store.get(&id, "alice").await.unwrap().unwrap();
    assert_eq!(got.status, TaskStatus::Working);
    assert_eq!(got.request.get(), r#"{"name":"echo"}"#);
    assert!(store.get(&id, "mallory").await.unwrap().is_none());
    assert!(store.get("not-a-task", "alice").await.unwrap().is_none());
    assert_eq!(
        store.cancel(&id, "mallory").await.unwrap(),
        CancelOutcome::NotFound
    );
    assert_eq!(
        store
            .accept_input_responses(&id, "mallory", answer("input-0"))
            .await
            .unwrap(),
        UpdateOutcome::NotFound
    );
}

/// Two instances on one Redis, and a task that the first one owns.
async fn two_instances_and_a_task() -> (Server, Arc<RedisStore>, Arc<RedisStore>, String) {
    let server = redis_server();
    let a = store(&server, "gw-1");
    let b = store(&server, "gw-2");
    let task = record("gw-1", 60_000);
    let id = task.task_id.clone();
    a.create(task).await.unwrap();
    (server, a, b, id)
}

/// An MRTR round's requests land in one step: another instance sees all or none.
#[tokio::test]
async fn a_round_of_input_requests_is_added_at_once() {
    let (_server, a, b, id) = two_instances_and_a_task().await;
    let keys = a
        .add_input_requests(&id, vec![elicit(), elicit(), elicit()])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(keys, ["input-0", "input-1", "input-2"]);
    let waiting = b.get(&id, "alice").await.unwrap().unwrap();
    assert_eq!(waiting.status, TaskStatus::InputRequired);
    assert_eq!(waiting.input_requests.len(), 3);
    let next = a.add_input_request(&id, elicit()).await.unwrap();
    assert_eq!(next.as_deref(), Some("input-3"));
}

#[tokio::test]
async fn answers_are_accepted_once_and_taken_once() {
    let (_server, a, b, id) = two_instances_and_a_task().await;
    let k0 = a.add_input_request(&id, elicit()).await.unwrap().unwrap();
    let k1 = a.add_input_request(&id, elicit()).await.unwrap().unwrap();
    assert_eq!((k0.as_str(), k1.as_str()), ("input-0", "input-1"));
    let waiting = b.get(&id, "alice").await.unwrap().unwrap();
    assert_eq!(waiting.status, TaskStatus::InputRequired);
    assert_eq!(waiting.input_requests.len(), 2);

    // The same answer through two instances at once: accepted exactly once.
    let (first, second) = tokio::join!(
        a.accept_input_responses(&id, "alice", answer(&k0)),
        b.accept_input_responses(&id, "alice", answer(&k0)),
    );
    let mut accepted: Vec<_> = [first.unwrap(), second.unwrap()]
        .into_iter()
        .map(|o| match o {
            UpdateOutcome::Accepted { keys, owner } => {
                assert_eq!(owner, "gw-1");
                keys
            }
            UpdateOutcome::NotFound => panic!("task not found"),
        })
        .collect();
    accepted.sort();
    assert_eq!(accepted, vec![vec![], vec![k0.clone()]]);
    assert_eq!(
        b.get(&id, "alice").await.unwrap().unwrap().status,
        TaskStatus::InputRequired
    );
    b.accept_input_responses(&id, "alice", answer(&k1))
        .await
        .unwrap();
    assert_eq!(
        a.get(&id, "alice").await.unwrap().unwrap().status,
        TaskStatus::Working
    );
    let (t1, t2) = tokio::join!(a.take_answers(&id), b.take_answers(&id));
    assert_eq!(t1.unwrap().len() + t2.unwrap().len(), 2);
    assert!(a.take_answers(&id).await.unwrap().is_empty());
    let k2 = a.add_input_request(&id, elicit()).await.unwrap().unwrap();
    assert_eq!(k2, "input-2");
    a.withdraw_input_request(&id, &k2).await.unwrap();
    assert_eq!(
        a.get(&id, "alice").await.unwrap().unwrap().status,
        TaskStatus::Working
    );
}

#[tokio::test]
async fn terminal_states_are_final_and_results_byte_exact() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let task = record("gw-1", 60_000);
    let id = task.task_id.clone();
    store.create(task).await.unwrap();
    store.set_status_message(&id, "half way").await.unwrap();
    store
        .set_upstream_state(&id, Some(json!({"round": 2})))
        .await
        .unwrap();
    let raw = r#"{"content":[],"big":123456789012345678901234567890}"#;
    let result = RawValue::from_string(raw.into()).unwrap();
    assert!(store.finish(&id, Outcome::Completed(result)).await.unwrap());
    let done = store.get(&id, "alice").await.unwrap().unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.result.as_ref().unwrap().get(), raw);
    assert_eq!(done.status_message.as_deref(), Some("half way"));
    assert_eq!(done.upstream_state, Some(json!({"round": 2})));

    let late = Outcome::gateway_failure("late");
    assert!(!store.finish(&id, late).await.unwrap());
    assert_eq!(
        store.cancel(&id, "alice").await.unwrap(),
        CancelOutcome::AlreadyTerminal
    );
    assert!(
        store
            .add_input_request(&id, elicit())
            .await
            .unwrap()
            .is_none()
    );
    store.set_status_message(&id, "ignored").await.unwrap();
    let still = store.get(&id, "alice").await.unwrap().unwrap();
    assert_eq!(still.status, TaskStatus::Completed);
    assert_eq!(still.status_message.as_deref(), Some("half way"));

    // Cancel first, then the upstream's late result is dropped.
    let task = record("gw-1", 60_000);
    let id = task.task_id.clone();
    store.create(task).await.unwrap();
    store.add_input_request(&id, elicit()).await.unwrap();
    assert_eq!(
        store.cancel(&id, "alice").await.unwrap(),
        CancelOutcome::Cancelled {
            owner: "gw-1".into()
        }
    );
    let late = Outcome::Completed(RawValue::from_string("{}".into()).unwrap());
    assert!(!store.finish(&id, late).await.unwrap());
    let cancelled = store.get(&id, "alice").await.unwrap().unwrap();
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    assert!(cancelled.input_requests.is_empty());
}

#[tokio::test]
async fn keys_expire_with_the_task() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let task = record("gw-1", 300);
    let id = task.task_id.clone();
    store.create(task).await.unwrap();
    let mut ttl = redis::cmd("PTTL");
    ttl.arg(task_key(&id));
    let pttl: i64 = parse(store.conn.one("test", ttl).await.unwrap()).unwrap();
    assert!(
        pttl > 300 && pttl <= 300 + KEY_GRACE.as_millis() as i64,
        "{pttl}"
    );
    let mut ttl = redis::cmd("PTTL");
    ttl.arg(owned_key("gw-1"));
    let pttl: i64 = parse(store.conn.one("test", ttl).await.unwrap()).unwrap();
    assert!(pttl > 0, "the owner index has a TTL too: {pttl}");
    let start = Instant::now();
    while store.get(&id, "alice").await.unwrap().is_some() {
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Gone logically; the scripts treat it as gone too.
    assert!(
        store
            .add_input_request(&id, elicit())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !store
            .finish(&id, Outcome::gateway_failure("x"))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_lost_owners_tasks_are_failed_by_the_sweep() {
    let server = redis_server();
    let lost = store(&server, "gw-lost");
    let alive = store(&server, "gw-alive");
    let short = Lease {
        instance: "gw-lost",
        advertise_url: None,
        ttl: Duration::from_millis(200),
    };
    let long = Lease {
        instance: "gw-alive",
        advertise_url: Some("http://10.0.0.2:8080/mcp"),
        ttl: Duration::from_secs(60),
    };
    assert!(!lost.renew_lease(&short).await.unwrap());
    assert!(lost.renew_lease(&short).await.unwrap());
    alive.renew_lease(&long).await.unwrap();
    let mine = record("gw-alive", 60_000);
    alive.create(mine.clone()).await.unwrap();
    let theirs: Vec<TaskRecord> = (0..3).map(|_| record("gw-lost", 60_000)).collect();
    for task in &theirs {
        lost.create(task.clone()).await.unwrap();
    }
    assert!(
        lost.finish(&theirs[2].task_id, Outcome::gateway_failure("done"))
            .await
            .unwrap()
    );

    // The lease still holds: nothing happens.
    assert_eq!(
        alive.fail_tasks_of_lost_owners("gw-alive").await.unwrap(),
        0
    );
    let start = Instant::now();
    let failed = loop {
        let failed = alive.fail_tasks_of_lost_owners("gw-alive").await.unwrap();
        if failed > 0 {
            break failed;
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(failed, 2, "the finished task is left alone");
    for task in &theirs[..2] {
        let got = alive.get(&task.task_id, "alice").await.unwrap().unwrap();
        assert_eq!(got.status, TaskStatus::Failed);
        assert_eq!(got.status_message.as_deref(), Some(INSTANCE_LOST));
        assert_eq!(got.error.as_ref().unwrap().code, -32603);
    }
    let done = alive
        .get(&theirs[2].task_id, "alice")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.status_message.as_deref(), Some("done"));
    let untouched = alive.get(&mine.task_id, "alice").await.unwrap().unwrap();
    assert_eq!(untouched.status, TaskStatus::Working);
    // A second sweep finds nothing left; the lost instance is forgotten.
    assert_eq!(
        alive.fail_tasks_of_lost_owners("gw-alive").await.unwrap(),
        0
    );
    let mut members = redis::cmd("SMEMBERS");
    members.arg(INSTANCES_KEY);
    let members: Vec<String> = parse(alive.conn.one("test", members).await.unwrap()).unwrap();
    assert_eq!(members, vec!["gw-alive".to_owned()]);

    // A graceful stop fails what is still running at once.
    assert_eq!(alive.release_lease("gw-alive").await.unwrap(), 1);
    let stopped = lost.get(&mine.task_id, "alice").await.unwrap().unwrap();
    assert_eq!(
        stopped.status_message.as_deref(),
        Some(crate::store::INSTANCE_STOPPED)
    );
}

#[tokio::test]
async fn wake_ups_reach_the_owner_and_resubscribe() {
    let server = redis_server();
    let owner = store(&server, "gw-1");
    let other = store(&server, "gw-2");
    let mut wakeups = owner.wakeups("gw-1");
    // The first item after subscribing asks to look at everything.
    let first = tokio::time::timeout(Duration::from_secs(5), wakeups.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, WAKE_ALL);
    other.wake("gw-1", "task-a").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), wakeups.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, "task-a");
    // The owner's own wake-ups do not need Redis.
    owner.wake("gw-1", "task-b").await.unwrap();
    assert_eq!(wakeups.recv().await.unwrap(), "task-b");
}

#[tokio::test]
async fn an_unreachable_redis_fails_fast_and_clearly() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = RedisStore::connect(RedisSettings {
        target: Target::Server(format!("redis://127.0.0.1:{port}")),
        instance_id: "gw-1".into(),
        wait_replicas: 0,
        timeout: Duration::from_millis(500),
        max_ttl: Duration::from_secs(60),
    })
    .unwrap();
    let start = Instant::now();
    let err = store.create(record("gw-1", 60_000)).await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(
        err.to_string().starts_with("task store unavailable: "),
        "{err}"
    );
    let err = store
        .get(&uuid::Uuid::new_v4().to_string(), "a")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
}
