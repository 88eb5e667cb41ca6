//! The pub/sub subscriber: one connection per Redis target, shared by every namespace of
//! this process (each upstream's world has its own), on which each subscribes its
//! channels: an owner's wake-ups (`mtg:<ns>:wake:<instance>`) and the namespace's
//! changes. The stored state is the truth; a message only says "look again". Pub/sub
//! forgets what it sent while nobody listened, so after every (re)subscription each
//! channel's listeners are told to look at everything ([`WAKE_ALL`]). A channel whose
//! listeners are all gone is left (UNSUBSCRIBE), so Redis stops sending what nobody here
//! reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use redis::RedisError;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use super::conn::{PubSubSource, Target};
use super::link::Link;
use crate::WAKE_ALL;

/// How often an idle subscription is checked (PING), so a dead connection is noticed,
/// and how often the listeners are checked for any left.
const CHECK_EVERY: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

pub(super) struct Subscriber {
    sources: Vec<PubSubSource>,
    ca_cert: Option<Vec<u8>>,
    timeout: Duration,
    hub: Mutex<Hub>,
    /// Up while subscribed: the one connection that hears at once when Redis goes away.
    link: Arc<Link>,
}

#[derive(Default)]
struct Hub {
    /// Each channel's listeners.
    channels: HashMap<String, Vec<UnboundedSender<String>>>,
    /// Tells the running connection of a channel to subscribe; `None` while none runs.
    running: Option<UnboundedSender<String>>,
}

impl Subscriber {
    pub(super) fn new(
        target: &Target,
        ca_cert: Option<Vec<u8>>,
        timeout: Duration,
        link: Arc<Link>,
    ) -> Arc<Self> {
        Arc::new(Self {
            sources: PubSubSource::all_of(target),
            ca_cert,
            timeout,
            hub: Mutex::default(),
            link,
        })
    }

    /// Passes what is published on `channel` to `tx` (and [`WAKE_ALL`] after each
    /// (re)subscription) until `tx`'s receiver is dropped.
    pub(super) fn subscribe(self: &Arc<Self>, channel: String, tx: UnboundedSender<String>) {
        let mut hub = self.lock();
        hub.channels.entry(channel.clone()).or_default().push(tx);
        if let Some(running) = &hub.running
            && running.send(channel).is_ok()
        {
            return;
        }
        let (commands_tx, commands) = mpsc::unbounded_channel();
        hub.running = Some(commands_tx);
        tokio::spawn(self.clone().run(commands));
    }

    fn lock(&self) -> MutexGuard<'_, Hub> {
        self.hub.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `message` to `channel`'s listeners, forgetting those gone; `true` when none
    /// is left, and the channel is to be left.
    fn dispatch(&self, channel: &str, message: &str) -> bool {
        let mut hub = self.lock();
        let Some(listeners) = hub.channels.get_mut(channel) else {
            return true;
        };
        listeners.retain(|tx| tx.send(message.to_owned()).is_ok());
        if listeners.is_empty() {
            hub.channels.remove(channel);
            return true;
        }
        false
    }

    /// Forgets the channels whose listeners are all gone, and returns them to be left.
    fn unheard(&self) -> Vec<String> {
        let mut hub = self.lock();
        let mut gone = Vec::new();
        hub.channels.retain(|channel, listeners| {
            listeners.retain(|tx| !tx.is_closed());
            if listeners.is_empty() {
                gone.push(channel.clone());
            }
            !listeners.is_empty()
        });
        gone
    }

    /// Whether nobody listens any more; then the connection stops (under the same lock
    /// as `subscribe`, so a listener that comes meanwhile starts a new one).
    fn stop_if_unused(&self) -> bool {
        let mut hub = self.lock();
        hub.channels.retain(|_, listeners| {
            listeners.retain(|tx| !tx.is_closed());
            !listeners.is_empty()
        });
        if hub.channels.is_empty() {
            hub.running = None;
            return true;
        }
        false
    }

    async fn run(self: Arc<Self>, mut commands: UnboundedReceiver<String>) {
        let mut backoff = Duration::from_millis(50);
        let mut was_down = false;
        for turn in 0.. {
            if self.stop_if_unused() {
                return;
            }
            let mut subscribed = false;
            let source = &self.sources[turn % self.sources.len()];
            let outcome = self
                .listen(source, &mut commands, &mut subscribed, was_down)
                .await;
            self.link.lost();
            match outcome {
                Ok(()) => return,
                Err(e) => {
                    if subscribed || !was_down {
                        tracing::warn!(error = %e, "pub/sub subscription lost; reconnecting");
                    }
                    if subscribed {
                        backoff = Duration::from_millis(50);
                    }
                    was_down = true;
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Listens until the connection fails (`Err`) or nobody listens any more (`Ok`).
    async fn listen(
        &self,
        source: &PubSubSource,
        commands: &mut UnboundedReceiver<String>,
        subscribed: &mut bool,
        was_down: bool,
    ) -> Result<(), SubscriptionLost> {
        let timeout = self.timeout;
        // Both steps bounded: a master that Sentinel names may be unreachable.
        let client = tokio::time::timeout(timeout, source.client(self.ca_cert.as_deref()))
            .await
            .map_err(|_| SubscriptionLost::TimedOut("finding the master"))??;
        let pubsub = tokio::time::timeout(timeout, client.get_async_pubsub())
            .await
            .map_err(|_| SubscriptionLost::TimedOut("connect"))??;
        let (mut sink, mut stream) = pubsub.split();
        // Every channel known now; those asked for meanwhile are in the list already.
        while commands.try_recv().is_ok() {}
        let channels: Vec<String> = self.lock().channels.keys().cloned().collect();
        for channel in &channels {
            tokio::time::timeout(timeout, sink.subscribe(channel))
                .await
                .map_err(|_| SubscriptionLost::TimedOut("SUBSCRIBE"))??;
        }
        *subscribed = true;
        self.link.restored();
        if was_down {
            tracing::info!(channels = channels.len(), "pub/sub subscription restored");
        }
        // Anything published while we were away is covered by looking at every task.
        for channel in &channels {
            if self.dispatch(channel, WAKE_ALL) {
                leave(&mut sink, channel, timeout).await?;
            }
        }
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.tick().await;
        loop {
            tokio::select! {
                message = stream.next() => {
                    let Some(message) = message else {
                        return Err(SubscriptionLost::Closed);
                    };
                    let channel = message.get_channel_name();
                    if let Ok(payload) = message.get_payload::<String>()
                        && self.dispatch(channel, &payload)
                    {
                        leave(&mut sink, channel, timeout).await?;
                    }
                }
                // A channel asked for again after it was left comes here after the
                // UNSUBSCRIBE, so the two reach Redis in that order.
                Some(channel) = commands.recv() => {
                    tokio::time::timeout(timeout, sink.subscribe(&channel))
                        .await
                        .map_err(|_| SubscriptionLost::TimedOut("SUBSCRIBE"))??;
                    tracing::debug!(channel, "subscribed");
                    if self.dispatch(&channel, WAKE_ALL) {
                        leave(&mut sink, &channel, timeout).await?;
                    }
                }
                _ = check.tick() => {
                    // Left before the check below forgets them.
                    for channel in self.unheard() {
                        leave(&mut sink, &channel, timeout).await?;
                    }
                    if self.stop_if_unused() {
                        return Ok(());
                    }
                    tokio::time::timeout(timeout, sink.ping::<redis::Value>())
                        .await
                        .map_err(|_| SubscriptionLost::TimedOut("PING"))??;
                }
            }
        }
    }
}

/// Leaves a channel nobody here listens to any more.
async fn leave(
    sink: &mut redis::aio::PubSubSink,
    channel: &str,
    timeout: Duration,
) -> Result<(), SubscriptionLost> {
    tokio::time::timeout(timeout, sink.unsubscribe(channel))
        .await
        .map_err(|_| SubscriptionLost::TimedOut("UNSUBSCRIBE"))??;
    tracing::debug!(channel, "unsubscribed");
    Ok(())
}

/// Why a subscription ended while listeners still wanted messages.
#[derive(Debug, thiserror::Error)]
enum SubscriptionLost {
    #[error("Redis: {0}")]
    Redis(#[from] RedisError),
    #[error("{0} timed out")]
    TimedOut(&'static str),
    #[error("connection closed")]
    Closed,
}
