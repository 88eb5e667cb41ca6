//! The change contract: announcing that a task changed to every instance, for whoever
//! watches it there (a `tasks/result` waiting for it, the GET stream of the session that
//! created it). Best effort: the stored record is the truth, and watchers look again
//! now and then anyway, so a lost announcement only delays them.

use std::sync::Mutex;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::{StoreError, WAKE_ALL};

/// A task changed; `session` is the 2025-xx client session that created it, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskChange {
    /// The task id, or [`WAKE_ALL`] when changes may have been missed (a subscription
    /// was (re)established): every watcher looks again.
    pub task_id: String,
    pub session: Option<String>,
    /// The upstream's `notifications/progress` params, when that is the change (a
    /// session client hears progress under its own token; the record keeps only text).
    pub progress: Option<serde_json::Value>,
}

impl TaskChange {
    /// The one-line form carried on the wire: `<task id>[ <session id>[ <progress
    /// JSON>]]` (ids contain no space: task ids are UUIDs, session ids visible ASCII).
    pub(crate) fn encode(&self) -> String {
        let mut line = self.task_id.clone();
        if let Some(session) = &self.session {
            line.push(' ');
            line.push_str(session);
            if let Some(progress) = &self.progress {
                line.push(' ');
                line.push_str(&progress.to_string());
            }
        }
        line
    }

    pub(crate) fn decode(line: &str) -> Self {
        let mut parts = line.splitn(3, ' ');
        let task_id = parts.next().unwrap_or_default().to_owned();
        let session = parts.next().map(str::to_owned);
        let progress = parts
            .next()
            .and_then(|json| serde_json::from_str(json).ok());
        Self {
            task_id,
            session,
            progress,
        }
    }

    pub fn everything() -> Self {
        Self {
            task_id: WAKE_ALL.to_owned(),
            session: None,
            progress: None,
        }
    }
}

pub type ChangeReceiver = mpsc::UnboundedReceiver<TaskChange>;

#[async_trait]
pub trait Changes: Send + Sync + 'static {
    /// Tells every instance (this one included) that the task changed.
    async fn announce(&self, change: &TaskChange) -> Result<(), StoreError>;

    /// The changes announced by any instance while the receiver is kept. Its first
    /// message is [`WAKE_ALL`], once it listens: a change announced before that may be
    /// missed, none announced after it is. Dropping the receiver stops the listening, so
    /// an instance with nobody to tell is not woken by every task's end.
    fn changes(&self) -> ChangeReceiver;
}

/// Changes within one process, for the embedded store.
#[derive(Default)]
pub(crate) struct LocalChanges {
    listeners: Mutex<Vec<mpsc::UnboundedSender<TaskChange>>>,
}

#[async_trait]
impl Changes for LocalChanges {
    async fn announce(&self, change: &TaskChange) -> Result<(), StoreError> {
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        listeners.retain(|listener| listener.send(change.clone()).is_ok());
        Ok(())
    }

    fn changes(&self) -> ChangeReceiver {
        let (tx, rx) = mpsc::unbounded_channel();
        // Within one process a listener hears everything from the moment it is added.
        let _ = tx.send(TaskChange::everything());
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_round_trips_through_its_line() {
        for change in [
            TaskChange {
                task_id: "t".into(),
                session: Some("s-1".into()),
                progress: None,
            },
            TaskChange {
                task_id: "t".into(),
                session: Some("s-1".into()),
                progress: Some(serde_json::json!({"progress": 1, "message": "a b"})),
            },
            TaskChange {
                task_id: "t".into(),
                session: None,
                progress: None,
            },
        ] {
            assert_eq!(TaskChange::decode(&change.encode()), change);
        }
    }

    #[tokio::test]
    async fn every_listener_hears_each_change() {
        let changes = LocalChanges::default();
        let mut a = changes.changes();
        let mut b = changes.changes();
        for listener in [&mut a, &mut b] {
            assert_eq!(listener.recv().await.unwrap(), TaskChange::everything());
        }
        let change = TaskChange::decode("t s");
        changes.announce(&change).await.unwrap();
        assert_eq!(a.recv().await.unwrap(), change);
        assert_eq!(b.recv().await.unwrap(), change);
    }
}
