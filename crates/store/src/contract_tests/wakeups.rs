//! Wake-ups reach the instance they are addressed to.

use super::*;

pub(crate) async fn wake_ups_reach_their_owner(subject: &impl Subject) {
    let (owner, other) = (subject.instance(OWNER), subject.instance(OTHER));
    let mut to_owner = owner.wakeups.wakeups(OWNER);
    let mut to_other = other.wakeups.wakeups(OTHER);
    // Each receiver is told to look at everything once it listens.
    assert_eq!(next_wakeup(&mut to_owner).await, WAKE_ALL);
    assert_eq!(next_wakeup(&mut to_other).await, WAKE_ALL);

    other.wakeups.wake(OWNER, "task-a").await.unwrap();
    assert_eq!(next_wakeup(&mut to_owner).await, "task-a");
    owner.wakeups.wake(OWNER, "task-b").await.unwrap();
    assert_eq!(next_wakeup(&mut to_owner).await, "task-b");
    owner.wakeups.wake(OTHER, "task-c").await.unwrap();
    assert_eq!(next_wakeup(&mut to_other).await, "task-c");
    // task-c went to the other instance only: the owner's next wake-up is the marker.
    other.wakeups.wake(OWNER, "marker").await.unwrap();
    assert_eq!(next_wakeup(&mut to_owner).await, "marker");
    // Nobody listening is no error.
    owner.wakeups.wake("gw-gone", "task-d").await.unwrap();
}
