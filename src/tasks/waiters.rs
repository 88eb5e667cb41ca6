//! Who on this instance waits for a task to change: `tasks/result` calls (by task) and
//! the GET streams of 2025-xx sessions (by session). Fed by the store's announced
//! changes, whichever instance made them, while there is anyone to feed
//! ([`super::change_feed`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc, watch};

use mtg_store::{TaskChange, WAKE_ALL};

/// A session's feed: each change of its tasks (task id, and progress when that is it).
type FeedSender = mpsc::UnboundedSender<(String, Option<serde_json::Value>)>;
type SessionFeeds = Arc<Mutex<HashMap<String, FeedSender>>>;

#[derive(Default)]
pub struct Waiters {
    tasks: Mutex<HashMap<String, Arc<Notify>>>,
    sessions: SessionFeeds,
    /// Feeds of sessions that created a task before opening their GET stream: the
    /// changes queue here until the stream takes them (a client opens it while its first
    /// call may already run). Kept for [`EARLY_FEED_KEPT`] at most.
    early: Mutex<HashMap<String, (Instant, FeedReceiver)>>,
    /// Whether the changes are heard, shared with the feed that listens to them.
    pub(super) listening: Arc<Listening>,
}

/// The handshake between waiters and the change feed: a new waiter wants the changes,
/// and the feed says when they are heard.
pub(super) struct Listening {
    /// A waiter came (a permit is kept if the feed is not waiting yet).
    pub(super) wanted: Notify,
    /// True while every change announced is heard here: set after the store's first
    /// [`WAKE_ALL`], cleared before the feed decides whether to stop listening.
    pub(super) heard: watch::Sender<bool>,
}

impl Default for Listening {
    fn default() -> Self {
        Self {
            wanted: Notify::new(),
            heard: watch::Sender::new(false),
        }
    }
}

type FeedReceiver = mpsc::UnboundedReceiver<(String, Option<serde_json::Value>)>;

/// How long changes wait for a session's GET stream to open.
const EARLY_FEED_KEPT: Duration = Duration::from_secs(60);

/// How long a session's new task or stream waits for the changes to be heard: one
/// SUBSCRIBE when the instance was not listening. Short, because a pub/sub connection
/// that is down would make every such wait take all of it.
pub const HEARD_WITHIN: Duration = Duration::from_millis(500);

/// A waiter on one task; dropping the last one for a task forgets the task.
pub struct TaskWaiter<'a> {
    waiters: &'a Waiters,
    task_id: String,
    notify: Arc<Notify>,
}

impl TaskWaiter<'_> {
    /// Resolves at the next change after this call (register before reading the record,
    /// so a change in between is not missed: `Notified::enable`).
    pub fn changed(&self) -> std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        notified
    }
}

impl Drop for TaskWaiter<'_> {
    fn drop(&mut self) {
        let mut tasks = lock(&self.waiters.tasks);
        // Two references left: this waiter and the map's.
        if Arc::strong_count(&self.notify) <= 2 {
            tasks.remove(&self.task_id);
        }
    }
}

/// The changes of one session's tasks, for its GET stream; ends the feed when dropped.
pub struct SessionFeed {
    feeds: SessionFeeds,
    session: String,
    pub changes: mpsc::UnboundedReceiver<(String, Option<serde_json::Value>)>,
}

impl Drop for SessionFeed {
    fn drop(&mut self) {
        self.changes.close();
        let mut sessions = lock(&self.feeds);
        if sessions.get(&self.session).is_some_and(|tx| tx.is_closed()) {
            sessions.remove(&self.session);
        }
    }
}

impl Waiters {
    /// A waiter on `task_id`. Changes announced before this instance listens are not
    /// delivered, but the [`WAKE_ALL`] that starts the listening is: a waiter reads the
    /// task again at every [`TaskWaiter::changed`].
    pub fn wait_on(&self, task_id: &str) -> TaskWaiter<'_> {
        let notify = lock(&self.tasks)
            .entry(task_id.to_owned())
            .or_default()
            .clone();
        self.listening.wanted.notify_one();
        TaskWaiter {
            waiters: self,
            task_id: task_id.to_owned(),
            notify,
        }
    }

    /// A feed of `session`'s task changes; a newer feed for the same session replaces
    /// this one (a client reopening its GET stream). Changes since the session's first
    /// task, if the stream opens late, come first.
    /// A feed carries no [`WAKE_ALL`]: await [`Self::heard`] after making one.
    pub fn feed_session(&self, session: &str) -> SessionFeed {
        let changes = match lock(&self.early).remove(session) {
            Some((_, queued)) => queued,
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                lock(&self.sessions).insert(session.to_owned(), tx);
                rx
            }
        };
        self.listening.wanted.notify_one();
        SessionFeed {
            feeds: self.sessions.clone(),
            session: session.to_owned(),
            changes,
        }
    }

    /// `session` is about to have a task: if it has no feed yet, its changes start
    /// queueing for the GET stream it may open in a moment.
    pub fn expect_session(&self, session: &str) {
        let mut early = lock(&self.early);
        let now = Instant::now();
        early.retain(|_, (since, _)| now.duration_since(*since) < EARLY_FEED_KEPT);
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, tx| !tx.is_closed());
        if sessions.contains_key(session) {
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        sessions.insert(session.to_owned(), tx);
        early.insert(session.to_owned(), (now, rx));
        self.listening.wanted.notify_one();
    }

    /// Waits (up to `limit`) until every change announced from now on is heard here; a
    /// waiter registered just before is then fed all of them. `false` if the store's
    /// channel did not answer in time (it is down: changes then come late or not at all,
    /// as they would for anyone).
    pub async fn heard(&self, limit: Duration) -> bool {
        self.listening.wanted.notify_one();
        let mut heard = self.listening.heard.subscribe();
        tokio::time::timeout(limit, heard.wait_for(|heard| *heard))
            .await
            .is_ok_and(|seen| seen.is_ok())
    }

    /// Whether nobody here waits for a change (the feed may stop listening).
    pub(super) fn idle(&self) -> bool {
        if !lock(&self.tasks).is_empty() {
            return false;
        }
        let now = Instant::now();
        // Expired early feeds close their senders, which the sessions' check drops.
        lock(&self.early).retain(|_, (since, _)| now.duration_since(*since) < EARLY_FEED_KEPT);
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, tx| !tx.is_closed());
        sessions.is_empty()
    }

    pub fn dispatch(&self, change: &TaskChange) {
        if change.task_id == WAKE_ALL {
            lock(&self.tasks)
                .values()
                .for_each(|notify| notify.notify_waiters());
            return;
        }
        if let Some(notify) = lock(&self.tasks).get(&change.task_id) {
            notify.notify_waiters();
        }
        if let Some(session) = &change.session
            && let Some(feed) = lock(&self.sessions).get(session)
        {
            let _ = feed.send((change.task_id.clone(), change.progress.clone()));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(task: &str, session: Option<&str>) -> TaskChange {
        TaskChange {
            task_id: task.into(),
            session: session.map(Into::into),
            progress: None,
        }
    }

    #[tokio::test]
    async fn a_change_after_registering_is_never_missed() {
        let waiters = Waiters::default();
        let waiter = waiters.wait_on("t");
        let changed = waiter.changed();
        waiters.dispatch(&change("t", None));
        tokio::time::timeout(std::time::Duration::from_secs(1), changed)
            .await
            .expect("the change before awaiting still counts");
    }

    #[tokio::test]
    async fn changes_before_the_stream_opens_wait_for_it() {
        let waiters = Waiters::default();
        waiters.expect_session("s");
        waiters.dispatch(&change("t1", Some("s")));
        let mut feed = waiters.feed_session("s");
        waiters.dispatch(&change("t2", Some("s")));
        assert_eq!(feed.changes.recv().await.unwrap().0, "t1");
        assert_eq!(feed.changes.recv().await.unwrap().0, "t2");
        // A session with a stream open already gets no queue of its own.
        waiters.expect_session("s");
        assert!(lock(&waiters.early).is_empty());
    }

    #[tokio::test]
    async fn sessions_get_their_own_tasks_changes() {
        let waiters = Waiters::default();
        let mut feed = waiters.feed_session("s");
        waiters.dispatch(&change("t1", Some("other")));
        waiters.dispatch(&change("t2", Some("s")));
        assert_eq!(feed.changes.recv().await.unwrap().0, "t2");
    }

    #[tokio::test]
    async fn idle_only_while_nobody_waits() {
        let waiters = Waiters::default();
        assert!(waiters.idle());
        let waiter = waiters.wait_on("t");
        assert!(!waiters.idle());
        drop(waiter);
        assert!(waiters.idle());
        let feed = waiters.feed_session("s");
        assert!(!waiters.idle());
        drop(feed);
        assert!(waiters.idle());
        // A session's first task: its changes queue for the stream it may open.
        waiters.expect_session("s");
        assert!(!waiters.idle());
    }

    #[tokio::test]
    async fn heard_waits_for_the_feed_and_gives_up_at_its_limit() {
        let waiters = Waiters::default();
        assert!(!waiters.heard(Duration::from_millis(20)).await);
        let listening = waiters.listening.clone();
        let hearing = tokio::spawn(async move {
            listening.wanted.notified().await;
            listening.heard.send_replace(true);
        });
        assert!(waiters.heard(Duration::from_secs(5)).await);
        hearing.await.unwrap();
    }

    #[test]
    fn the_last_waiter_dropped_forgets_the_task() {
        let waiters = Waiters::default();
        let a = waiters.wait_on("t");
        let b = waiters.wait_on("t");
        drop(a);
        assert!(lock(&waiters.tasks).contains_key("t"));
        drop(b);
        assert!(!lock(&waiters.tasks).contains_key("t"));
    }
}
