//! The link without a process: what it writes to stdin is read from the writer channel,
//! and what the process "writes" is fed to `dispatch`.

use super::*;

struct Harness {
    link: Link,
    stdin: mpsc::UnboundedReceiver<Vec<u8>>,
}

fn harness() -> Harness {
    let (writer, stdin) = mpsc::unbounded_channel();
    let context = Arc::new(LinkContext::new(&["file:///work".to_owned()]));
    Harness {
        link: Link::new(0, 4242, context, writer),
        stdin,
    }
}

impl Harness {
    /// The next line written to the process's stdin.
    fn written(&mut self) -> Value {
        let line = self.stdin.try_recv().expect("a line on stdin");
        assert_eq!(line.last(), Some(&b'\n'), "one message per line");
        serde_json::from_slice(&line).expect("JSON on stdin")
    }

    fn nothing_written(&mut self) {
        assert!(self.stdin.try_recv().is_err(), "nothing more on stdin");
    }

    /// Starts a `tools/call` whose client can be asked for everything.
    fn call(&mut self, params: Value) -> (u64, Events) {
        let capabilities = json!({"elicitation": {}, "sampling": {}, "roots": {}});
        self.call_with(params, capabilities)
    }

    fn call_with(&mut self, params: Value, capabilities: Value) -> (u64, Events) {
        let capabilities = capabilities.as_object().cloned().unwrap_or_default();
        let started = self
            .link
            .start(Outgoing {
                method: "tools/call",
                params: Some(params),
                may_ask: true,
                grants: Grants::from_capabilities(&capabilities),
                capabilities: &capabilities,
            })
            .expect("the link is open");
        let sent = self.written();
        assert_eq!(sent["id"], started.0);
        started
    }

    fn upstream_writes(&self, message: Value) {
        self.link.dispatch(message.to_string().as_bytes());
    }
}

fn next_event(events: &mut Events) -> UpstreamEvent {
    events
        .try_recv()
        .expect("an event for the call")
        .expect("not an error")
}

fn elicitation(upstream_id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": upstream_id, "method": "elicitation/create",
           "params": {"message": "Name?", "requestedSchema": {"type": "object"}}})
}

#[test]
fn a_response_reaches_its_call_even_with_the_id_echoed_as_a_string() {
    let mut h = harness();
    let (id, mut events) = h.call(json!({"name": "echo"}));
    h.upstream_writes(json!({"jsonrpc": "2.0", "id": id.to_string(), "result": {"ok": 1}}));
    match next_event(&mut events) {
        UpstreamEvent::Response { id: got, outcome } => {
            assert_eq!(got, id);
            assert_eq!(outcome.expect("a result")["ok"], 1);
        }
        other => panic!("expected the response, got {other:?}"),
    }
    // A second answer to the same id belongs to nobody.
    h.upstream_writes(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    assert!(events.try_recv().is_err());
}

#[test]
fn progress_travels_under_the_gateways_token_and_returns_under_the_callers() {
    let mut h = harness();
    let capabilities = Map::new();
    let (id, mut events) = h
        .link
        .start(Outgoing {
            method: "tools/call",
            params: Some(json!({"name": "slow", "_meta": {"progressToken": "client-7"}})),
            may_ask: true,
            grants: Grants::default(),
            capabilities: &capabilities,
        })
        .expect("open");
    let ours = format!("mtg-{id}");
    assert_eq!(h.written()["params"]["_meta"]["progressToken"], ours);
    h.upstream_writes(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                             "params": {"progressToken": ours, "progress": 1}}));
    match next_event(&mut events) {
        UpstreamEvent::Notification { method, params } => {
            assert_eq!(method, "notifications/progress");
            assert_eq!(params.expect("params")["progressToken"], "client-7");
        }
        other => panic!("expected progress, got {other:?}"),
    }
}

#[test]
fn a_request_of_the_only_call_is_handed_over_and_its_answer_goes_back_upstream() {
    let mut h = harness();
    let (_, mut events) = h.call(json!({"name": "ask"}));
    h.upstream_writes(elicitation(900));
    let shown_id = match next_event(&mut events) {
        UpstreamEvent::Request { id, method, .. } => {
            assert_eq!(method, "elicitation/create");
            assert_ne!(id, 900, "callers see a gateway id, not the process's");
            id
        }
        other => panic!("expected the request, got {other:?}"),
    };
    h.link
        .answer(&shown_id, Ok(json!({"action": "decline"})))
        .expect("sent");
    let answer = h.written();
    assert_eq!(answer["id"], 900);
    assert_eq!(answer["result"]["action"], "decline");
    // Answered once: a second answer is not sent.
    h.link.answer(&shown_id, Ok(json!({}))).expect("ignored");
    h.nothing_written();
}

#[test]
fn a_request_two_calls_could_have_sent_is_refused_not_guessed() {
    let mut h = harness();
    let (_, mut first) = h.call(json!({"name": "a"}));
    let (_, mut second) = h.call(json!({"name": "b"}));
    h.upstream_writes(elicitation(5));
    let refusal = h.written();
    assert_eq!(refusal["id"], 5);
    let message = refusal["error"]["message"].as_str().expect("a message");
    assert!(message.contains("does not guess"), "{message}");
    assert!(first.try_recv().is_err() && second.try_recv().is_err());
}

#[test]
fn a_request_the_client_cannot_take_is_refused() {
    let mut h = harness();
    let (_, mut events) = h.call_with(json!({"name": "ask"}), json!({"elicitation": {}}));
    h.upstream_writes(
        json!({"jsonrpc": "2.0", "id": 6, "method": "sampling/createMessage",
                             "params": {"messages": []}}),
    );
    let refusal = h.written();
    assert_eq!(refusal["id"], 6);
    let message = refusal["error"]["message"].as_str().expect("a message");
    assert!(message.contains("did not declare"), "{message}");
    assert!(events.try_recv().is_err());
}

#[test]
fn a_cancelled_call_stays_a_ghost_until_the_ping_after_the_cancellation() {
    let mut h = harness();
    let (id, _events) = h.call(json!({"name": "ask"}));
    h.link.cancel(id, "client left").expect("sent");
    let notice = h.written();
    assert_eq!(notice["method"], "notifications/cancelled");
    assert_eq!(notice["params"]["requestId"], id);
    let ping = h.written();
    assert_eq!(ping["method"], "ping");

    // Sent before the server read the cancellation: still the ghost's, refused.
    h.upstream_writes(elicitation(7));
    let refusal = h.written();
    assert_eq!(refusal["id"], 7);
    assert!(
        refusal["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("was cancelled")),
        "{refusal}"
    );

    // Once the ping is answered, the ghost is gone: nothing is in flight.
    h.upstream_writes(json!({"jsonrpc": "2.0", "id": ping["id"], "result": {}}));
    h.upstream_writes(elicitation(8));
    let no_call = h.written();
    assert_eq!(no_call["id"], 8);
    assert_eq!(no_call["error"]["code"], code::METHOD_NOT_FOUND);
}

#[test]
fn the_gateway_answers_ping_and_roots_that_belong_to_no_call() {
    let mut h = harness();
    h.upstream_writes(json!({"jsonrpc": "2.0", "id": "p", "method": "ping"}));
    assert_eq!(
        h.written(),
        json!({"jsonrpc": "2.0", "id": "p", "result": {}})
    );
    h.upstream_writes(json!({"jsonrpc": "2.0", "id": 9, "method": "roots/list"}));
    let roots = h.written();
    assert_eq!(roots["result"]["roots"], json!([{"uri": "file:///work"}]));
}

#[test]
fn a_closed_link_fails_the_calls_in_flight_and_refuses_new_ones() {
    let mut h = harness();
    let (_, mut events) = h.call(json!({"name": "slow"}));
    h.link
        .close(UpstreamError::Exited("status 137 (signal 9)".into()));
    match events.try_recv() {
        Ok(Err(UpstreamError::Exited(status))) => assert_eq!(status, "status 137 (signal 9)"),
        other => panic!("expected the exit, got {other:?}"),
    }
    assert!(h.link.is_closed());
    let capabilities = Map::new();
    let refused = h.link.start(Outgoing {
        method: "tools/list",
        params: None,
        may_ask: false,
        grants: Grants::default(),
        capabilities: &capabilities,
    });
    assert!(matches!(refused, Err(UpstreamError::Exited(_))));
}

#[test]
fn a_stateless_process_gets_the_callers_capabilities_in_meta() {
    let mut h = harness();
    h.link.set_generation(Generation::Stateless);
    let capabilities = json!({"sampling": {}})
        .as_object()
        .cloned()
        .unwrap_or_default();
    h.link
        .start(Outgoing {
            method: "tools/call",
            params: Some(json!({"name": "echo"})),
            may_ask: true,
            grants: Grants::default(),
            capabilities: &capabilities,
        })
        .expect("open");
    let meta = &h.written()["params"]["_meta"];
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert_eq!(
        meta["io.modelcontextprotocol/clientCapabilities"]["sampling"],
        json!({})
    );
}

#[test]
fn a_line_that_is_not_json_rpc_is_skipped() {
    let mut h = harness();
    let (_, mut events) = h.call(json!({"name": "echo"}));
    h.link.dispatch(b"Server started on stdio");
    assert!(events.try_recv().is_err());
    h.nothing_written();
}
