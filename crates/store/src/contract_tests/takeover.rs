//! Taking over a gone instance's tasks: exactly one instance wins each task, the round
//! stays or goes as asked, and a task taken over too often fails.

use super::*;
use crate::{Adoption, Takeover};

fn takeover<'a>(to: &'a str, keep_round: bool, max: u32) -> Takeover<'a> {
    Takeover {
        from: OWNER,
        to,
        message: "resumed",
        counts: true,
        max_takeovers: max,
        keep_round,
        exhausted: Outcome::gateway_failure("taken over too often"),
    }
}

pub(crate) async fn racing_takeovers_have_one_winner(subject: &impl Subject) {
    const TASKS: usize = 6;
    let owner = subject.instance(OWNER);
    let mut ids = Vec::new();
    for _ in 0..TASKS {
        ids.push(create(&owner).await);
    }
    let done = ids.pop().unwrap();
    owner
        .tasks
        .finish(&done, Outcome::gateway_failure("ended"))
        .await
        .unwrap();
    let orphans = owner.membership.orphans(OWNER).await.unwrap();
    let mut orphan_ids: Vec<String> = orphans.iter().map(|t| t.task_id.clone()).collect();
    orphan_ids.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(orphan_ids, expected, "orphans are the unfinished tasks");

    let racers: Vec<_> = [OTHER, "gw-3", "gw-4"]
        .into_iter()
        .map(|to| {
            let membership = subject.instance(to).membership;
            let ids = ids.clone();
            tokio::spawn(async move {
                let adoptions = membership
                    .take_over(&ids, &takeover(to, false, 2))
                    .await
                    .unwrap();
                (to, adoptions)
            })
        })
        .collect();
    let mut winners: std::collections::HashMap<String, &str> = Default::default();
    for racer in racers {
        let (to, adoptions) = racer.await.unwrap();
        for adoption in adoptions {
            if let Adoption::Adopted(task) = adoption {
                assert_eq!(task.owner, to);
                assert_eq!(task.takeovers, 1);
                assert_eq!(task.status_message.as_deref(), Some("resumed"));
                assert!(
                    winners.insert(task.task_id.clone(), to).is_none(),
                    "two winners"
                );
            }
        }
    }
    assert_eq!(
        winners.len(),
        ids.len(),
        "every task has exactly one new owner"
    );
    for id in &ids {
        assert_eq!(fetch(&owner, id).await.owner, winners[id]);
    }
    // The finished task was left alone, and nothing is the gone owner's any more.
    assert_eq!(fetch(&owner, &done).await.owner, OWNER);
    assert!(owner.membership.orphans(OWNER).await.unwrap().is_empty());
}

pub(crate) async fn a_takeover_keeps_or_withdraws_the_round(subject: &impl Subject) {
    let store = subject.instance(OTHER);
    // Run again from the start: the question and its answer go, the keys keep counting.
    let again = create(&store).await;
    add_input(&store, &again).await;
    let second = add_input(&store, &again).await;
    accept(&store, &again, answer(&second, json!({"ok": true}))).await;
    store
        .tasks
        .set_upstream_state(&again, Some(json!({"mrtr": {}})))
        .await
        .unwrap();
    let adoptions = store
        .membership
        .take_over(std::slice::from_ref(&again), &takeover(OTHER, false, 2))
        .await
        .unwrap();
    assert!(matches!(adoptions[..], [Adoption::Adopted(_)]));
    let task = fetch(&store, &again).await;
    assert_eq!(task.status, TaskStatus::Working);
    assert!(task.input_requests.is_empty() && task.answers.is_empty());
    assert_eq!(task.upstream_state, None);
    assert_eq!(
        add_input(&store, &again).await,
        "input-2",
        "a key is never reused"
    );

    // Keep the round: the question and the answer stay as they were.
    let kept = create(&store).await;
    let asked = add_input(&store, &kept).await;
    let adoptions = store
        .membership
        .take_over(std::slice::from_ref(&kept), &takeover(OTHER, true, 2))
        .await
        .unwrap();
    let Some(Adoption::Adopted(task)) = adoptions.into_iter().next() else {
        panic!("not adopted");
    };
    assert_eq!(task.status, TaskStatus::InputRequired);
    assert!(task.input_requests.contains_key(&asked));
    assert_eq!(fetch(&store, &kept).await.owner, OTHER);
}

pub(crate) async fn a_task_taken_over_too_often_fails(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let id = create(&store).await;
    let mut from = OWNER.to_owned();
    for (n, to) in ["gw-a", "gw-b"].into_iter().enumerate() {
        let mut step = takeover(to, false, 2);
        step.from = &from;
        let adoptions = store
            .membership
            .take_over(std::slice::from_ref(&id), &step)
            .await
            .unwrap();
        let Some(Adoption::Adopted(task)) = adoptions.into_iter().next() else {
            panic!("takeover {n} refused");
        };
        assert_eq!(task.takeovers, n as u32 + 1);
        from = to.to_owned();
    }
    // A graceful hand-over does not count.
    let mut handover = takeover("gw-c", false, 2);
    handover.from = &from;
    handover.counts = false;
    let adoptions = store
        .membership
        .take_over(std::slice::from_ref(&id), &handover)
        .await
        .unwrap();
    assert!(matches!(adoptions[..], [Adoption::Adopted(_)]));
    let mut third = takeover("gw-d", false, 2);
    third.from = "gw-c";
    let adoptions = store
        .membership
        .take_over(std::slice::from_ref(&id), &third)
        .await
        .unwrap();
    assert!(matches!(adoptions[..], [Adoption::Exhausted]));
    let task = fetch(&store, &id).await;
    assert_eq!(task.status, TaskStatus::Failed);
    assert_eq!(task.status_message.as_deref(), Some("taken over too often"));
    assert_eq!(task.error.as_ref().unwrap().code, -32603);
}

pub(crate) async fn gone_owners_orphans_fail_once(subject: &impl Subject) {
    let store = subject.instance(OTHER);
    let ids = vec![create(&store).await, create(&store).await];
    let failed = store
        .membership
        .fail_orphans(OWNER, &ids, "gateway instance lost")
        .await
        .unwrap();
    assert_eq!(failed, 2);
    let again = store
        .membership
        .fail_orphans(OWNER, &ids, "gateway instance lost")
        .await
        .unwrap();
    assert_eq!(again, 0, "an ended task is not failed twice");
    let task = fetch(&store, &ids[0]).await;
    assert_eq!(
        task.status_message.as_deref(),
        Some("gateway instance lost")
    );
    // Another owner's task is not touched.
    let theirs = {
        let task = record(OTHER);
        let id = task.task_id.clone();
        store.tasks.create(task).await.unwrap();
        id
    };
    let failed = store
        .membership
        .fail_orphans(OWNER, std::slice::from_ref(&theirs), "lost")
        .await
        .unwrap();
    assert_eq!(failed, 0);
}
