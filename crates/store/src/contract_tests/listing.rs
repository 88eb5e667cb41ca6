//! Listing a principal's tasks: whose, in which order, page by page.

use super::*;
use crate::ListCursor;

/// A principal of this case alone, so the listing holds only the case's tasks.
fn principal() -> String {
    format!("alice-{}", uuid::Uuid::new_v4())
}

/// A task of `principal` created `age_ms` ago.
fn task_of(principal: &str, age_ms: u64) -> TaskRecord {
    let mut task = record(OWNER);
    task.principal = principal.into();
    task.created_at_ms -= age_ms;
    task.last_updated_at_ms = task.created_at_ms;
    task
}

/// The ids `list` returns.
async fn list_ids(
    store: &Store,
    principal: &str,
    after: Option<&ListCursor>,
    limit: usize,
) -> Vec<String> {
    ids(&store.tasks.list(principal, after, limit).await.unwrap())
}

fn ids(tasks: &[Arc<TaskRecord>]) -> Vec<String> {
    tasks.iter().map(|task| task.task_id.clone()).collect()
}

/// Newest first; ties by id, descending.
fn newest_first(tasks: &[TaskRecord]) -> Vec<String> {
    let mut tasks: Vec<_> = tasks.iter().collect();
    tasks.sort_by(|a, b| (b.created_at_ms, &b.task_id).cmp(&(a.created_at_ms, &a.task_id)));
    tasks.iter().map(|task| task.task_id.clone()).collect()
}

pub(crate) async fn a_principal_lists_only_its_own_tasks_newest_first(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let alice = principal();
    let mallory = principal();
    let mine: Vec<TaskRecord> = [3_000, 1_000, 2_000]
        .into_iter()
        .map(|age| task_of(&alice, age))
        .collect();
    for task in &mine {
        store.tasks.create(task.clone()).await.unwrap();
    }
    store.tasks.create(task_of(&mallory, 1_500)).await.unwrap();

    // Any instance lists the same.
    let listed = subject
        .instance(OTHER)
        .tasks
        .list(&alice, None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&listed), newest_first(&mine));
    assert!(listed.iter().all(|task| task.principal == alice));
    let newest = &listed[0];
    assert_eq!(
        (newest.status, newest.owner.as_str(), newest.request.get()),
        (TaskStatus::Working, OWNER, mine[1].request.get())
    );
    assert_eq!(
        list_ids(&store, &alice, None, 2).await,
        newest_first(&mine)[..2]
    );
    assert!(list_ids(&store, &alice, None, 0).await.is_empty());
    assert_eq!(list_ids(&store, &mallory, None, 10).await.len(), 1);
    assert!(list_ids(&store, &principal(), None, 10).await.is_empty());
}

pub(crate) async fn listing_pages_by_cursor_without_gaps_or_repeats(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let alice = principal();
    // Some created in the same millisecond: the id breaks the tie.
    let tasks: Vec<TaskRecord> = [0, 0, 1, 1, 1, 2, 3]
        .into_iter()
        .map(|age| task_of(&alice, 1_000 + age))
        .collect();
    for task in &tasks {
        store.tasks.create(task.clone()).await.unwrap();
    }

    let mut pages = Vec::new();
    let mut after: Option<ListCursor> = None;
    loop {
        let page = store.tasks.list(&alice, after.as_ref(), 3).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(ListCursor::after(last));
        pages.push(ids(&page));
        assert!(pages.len() <= tasks.len(), "paging does not end");
    }
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        [3, 3, 1],
        "{pages:?}"
    );
    assert_eq!(pages.concat(), newest_first(&tasks));

    // A cursor holds values, not a task: it still works once its task is gone.
    let expected = newest_first(&tasks);
    let cursor_task = tasks.iter().find(|t| t.task_id == expected[2]).unwrap();
    store.tasks.delete(&cursor_task.task_id).await.unwrap();
    let cursor = ListCursor::after(cursor_task);
    assert_eq!(
        list_ids(&store, &alice, Some(&cursor), 10).await,
        expected[3..]
    );
}

pub(crate) async fn deleted_and_expired_tasks_are_not_listed(subject: &impl Subject) {
    let store = subject.instance(OWNER);
    let alice = principal();
    let live = task_of(&alice, 20_000);
    store.tasks.create(live.clone()).await.unwrap();
    // Newer than the live one, so a page must read past them.
    let mut expired = task_of(&alice, 10_000);
    expired.ttl_ms = 5_000;
    store.tasks.create(expired).await.unwrap();
    let deleted = task_of(&alice, 5_000);
    store.tasks.create(deleted.clone()).await.unwrap();
    let mut short = task_of(&alice, 0);
    short.ttl_ms = 300;
    store.tasks.create(short.clone()).await.unwrap();

    assert_eq!(
        list_ids(&store, &alice, None, 10).await,
        [
            short.task_id.as_str(),
            deleted.task_id.as_str(),
            live.task_id.as_str()
        ]
    );
    store.tasks.delete(&deleted.task_id).await.unwrap();
    let start = std::time::Instant::now();
    while store
        .tasks
        .get(&short.task_id, &alice)
        .await
        .unwrap()
        .is_some()
    {
        assert!(start.elapsed() < PATIENCE, "the task outlived its TTL");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for limit in [1, 10] {
        assert_eq!(
            list_ids(&store, &alice, None, limit).await,
            [live.task_id.as_str()],
            "limit {limit}"
        );
    }
    let after_short = ListCursor::after(&short);
    assert_eq!(
        list_ids(&store, &alice, Some(&after_short), 1).await,
        [live.task_id.as_str()]
    );
    store.tasks.delete(&live.task_id).await.unwrap();
    assert!(list_ids(&store, &alice, None, 10).await.is_empty());
}
