//! What operators see: any task by id, every task page by page, each scope's tasks, and
//! the instances with their leases.

use std::collections::BTreeSet;

use super::*;
use crate::{InspectError, Lease, Newest, Scope};

/// Every task of `scope`, following cursors with a small budget, so a walk takes pages.
/// Panics on a task seen twice.
async fn walk(store: &Store, scope: Scope<'_>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let page = store
            .inspection
            .scan(scope, cursor.as_deref(), 2)
            .await
            .unwrap();
        for scanned in page.tasks {
            let id = &scanned.task.task_id;
            assert!(seen.insert(id.clone()), "{id} listed twice");
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return seen,
        }
    }
    panic!("the walk of {scope:?} did not end");
}

fn owned_by(owner: &str, principal: &str) -> TaskRecord {
    let mut task = record(owner);
    task.principal = principal.into();
    task
}

fn lease(instance: &str) -> Lease<'_> {
    Lease {
        instance,
        advertise_url: None,
        ttl: Duration::from_secs(30),
    }
}

/// Every instance owns a lease: that is how the owners' indexes are found.
async fn both_own_leases(store: &Store) {
    for instance in [OWNER, OTHER] {
        store
            .membership
            .renew_lease(&lease(instance))
            .await
            .unwrap();
    }
}

pub(crate) async fn operators_see_every_task_in_each_scope(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    both_own_leases(&store).await;
    let mut everyone = BTreeSet::new();
    let mut running_here = BTreeSet::new();
    let mut bobs = BTreeSet::new();
    let mut alices = BTreeSet::new();
    for n in 0..7 {
        let (owner, principal) = match n % 3 {
            0 => (OWNER, ALICE),
            1 => (OWNER, "bob"),
            _ => (OTHER, "bob"),
        };
        let task = owned_by(owner, principal);
        let id = task.task_id.clone();
        store.tasks.create(task).await.unwrap();
        everyone.insert(id.clone());
        if principal == "bob" {
            bobs.insert(id.clone());
        } else {
            alices.insert(id.clone());
        }
        if owner == OWNER {
            running_here.insert(id);
        }
    }
    // One of this owner's tasks ends: no longer unfinished, still listed.
    let ended = running_here.pop_first().unwrap();
    let outcome = Outcome::Completed(raw("{}"));
    assert!(store.tasks.finish(&ended, outcome).await.unwrap());

    assert_eq!(walk(&store, Scope::All).await, everyone);
    assert_eq!(walk(&store, Scope::Principal("bob")).await, bobs);
    assert_eq!(
        walk(&store, Scope::Unfinished { owner: Some(OWNER) }).await,
        running_here
    );
    let mut unfinished = everyone.clone();
    unfinished.remove(&ended);
    assert_eq!(
        walk(&store, Scope::Unfinished { owner: None }).await,
        unfinished
    );

    // Any principal's task, by id; an ended one too, with its status.
    let seen = store.inspection.inspect(&ended).await.unwrap().unwrap();
    let whose = if alices.contains(&ended) {
        ALICE
    } else {
        "bob"
    };
    assert_eq!(
        (seen.principal.as_str(), seen.status),
        (whose, TaskStatus::Completed)
    );
    let unknown = uuid::Uuid::new_v4().to_string();
    assert!(store.inspection.inspect(&unknown).await.unwrap().is_none());
    assert!(
        store
            .inspection
            .inspect("not-a-task")
            .await
            .unwrap()
            .is_none()
    );
}

/// Every task of `scope`, each page cut after its first `take` tasks and the walk going on
/// right after the last one taken (as the admin API does to hold a page to its limit).
/// Panics on a task seen twice.
async fn walk_cut(store: &Store, scope: Scope<'_>, budget: usize, take: usize) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let mut page = store
            .inspection
            .scan(scope, cursor.as_deref(), budget)
            .await
            .unwrap();
        let cut = page.tasks.len() > take;
        page.tasks.truncate(take);
        for scanned in &page.tasks {
            let id = &scanned.task.task_id;
            assert!(seen.insert(id.clone()), "{id} listed twice ({scope:?})");
        }
        cursor = match (cut, page.tasks.pop()) {
            (true, Some(last)) => Some(last.after),
            _ => page.next,
        };
        if cursor.is_none() {
            return seen;
        }
    }
    panic!("the walk of {scope:?} did not end");
}

pub(crate) async fn a_walk_can_stop_after_any_task(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    both_own_leases(&store).await;
    // A task ends on its owner (the store unindexes it there).
    let other = subject.instance(OTHER);
    let mut everyone = BTreeSet::new();
    let mut unfinished = BTreeSet::new();
    let mut others = BTreeSet::new();
    let mut bobs = BTreeSet::new();
    for n in 0..23 {
        let (owner, runs_it) = if n % 2 == 0 {
            (OWNER, &store)
        } else {
            (OTHER, &other)
        };
        let principal = if n % 3 == 0 { "bob" } else { ALICE };
        let task = owned_by(owner, principal);
        let id = task.task_id.clone();
        runs_it.tasks.create(task).await.unwrap();
        let ended = n % 4 == 0;
        if ended {
            let outcome = Outcome::Completed(raw("{}"));
            assert!(runs_it.tasks.finish(&id, outcome).await.unwrap());
        }
        insert_if(&mut everyone, true, &id);
        insert_if(&mut unfinished, !ended, &id);
        insert_if(&mut others, !ended && owner == OTHER, &id);
        insert_if(&mut bobs, principal == "bob", &id);
    }
    for (budget, take) in [(1, 1), (3, 1), (5, 2), (100, 1), (100, 7)] {
        let cases = [
            (Scope::All, &everyone),
            (Scope::Unfinished { owner: None }, &unfinished),
            (Scope::Unfinished { owner: Some(OTHER) }, &others),
            (Scope::Principal("bob"), &bobs),
        ];
        for (scope, expected) in cases {
            let seen = walk_cut(&store, scope, budget, take).await;
            assert_eq!(&seen, expected, "{scope:?}, budget {budget}, take {take}");
        }
    }
}

fn insert_if(set: &mut BTreeSet<String>, condition: bool, id: &str) {
    if condition {
        set.insert(id.to_owned());
    }
}

pub(crate) async fn expired_tasks_are_not_inspected(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let mut task = record(OWNER);
    task.ttl_ms = 1;
    task.created_at_ms -= 10;
    let id = task.task_id.clone();
    store.tasks.create(task).await.unwrap();
    assert!(store.inspection.inspect(&id).await.unwrap().is_none());
    assert!(walk(&store, Scope::All).await.is_empty());
}

pub(crate) async fn a_cursor_from_elsewhere_is_refused(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    for scope in [
        Scope::All,
        Scope::Principal(ALICE),
        Scope::Unfinished { owner: None },
    ] {
        let refused = store.inspection.scan(scope, Some("garbage"), 10).await;
        assert!(
            matches!(refused, Err(InspectError::BadCursor(_))),
            "{scope:?}: {refused:?}"
        );
    }
}

pub(crate) async fn instances_show_their_leases_and_running_tasks(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let lease = Lease {
        advertise_url: Some("http://10.0.0.7:8080/mcp"),
        ..lease(OWNER)
    };
    store.membership.renew_lease(&lease).await.unwrap();
    let first = create(&store).await;
    create(&store).await;
    let outcome = Outcome::Completed(raw("{}"));
    assert!(store.tasks.finish(&first, outcome).await.unwrap());

    let instances = store.inspection.instances().await.unwrap();
    let me = instances
        .iter()
        .find(|i| i.instance == OWNER)
        .unwrap_or_else(|| panic!("{OWNER} among {instances:?}"));
    assert_eq!(
        me.advertise_url.as_deref(),
        Some("http://10.0.0.7:8080/mcp")
    );
    let left = me.lease_expires_in_ms.expect("a live lease");
    assert!(left > 20_000 && left <= 30_000, "{left} ms left");
    assert_eq!(me.running_tasks, 1, "the finished task is not running");

    store.membership.release_lease(OWNER, false).await.unwrap();
    let instances = store.inspection.instances().await.unwrap();
    assert!(
        instances.iter().all(|i| i.instance != OWNER),
        "a released lease leaves: {instances:?}"
    );
}

/// Every task of a newest-first walk of `which`, in pages of `budget` cut after `take`
/// tasks (going on from the last one taken), in the order listed. Panics on a task seen
/// twice or out of order.
async fn walk_newest(store: &Store, which: Newest<'_>, budget: usize, take: usize) -> Vec<String> {
    let mut seen: Vec<(u64, String)> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let mut page = store
            .inspection
            .newest(which, cursor.as_deref(), budget)
            .await
            .unwrap();
        assert!(
            page.tasks.len() <= budget,
            "{which:?}: a page over its budget"
        );
        let cut = page.tasks.len() > take;
        page.tasks.truncate(take);
        for scanned in &page.tasks {
            let task = &scanned.task;
            let position = (task.created_at_ms, task.task_id.clone());
            if let Some(last) = seen.last() {
                assert!(position < *last, "{position:?} after {last:?} ({which:?})");
            }
            assert!(which.holds(task), "{position:?} outside {which:?}");
            seen.push(position);
        }
        cursor = match (cut, page.tasks.pop()) {
            (true, Some(last)) => Some(last.after),
            _ => page.next,
        };
        if cursor.is_none() {
            return seen.into_iter().map(|(_, id)| id).collect();
        }
    }
    panic!("the newest-first walk of {which:?} did not end");
}

/// 17 tasks of two principals, in an order other than their creation times, some sharing
/// a millisecond; one deleted and one ended. Their ids newest first, with principals.
async fn created_out_of_order(store: &Store) -> Vec<(String, String, u64)> {
    let base = now_ms() - 10_000;
    let mut made = Vec::new();
    for n in [5u64, 1, 16, 3, 3, 3, 9, 0, 12, 7, 7, 14, 2, 11, 8, 15, 4] {
        let mut task = record(OWNER);
        task.principal = if n % 2 == 0 { "bob" } else { ALICE }.into();
        task.created_at_ms = base + n * 100;
        task.last_updated_at_ms = task.created_at_ms;
        made.push((
            task.task_id.clone(),
            task.principal.clone(),
            task.created_at_ms,
        ));
        store.tasks.create(task).await.unwrap();
    }
    let deleted = made.remove(3);
    store.tasks.delete(&deleted.0).await.unwrap();
    let outcome = Outcome::Completed(raw("{}"));
    assert!(store.tasks.finish(&made[0].0, outcome).await.unwrap());
    made.sort_by(|a, b| (b.2, &b.0).cmp(&(a.2, &a.0)));
    made
}

pub(crate) async fn newest_first_walks_every_task_once_in_order(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let made = created_out_of_order(&store).await;
    let expected: Vec<String> = made.iter().map(|(id, _, _)| id.clone()).collect();
    for (budget, take) in [(1, 1), (2, 2), (3, 1), (5, 2), (100, 100), (100, 4)] {
        let seen = walk_newest(&store, Newest::default(), budget, take).await;
        assert_eq!(seen, expected, "budget {budget}, take {take}");
    }
    // Another instance's view lists the same.
    let other = subject.instance(OTHER);
    assert_eq!(walk_newest(&other, Newest::default(), 4, 4).await, expected);
    let refused = store
        .inspection
        .newest(Newest::default(), Some("garbage"), 5)
        .await;
    assert!(
        matches!(refused, Err(InspectError::BadCursor(_))),
        "{refused:?}"
    );
}

pub(crate) async fn newest_first_keeps_to_its_window_and_principal(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let made = created_out_of_order(&store).await;
    let newest = made[0].2;
    let oldest = made[made.len() - 1].2;
    let middle = made[made.len() / 2].2;
    let windows = [
        (Some(middle), None),
        (None, Some(middle)),
        (Some(middle), Some(middle)),
        (Some(newest + 1), Some(oldest.saturating_sub(1))),
        (Some(oldest.saturating_sub(1)), None),
        (None, Some(newest + 1)),
    ];
    for principal in [None, Some("bob"), Some(ALICE), Some("nobody")] {
        for (at_most, at_least) in windows {
            let which = Newest {
                principal,
                created_at_most: at_most,
                created_at_least: at_least,
            };
            let expected: Vec<String> = made
                .iter()
                .filter(|(_, whose, at)| {
                    principal.is_none_or(|p| p == whose)
                        && at_most.is_none_or(|most| *at <= most)
                        && at_least.is_none_or(|least| *at >= least)
                })
                .map(|(id, _, _)| id.clone())
                .collect();
            for (budget, take) in [(1, 1), (3, 2), (100, 100)] {
                let seen = walk_newest(&store, which, budget, take).await;
                assert_eq!(seen, expected, "{which:?}, budget {budget}, take {take}");
            }
        }
    }
}
