//! The processes of one stdio upstream and which call runs where.
//!
//! A call that may be asked for input by a tool known to ask (see `habits`) runs on a
//! process with no other such call, so the upstream's requests are attributed with
//! certainty. Other calls share processes freely: fifty echo calls run at once on one
//! process. A process is reserved for a waiting exclusive call and drains (takes no new
//! shared calls); processes beyond the first start only when a call needs one.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod supervisor;

use super::command::StdioCommand;
use super::link::{Link, LinkContext};
use crate::upstream::UpstreamError;

/// How long a call waits for a process while none is running (starting, restarting).
const READY_WAIT: Duration = Duration::from_secs(30);
/// Failed starts in a row after which calls fail at once instead of waiting.
const CRASH_LOOP: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Cannot ask for input (`tools/list`, `ping`): runs anywhere.
    Quiet,
    /// Shares a process with other calls.
    Shared,
    /// Needs a process with no other call that may ask.
    Exclusive,
}

#[derive(Default)]
struct Slot {
    started: bool,
    link: Option<Arc<Link>>,
    shared: usize,
    exclusive: bool,
    reserved: bool,
    failures: u32,
    last_exit: Option<String>,
}

impl Slot {
    fn ready(&self) -> bool {
        self.link.as_ref().is_some_and(|l| !l.is_closed())
    }
}

/// Whether the upstream can serve, for `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Health {
    pub ready: bool,
    pub detail: String,
}

pub(super) struct Pool {
    me: Weak<Pool>,
    pub command: StdioCommand,
    pub context: Arc<LinkContext>,
    pub shutdown: CancellationToken,
    slots: Mutex<Vec<Slot>>,
    changes: watch::Sender<u64>,
    supervisors: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    pub(super) fn start(command: StdioCommand, size: usize, roots: &[String]) -> Arc<Self> {
        let pool = Arc::new_cyclic(|me| Pool {
            me: me.clone(),
            command,
            context: Arc::new(LinkContext::new(roots)),
            shutdown: CancellationToken::new(),
            slots: Mutex::new((0..size.max(1)).map(|_| Slot::default()).collect()),
            changes: watch::channel(0).0,
            supervisors: Mutex::new(Vec::new()),
        });
        pool.start_slot(&mut pool.lock(), 0);
        pool
    }

    /// A process for a call of `kind`, waiting while none fits.
    pub(super) async fn acquire(&self, kind: Kind) -> Result<Lease, UpstreamError> {
        let mut changes = self.changes.subscribe();
        let mut reservation = Reservation {
            pool: self.strong(),
            slot: None,
        };
        let give_up_at = Instant::now() + READY_WAIT;
        loop {
            changes.borrow_and_update();
            let wait_for_start = {
                let mut slots = self.lock();
                if let Some(lease) = self.try_take(&mut slots, kind, &mut reservation) {
                    return Ok(lease);
                }
                let any_ready = slots.iter().any(Slot::ready);
                if !any_ready {
                    if let Some(error) = crash_loop(&slots) {
                        return Err(error);
                    }
                    if Instant::now() >= give_up_at {
                        return Err(not_running(&slots[0]));
                    }
                }
                !any_ready
            };
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Err(UpstreamError::Unreachable("the gateway is shutting down".into()));
                    }
                }
                () = tokio::time::sleep_until(give_up_at), if wait_for_start => {}
                () = self.shutdown.cancelled() => {
                    return Err(UpstreamError::Unreachable("the gateway is shutting down".into()));
                }
            }
        }
    }

    fn try_take(
        &self,
        slots: &mut [Slot],
        kind: Kind,
        reservation: &mut Reservation,
    ) -> Option<Lease> {
        let usable = |s: &Slot| s.ready() && !s.exclusive && !s.reserved;
        let chosen = match kind {
            Kind::Quiet => least_loaded(slots, Slot::ready)?,
            Kind::Shared => match least_loaded(slots, usable) {
                Some(i) => {
                    slots[i].shared += 1;
                    i
                }
                None => {
                    // Every process waits for input: more processes, if allowed.
                    if !slots
                        .iter()
                        .any(|s| s.started && !s.exclusive && !s.reserved)
                    {
                        self.start_next(slots);
                    }
                    return None;
                }
            },
            Kind::Exclusive => {
                if let Some(i) = reservation.slot {
                    let slot = &mut slots[i];
                    if !(slot.ready() && slot.shared == 0 && !slot.exclusive) {
                        return None;
                    }
                    slot.reserved = false;
                    reservation.slot = None;
                    slot.exclusive = true;
                    i
                } else if let Some(i) = least_loaded(slots, |s| usable(s) && s.shared == 0) {
                    slots[i].exclusive = true;
                    i
                } else {
                    let fresh = self.start_next(slots);
                    let drain = fresh.or_else(|| {
                        least_loaded(slots, |s| s.started && !s.exclusive && !s.reserved)
                    });
                    if let Some(i) = drain {
                        slots[i].reserved = true;
                        reservation.slot = Some(i);
                    }
                    return None;
                }
            }
        };
        let link = slots[chosen].link.clone()?;
        Some(Lease {
            pool: self.strong(),
            slot: chosen,
            kind,
            link,
        })
    }

    fn start_next(&self, slots: &mut [Slot]) -> Option<usize> {
        let next = slots.iter().position(|s| !s.started)?;
        self.start_slot(slots, next);
        Some(next)
    }

    fn start_slot(&self, slots: &mut [Slot], slot: usize) {
        slots[slot].started = true;
        tracing::info!(slot, "starting an upstream process");
        let handle = tokio::spawn(supervisor::supervise(self.strong(), slot));
        self.supervisors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle);
    }

    /// A process finished its handshake and takes calls.
    pub(super) fn publish(&self, slot: usize, link: Arc<Link>) {
        self.lock()[slot].link = Some(link);
        self.changed();
    }

    /// A process is gone: no new call may pick it.
    pub(super) fn unpublish(&self, slot: usize, link: &Arc<Link>) {
        {
            let mut slots = self.lock();
            let slot = &mut slots[slot];
            if slot.link.as_ref().is_some_and(|s| Arc::ptr_eq(s, link)) {
                slot.link = None;
            }
        }
        self.changed();
    }

    /// A process ended (or never started); returns the failures in a row so far. An
    /// exit after a stable run starts a new count.
    pub(super) fn record_exit(&self, slot: usize, reason: &str, stable: bool) -> u32 {
        let failures = {
            let mut slots = self.lock();
            let slot = &mut slots[slot];
            slot.failures = if stable { 1 } else { slot.failures + 1 };
            slot.last_exit = Some(reason.to_owned());
            slot.failures
        };
        self.changed();
        failures
    }

    pub(super) fn health(&self) -> Health {
        let slots = self.lock();
        let running = slots.iter().filter(|s| s.ready()).count();
        if running > 0 {
            return Health {
                ready: true,
                detail: format!("{running} upstream process(es) running"),
            };
        }
        let detail = match crash_loop(&slots) {
            Some(error) => error.to_string(),
            None => not_running(&slots[0]).to_string(),
        };
        Health {
            ready: false,
            detail,
        }
    }

    /// Stops every process and waits for their supervisors.
    pub(super) async fn stop(&self) {
        self.shutdown.cancel();
        let handles =
            std::mem::take(&mut *self.supervisors.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in handles {
            let _ = handle.await;
        }
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn strong(&self) -> Arc<Pool> {
        self.me.upgrade().expect("the pool is alive while used")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn least_loaded(slots: &[Slot], fits: impl Fn(&Slot) -> bool) -> Option<usize> {
    (0..slots.len())
        .filter(|&i| fits(&slots[i]))
        .min_by_key(|&i| slots[i].shared)
}

fn crash_loop(slots: &[Slot]) -> Option<UpstreamError> {
    let slot = slots
        .iter()
        .filter(|s| s.started)
        .min_by_key(|s| s.failures)?;
    (slot.failures >= CRASH_LOOP).then(|| {
        UpstreamError::Unreachable(format!(
            "the upstream process keeps failing ({} times in a row, last: {}); the gateway keeps restarting it",
            slot.failures,
            slot.last_exit.as_deref().unwrap_or("unknown")
        ))
    })
}

fn not_running(slot: &Slot) -> UpstreamError {
    UpstreamError::Unreachable(match &slot.last_exit {
        Some(reason) => format!("the upstream process is not running ({reason}); restarting"),
        None => "the upstream process is still starting".to_owned(),
    })
}

/// A call's claim on a process; released when the call's exchange is dropped.
pub(super) struct Lease {
    pool: Arc<Pool>,
    slot: usize,
    kind: Kind,
    pub link: Arc<Link>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        {
            let mut slots = self.pool.lock();
            let slot = &mut slots[self.slot];
            match self.kind {
                Kind::Quiet => return,
                Kind::Shared => slot.shared = slot.shared.saturating_sub(1),
                Kind::Exclusive => slot.exclusive = false,
            }
        }
        self.pool.changed();
    }
}

/// A process reserved for a waiting exclusive call; freed if the call stops waiting.
struct Reservation {
    pool: Arc<Pool>,
    slot: Option<usize>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool.lock()[slot].reserved = false;
            self.pool.changed();
        }
    }
}
