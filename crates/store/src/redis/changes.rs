//! Task changes across instances: PUBLISH on one channel (`mtg:<ns>:changes`) that each
//! instance of the namespace subscribes to while somebody there waits for a change.
//! Changes are rare (a few per task: input wanted, answered, ended) and carry only ids.

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::RedisStore;
use super::keys::Keys;
use crate::{ChangeReceiver, Changes, StoreError, TaskChange, WAKE_ALL};

#[async_trait]
impl Changes for RedisStore {
    async fn announce(&self, change: &TaskChange) -> Result<(), StoreError> {
        self.conn
            .one("announce", publish(&self.keys, change))
            .await?;
        Ok(())
    }

    fn changes(&self) -> ChangeReceiver {
        let (lines_tx, mut lines) = mpsc::unbounded_channel::<String>();
        self.subscriber.subscribe(self.keys.changes(), lines_tx);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                // Ends with the receiver, so the subscriber sees the channel unheard.
                let line = tokio::select! {
                    line = lines.recv() => line,
                    () = tx.closed() => return,
                };
                let Some(line) = line else { return };
                // The subscriber's "(re)subscribed, look at everything" arrives as WAKE_ALL.
                let change = if line == WAKE_ALL {
                    TaskChange::everything()
                } else {
                    TaskChange::decode(&line)
                };
                if tx.send(change).is_err() {
                    return;
                }
            }
        });
        rx
    }
}

/// The command that announces `change` (also sent in the pipeline that ends a task).
pub(super) fn publish(keys: &Keys, change: &TaskChange) -> redis::Cmd {
    let mut cmd = redis::cmd("PUBLISH");
    cmd.arg(keys.changes()).arg(change.encode());
    cmd
}
