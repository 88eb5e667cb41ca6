//! The Redis store against a real `redis-server` on a free port: the store contract
//! (`contract_tests/`), then what only Redis has (key TTLs, leases, reconnecting).

use std::time::{Duration, Instant};

use test_support::{RedisServer, free_port};

use super::*;
use crate::contract_tests::{self, Subject, record};
use crate::{
    Changes, INSTANCE_LOST, INSTANCE_STOPPED, Scope, Store, TaskChange, TaskInspection, WAKE_ALL,
};

fn redis_server() -> RedisServer {
    RedisServer::start()
}

/// The namespace of every store here but the ones a test names itself.
const NAMESPACE: &str = "test";

fn settings(port: u16, instance: &str, timeout: Duration) -> RedisSettings {
    RedisSettings {
        namespace: StoreNamespace::Named(NAMESPACE.into()),
        ca_cert: None,
        target: Target::Server(format!("redis://127.0.0.1:{port}")),
        instance_id: instance.into(),
        wait_replicas: 0,
        timeout,
        max_ttl: Duration::from_secs(60),
        terminal_cache_bytes: 1 << 20,
    }
}

fn store(server: &RedisServer, instance: &str) -> Arc<RedisStore> {
    RedisStore::connect(settings(server.port, instance, Duration::from_secs(1))).unwrap()
}

/// One Redis, and each gateway instance its own store on it.
impl Subject for RedisServer {
    fn instance(&self, id: &str) -> Store {
        Store::new(store(self, id))
    }
}

contract_tests::suite!(redis_server());

async fn query<T: redis::FromRedisValue>(store: &RedisStore, cmd: redis::Cmd) -> T {
    parse(store.conn.one("test", cmd).await.unwrap()).unwrap()
}

/// A key's `PTTL`, in ms.
async fn ttl_ms(store: &RedisStore, key: String) -> i64 {
    let mut cmd = redis::cmd("PTTL");
    cmd.arg(key);
    query(store, cmd).await
}

/// The members of a set, sorted.
async fn members(store: &RedisStore, key: String) -> Vec<String> {
    let mut cmd = redis::cmd("SMEMBERS");
    cmd.arg(key);
    let mut members: Vec<String> = query(store, cmd).await;
    members.sort();
    members
}

#[tokio::test]
async fn the_task_key_and_its_owner_index_expire() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let mut task = record("gw-1");
    task.ttl_ms = 300;
    let id = task.task_id.clone();
    store.create(task).await.unwrap();
    let pttl = ttl_ms(&store, store.keys.task(&id)).await;
    assert!(
        pttl > 300 && pttl <= 300 + KEY_GRACE.as_millis() as i64,
        "{pttl}"
    );
    let pttl = ttl_ms(&store, store.keys.owned("gw-1")).await;
    assert!(pttl > 0, "the owner index has a TTL too: {pttl}");
}

#[tokio::test]
async fn a_short_lived_task_does_not_cut_short_its_owners_index() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let long_lived = record("gw-1");
    assert_eq!(long_lived.ttl_ms, 60_000, "the record this test expects");
    let long_id = long_lived.task_id.clone();
    store.create(long_lived).await.unwrap();
    let mut short_lived = record("gw-1");
    short_lived.ttl_ms = 300;
    let short_id = short_lived.task_id.clone();
    store.create(short_lived).await.unwrap();
    let pttl = ttl_ms(&store, store.keys.owned("gw-1")).await;
    assert!(
        pttl > 50_000,
        "the owner index outlives the first task: {pttl} ms"
    );
    // The runner lets go of the short-lived one at its TTL; the other stays indexed.
    store.let_go_expired(&short_id).await.unwrap();
    assert_eq!(
        members(&store, store.keys.owned("gw-1")).await,
        vec![long_id]
    );
}

#[tokio::test]
async fn tidying_the_own_index_drops_only_ids_nobody_runs_whose_task_is_gone() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let live = record("gw-1");
    let live_id = live.task_id.clone();
    store.create(live).await.unwrap();
    // Left behind (a runner's clean-up failed), and one whose runner is about to create it.
    let (left, creating) = ("left-behind", "being-created");
    let mut add = redis::cmd("SADD");
    add.arg(store.keys.owned("gw-1")).arg(left).arg(creating);
    let _: i64 = query(&store, add).await;

    let running = |id: &str| id == creating;
    let mut cursor = 0;
    let mut dropped = 0;
    loop {
        let (next, step) = store.tidy_own_index(cursor, &running).await.unwrap();
        dropped += step;
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(dropped, 1);
    let mut expected = vec![live_id, creating.to_owned()];
    expected.sort();
    assert_eq!(members(&store, store.keys.owned("gw-1")).await, expected);
}

#[tokio::test]
async fn an_owner_index_made_by_a_takeover_has_a_ttl() {
    let server = redis_server();
    let lost = store(&server, "gw-lost");
    let task = record("gw-lost");
    let id = task.task_id.clone();
    lost.create(task).await.unwrap();
    let taker = store(&server, "gw-taker");
    let takeover = crate::Takeover {
        from: "gw-lost",
        to: "gw-taker",
        message: "resumed",
        counts: true,
        max_takeovers: 3,
        keep_round: false,
        exhausted: Outcome::gateway_failure("too often"),
    };
    let adopted = taker.take_over(&[id], &takeover).await.unwrap();
    assert!(matches!(adopted[..], [crate::Adoption::Adopted(_)]));
    let pttl = ttl_ms(&taker, taker.keys.owned("gw-taker")).await;
    assert!(pttl > 50_000, "the new owner's index has a TTL: {pttl} ms");
}

#[tokio::test]
async fn a_create_leaves_no_staged_key_and_a_duplicate_leaves_the_first_task_as_it_was() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let first = record("gw-1");
    let id = first.task_id.clone();
    store.create(first).await.unwrap();
    let mut again = record("gw-2");
    again.task_id = id.clone();
    assert!(matches!(
        store.create(again).await,
        Err(StoreError::Duplicate(_))
    ));
    let mut staged = redis::cmd("EXISTS");
    staged.arg(store.keys.task_staged(&id));
    assert_eq!(query::<i64>(&store, staged).await, 0);
    let mut owner = redis::cmd("HGET");
    owner.arg(store.keys.task(&id)).arg("owner");
    assert_eq!(query::<String>(&store, owner).await, "gw-1");
}

#[tokio::test]
async fn scripts_redis_lost_are_loaded_again() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let task = record("gw-1");
    let id = task.task_id.clone();
    store.create(task).await.unwrap();
    let mut flush = redis::cmd("SCRIPT");
    flush.arg("FLUSH");
    let _: String = query(&store, flush).await;
    let request = InputRequest {
        method: "roots/list".into(),
        params: None,
    };
    let key = store.add_input_request(&id, request).await.unwrap();
    assert_eq!(key.as_deref(), Some("input-0"));
}

#[tokio::test]
async fn a_lost_subscription_is_restored_and_every_task_looked_at() {
    let server = redis_server();
    let owner = store(&server, "gw-1");
    let other = store(&server, "gw-2");
    let mut wakeups = owner.wakeups("gw-1");
    let next = async |wakeups: &mut WakeReceiver| {
        tokio::time::timeout(Duration::from_secs(5), wakeups.recv())
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(next(&mut wakeups).await, WAKE_ALL);
    let mut kill = redis::cmd("CLIENT");
    kill.arg("KILL").arg("TYPE").arg("pubsub");
    let killed: i64 = query(&other, kill).await;
    assert_eq!(killed, 1);
    // What was published meanwhile is lost, so the owner is told to look at everything.
    assert_eq!(next(&mut wakeups).await, WAKE_ALL);
    other.wake("gw-1", "task-a").await.unwrap();
    assert_eq!(next(&mut wakeups).await, "task-a");
}

#[tokio::test]
async fn a_gone_owner_is_found_by_its_lease_and_forgotten_once_swept() {
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
    let mine = record("gw-alive");
    alive.create(mine.clone()).await.unwrap();
    let theirs: Vec<TaskRecord> = (0..3).map(|_| record("gw-lost")).collect();
    for task in &theirs {
        lost.create(task.clone()).await.unwrap();
    }
    assert!(
        lost.finish(&theirs[2].task_id, Outcome::gateway_failure("done"))
            .await
            .unwrap()
    );

    // The lease is still live: nobody is gone.
    assert!(alive.gone_instances("gw-alive").await.unwrap().is_empty());
    let start = Instant::now();
    let gone = loop {
        let gone = alive.gone_instances("gw-alive").await.unwrap();
        if !gone.is_empty() {
            break gone;
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        gone,
        vec![GoneInstance {
            instance: "gw-lost".into(),
            handed_over: false
        }]
    );
    let orphans = alive.orphans("gw-lost").await.unwrap();
    assert_eq!(orphans.len(), 2, "the finished task is no orphan");
    let ids: Vec<String> = orphans.iter().map(|t| t.task_id.clone()).collect();
    assert_eq!(
        alive
            .fail_orphans("gw-lost", &ids, INSTANCE_LOST)
            .await
            .unwrap(),
        2
    );
    for task in &theirs[..2] {
        let got = alive.get(&task.task_id, "alice").await.unwrap().unwrap();
        assert_eq!(got.status, TaskStatus::Failed);
        assert_eq!(got.status_message.as_deref(), Some(INSTANCE_LOST));
    }
    let untouched = alive.get(&mine.task_id, "alice").await.unwrap().unwrap();
    assert_eq!(untouched.status, TaskStatus::Working);
    // Its index is empty now: the lost instance is forgotten.
    assert!(alive.orphans("gw-lost").await.unwrap().is_empty());
    alive.forget_if_gone("gw-lost").await.unwrap();
    assert_eq!(
        members(&alive, alive.keys.instances()).await,
        vec!["gw-alive".to_owned()]
    );

    // A graceful stop that hands over leaves its tasks indexed and says so.
    assert_eq!(alive.release_lease("gw-alive", true).await.unwrap(), 0);
    let gone = lost.gone_instances("gw-lost").await.unwrap();
    assert_eq!(
        gone,
        vec![GoneInstance {
            instance: "gw-alive".into(),
            handed_over: true
        }]
    );
    assert_eq!(lost.orphans("gw-alive").await.unwrap().len(), 1);
    // Coming back under the same id takes the mark away.
    alive.renew_lease(&long).await.unwrap();
    assert!(lost.gone_instances("gw-lost").await.unwrap().is_empty());
    // A graceful stop without a hand-over fails what is still running at once.
    assert_eq!(alive.release_lease("gw-alive", false).await.unwrap(), 1);
    let stopped = lost.get(&mine.task_id, "alice").await.unwrap().unwrap();
    assert_eq!(stopped.status_message.as_deref(), Some(INSTANCE_STOPPED));
}

#[tokio::test]
async fn an_unreachable_redis_fails_fast_and_clearly() {
    let port = free_port();
    let store = RedisStore::connect(settings(port, "gw-1", Duration::from_millis(500))).unwrap();
    let start = Instant::now();
    let err = store.create(record("gw-1")).await.unwrap_err();
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

async fn score_of(store: &RedisStore, principal: &str, task_id: &str) -> Option<f64> {
    let mut score = redis::cmd("ZSCORE");
    score.arg(store.keys.by_principal(principal)).arg(task_id);
    query(store, score).await
}

/// Waits for a background ZREM.
async fn until_unlisted(store: &RedisStore, principal: &str, task_id: &str) {
    let start = Instant::now();
    while score_of(store, principal, task_id).await.is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{task_id} still listed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_principals_listing_expires_and_sheds_dead_members() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let live = record("gw-1");
    store.create(live.clone()).await.unwrap();
    let pttl = ttl_ms(&store, store.keys.by_principal("alice")).await;
    assert!(
        pttl > 59_000 && pttl <= 60_000 + KEY_GRACE.as_millis() as i64,
        "{pttl}"
    );

    // Older than the max TTL: trimmed by the next page, though its hash is still there.
    let mut ancient = record("gw-1");
    ancient.created_at_ms -= 70_000;
    store.create(ancient.clone()).await.unwrap();
    // Members without a task: an old one is removed, a young one (maybe a create under
    // way) only skipped; one that is no task id is never read.
    let now = now_ms();
    let old_ghost = uuid::Uuid::new_v4().to_string();
    let young_ghost = uuid::Uuid::new_v4().to_string();
    let mut ghosts = redis::cmd("ZADD");
    ghosts
        .arg(store.keys.by_principal("alice"))
        .arg(now - 20_000)
        .arg(&old_ghost)
        .arg(now)
        .arg(&young_ghost)
        .arg(now - 1_000)
        .arg("mtg:{x}");
    let _: i64 = query(&store, ghosts).await;

    let listed = store.list("alice", None, 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|t| &t.task_id).collect::<Vec<_>>(),
        [&live.task_id]
    );
    assert_eq!(score_of(&store, "alice", &ancient.task_id).await, None);
    until_unlisted(&store, "alice", &old_ghost).await;
    assert!(score_of(&store, "alice", &young_ghost).await.is_some());

    // A cursor the gateway cannot have made lists nothing.
    let odd = ListCursor {
        created_at_ms: now,
        task_id: "x}y".into(),
    };
    assert!(
        store
            .list("alice", Some(&odd), 10)
            .await
            .unwrap()
            .is_empty()
    );

    store.delete(&live.task_id).await.unwrap();
    until_unlisted(&store, "alice", &live.task_id).await;
}

#[tokio::test]
async fn many_tasks_of_one_millisecond_page_through() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let created = now_ms();
    let mut ids = Vec::new();
    for _ in 0..9 {
        let mut task = record("gw-1");
        task.created_at_ms = created;
        ids.push(task.task_id.clone());
        store.create(task).await.unwrap();
    }
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store.list("alice", after.as_ref(), 2).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(ListCursor::after(last));
        seen.extend(page.iter().map(|t| t.task_id.clone()));
        assert!(seen.len() <= ids.len());
    }
    assert_eq!(seen, ids);
}

/// How many of this process's connections Redis counts on the namespace's change channel.
async fn change_listeners(store: &RedisStore) -> i64 {
    let mut numsub = redis::cmd("PUBSUB");
    numsub.arg("NUMSUB").arg(store.keys.changes());
    let (_, count): (String, i64) = query(store, numsub).await;
    count
}

/// An instance whose change receiver is dropped leaves the channel, so Redis stops
/// waking it for changes nobody there reads; the wake-ups' channel on the same
/// connection stays. A receiver taken later hears `WAKE_ALL` first, then every change.
#[tokio::test]
async fn a_dropped_change_receiver_leaves_the_channel_and_a_new_one_rejoins() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let other = store_in(&server, NAMESPACE, "gw-2");
    let mut wakeups = store.wakeups("gw-1");
    assert_eq!(next_of(&mut wakeups).await, WAKE_ALL);
    let change = |task_id: &str| TaskChange {
        task_id: task_id.into(),
        session: None,
        progress: None,
    };
    let mut changes = store.changes();
    assert_eq!(next_of(&mut changes).await.task_id, WAKE_ALL);
    assert_eq!(change_listeners(&store).await, 1);
    other.announce(&change("heard")).await.unwrap();
    assert_eq!(next_of(&mut changes).await.task_id, "heard");

    drop(changes);
    // The next message finds nobody to give it to, and the channel is left (or the
    // periodic check leaves it first).
    let deadline = Instant::now() + Duration::from_secs(15);
    while change_listeners(&store).await != 0 {
        assert!(
            Instant::now() < deadline,
            "the change channel was never left"
        );
        other.announce(&change("unheard")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    other.wake("gw-1", "still-woken").await.unwrap();
    assert_eq!(next_of(&mut wakeups).await, "still-woken");

    let mut changes = store.changes();
    assert_eq!(next_of(&mut changes).await.task_id, WAKE_ALL);
    assert_eq!(change_listeners(&store).await, 1);
    other.announce(&change("heard-again")).await.unwrap();
    assert_eq!(next_of(&mut changes).await.task_id, "heard-again");
}

fn store_in(server: &RedisServer, namespace: &str, instance: &str) -> Arc<RedisStore> {
    let mut settings = settings(server.port, instance, Duration::from_secs(1));
    settings.namespace = StoreNamespace::parse(namespace).unwrap();
    RedisStore::connect(settings).unwrap()
}

async fn next_of<T>(receiver: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), receiver.recv())
        .await
        .expect("a message within 5 s")
        .expect("the channel open")
}

/// Two deployments (and an unprefixed one) on one Redis: neither sees, sweeps, takes over,
/// cancels, lists, wakes nor announces to the other.
#[tokio::test]
async fn namespaces_on_one_redis_never_meet() {
    let server = redis_server();
    let x = store_in(&server, "x", "gw-x");
    let x_peer = store_in(&server, "x", "gw-x2");
    let y = store_in(&server, "y", "gw-y");
    let unprefixed = store_in(&server, "", "gw-l");
    let long = |instance| Lease {
        instance,
        advertise_url: None,
        ttl: Duration::from_secs(60),
    };
    let short = |instance| Lease {
        instance,
        advertise_url: None,
        ttl: Duration::from_millis(100),
    };
    x.renew_lease(&long("gw-x")).await.unwrap();
    y.renew_lease(&short("gw-y")).await.unwrap();
    unprefixed.renew_lease(&short("gw-l")).await.unwrap();
    let mine = record("gw-x");
    x.create(mine.clone()).await.unwrap();
    let theirs = record("gw-y");
    y.create(theirs.clone()).await.unwrap();
    let old = record("gw-l");
    unprefixed.create(old.clone()).await.unwrap();

    // Y's and the unprefixed instance's leases lapse: gone in their own namespaces only.
    let start = Instant::now();
    while y.gone_instances("gw-other").await.unwrap().is_empty()
        || unprefixed
            .gone_instances("gw-other")
            .await
            .unwrap()
            .is_empty()
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "leases never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(x.gone_instances("gw-x").await.unwrap().is_empty());
    assert!(x.orphans("gw-y").await.unwrap().is_empty());
    assert!(x.orphans("gw-l").await.unwrap().is_empty());
    let foreign = [theirs.task_id.clone(), old.task_id.clone()];
    assert_eq!(
        x.fail_orphans("gw-y", &foreign, INSTANCE_LOST)
            .await
            .unwrap(),
        0
    );
    let takeover = Takeover {
        from: "gw-y",
        to: "gw-x",
        message: "resumed",
        counts: true,
        keep_round: false,
        max_takeovers: 2,
        exhausted: Outcome::gateway_failure(INSTANCE_LOST),
    };
    let adoptions = x.take_over(&foreign, &takeover).await.unwrap();
    assert!(
        adoptions.iter().all(|a| matches!(a, Adoption::NotOwned)),
        "{adoptions:?}"
    );

    // Nothing of the others is read, listed or cancelled, by id or by walking.
    for id in &foreign {
        assert!(x.get(id, "alice").await.unwrap().is_none());
        assert!(x.inspect(id).await.unwrap().is_none());
        assert!(matches!(
            x.cancel(id, "alice", "no").await.unwrap(),
            CancelOutcome::NotFound
        ));
    }
    for scope in [
        Scope::All,
        Scope::Unfinished { owner: None },
        Scope::Principal("alice"),
    ] {
        let page = x.scan(scope, None, 100).await.unwrap();
        let ids: Vec<&str> = page.tasks.iter().map(|t| t.task.task_id.as_str()).collect();
        assert_eq!(ids, [mine.task_id.as_str()], "{scope:?}");
    }
    let listed = x.list("alice", None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    let instances = x.instances().await.unwrap();
    let names: Vec<&str> = instances.iter().map(|i| i.instance.as_str()).collect();
    assert_eq!(names, ["gw-x"]);

    // The others' records are as they were.
    for (store, task) in [(&y, &theirs), (&unprefixed, &old)] {
        let seen = store.get(&task.task_id, "alice").await.unwrap().unwrap();
        assert_eq!(
            (seen.status, &seen.owner),
            (TaskStatus::Working, &task.owner)
        );
        assert_eq!(seen.status_message, None);
    }

    // Wake-ups and changes stay in the namespace: Y's message to "gw-x", published
    // first, never arrives; X's own, published after it, does.
    let mut wakeups = x.wakeups("gw-x");
    assert_eq!(next_of(&mut wakeups).await, WAKE_ALL);
    let mut changes = x.changes();
    assert_eq!(next_of(&mut changes).await.task_id, WAKE_ALL);
    y.wake("gw-x", "from-y").await.unwrap();
    unprefixed.wake("gw-x", "from-unprefixed").await.unwrap();
    x_peer.wake("gw-x", "from-x").await.unwrap();
    assert_eq!(next_of(&mut wakeups).await, "from-x");
    let change = |task_id: &str| TaskChange {
        task_id: task_id.into(),
        session: None,
        progress: None,
    };
    y.announce(&change("from-y")).await.unwrap();
    unprefixed
        .announce(&change("from-unprefixed"))
        .await
        .unwrap();
    x_peer.announce(&change("from-x")).await.unwrap();
    assert_eq!(next_of(&mut changes).await.task_id, "from-x");
}

/// A finished task read once through `store`, then deleted from Redis behind its back:
/// from then on only memory can answer it.
async fn remembered_task(store: &RedisStore) -> String {
    let task = record("gw-1");
    let id = task.task_id.clone();
    store.create(task).await.unwrap();
    let completed = Outcome::Completed(contract_tests::raw(r#"{"content":[]}"#));
    assert!(store.finish(&id, completed).await.unwrap());
    let read = store
        .get(&id, contract_tests::ALICE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.status, TaskStatus::Completed);
    delete_behind(store, &id).await;
    id
}

/// Whether the task's principal gets it.
async fn found(store: &RedisStore, task_id: &str) -> bool {
    store
        .get(task_id, contract_tests::ALICE)
        .await
        .unwrap()
        .is_some()
}

async fn delete_behind(store: &RedisStore, task_id: &str) {
    let mut del = redis::cmd("DEL");
    del.arg(store.keys.task(task_id));
    let deleted: i64 = query(store, del).await;
    assert_eq!(deleted, 1);
}

/// Subscribed, so the link to Redis is up (the cache serves nothing before that).
async fn subscribed(store: &RedisStore) -> WakeReceiver {
    let mut wakeups = store.wakeups("gw-1");
    assert_eq!(next_wakeup(&mut wakeups).await, WAKE_ALL);
    wakeups
}

async fn next_wakeup(wakeups: &mut WakeReceiver) -> String {
    tokio::time::timeout(Duration::from_secs(5), wakeups.recv())
        .await
        .expect("a wake-up within 5 s")
        .expect("the subscription open")
}

#[tokio::test]
async fn finished_tasks_are_answered_from_memory_and_only_to_their_principal() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let elsewhere = store_in(&server, NAMESPACE, "gw-2");
    let _wakeups = subscribed(&store).await;
    let id = remembered_task(&store).await;

    let again = store.get(&id, contract_tests::ALICE).await.unwrap();
    assert_eq!(
        again.expect("answered from memory").status,
        TaskStatus::Completed
    );
    assert!(!found(&elsewhere, &id).await);
    assert!(store.get(&id, "bob").await.unwrap().is_none());

    // A running task is never kept: it still changes.
    let running = record("gw-1");
    let running_id = running.task_id.clone();
    store.create(running).await.unwrap();
    assert!(found(&store, &running_id).await);
    delete_behind(&store, &running_id).await;
    assert!(!found(&store, &running_id).await);
}

#[tokio::test]
async fn memory_is_dropped_when_the_link_to_redis_drops_or_an_operation_fails() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let other = store_in(&server, NAMESPACE, "gw-2");
    let mut wakeups = subscribed(&store).await;

    // The pub/sub connection drops (as on a restart or failover): Redis is believed.
    let dropped = remembered_task(&store).await;
    let mut kill = redis::cmd("CLIENT");
    kill.arg("KILL").arg("TYPE").arg("pubsub");
    let killed: i64 = query(&other, kill).await;
    assert_eq!(killed, 1);
    assert_eq!(
        next_wakeup(&mut wakeups).await,
        WAKE_ALL,
        "subscribed again"
    );
    assert!(!found(&store, &dropped).await);

    // Any failed operation does the same.
    let faulted = remembered_task(&store).await;
    let failed = store.conn.one("test", redis::cmd("NO-SUCH-COMMAND")).await;
    assert!(failed.is_err());
    assert!(!found(&store, &faulted).await);
}

#[tokio::test]
async fn a_remembered_task_expires_at_its_ttl_and_deleting_it_forgets_it() {
    let server = redis_server();
    let store = store(&server, "gw-1");
    let _wakeups = subscribed(&store).await;

    let mut short = record("gw-1");
    short.ttl_ms = 300;
    let id = short.task_id.clone();
    let expires_at_ms = short.expires_at_ms();
    store.create(short).await.unwrap();
    store
        .finish(&id, Outcome::gateway_failure("done"))
        .await
        .unwrap();
    assert!(found(&store, &id).await);
    delete_behind(&store, &id).await;
    assert!(found(&store, &id).await);
    // The TTL is the subject here: wait for the clock to pass it.
    tokio::time::sleep(Duration::from_millis(
        expires_at_ms.saturating_sub(now_ms()) + 20,
    ))
    .await;
    assert!(!found(&store, &id).await);

    // Deleted through the store (answered inline): forgotten at once.
    let task = record("gw-1");
    let inline = task.task_id.clone();
    store.create(task).await.unwrap();
    store
        .finish(&inline, Outcome::gateway_failure("done"))
        .await
        .unwrap();
    assert!(found(&store, &inline).await);
    store.delete(&inline).await.unwrap();
    assert!(!found(&store, &inline).await);
}
