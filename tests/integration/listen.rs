//! `subscriptions/listen` for 2026-07-28 clients: `notifications/tasks` for the caller's
//! tasks, each the task as `tasks/get` shows it, from whichever instance changed it.

use crate::common;
use crate::common::mrtr::SseMessages;
use crate::common::*;
use serde_json::{Value, json};
use test_support::RedisServer;

fn client_of(url: &str, who: &str) -> Client {
    let mut client = Client::with_tasks(url);
    client.authorization = Some(format!("Bearer {who}"));
    client
}

/// The next message, which must be a `notifications/tasks` of subscription `id`; its
/// params without `_meta`.
async fn next_task(stream: &mut SseMessages, id: u64) -> Value {
    let message = stream.next().await.expect("a notification before the end");
    assert_eq!(message["method"], "notifications/tasks", "{message}");
    let mut params = message["params"].clone();
    let meta = params.as_object_mut().unwrap().remove("_meta").unwrap();
    assert_eq!(
        meta["io.modelcontextprotocol/subscriptionId"], id,
        "{message}"
    );
    params
}

/// What `tasks/get` answers now, as a notification would carry it.
async fn as_get_shows(client: &Client, task_id: &str) -> Value {
    let mut task = client.get_task(task_id).await;
    let fields = task.as_object_mut().unwrap();
    fields.remove("resultType");
    // The result's `_meta` names the server; a notification's names the subscription.
    let meta = fields.remove("_meta").unwrap();
    assert_eq!(
        meta["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-task-gateway"
    );
    task
}

/// The acknowledgement (first message) of subscription `id`: the task ids it names.
async fn acknowledged(stream: &mut SseMessages, id: u64) -> Value {
    let ack = stream.next().await.expect("an acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        id
    );
    ack["params"]["notifications"].clone()
}

/// The graceful end: the listen request's own response.
async fn ended(stream: &mut SseMessages, id: u64) {
    let end = stream
        .next()
        .await
        .expect("the response that ends the stream");
    assert_eq!(end["id"], id, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        id
    );
    assert!(stream.next().await.is_none(), "nothing after the end");
}

/// One task through input_required, working and completed, heard by `listener` while
/// `actor` answers: each status once, in order, each as `tasks/get` showed it then.
async fn follow_one_task(actor: &Client, listener: &Client) {
    let task_id = actor
        .start_task("test_tool_with_task", json!({"delay_ms": 700}))
        .await;
    let asking = actor.wait_status(&task_id, "input_required").await;
    let mut stream = listener
        .listen(7, json!({"taskIds": [task_id]}))
        .await
        .unwrap_or_else(|reply| panic!("listen refused: {}", reply.body));
    assert_eq!(
        acknowledged(&mut stream, 7).await,
        json!({"taskIds": [task_id]})
    );

    let first = next_task(&mut stream, 7).await;
    assert_eq!(first["status"], "input_required", "{first}");
    assert_eq!(first, as_get_shows(actor, &task_id).await);
    let (key, _) = only_input_request(&asking);
    let answer = json!({key: {"action": "accept", "content": {"name": "Ada"}}});
    assert_eq!(actor.update(&task_id, answer).await.status, 200);

    let working = next_task(&mut stream, 7).await;
    assert_eq!(working["status"], "working", "{working}");
    assert!(working.get("inputRequests").is_none(), "{working}");
    let done = next_task(&mut stream, 7).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done, as_get_shows(actor, &task_id).await);
    assert!(first_text(&done["result"]).contains("Ada"), "{done}");
    ended(&mut stream, 7).await;
}

#[tokio::test]
async fn a_listener_hears_each_change_of_its_task_once_in_order() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let alice = client_of(&url, "alice");
    follow_one_task(&alice, &alice).await;
}

/// Two gateway instances, "a" and "b", on `redis` in front of one fixture: the running
/// processes, and alice's client of each.
fn two_instances_on(redis: &RedisServer) -> (Vec<Proc>, Client, Client) {
    let redis_url = redis.url();
    let (upstream, upstream_url) = start_plain_server();
    let (a, on_a) = start_gateway(
        &upstream_url,
        &["--redis", &redis_url, "--instance-id", "a"],
    );
    let (b, on_b) = start_gateway(
        &upstream_url,
        &["--redis", &redis_url, "--instance-id", "b"],
    );
    (
        vec![upstream, a, b],
        client_of(&on_a, "alice"),
        client_of(&on_b, "alice"),
    )
}

#[tokio::test]
async fn on_redis_a_listener_on_one_instance_hears_a_task_running_on_another() {
    let redis = RedisServer::start();
    let (_running, on_a, on_b) = two_instances_on(&redis);
    follow_one_task(&on_a, &on_b).await;
}

/// The instances that listen to the namespace's change channel (one subscription each).
fn change_listeners(redis: &RedisServer) -> i64 {
    let mut conn = redis.connection();
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("mtg*changes")
        .query(&mut conn)
        .unwrap();
    let mut numsub = redis::cmd("PUBSUB");
    numsub.arg("NUMSUB").arg(&channels);
    let counts: Vec<(String, i64)> = numsub.query(&mut conn).unwrap();
    counts.iter().map(|(_, count)| count).sum()
}

/// Every task's end is announced on Redis, but an instance hears the announcements only
/// while a client there waits for a change: none are heard by the instance that ran the
/// task when nobody listens, and the listener's instance leaves the channel after its
/// stream ended.
#[tokio::test]
async fn on_redis_an_instance_hears_changes_only_while_someone_there_waits() {
    let redis = RedisServer::start();
    let (_running, alice_a, alice_b) = two_instances_on(&redis);

    let quick = alice_a.start_task("echo", json!({"text": "hi"})).await;
    alice_a.wait_status(&quick, "completed").await;
    assert_eq!(change_listeners(&redis), 0, "nobody waits, nobody listens");

    let slow = alice_a.start_task("sleep", json!({"ms": 1500})).await;
    let mut stream = alice_b
        .listen(3, json!({"taskIds": [slow]}))
        .await
        .unwrap_or_else(|reply| panic!("listen refused: {}", reply.body));
    acknowledged(&mut stream, 3).await;
    eventually("B listening while its client waits", || async {
        (change_listeners(&redis) == 1).then_some(())
    })
    .await;
    let working = next_task(&mut stream, 3).await;
    assert_eq!(working["status"], "working", "{working}");
    let done = next_task(&mut stream, 3).await;
    assert_eq!(done["status"], "completed", "{done}");
    ended(&mut stream, 3).await;
    eventually("B leaving the channel once nobody waits", || async {
        (change_listeners(&redis) == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn only_the_callers_live_tasks_are_acknowledged() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let alice = client_of(&url, "alice");
    let bob = client_of(&url, "bob");
    let mine = alice.start_task("sleep", json!({"ms": 60000})).await;
    let theirs = bob.start_task("sleep", json!({"ms": 60000})).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let mut stream = alice
        .listen(
            3,
            json!({"taskIds": [theirs, mine, unknown, mine], "toolsListChanged": true}),
        )
        .await
        .unwrap_or_else(|reply| panic!("listen refused: {}", reply.body));
    // Another's task reads like an unknown one; kinds the gateway cannot deliver are
    // left out.
    assert_eq!(
        acknowledged(&mut stream, 3).await,
        json!({"taskIds": [mine]})
    );
    assert_eq!(next_task(&mut stream, 3).await["status"], "working");
    assert_eq!(alice.cancel(&mine).await.status, 200);
    let cancelled = next_task(&mut stream, 3).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    ended(&mut stream, 3).await;

    // Nothing to follow (this 2025-xx upstream serves no listen): acknowledged empty,
    // then ended at once.
    let mut nothing = alice
        .listen(4, json!({"promptsListChanged": true}))
        .await
        .unwrap_or_else(|reply| panic!("listen refused: {}", reply.body));
    assert_eq!(acknowledged(&mut nothing, 4).await, json!({}));
    ended(&mut nothing, 4).await;
}

#[tokio::test]
async fn listening_for_tasks_needs_the_extension_and_a_filter() {
    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let with_tasks = client_of(&url, "alice");
    let task_id = with_tasks.start_task("sleep", json!({"ms": 60000})).await;
    let mut without = Client::new(&url, json!({"elicitation": {}}));
    without.authorization = Some("Bearer alice".into());
    let Err(refused) = without.listen(5, json!({"taskIds": [task_id]})).await else {
        panic!("a client without the extension must not get task notifications");
    };
    assert_eq!(refused.status, 400);
    assert_eq!(refused.error_code(), -32021);
    assert_eq!(
        refused.body["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    let Err(bad) = with_tasks.listen(6, json!(["not", "an", "object"])).await else {
        panic!("a filter that is not an object is refused");
    };
    assert_eq!(bad.error_code(), -32602);
    bad.assert_message_mentions("params.notifications");
}

/// A 2026-07-28 upstream serves its own `subscriptions/listen`: the kinds the gateway
/// does not serve go there, and both parts share the client's one stream.
#[tokio::test]
async fn the_upstreams_part_of_a_subscription_is_relayed_beside_the_tasks() {
    let (_upstream, upstream_url) = common::mrtr::MrtrUpstream::Rmcp.start();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let alice = client_of(&url, "alice");
    let task_id = alice
        .start_task("confirm_delete", json!({"path": "/tmp/x"}))
        .await;
    alice.wait_status(&task_id, "input_required").await;
    let mut stream = alice
        .listen(
            9,
            json!({"taskIds": [task_id], "toolsListChanged": true, "promptsListChanged": true}),
        )
        .await
        .unwrap_or_else(|reply| panic!("listen refused: {}", reply.body));
    // The upstream serves tool-list changes only; prompts are left out.
    assert_eq!(
        acknowledged(&mut stream, 9).await,
        json!({"toolsListChanged": true, "taskIds": [task_id]})
    );
    let mut methods = Vec::new();
    for _ in 0..2 {
        let message = stream.next().await.expect("a notification");
        assert_eq!(
            message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 9,
            "{message}"
        );
        methods.push(message["method"].as_str().unwrap().to_owned());
    }
    methods.sort();
    assert_eq!(
        methods,
        ["notifications/tasks", "notifications/tools/list_changed"]
    );
}

/// A stopping gateway ends its listen streams with their response instead of cutting
/// them off, and does not wait for them to stop on their own.
#[tokio::test]
async fn a_stopping_gateway_ends_listen_streams_gracefully() {
    let (_upstream, upstream_url) = start_plain_server();
    let (gateway, url) = start_gateway(&upstream_url, &[]);
    let alice = client_of(&url, "alice");
    let task_id = alice.start_task("sleep", json!({"ms": 60000})).await;
    let mut stream = alice
        .listen(11, json!({"taskIds": [task_id]}))
        .await
        .unwrap_or_else(|reply| panic!("listen refused: {}", reply.body));
    acknowledged(&mut stream, 11).await;
    assert_eq!(next_task(&mut stream, 11).await["status"], "working");
    let stopping = std::time::Instant::now();
    gateway.signal_group(libc::SIGTERM);
    // The drain fails the running task: its listener may hear that first.
    loop {
        let message = stream
            .next()
            .await
            .expect("the response before the stream closes");
        if message.get("id").is_some() {
            assert_eq!(message["id"], 11, "{message}");
            assert_eq!(message["result"]["resultType"], "complete", "{message}");
            break;
        }
        assert_eq!(message["method"], "notifications/tasks", "{message}");
    }
    assert!(
        stopping.elapsed() < std::time::Duration::from_secs(5),
        "the stream held the stop for {:?}",
        stopping.elapsed()
    );
}
