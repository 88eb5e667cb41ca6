//! Several instances acting on one task at once: one of them wins, exactly once.

use std::collections::BTreeSet;

use super::*;

pub(crate) async fn racing_answers_to_one_key_are_accepted_once(subject: &impl Subject) {
    const TASKS: usize = 8;
    const RACERS: usize = 12;
    let instances = [OWNER, OTHER, "gw-3"].map(|id| subject.instance(id));
    let mut ids = Vec::new();
    for _ in 0..TASKS {
        let id = create(&instances[0]).await;
        add_input(&instances[0], &id).await;
        ids.push(id);
    }
    let mut racers = Vec::new();
    for id in &ids {
        for n in 0..RACERS {
            let tasks = instances[n % instances.len()].tasks.clone();
            let (id, response) = (id.clone(), answer("input-0", json!({"n": n})));
            racers.push(tokio::spawn(async move {
                let outcome = tasks.accept_input_responses(&id, ALICE, response).await;
                (id, outcome.unwrap())
            }));
        }
    }
    let mut winners = BTreeSet::new();
    for racer in racers {
        let (id, outcome) = racer.await.unwrap();
        if outcome == accepted(&["input-0"]) {
            assert!(winners.insert(id), "an answer was accepted twice");
        } else {
            assert_eq!(outcome, accepted(&[]));
        }
    }
    assert_eq!(winners.len(), TASKS, "every task accepted one answer");

    // Takers racing on each task: every answer is taken exactly once.
    let mut takers = Vec::new();
    for id in &ids {
        for instance in &instances {
            let (tasks, id) = (instance.tasks.clone(), id.clone());
            takers.push(tokio::spawn(async move {
                tasks.take_answers(&id).await.unwrap()
            }));
        }
    }
    let mut taken = 0;
    for taker in takers {
        taken += taker.await.unwrap().len();
    }
    assert_eq!(taken, TASKS);
}

pub(crate) async fn cancel_racing_finish_has_one_winner(subject: &impl Subject) {
    const TASKS: usize = 16;
    let (owner, other) = (subject.instance(OWNER), subject.instance(OTHER));
    let mut races = Vec::new();
    for _ in 0..TASKS {
        let id = create(&owner).await;
        let finisher = {
            let (tasks, id) = (owner.tasks.clone(), id.clone());
            tokio::spawn(async move {
                let result = Outcome::Completed(raw(r#"{"content":[]}"#));
                tasks.finish(&id, result).await.unwrap()
            })
        };
        let canceller = {
            let (tasks, id) = (other.tasks.clone(), id.clone());
            tokio::spawn(
                async move { tasks.cancel(&id, ALICE, CANCELLED_BY_CLIENT).await.unwrap() },
            )
        };
        races.push((id, finisher, canceller));
    }
    for (id, finisher, canceller) in races {
        let finished = finisher.await.unwrap();
        let cancelled = canceller.await.unwrap();
        let status = fetch(&owner, &id).await.status;
        if finished {
            assert_eq!(cancelled, CancelOutcome::AlreadyTerminal);
            assert_eq!(status, TaskStatus::Completed);
        } else {
            assert_eq!(
                cancelled,
                CancelOutcome::Cancelled {
                    owner: OWNER.into()
                }
            );
            assert_eq!(status, TaskStatus::Cancelled);
        }
    }
}
