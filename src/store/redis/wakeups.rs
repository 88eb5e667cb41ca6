//! The owner's wake-up subscriber: SUBSCRIBE to `mtg:<ns>:wake:<instance>` and pass each
//! task id to the runners. The stored state is the truth; a wake-up only says "look
//! again". Pub/sub forgets what it sent while nobody listened, so after every
//! (re)subscription the runners are told to look at everything ([`WAKE_ALL`]).

use std::time::Duration;

use futures_util::StreamExt;
use redis::RedisError;
use tokio::sync::mpsc::UnboundedSender;

use super::conn::{PubSubSource, Target};
use crate::store::WAKE_ALL;

/// How often an idle subscription is checked (PING), so a dead connection is noticed.
const CHECK_EVERY: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

pub(super) fn spawn_subscriber(
    target: &Target,
    ca_cert: Option<Vec<u8>>,
    channel: String,
    timeout: Duration,
    tx: UnboundedSender<String>,
) {
    let sources = PubSubSource::all_of(target);
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(50);
        let mut was_down = false;
        for turn in 0.. {
            if tx.is_closed() {
                return;
            }
            let mut subscribed = false;
            let ca_cert = ca_cert.as_deref();
            let source = &sources[turn % sources.len()];
            match listen(
                source,
                ca_cert,
                &channel,
                timeout,
                &tx,
                &mut subscribed,
                was_down,
            )
            .await
            {
                Ok(()) => return,
                Err(e) => {
                    if subscribed || !was_down {
                        tracing::warn!(channel, error = %e, "wake-up subscription lost; reconnecting");
                    }
                    if subscribed {
                        backoff = Duration::from_millis(50);
                    }
                    was_down = true;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = tx.closed() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    });
}

/// Why a subscription ended while the receiver still wanted wake-ups.
#[derive(Debug, thiserror::Error)]
enum SubscriptionLost {
    #[error("Redis: {0}")]
    Redis(#[from] RedisError),
    #[error("{0} timed out")]
    TimedOut(&'static str),
    #[error("connection closed")]
    Closed,
}

/// Listens until the connection fails (`Err`) or the receiver is gone (`Ok`).
async fn listen(
    source: &PubSubSource,
    ca_cert: Option<&[u8]>,
    channel: &str,
    timeout: Duration,
    tx: &UnboundedSender<String>,
    subscribed: &mut bool,
    was_down: bool,
) -> Result<(), SubscriptionLost> {
    // Both steps bounded: a master that Sentinel names may be unreachable.
    let client = tokio::time::timeout(timeout, source.client(ca_cert))
        .await
        .map_err(|_| SubscriptionLost::TimedOut("finding the master"))??;
    let pubsub = tokio::time::timeout(timeout, client.get_async_pubsub())
        .await
        .map_err(|_| SubscriptionLost::TimedOut("connect"))??;
    let (mut sink, mut stream) = pubsub.split();
    tokio::time::timeout(timeout, sink.subscribe(channel))
        .await
        .map_err(|_| SubscriptionLost::TimedOut("SUBSCRIBE"))??;
    *subscribed = true;
    if was_down {
        tracing::info!(channel, "wake-up subscription restored");
    } else {
        tracing::debug!(channel, "listening for wake-ups");
    }
    // Anything published while we were away is covered by looking at every task.
    if tx.send(WAKE_ALL.to_owned()).is_err() {
        return Ok(());
    }
    let mut check = tokio::time::interval(CHECK_EVERY);
    check.tick().await;
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else {
                    return Err(SubscriptionLost::Closed);
                };
                if let Ok(task_id) = message.get_payload::<String>()
                    && tx.send(task_id).is_err()
                {
                    return Ok(());
                }
            }
            _ = check.tick() => {
                tokio::time::timeout(timeout, sink.ping::<redis::Value>())
                    .await
                    .map_err(|_| SubscriptionLost::TimedOut("PING"))??;
            }
            () = tx.closed() => return Ok(()),
        }
    }
}
