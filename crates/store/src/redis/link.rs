//! What this process knows of its link to Redis, for answers kept in memory: an epoch
//! that moves whenever the link may have lost sight of the stored data (the pub/sub
//! connection dropped or was replaced, or an operation failed), and whether the link is
//! up now. An answer remembered under one epoch is served only while the link stays up
//! in that same epoch, so a Redis restart, a failover or a cut-off never leaves memory
//! answering for data Redis no longer holds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(super) struct Link {
    epoch: AtomicU64,
    up: AtomicBool,
}

impl Link {
    /// The epoch now, while the link is up; `None` while it is down.
    pub(super) fn current(&self) -> Option<u64> {
        // Epoch first: a drop that lands between the two loads reads as a change.
        let epoch = self.epoch.load(Ordering::Acquire);
        self.up.load(Ordering::Acquire).then_some(epoch)
    }

    /// The pub/sub connection is subscribed again (or for the first time).
    pub(super) fn restored(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.up.store(true, Ordering::Release);
    }

    /// The pub/sub connection is gone: Redis may be restarting, failing over or cut off.
    pub(super) fn lost(&self) {
        self.up.store(false, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// An operation failed: what was remembered may no longer be what Redis holds.
    pub(super) fn faulted(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_moves_the_epoch_and_a_lost_link_has_none() {
        let link = Link::default();
        assert_eq!(link.current(), None, "down until first subscribed");
        link.restored();
        let first = link.current().expect("up");
        link.faulted();
        let second = link.current().expect("still up");
        assert_ne!(first, second);
        link.lost();
        assert_eq!(link.current(), None);
        link.restored();
        let third = link.current().expect("up again");
        assert!(third != first && third != second);
    }
}
