//! 2026-07-28 upstreams that ask for input with MRTR (`InputRequiredResult`), behind
//! the gateway: rounds become task `inputRequests`, answers go back in retries with the
//! exact `requestState`, input before a task exists is answered inline, and clients
//! without the tasks extension get the upstream's `InputRequiredResult` untouched.
//!
//! Every flow runs against two independent servers: the Python `mcp` SDK and rmcp.
//! Each flow takes the gateway's extra arguments, so the same flows can run against
//! other gateway setups (e.g. a shared store) by adding one line to the macro below.

use crate::common::mrtr::{BridgedSession, MrtrUpstream, upstream_calls};
use crate::common::*;
use crate::over_both_upstreams;
use serde_json::{Value, json};

/// The gateway in front of a fresh MRTR upstream, and a 2026-07-28 client of it.
struct Setup {
    upstream_url: String,
    client: Client,
    _upstream: Proc,
    _gateway: Proc,
}

fn setup(upstream: MrtrUpstream, gateway_args: &[&str]) -> Setup {
    let (upstream_proc, upstream_url) = upstream.start();
    let (gateway, url) = start_gateway(&upstream_url, gateway_args);
    Setup {
        client: Client::with_tasks(&url),
        upstream_url,
        _upstream: upstream_proc,
        _gateway: gateway,
    }
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// The key of the outstanding request whose message is `message`.
fn key_of(task: &Value, message: &str) -> String {
    let requests = task["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("no inputRequests: {task}"));
    requests
        .iter()
        .find(|(_, r)| r["params"]["message"] == message)
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| panic!("no request {message:?} in {task}"))
}

fn outstanding_keys(task: &Value) -> Vec<String> {
    task["inputRequests"]
        .as_object()
        .map(|r| r.keys().cloned().collect())
        .unwrap_or_default()
}

async fn one_round_of_elicitation_completes_the_task(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let task_id = s
        .client
        .start_task("confirm_delete", json!({"path": "/tmp/x"}))
        .await;
    let task = s.client.wait_status(&task_id, "input_required").await;
    assert_eq!(outstanding_keys(&task), ["input-0"], "{task}");
    let request = &task["inputRequests"]["input-0"];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Delete /tmp/x?");
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );

    let ack = s
        .client
        .update(
            &task_id,
            json!({"input-0": accept(json!({"confirm": true}))}),
        )
        .await;
    assert_eq!(ack.result(), &gateway_ack());
    let task = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&task["result"]), "deleted /tmp/x");
    assert_eq!(task["result"]["resultType"], "complete");
    assert!(task.get("inputRequests").is_none(), "{task}");
    assert_eq!(upstream_calls(&s.upstream_url, "confirm_delete").await, 2);
}

async fn two_rounds_wait_for_every_answer(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let task_id = s.client.start_task("two_rounds", json!({})).await;
    let round_1 = s.client.wait_status(&task_id, "input_required").await;
    let name_key = key_of(&round_1, "Your name?");
    let color_key = key_of(&round_1, "Favourite color?");
    let mut round_1_keys = outstanding_keys(&round_1);
    round_1_keys.sort();
    assert_eq!(round_1_keys, ["input-0", "input-1"]);

    // Half of the round: the task waits for the rest, and the upstream is not called.
    s.client
        .update(
            &task_id,
            json!({name_key.clone(): accept(json!({"name": "Ann"}))}),
        )
        .await
        .result();
    let task = s.client.get_task(&task_id).await;
    assert_eq!(task["status"], "input_required", "{task}");
    assert_eq!(outstanding_keys(&task), std::slice::from_ref(&color_key));
    assert_eq!(upstream_calls(&s.upstream_url, "two_rounds").await, 1);

    // The rest (an answer to the already answered key is ignored).
    s.client
        .update(
            &task_id,
            json!({
                color_key.clone(): accept(json!({"color": "blue"})),
                name_key.clone(): accept(json!({"name": "Mallory"})),
            }),
        )
        .await
        .result();
    let round_2 = s
        .client
        .poll_until(&task_id, |t| {
            t["status"] == "input_required"
                && outstanding_keys(t)
                    .iter()
                    .any(|k| !round_1_keys.contains(k))
        })
        .await;
    // Round 2's key is new over the task's lifetime, although the upstream reuses
    // nothing but its own round-local keys.
    assert_eq!(outstanding_keys(&round_2), ["input-2"]);
    assert_eq!(
        round_2["inputRequests"]["input-2"]["params"]["message"],
        "Ann likes blue, right?"
    );

    s.client
        .update(&task_id, json!({"input-2": accept(json!({"ok": true}))}))
        .await
        .result();
    let task = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&task["result"]), "Ann likes blue");
    // Initial call and one retry per round: the partial answer caused no call.
    assert_eq!(upstream_calls(&s.upstream_url, "two_rounds").await, 3);
}

async fn a_forged_request_state_fails_the_task(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let reply = s
        .client
        .retry_tool(
            "two_rounds",
            json!({}),
            json!({"name": accept(json!({"name": "Eve"}))}),
            &json!("forged-by-the-client"),
        )
        .await;
    assert_eq!(reply.result()["resultType"], "task");
    let task_id = reply.result()["taskId"].as_str().unwrap().to_owned();
    let task = s.client.wait_status(&task_id, "failed").await;
    assert_eq!(task["error"]["code"], -32602, "{task}");
    assert_eq!(task["error"]["message"], "Invalid or expired requestState");
    assert!(status_message(&task).contains("requestState"), "{task}");
}

async fn a_client_without_tasks_gets_input_required_untouched(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let capabilities = json!({"elicitation": {"form": {}}});
    let client = Client::new(&s.client.url, capabilities.clone());
    let direct = Client::new(&s.upstream_url, capabilities);
    let arguments = json!({"path": "/srv/data"});

    let reply = client.call_tool("confirm_delete", arguments.clone()).await;
    let through_gateway = reply.result().clone();
    let upstream_answer = direct
        .call_tool("confirm_delete", arguments.clone())
        .await
        .result()
        .clone();
    assert_eq!(through_gateway["resultType"], "input_required");
    let state = through_gateway["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    // Identical but for the state, which the Python SDK seals afresh every time.
    let without_state = |result: &Value| {
        let mut result = result.clone();
        result.as_object_mut().unwrap().remove("requestState");
        result
    };
    assert_eq!(
        without_state(&through_gateway),
        without_state(&upstream_answer)
    );

    // The client retries itself, through the gateway, with the state as it got it.
    let retry = client
        .retry_tool(
            "confirm_delete",
            arguments,
            json!({"confirm": accept(json!({"confirm": true}))}),
            &json!(state),
        )
        .await;
    assert_eq!(first_text(retry.result()), "deleted /srv/data");
    assert_eq!(retry.result()["resultType"], "complete");
}

async fn input_before_promotion_is_answered_inline(upstream: MrtrUpstream) {
    let s = setup(upstream, &["--promote-after-ms", "1500"]);

    // Both rounds and the result come back within the budget: no task at all.
    let first = s.client.call_tool("two_rounds", json!({})).await;
    let first = first.result();
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert!(
        first["inputRequests"]["name"].is_object(),
        "upstream keys: {first}"
    );
    let answers = json!({
        "name": accept(json!({"name": "Bo"})),
        "color": accept(json!({"color": "red"})),
    });
    let second = s
        .client
        .retry_tool("two_rounds", json!({}), answers, &first["requestState"])
        .await;
    let second = second.result();
    assert_eq!(second["resultType"], "input_required", "{second}");
    let third = s
        .client
        .retry_tool(
            "two_rounds",
            json!({}),
            json!({"confirm": accept(json!({"ok": true}))}),
            &second["requestState"],
        )
        .await;
    assert_eq!(first_text(third.result()), "Bo likes red");

    // A retry that works past the budget becomes a task.
    let arguments = json!({"path": "/slow", "delay_ms": 4000});
    let asked = s
        .client
        .call_tool("confirm_delete", arguments.clone())
        .await;
    let asked = asked.result();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let retry = s
        .client
        .retry_tool(
            "confirm_delete",
            arguments,
            json!({"confirm": accept(json!({"confirm": true}))}),
            &asked["requestState"],
        )
        .await;
    let created = retry.result();
    assert_eq!(created["resultType"], "task", "{created}");
    let task_id = created["taskId"].as_str().unwrap();
    let task = s.client.wait_status(task_id, "completed").await;
    assert_eq!(first_text(&task["result"]), "deleted /slow");
}

async fn cancel_while_waiting_for_input(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let task_id = s
        .client
        .start_task("confirm_delete", json!({"path": "/keep"}))
        .await;
    s.client.wait_status(&task_id, "input_required").await;
    s.client.cancel(&task_id).await.result();
    let task = s.client.wait_status(&task_id, "cancelled").await;
    assert!(task.get("inputRequests").is_none(), "{task}");
    // A late answer changes nothing and reaches no one.
    s.client
        .update(
            &task_id,
            json!({"input-0": accept(json!({"confirm": true}))}),
        )
        .await
        .result();
    assert_eq!(s.client.get_task(&task_id).await["status"], "cancelled");
    assert_eq!(upstream_calls(&s.upstream_url, "confirm_delete").await, 1);
}

async fn discover_is_the_upstreams_with_the_tasks_extension(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let reply = s.client.request("server/discover", json!({})).await;
    let result = reply.result();
    assert_eq!(result["supportedVersions"], json!([STATELESS]));
    assert_eq!(result["capabilities"]["extensions"][TASKS_EXT], json!({}));
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    let server = &result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"];
    let expected = match upstream {
        MrtrUpstream::Python => "mrtr-fixture",
        MrtrUpstream::Rmcp => "rmcp",
    };
    assert_eq!(server, expected);
    assert!(result["ttlMs"].is_u64() && result["cacheScope"].is_string());
}

async fn a_session_client_gets_input_requests_as_server_requests(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let (session, init) =
        BridgedSession::initialize(&s.client.url, json!({"elicitation": {}})).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    assert!(init["result"]["capabilities"].get("extensions").is_none());

    let tools = session
        .request(1, "tools/list", json!({}))
        .await
        .next()
        .await
        .unwrap();
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"two_rounds"), "{tools}");

    // Round 1: two requests on the call's stream; the upstream waits for both answers.
    let mut stream = session
        .request(
            2,
            "tools/call",
            json!({"name": "two_rounds", "arguments": {}}),
        )
        .await;
    let first = stream.next().await.expect("a request");
    let second = stream.next().await.expect("a request");
    assert_ne!(first["id"], second["id"]);
    for request in [&first, &second] {
        assert_eq!(request["method"], "elicitation/create", "{request}");
        let answer = match request["params"]["message"].as_str().unwrap() {
            "Your name?" => json!({"name": "Cy"}),
            "Favourite color?" => json!({"color": "green"}),
            other => panic!("unexpected question {other}"),
        };
        if request == &first {
            assert_eq!(upstream_calls(&s.upstream_url, "two_rounds").await, 1);
        }
        session.respond(&request["id"], accept(answer)).await;
    }
    // Round 2, then the result, on the same stream.
    let third = stream.next().await.expect("round 2");
    assert_eq!(third["params"]["message"], "Cy likes green, right?");
    session
        .respond(&third["id"], accept(json!({"ok": true})))
        .await;
    let last = stream.next().await.expect("the response");
    assert_eq!(last["id"], 2);
    assert_eq!(first_text(&last["result"]), "Cy likes green");
    assert!(
        stream.next().await.is_none(),
        "the stream ends with the response"
    );
    assert_eq!(upstream_calls(&s.upstream_url, "two_rounds").await, 3);

    // The session ends with DELETE; it is unknown afterwards.
    assert_eq!(session.delete().await, 200);
    let after = session
        .post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}))
        .await;
    assert_eq!(after.status(), 404);
}

async fn a_session_client_cancels_a_bridged_call(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let (session, _) = BridgedSession::initialize(&s.client.url, json!({"elicitation": {}})).await;
    let mut stream = session
        .request(
            7,
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"path": "/c"}}),
        )
        .await;
    let asked = stream.next().await.expect("an elicitation");
    assert_eq!(asked["method"], "elicitation/create");
    let notice = json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "user gave up"}
    });
    assert_eq!(session.post(notice).await.status(), 202);
    // The call's stream ends without a response, and the upstream is not called again.
    assert!(stream.next().await.is_none());
    assert_eq!(upstream_calls(&s.upstream_url, "confirm_delete").await, 1);
    // A late answer to the withdrawn request is accepted and ignored.
    session
        .respond(&asked["id"], accept(json!({"confirm": true})))
        .await;
    assert_eq!(upstream_calls(&s.upstream_url, "confirm_delete").await, 1);
}

/// A `tools/call` of `regional_echo` as `client` sends it, with `param_headers` added.
async fn regional_call(client: &Client, arguments: Value, param_headers: &[(&str, &str)]) -> Reply {
    let params = client.params(json!({"name": "regional_echo", "arguments": arguments}));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let mut headers = vec![
        ("mcp-method", "tools/call".to_owned()),
        ("mcp-name", "regional_echo".to_owned()),
    ];
    headers.extend(param_headers.iter().map(|(n, v)| (*n, (*v).to_owned())));
    client
        .send_raw(serde_json::to_vec(&body).unwrap(), &headers)
        .await
}

async fn annotated_arguments_are_mirrored_into_param_headers(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    // Both SDKs reject a call whose Mcp-Param-Region does not mirror `region`; a
    // non-ASCII value travels Base64-encoded, in the client's header and the gateway's.
    let arguments = json!({"region": "z\u{fc}rich", "text": "hi"});
    let mirrored = [("mcp-param-region", "=?base64?esO8cmljaA==?=")];
    let created = regional_call(&s.client, arguments.clone(), &mirrored).await;
    let task_id = created.result()["taskId"].as_str().unwrap().to_owned();
    let task = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&task["result"]), "z\u{fc}rich: hi");

    let plain = Client::new(&s.client.url, json!({}));
    let inline = regional_call(&plain, arguments.clone(), &mirrored).await;
    assert_eq!(first_text(inline.result()), "z\u{fc}rich: hi");
    assert_eq!(upstream_calls(&s.upstream_url, "regional_echo").await, 2);

    // The gateway checks the client's headers against the body itself (a load balancer
    // may have routed on them): missing, different, or set without the argument.
    let missing = regional_call(&plain, arguments.clone(), &[]).await;
    assert_eq!(
        (missing.status, missing.error_code()),
        (400, -32020),
        "{}",
        missing.body
    );
    missing.assert_message_mentions("mcp-param-Region");
    let different = regional_call(&plain, arguments, &[("mcp-param-region", "bern")]).await;
    assert_eq!((different.status, different.error_code()), (400, -32020));
    let stray = regional_call(
        &plain,
        json!({"text": "hi"}),
        &[("mcp-param-region", "bern")],
    )
    .await;
    assert_eq!((stray.status, stray.error_code()), (400, -32020));
    assert_eq!(
        upstream_calls(&s.upstream_url, "regional_echo").await,
        2,
        "none reached it"
    );
}

/// What the client declared reaches the upstream, but for the tasks extension, which the
/// gateway serves: as a task and inline alike.
async fn a_tool_that_needs_a_client_extension_gets_it(upstream: MrtrUpstream) {
    let s = setup(upstream, &[]);
    let declared = json!({
        "extensions": {TASKS_EXT: {}, "io.example/widgets": {}},
        "elicitation": {"form": {}},
    });
    let with_widgets = Client::new(&s.client.url, declared);
    let task_id = with_widgets.start_task("widgets", json!({})).await;
    let task = with_widgets.wait_status(&task_id, "completed").await;
    assert_ne!(task["result"]["isError"], true, "{task}");
    assert_eq!(
        first_text(&task["result"]),
        "extensions: io.example/widgets"
    );

    let inline = Client::new(
        &s.client.url,
        json!({"extensions": {"io.example/widgets": {}}}),
    );
    let answer = inline.call_tool("widgets", json!({})).await;
    assert_eq!(
        first_text(answer.result()),
        "extensions: io.example/widgets"
    );

    // Without it, the upstream says so.
    let task_id = s.client.start_task("widgets", json!({})).await;
    let refused = s.client.wait_status(&task_id, "completed").await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
}

// One test per flow and upstream.
/// A round the client never answers ends with the task's TTL: the runner stops (a slot
/// of the caller's running-task limit is free again, `mtg_tasks_in_flight` falls to 0),
/// and on Redis the owner's index lets go of the task.
async fn an_unanswered_round_ends_with_the_tasks_ttl(upstream: MrtrUpstream) {
    let redis = test_support::RedisServer::start();
    let redis_url = redis.url();
    let metrics_port = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let flags = [
        "--redis",
        &redis_url,
        "--default-ttl-ms",
        "1500",
        "--max-running-tasks-per-principal",
        "1",
        "--metrics-listen",
        &metrics_addr,
    ];
    let s = setup(upstream, &flags);
    let task_id = s
        .client
        .start_task("confirm_delete", json!({"path": "/left"}))
        .await;
    s.client.wait_status(&task_id, "input_required").await;
    let refused = s
        .client
        .call_tool("confirm_delete", json!({"path": "/refused"}))
        .await;
    assert_eq!(refused.error_code(), -31429, "{}", refused.body);

    let expired = eventually("the task to expire", || async {
        let reply = s
            .client
            .request("tasks/get", json!({"taskId": task_id}))
            .await;
        reply.body.get("error").is_some().then_some(reply)
    })
    .await;
    assert_eq!(expired.error_code(), -32602);
    eventually("the runner to end", || async {
        let metrics = scrape_metrics(metrics_port).await;
        (metric_sample(&metrics, "mtg_tasks_in_flight") == Some(0.0)).then_some(())
    })
    .await;
    let next = s
        .client
        .start_task("confirm_delete", json!({"path": "/next"}))
        .await;
    s.client.wait_status(&next, "input_required").await;

    let indexed = owner_index(&mut redis.connection(), "*");
    assert_eq!(
        indexed,
        vec![next],
        "the owner's index holds only the live task"
    );
}

over_both_upstreams!(
    a_tool_that_needs_a_client_extension_gets_it,
    one_round_of_elicitation_completes_the_task,
    two_rounds_wait_for_every_answer,
    a_forged_request_state_fails_the_task,
    a_client_without_tasks_gets_input_required_untouched,
    input_before_promotion_is_answered_inline,
    cancel_while_waiting_for_input,
    discover_is_the_upstreams_with_the_tasks_extension,
    a_session_client_gets_input_requests_as_server_requests,
    a_session_client_cancels_a_bridged_call,
    annotated_arguments_are_mirrored_into_param_headers,
    rounds_answered_on_another_instance,
    an_unanswered_round_ends_with_the_tasks_ttl,
);

/// An upstream that is down at first use is asked again later, not taken for a session upstream.
#[tokio::test]
async fn an_unreachable_upstream_is_detected_once_it_answers() {
    let port = free_port();
    let (_gateway, url) = start_gateway(&format!("http://127.0.0.1:{port}/mcp"), &[]);
    let client = Client::with_tasks(&url);
    let down = client.request("server/discover", json!({})).await;
    assert_eq!(down.error_code(), -32603, "{}", down.body);

    let (_upstream, _) = MrtrUpstream::Rmcp.start_on(port);
    let up = client.request("server/discover", json!({})).await;
    assert_eq!(
        up.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "rmcp"
    );
    let task_id = client
        .start_task("confirm_delete", json!({"path": "/late"}))
        .await;
    let task = client.wait_status(&task_id, "input_required").await;
    assert_eq!(outstanding_keys(&task), ["input-0"]);
}

/// With Redis, two instances: the task is created on A, every answer goes to B, and the
/// rounds still complete (B stores the answers; A, the owner, is woken and retries).
async fn rounds_answered_on_another_instance(upstream: MrtrUpstream) {
    let redis = test_support::RedisServer::start();
    let redis_url = redis.url();
    let (_upstream, upstream_url) = upstream.start();
    let (_a, url_a) = start_gateway(&upstream_url, &["--redis", &redis_url]);
    let (_b, url_b) = start_gateway(&upstream_url, &["--redis", &redis_url]);
    let a = Client::with_tasks(&url_a);
    let b = Client::with_tasks(&url_b);

    let task_id = a.start_task("two_rounds", json!({})).await;
    let round_1 = b.wait_status(&task_id, "input_required").await;
    let name_key = key_of(&round_1, "Your name?");
    let color_key = key_of(&round_1, "Favourite color?");
    b.update(&task_id, json!({name_key: accept(json!({"name": "Ann"}))}))
        .await
        .result();
    let task = b.get_task(&task_id).await;
    assert_eq!(outstanding_keys(&task), std::slice::from_ref(&color_key));
    assert_eq!(upstream_calls(&upstream_url, "two_rounds").await, 1);
    b.update(
        &task_id,
        json!({color_key: accept(json!({"color": "blue"}))}),
    )
    .await
    .result();
    let round_2 = b
        .poll_until(&task_id, |t| outstanding_keys(t) == ["input-2"])
        .await;
    assert_eq!(
        round_2["inputRequests"]["input-2"]["params"]["message"],
        "Ann likes blue, right?"
    );
    b.update(&task_id, json!({"input-2": accept(json!({"ok": true}))}))
        .await
        .result();
    let done = a.wait_status(&task_id, "completed").await;
    assert_eq!(first_text(&done["result"]), "Ann likes blue");
    assert_eq!(upstream_calls(&upstream_url, "two_rounds").await, 3);
}
