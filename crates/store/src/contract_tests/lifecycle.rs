//! Who sees a task, how it moves between states, and when it is gone.

use std::time::Instant;

use super::*;

pub(crate) async fn a_task_is_seen_only_by_its_principal(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    store.tasks.ping().await.unwrap();
    let task = record(OWNER);
    let id = task.task_id.clone();
    store.tasks.create(task.clone()).await.unwrap();
    assert!(matches!(
        store.tasks.create(task.clone()).await,
        Err(StoreError::Duplicate(_))
    ));
    let got = fetch(&subject.instance(OTHER), &id).await;
    assert_eq!(
        (got.status, got.owner.as_str(), got.request.get()),
        (TaskStatus::Working, OWNER, task.request.get())
    );
    assert_eq!(
        (got.created_at_ms, got.ttl_ms, got.poll_interval_ms),
        (task.created_at_ms, task.ttl_ms, task.poll_interval_ms)
    );

    // Another principal gets what an unknown id gets, and changes nothing.
    let key = add_input(&store, &id).await;
    let response = answer(&key, json!({"action": "accept"}));
    for unknown in [id.as_str(), &uuid::Uuid::new_v4().to_string(), "not-a-task"] {
        let principal = if unknown == id { "mallory" } else { ALICE };
        assert!(store.tasks.get(unknown, principal).await.unwrap().is_none());
        assert_eq!(
            store
                .tasks
                .cancel(unknown, principal, CANCELLED_BY_CLIENT)
                .await
                .unwrap(),
            CancelOutcome::NotFound
        );
        assert_eq!(
            store
                .tasks
                .accept_input_responses(unknown, principal, response.clone())
                .await
                .unwrap(),
            UpdateOutcome::NotFound
        );
    }
    let untouched = fetch(&store, &id).await;
    assert_eq!(untouched.status, TaskStatus::InputRequired);
    assert!(untouched.input_requests.contains_key(&key));

    store.tasks.delete(&id).await.unwrap();
    assert!(store.tasks.get(&id, ALICE).await.unwrap().is_none());
    store.tasks.delete(&id).await.unwrap();
}

pub(crate) async fn input_required_then_working_again(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let id = create(&store).await;
    let key = add_input(&store, &id).await;
    let waiting = fetch(&store, &id).await;
    assert_eq!(waiting.status, TaskStatus::InputRequired);
    assert_eq!(waiting.input_requests.get(&key), Some(&elicit()));

    let response = json!({"action": "accept", "content": {"name": "Ada"}});
    let other = subject.instance(OTHER);
    assert_eq!(
        accept(&other, &id, answer(&key, response.clone())).await,
        accepted(&[&key])
    );
    let working = fetch(&store, &id).await;
    assert_eq!(working.status, TaskStatus::Working);
    assert!(working.input_requests.is_empty());
    assert_eq!(
        store.tasks.take_answers(&id).await.unwrap(),
        vec![(key, response)]
    );

    // An input request the upstream withdraws leaves the task working again.
    let withdrawn = add_input(&store, &id).await;
    store
        .tasks
        .withdraw_input_request(&id, "input-99")
        .await
        .unwrap();
    assert_eq!(fetch(&store, &id).await.status, TaskStatus::InputRequired);
    store
        .tasks
        .withdraw_input_request(&id, &withdrawn)
        .await
        .unwrap();
    let working = fetch(&store, &id).await;
    assert_eq!(working.status, TaskStatus::Working);
    assert!(working.input_requests.is_empty());
}

pub(crate) async fn completed_keeps_the_result_byte_for_byte(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let id = create(&store).await;
    store
        .tasks
        .set_status_message(&id, "half way")
        .await
        .unwrap();
    assert_eq!(
        fetch(&store, &id).await.status_message.as_deref(),
        Some("half way")
    );
    // Big integers and odd spacing must come back unchanged.
    let result = r#"{"content":[], "big":123456789012345678901234567890}"#;
    assert!(
        store
            .tasks
            .finish(&id, Outcome::Completed(raw(result)))
            .await
            .unwrap()
    );
    let done = fetch(&subject.instance(OTHER), &id).await;
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.result.as_ref().map(|r| r.get()), Some(result));
    // The progress text went with the work it described.
    assert_eq!(done.status_message, None);
    assert!(done.error.is_none());
}

/// A change receiver's first message is `WAKE_ALL`, once it listens; every change
/// announced after that, by any instance, follows. Dropped, it hears nothing more, and
/// a new one starts with `WAKE_ALL` again.
pub(crate) async fn a_change_receiver_hears_wake_all_first_then_every_change(
    subject: &impl Subject,
) {
    let (store, other) = (subject.instance(OWNER), subject.instance(OTHER));
    let next = async |heard: &mut crate::ChangeReceiver| {
        tokio::time::timeout(PATIENCE, heard.recv())
            .await
            .expect("a change in time")
            .expect("the receiver open")
    };
    let change = |task_id: &str| TaskChange {
        task_id: task_id.into(),
        session: None,
        progress: None,
    };
    for round in ["first", "again"] {
        let mut heard = other.changes.changes();
        assert_eq!(next(&mut heard).await, TaskChange::everything(), "{round}");
        store.changes.announce(&change(round)).await.unwrap();
        assert_eq!(next(&mut heard).await, change(round));
        other.changes.announce(&change("its-own")).await.unwrap();
        assert_eq!(next(&mut heard).await, change("its-own"));
    }
}

/// A change announced with the finish that makes it reaches another instance, which
/// then reads the task as ended; a finish that moves nothing says so, and still sends
/// its announcement or leaves it to the caller.
pub(crate) async fn an_end_announced_with_its_finish_is_heard_after_it(subject: &impl Subject) {
    let (store, other) = (subject.instance(OWNER), subject.instance(OTHER));
    let mut heard = other.changes.changes();
    let change = |task_id: &str| TaskChange {
        task_id: task_id.into(),
        session: Some("s-1".into()),
        progress: None,
    };
    // Announced until heard: the subscription may still be on its way.
    let probe = change("probe");
    let deadline = Instant::now() + PATIENCE;
    'subscribed: loop {
        assert!(Instant::now() < deadline, "no announcement was ever heard");
        store.changes.announce(&probe).await.unwrap();
        while let Ok(Some(seen)) =
            tokio::time::timeout(Duration::from_millis(100), heard.recv()).await
        {
            if seen == probe {
                break 'subscribed;
            }
        }
    }
    let id = create(&store).await;
    let ended = change(&id);
    for moves in [true, false] {
        let outcome = Outcome::Completed(raw(r#"{"content":[]}"#));
        let (finished, announced) = store.tasks.finish_announcing(&id, outcome, &ended).await;
        assert_eq!(finished.unwrap(), moves);
        if !announced {
            store.changes.announce(&ended).await.unwrap();
        }
        let seen = loop {
            let next = tokio::time::timeout(PATIENCE, heard.recv()).await;
            match next.expect("the end was never announced") {
                Some(seen) if seen == probe => continue,
                seen => break seen,
            }
        };
        assert_eq!(seen.as_ref(), Some(&ended));
        assert_eq!(fetch(&other, &id).await.status, TaskStatus::Completed);
    }
}

/// An ended task keeps what `tasks/get` and the operators read, not what only its running
/// call needed: no resume data or round state, and of the call the tool's name unless
/// the task keeps its arguments.
pub(crate) async fn an_ended_task_sheds_what_only_its_call_needed(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    // A token no float holds: it must come back digit for digit.
    let call = r#"{"name":"echo","arguments":{"text":"secret"},"_meta":{"progressToken":12345678901234567891,"other":1}}"#;
    let new_task = |keep_arguments: bool, request: &str| {
        let mut task = record(OWNER);
        task.request = raw(request);
        task.resume = Some(json!({"capabilities": {}}));
        task.keep_arguments = keep_arguments;
        task
    };
    let plain = new_task(false, call);
    let kept = new_task(true, call);
    let nameless = new_task(false, r#"{"arguments":{"a":1}}"#);
    for task in [&plain, &kept, &nameless] {
        store.tasks.create(task.clone()).await.unwrap();
        let state = Some(json!({"requestState": "round-1"}));
        store
            .tasks
            .set_upstream_state(&task.task_id, state)
            .await
            .unwrap();
        let running = fetch(&store, &task.task_id).await;
        assert!(running.resume.is_some() && running.upstream_state.is_some());
        assert_eq!(running.request.get(), task.request.get());
    }
    let result = r#"{"content":[{"type":"text","text":"secret"}]}"#;
    assert!(
        store
            .tasks
            .finish(&plain.task_id, Outcome::Completed(raw(result)))
            .await
            .unwrap()
    );
    store
        .tasks
        .cancel(&kept.task_id, ALICE, CANCELLED_BY_CLIENT)
        .await
        .unwrap();
    let orphan = [nameless.task_id.clone()];
    store
        .membership
        .fail_orphans(OWNER, &orphan, "owner gone")
        .await
        .unwrap();

    let other = subject.instance(OTHER);
    let done = fetch(&other, &plain.task_id).await;
    assert_eq!(
        done.request.get(),
        r#"{"name":"echo","_meta":{"progressToken":12345678901234567891}}"#
    );
    assert_eq!(done.result.as_ref().map(|r| r.get()), Some(result));
    let cancelled = fetch(&other, &kept.task_id).await;
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    assert_eq!(cancelled.request.get(), call);
    let failed = fetch(&other, &nameless.task_id).await;
    assert_eq!(failed.status, TaskStatus::Failed);
    assert_eq!(failed.request.get(), "{}");
    for ended in [&done, &cancelled, &failed] {
        assert_eq!((&ended.resume, &ended.upstream_state), (&None, &None));
    }
}

pub(crate) async fn failed_keeps_the_error_and_says_why(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let id = create(&store).await;
    let answered = add_input(&store, &id).await;
    add_input(&store, &id).await;
    // One request answered (the answer not yet taken by the runner), one outstanding:
    // the end drops both, and the answer.
    let response = answer(&answered, json!({"action": "accept"}));
    assert_eq!(accept(&store, &id, response).await, accepted(&[&answered]));
    let failure = Outcome::gateway_failure("upstream lost");
    assert!(store.tasks.finish(&id, failure).await.unwrap());
    let failed = fetch(&store, &id).await;
    assert_eq!(failed.status, TaskStatus::Failed);
    assert_eq!(failed.status_message.as_deref(), Some("upstream lost"));
    assert_eq!(failed.error.as_ref().map(|e| e.code), Some(-32603));
    assert!(failed.input_requests.is_empty());
    assert!(failed.answers.is_empty());
    assert!(failed.result.is_none());
}

pub(crate) async fn cancelled_drops_outstanding_input_and_names_the_owner(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let id = create(&store).await;
    let first = add_input(&store, &id).await;
    add_input(&store, &id).await;
    accept(&store, &id, answer(&first, json!({"action": "decline"}))).await;
    // Any instance may cancel; the answer names the owner that must stop the call.
    assert_eq!(
        subject
            .instance(OTHER)
            .tasks
            .cancel(&id, ALICE, CANCELLED_BY_CLIENT)
            .await
            .unwrap(),
        CancelOutcome::Cancelled {
            owner: OWNER.into()
        }
    );
    let cancelled = fetch(&store, &id).await;
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    assert_eq!(
        cancelled.status_message.as_deref(),
        Some("cancelled by the client")
    );
    assert!(cancelled.input_requests.is_empty());
    assert!(store.tasks.take_answers(&id).await.unwrap().is_empty());
}

pub(crate) async fn terminal_states_are_final(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let ends = [
        Outcome::Completed(raw(r#"{"content":[]}"#)),
        Outcome::gateway_failure("boom"),
        Outcome::Cancelled {
            message: "cancelled by the client".into(),
        },
    ];
    for end in ends {
        let id = create(&store).await;
        let status = end.status();
        if status == TaskStatus::Cancelled {
            assert!(matches!(
                store
                    .tasks
                    .cancel(&id, ALICE, CANCELLED_BY_CLIENT)
                    .await
                    .unwrap(),
                CancelOutcome::Cancelled { .. }
            ));
        } else {
            assert!(store.tasks.finish(&id, end).await.unwrap());
        }
        let before = fetch(&store, &id).await;

        let late = Outcome::Completed(raw(r#"{"late":true}"#));
        assert!(!store.tasks.finish(&id, late).await.unwrap(), "{status:?}");
        let late = Outcome::gateway_failure("late");
        assert!(!store.tasks.finish(&id, late).await.unwrap(), "{status:?}");
        assert_eq!(
            store
                .tasks
                .cancel(&id, ALICE, CANCELLED_BY_CLIENT)
                .await
                .unwrap(),
            CancelOutcome::AlreadyTerminal
        );
        assert!(
            store
                .tasks
                .add_input_request(&id, elicit())
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .tasks
                .add_input_requests(&id, vec![elicit(), elicit()])
                .await
                .unwrap()
                .is_none()
        );
        store.tasks.set_status_message(&id, "late").await.unwrap();
        let response = answer("input-0", json!({"action": "accept"}));
        assert_eq!(accept(&store, &id, response).await, accepted(&[]));

        let after = fetch(&store, &id).await;
        assert_eq!(after.status, status);
        assert_eq!(after.status_message, before.status_message);
        assert_eq!(
            after.result.as_ref().map(|r| r.get()),
            before.result.as_ref().map(|r| r.get())
        );
        assert_eq!(after.error, before.error);
        assert!(after.input_requests.is_empty());
    }
}

pub(crate) async fn an_expired_task_is_gone(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    // Created 10 s ago with a 5 s TTL: past its expiry from the start.
    let mut task = record(OWNER);
    task.created_at_ms -= 10_000;
    task.last_updated_at_ms = task.created_at_ms;
    task.ttl_ms = 5_000;
    let id = task.task_id.clone();
    store.tasks.create(task).await.unwrap();
    assert_gone(&store, &id).await;

    // A live task becomes gone once its TTL passes.
    let mut task = record(OWNER);
    task.ttl_ms = 300;
    let id = task.task_id.clone();
    store.tasks.create(task).await.unwrap();
    fetch(&store, &id).await;
    let start = Instant::now();
    while store.tasks.get(&id, ALICE).await.unwrap().is_some() {
        assert!(start.elapsed() < PATIENCE, "the task outlived its TTL");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_gone(&store, &id).await;
}

/// Every operation treats `task_id` as unknown.
async fn assert_gone(store: &Store, task_id: &str) {
    let tasks = &store.tasks;
    assert!(tasks.get(task_id, ALICE).await.unwrap().is_none());
    let response = answer("input-0", json!({"action": "accept"}));
    assert_eq!(
        accept(store, task_id, response).await,
        UpdateOutcome::NotFound
    );
    assert_eq!(
        tasks
            .cancel(task_id, ALICE, CANCELLED_BY_CLIENT)
            .await
            .unwrap(),
        CancelOutcome::NotFound
    );
    let late = Outcome::gateway_failure("late");
    assert!(!tasks.finish(task_id, late).await.unwrap());
    assert!(
        tasks
            .add_input_request(task_id, elicit())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        tasks
            .add_input_requests(task_id, vec![elicit()])
            .await
            .unwrap()
            .is_none()
    );
    assert!(tasks.take_answers(task_id).await.unwrap().is_empty());
    tasks.set_status_message(task_id, "late").await.unwrap();
    tasks
        .set_upstream_state(task_id, Some(json!({"round": 1})))
        .await
        .unwrap();
    tasks
        .withdraw_input_request(task_id, "input-0")
        .await
        .unwrap();
    assert!(tasks.get(task_id, ALICE).await.unwrap().is_none());
}
