//! The outbox: events written with their transition, in order per task, claimed with a
//! visibility deadline, settled only as the head, dead letters and redelivery.

use super::*;
use crate::outbox::{EventType, OutboxPlan, Route};

const SUB: &str = "5ub0000000000001";
const ALL: &str = "5ub0000000000002";

/// `SUB` hears the four default events; `ALL` hears every event, with results.
fn plan() -> OutboxPlan {
    OutboxPlan {
        routes: vec![
            Route {
                subscription: SUB.into(),
                events: vec![
                    EventType::InputRequired,
                    EventType::Completed,
                    EventType::Failed,
                    EventType::Cancelled,
                ],
                include_result: false,
            },
            Route {
                subscription: ALL.into(),
                events: EventType::ALL.to_vec(),
                include_result: true,
            },
        ],
    }
}

fn routed(subject: &impl Subject, id: &str) -> Store {
    let store = subject.instance(id);
    store.outbox.route(plan());
    store
}

/// Every due head of `sub` claimed now for a minute by `claimer`: (task, type) pairs.
async fn claim_all(store: &Store, sub: &str, claimer: &str) -> Vec<crate::Claimed> {
    store
        .outbox
        .claim(sub, claimer, now_ms() + 1, 60_000, 100)
        .await
        .unwrap()
}

pub(crate) async fn a_transition_writes_its_events_and_one_that_fails_writes_none(
    subject: &impl Subject,
) {
    let store = routed(subject, OWNER);
    let id = create(&store).await;
    assert_eq!(
        store
            .tasks
            .cancel(&id, ALICE, CANCELLED_BY_CLIENT)
            .await
            .unwrap(),
        CancelOutcome::Cancelled {
            owner: OWNER.into()
        }
    );
    // A late finish after the cancel does not happen, and announces nothing.
    let late = Outcome::Completed(raw(r#"{"content":[]}"#));
    assert!(!store.tasks.finish(&id, late).await.unwrap());

    let heard = store.outbox.pending(SUB, 10).await.unwrap();
    let kinds: Vec<&str> = heard.iter().map(|e| e.event.kind.as_str()).collect();
    assert_eq!(kinds, ["task.cancelled"]);
    let event = &heard[0].event;
    assert_eq!(
        (
            event.task.as_str(),
            event.status.as_str(),
            event.principal.as_str()
        ),
        (id.as_str(), "cancelled", ALICE)
    );
    assert_eq!(event.tool.as_deref(), Some("echo"));
    assert_eq!(event.msg.as_deref(), Some(CANCELLED_BY_CLIENT));
    assert!(event.id.starts_with("msg_") && event.request.is_none());

    // Pending events list by when they happened; two of one millisecond in any order.
    let mut all = store.outbox.pending(ALL, 10).await.unwrap();
    all.sort_by_key(|e| e.event.kind != "task.created");
    let kinds: Vec<&str> = all.iter().map(|e| e.event.kind.as_str()).collect();
    assert_eq!(kinds, ["task.created", "task.cancelled"]);
    assert_eq!(all[1].event.request.as_deref(), Some(r#"{"name":"echo"}"#));
    assert_ne!(all[1].event.id, heard[0].event.id, "an id per subscription");
    let stats = store.outbox.stats(SUB).await.unwrap();
    assert_eq!((stats.pending, stats.dead), (1, 0));
    assert!(stats.oldest_at_ms.is_some_and(|at| at <= now_ms()));
}

pub(crate) async fn a_tasks_events_are_delivered_in_order(subject: &impl Subject) {
    let store = routed(subject, OWNER);
    let first = create(&store).await;
    let second = create(&store).await;
    add_input(&store, &first).await;
    // A second round while input is still required is no new event.
    add_input(&store, &first).await;
    let done = Outcome::Completed(raw(r#"{"content":[]}"#));
    assert!(store.tasks.finish(&first, done.clone()).await.unwrap());
    assert!(store.tasks.finish(&second, done).await.unwrap());

    // Only each task's head is deliverable.
    let claimed = claim_all(&store, SUB, "gw-a").await;
    let mut heads: Vec<(String, String)> = claimed
        .iter()
        .map(|c| (c.event.task.clone(), c.event.kind.clone()))
        .collect();
    heads.sort();
    let mut want = vec![
        (first.clone(), "task.input_required".to_owned()),
        (second.clone(), "task.completed".to_owned()),
    ];
    want.sort();
    assert_eq!(heads, want);
    assert!(claimed.iter().all(|c| c.attempts == 1));
    let head = claimed.iter().find(|c| c.event.task == first).unwrap();
    assert!(
        claim_all(&store, SUB, "gw-b").await.is_empty(),
        "claimed heads are invisible"
    );
    assert!(store.outbox.ack(SUB, &first, &head.event.id).await.unwrap());
    assert!(!store.outbox.ack(SUB, &first, &head.event.id).await.unwrap());

    let next = claim_all(&store, SUB, "gw-b").await;
    assert_eq!(next.len(), 1);
    assert_eq!(
        (next[0].event.task.as_str(), next[0].event.kind.as_str()),
        (first.as_str(), "task.completed")
    );
    assert_eq!(store.outbox.stats(SUB).await.unwrap().pending, 2);
}

pub(crate) async fn an_expired_claim_is_claimed_again(subject: &impl Subject) {
    let store = routed(subject, OWNER);
    let id = create(&store).await;
    assert!(
        store
            .tasks
            .finish(&id, Outcome::gateway_failure("lost"))
            .await
            .unwrap()
    );
    let now = now_ms() + 1;
    let first = store
        .outbox
        .claim(SUB, "gw-a", now, 1_000, 10)
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert!(
        store
            .outbox
            .claim(SUB, "gw-b", now + 999, 1_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // gw-a died: its claim ends, and another instance gets the same event.
    let other = subject.instance(OTHER);
    let again = other
        .outbox
        .claim(SUB, "gw-b", now + 1_000, 1_000, 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].event.id.as_str(), again[0].attempts),
        (first[0].event.id.as_str(), 2)
    );
    assert_eq!(again[0].event, first[0].event);
    let entries = other.outbox.pending(SUB, 10).await.unwrap();
    assert_eq!(entries[0].attempts.claimer.as_deref(), Some("gw-b"));
}

pub(crate) async fn retries_dead_letters_and_redelivery(subject: &impl Subject) {
    let store = routed(subject, OWNER);
    let id = create(&store).await;
    assert!(
        store
            .tasks
            .finish(&id, Outcome::gateway_failure("lost"))
            .await
            .unwrap()
    );
    let claimed = claim_all(&store, SUB, "gw-a").await;
    let event = claimed[0].event.id.clone();
    let later = now_ms() + 60_000;
    assert!(
        store
            .outbox
            .retry(SUB, &id, &event, later, "HTTP 503")
            .await
            .unwrap()
    );
    let entry = &store.outbox.pending(SUB, 10).await.unwrap()[0];
    assert_eq!(
        (
            entry.attempts.attempts,
            entry.attempts.error.as_deref(),
            entry.attempts.next
        ),
        (1, Some("HTTP 503"), Some(later))
    );
    assert!(
        claim_all(&store, SUB, "gw-a").await.is_empty(),
        "not due yet"
    );
    let retried = store
        .outbox
        .claim(SUB, "gw-a", later, 1_000, 10)
        .await
        .unwrap();
    assert_eq!(retried[0].attempts, 2);

    dead_letter_then_redeliver(&store, &id, &event, later).await;
}

async fn dead_letter_then_redeliver(store: &Store, id: &str, event: &str, later: u64) {
    assert!(
        store
            .outbox
            .give_up(SUB, id, event, "HTTP 410")
            .await
            .unwrap()
    );
    assert!(
        !store
            .outbox
            .retry(SUB, id, event, later, "late")
            .await
            .unwrap()
    );
    let stats = store.outbox.stats(SUB).await.unwrap();
    assert_eq!(
        (stats.pending, stats.dead, stats.oldest_at_ms),
        (0, 1, None)
    );
    let dead = store.outbox.dead_letters(SUB, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (
            dead[0].event.id.as_str(),
            dead[0].attempts.attempts,
            dead[0].attempts.error.as_deref()
        ),
        (event, 2, Some("HTTP 410"))
    );
    assert!(dead[0].attempts.dead_at.is_some());

    assert_eq!(
        store.outbox.redeliver(SUB, Some("msg_nope")).await.unwrap(),
        0
    );
    assert_eq!(store.outbox.redeliver(SUB, Some(event)).await.unwrap(), 1);
    assert_eq!(store.outbox.redeliver(SUB, None).await.unwrap(), 0);
    let back = claim_all(store, SUB, "gw-a").await;
    assert_eq!((back[0].event.id.as_str(), back[0].attempts), (event, 1));
    assert!(store.outbox.ack(SUB, id, event).await.unwrap());
    let stats = store.outbox.stats(SUB).await.unwrap();
    assert_eq!((stats.pending, stats.dead), (0, 0));
}

pub(crate) async fn takeovers_and_failed_orphans_are_events(subject: &impl Subject) {
    let store = routed(subject, OTHER);
    let moved = create(&store).await;
    let failed = create(&store).await;
    let takeover = crate::Takeover {
        from: OWNER,
        to: OTHER,
        message: "resumed",
        counts: true,
        max_takeovers: 3,
        keep_round: false,
        exhausted: Outcome::gateway_failure("too often"),
    };
    let adopted = store
        .membership
        .take_over(std::slice::from_ref(&moved), &takeover)
        .await
        .unwrap();
    assert!(matches!(adopted[0], crate::Adoption::Adopted(_)));
    assert_eq!(
        store
            .membership
            .fail_orphans(OWNER, std::slice::from_ref(&failed), "gone")
            .await
            .unwrap(),
        1
    );
    let all = store.outbox.pending(ALL, 10).await.unwrap();
    let mut kinds: Vec<(String, &str)> = all
        .iter()
        .map(|e| (e.event.task.clone(), e.event.kind.as_str()))
        .collect();
    kinds.sort();
    let mut want = vec![
        (moved.clone(), "task.created"),
        (moved, "task.taken_over"),
        (failed.clone(), "task.created"),
        (failed, "task.failed"),
    ];
    want.sort();
    assert_eq!(kinds, want);
}
