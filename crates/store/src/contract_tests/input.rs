//! Input requests and their answers: keys, exactly-once answers, MRTR rounds and the
//! runner's upstream state.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

pub(crate) async fn input_keys_are_never_reused(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let id = create(&store).await;
    let mut keys = vec![add_input(&store, &id).await];
    let round = store
        .tasks
        .add_input_requests(&id, vec![elicit(), elicit()])
        .await
        .unwrap()
        .unwrap();
    keys.extend(round);
    // Answered, taken and withdrawn keys stay used.
    let responses = keys
        .iter()
        .map(|key| (key.clone(), json!({"action": "accept"})))
        .collect();
    accept(&store, &id, responses).await;
    store.tasks.take_answers(&id).await.unwrap();
    let withdrawn = add_input(&store, &id).await;
    store
        .tasks
        .withdraw_input_request(&id, &withdrawn)
        .await
        .unwrap();
    keys.push(withdrawn);
    keys.push(add_input(&store, &id).await);
    assert_eq!(
        keys,
        ["input-0", "input-1", "input-2", "input-3", "input-4"]
    );
}

pub(crate) async fn an_answer_is_accepted_once_and_taken_once(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let id = create(&store).await;
    let k0 = add_input(&store, &id).await;
    let k1 = add_input(&store, &id).await;
    let first = json!({"action": "accept", "content": {"n": 1}});
    let tasks = &store.tasks;
    assert_eq!(
        accept(&store, &id, answer(&k0, first.clone())).await,
        accepted(&[&k0])
    );
    assert_eq!(fetch(&store, &id).await.status, TaskStatus::InputRequired);
    // The same key again, alone or with a key never asked for: nothing is accepted.
    let second = json!({"action": "accept", "content": {"n": 2}});
    assert_eq!(
        accept(&store, &id, answer(&k0, second.clone())).await,
        accepted(&[])
    );
    let mut stray = answer(&k0, second);
    stray.insert("input-9".into(), json!({"action": "accept"}));
    assert_eq!(accept(&store, &id, stray).await, accepted(&[]));
    let last = json!({"action": "decline"});
    assert_eq!(
        accept(&store, &id, answer(&k1, last.clone())).await,
        accepted(&[&k1])
    );
    assert_eq!(fetch(&store, &id).await.status, TaskStatus::Working);

    let mut taken = tasks.take_answers(&id).await.unwrap();
    taken.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(taken, vec![(k0, first), (k1, last)]);
    assert!(tasks.take_answers(&id).await.unwrap().is_empty());
}

pub(crate) async fn a_round_of_input_requests_lands_at_once(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let id = create(&store).await;
    // A reader on another instance never sees part of the round.
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (tasks, id, done) = (subject.instance(OTHER).tasks, id.clone(), done.clone());
        tokio::spawn(async move {
            let mut seen = BTreeSet::new();
            while !done.load(Ordering::Acquire) {
                let task = tasks.get(&id, ALICE).await.unwrap().unwrap();
                seen.insert(task.input_requests.len());
            }
            seen
        })
    };
    let keys = store
        .tasks
        .add_input_requests(&id, vec![elicit(), elicit(), elicit()])
        .await
        .unwrap()
        .unwrap();
    done.store(true, Ordering::Release);
    assert_eq!(keys, ["input-0", "input-1", "input-2"]);
    let seen = reader.await.unwrap();
    assert!(seen.iter().all(|n| [0, 3].contains(n)), "{seen:?}");
    let waiting = fetch(&store, &id).await;
    assert_eq!(waiting.status, TaskStatus::InputRequired);
    assert_eq!(waiting.input_requests.len(), 3);
}

pub(crate) async fn upstream_state_round_trips(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let other = subject.instance(OTHER);
    let id = create(&store).await;
    let round = json!({"round": 1, "requestState": "opaque", "keys": {"input-0": "q"}});
    let tasks = &store.tasks;
    tasks
        .set_upstream_state(&id, Some(round.clone()))
        .await
        .unwrap();
    assert_eq!(fetch(&other, &id).await.upstream_state, Some(round));
    let next = json!({"round": 2});
    tasks
        .set_upstream_state(&id, Some(next.clone()))
        .await
        .unwrap();
    assert_eq!(fetch(&other, &id).await.upstream_state, Some(next.clone()));
    tasks.set_upstream_state(&id, None).await.unwrap();
    assert_eq!(fetch(&other, &id).await.upstream_state, None);

    // It goes with the end of the task, a late write does not bring it back, and
    // writing it never creates a task.
    tasks
        .set_upstream_state(&id, Some(next.clone()))
        .await
        .unwrap();
    let result = Outcome::Completed(raw("{}"));
    assert!(tasks.finish(&id, result).await.unwrap());
    assert_eq!(fetch(&other, &id).await.upstream_state, None);
    tasks
        .set_upstream_state(&id, Some(next.clone()))
        .await
        .unwrap();
    assert_eq!(fetch(&other, &id).await.upstream_state, None);
    let unknown = uuid::Uuid::new_v4().to_string();
    tasks
        .set_upstream_state(&unknown, Some(next))
        .await
        .unwrap();
    assert!(tasks.get(&unknown, ALICE).await.unwrap().is_none());
}
