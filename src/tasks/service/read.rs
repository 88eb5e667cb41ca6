//! Reading tasks: one by id, the store, and a session's feed of changed tasks.

use std::sync::Arc;

use crate::tasks::{TaskService, not_found, waiters};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_store::{TaskRecord, TaskStore};

impl TaskService {
    pub async fn get(
        &self,
        task_id: &str,
        principal: &str,
    ) -> Result<Arc<TaskRecord>, ErrorObject> {
        self.store
            .get(task_id, principal)
            .await?
            .ok_or_else(|| not_found(task_id))
    }

    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    /// The ids of a session's tasks as they change, from whichever instance changed
    /// them, for as long as the feed is kept (one per session: a newer one replaces it).
    /// Returns once the changes are heard here (or [`waiters::HEARD_WITHIN`] passed).
    pub async fn feed_session(&self, session: &str) -> waiters::SessionFeed {
        let feed = self.waiters.feed_session(session);
        self.waiters.heard(waiters::HEARD_WITHIN).await;
        feed
    }
}
