//! Polling before a worker sleeps (`--idle-poll-us`): a worker thread about to block for
//! I/O first peeks at its runtime's event queue for a few microseconds.
//!
//! On a virtual machine, waking a thread that sleeps costs far more than running it: its
//! vCPU halts, and the wake-up comes back through the hypervisor. A proxied request at
//! low concurrency wakes the gateway twice (the client's request, the upstream's answer);
//! those wake-ups were most of what the gateway added to a request's latency
//! (docs/benchmarks.md, run 25). An upstream's answer often comes within tens of
//! microseconds, and a worker that waits that long awake sees it without sleeping.
//!
//! - **How long.** Adapted per worker, as Linux's guest `haltpoll` does: a sleep that a
//!   longer window would have avoided doubles the window (up to the cap), a sleep longer
//!   than the cap halves it, so a worker whose events come far apart stops polling.
//! - **Only with a CPU to spare.** Not while the machine's CPU pressure (PSI, the share
//!   of time some runnable thread waited for a CPU) is above [`PRESSURE_LIMIT`]: a
//!   polling thread holds a CPU that others would run on, and keeps its CPU from pulling
//!   waiting threads over. Without PSI the worker does not poll. Nor for a second after
//!   the gateway's own cgroup was throttled (`throttled.rs`): in a container with a CPU
//!   limit, polling spends the quota that requests need. Each round of polling also
//!   yields, so a thread runnable on the same CPU goes first.
//! - **What it sees.** The runtime's own epoll instance, nested in one of ours: every
//!   socket and every wake-up from another thread. Timers (a millisecond's resolution)
//!   are late by at most the window.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::telemetry::metrics;

mod throttled;

/// The first window after a sleep that polling would have avoided.
const GROW_START: Duration = Duration::from_micros(10);
/// No polling while the CPU pressure's "some" share was above this over the last sample.
pub(crate) const PRESSURE_LIMIT: f64 = 0.3;
/// How often the pressure is read (a read costs a few microseconds).
const PRESSURE_SAMPLE: Duration = Duration::from_millis(10);
/// How often a worker adds its tally to the metrics.
const TALLY_FLUSH: Duration = Duration::from_secs(1);
const PRESSURE_FILE: &str = "/proc/pressure/cpu";

/// A current-thread runtime for one worker thread, polling up to `cap` before it sleeps
/// (`Duration::ZERO`: never).
pub fn worker_runtime(cap: Duration) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if !cap.is_zero() {
        let poll = Arc::new(IdlePoll::new(cap));
        let unparked = poll.clone();
        builder
            .on_thread_park(move || poll.before_park())
            .on_thread_unpark(move || unparked.after_unpark());
    }
    builder.build()
}

/// One worker's polling; its hooks run on that worker's thread only.
struct IdlePoll {
    cap: Duration,
    state: Mutex<State>,
}

struct State {
    peek: Lookup,
    /// How long the next park polls.
    window: Duration,
    /// The current park: when it began, and how it went.
    park: Option<(Instant, Outcome)>,
    pressure: Pressure,
    tally: Tally,
}

/// The runtime's epoll instance, found on the worker's first park.
enum Lookup {
    NotYet,
    Found(RuntimePeek),
    Unavailable,
}

#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    /// The window was zero: the worker slept at once.
    Slept,
    /// An event came while polling: no sleep.
    Caught,
    /// Polled the whole window, then slept.
    Missed,
    /// Not polled: the CPUs were under pressure.
    Pressed,
}

impl IdlePoll {
    fn new(cap: Duration) -> Self {
        Self {
            cap,
            state: Mutex::new(State {
                peek: Lookup::NotYet,
                window: Duration::ZERO,
                park: None,
                pressure: Pressure::new(),
                tally: Tally::new(),
            }),
        }
    }

    fn before_park(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *state;
        let started = Instant::now();
        let outcome = state.poll(started);
        state.park = Some((started, outcome));
        if outcome != Outcome::Slept {
            state.tally.add(outcome, started.elapsed());
        }
    }

    fn after_unpark(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((parked_at, outcome)) = state.park.take() else {
            return;
        };
        let now = Instant::now();
        if outcome != Outcome::Caught {
            state.window = next_window(state.window, now - parked_at, self.cap);
        }
        state.tally.flush_if_due(now);
    }
}

impl State {
    fn poll(&mut self, started: Instant) -> Outcome {
        if self.window.is_zero() {
            return Outcome::Slept;
        }
        if self.pressure.high(started) {
            return Outcome::Pressed;
        }
        if matches!(self.peek, Lookup::NotYet) {
            self.peek = match RuntimePeek::runtime() {
                Ok(peek) => Lookup::Found(peek),
                Err(e) => {
                    tracing::warn!(error = %e, "a worker cannot poll before it sleeps");
                    Lookup::Unavailable
                }
            };
        }
        let Lookup::Found(peek) = &mut self.peek else {
            return Outcome::Slept;
        };
        loop {
            if peek.ready() {
                return Outcome::Caught;
            }
            if started.elapsed() >= self.window {
                return Outcome::Missed;
            }
            // A thread runnable on this CPU goes first.
            std::thread::yield_now();
        }
    }
}

/// The window after a park that slept for `slept` (polling included).
fn next_window(window: Duration, slept: Duration, cap: Duration) -> Duration {
    if slept <= cap {
        // A longer window would have avoided this sleep.
        return match window.is_zero() {
            true => GROW_START.min(cap),
            false => (window * 2).min(cap),
        };
    }
    let halved = window / 2;
    match halved < GROW_START {
        true => Duration::ZERO,
        false => halved,
    }
}

/// The runtime's epoll instance, registered (readable) in an epoll instance of our own:
/// ours is ready exactly when the runtime has events waiting.
struct RuntimePeek {
    poll: Poll,
    events: Events,
}

impl RuntimePeek {
    /// The epoll instance of the runtime this runs on: among the process's epoll
    /// instances, the one that holds a socket registered here just now.
    fn runtime() -> std::io::Result<Self> {
        let (probe, _peer) = std::os::unix::net::UnixDatagram::pair()?;
        probe.set_nonblocking(true)?;
        let probe = tokio::net::UnixDatagram::from_std(probe)?;
        let epoll = epoll_holding(probe.as_raw_fd())?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut SourceFd(&epoll), Token(0), Interest::READABLE)?;
        Ok(Self {
            poll,
            events: Events::with_capacity(1),
        })
    }

    /// Whether the runtime has events waiting, without blocking.
    fn ready(&mut self) -> bool {
        match self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            Ok(()) => !self.events.is_empty(),
            // Let the runtime's own wait find out what happened.
            Err(_) => true,
        }
    }
}

/// The epoll fd of this process that has `fd` (the same socket, by inode) registered,
/// from `/proc/self/fdinfo`.
fn epoll_holding(fd: RawFd) -> std::io::Result<RawFd> {
    let inode = socket_inode(fd)?;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Some(candidate) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let is_epoll = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:[eventpoll]");
        if !is_epoll {
            continue;
        }
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{candidate}")) else {
            continue;
        };
        if info.lines().any(|line| registers(line, fd, inode)) {
            return Ok(candidate);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "the runtime's epoll instance is not in /proc/self/fdinfo",
    ))
}

/// The inode of socket `fd`, whose `/proc/self/fd` link reads `socket:[INODE]`.
fn socket_inode(fd: RawFd) -> std::io::Result<u64> {
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))?;
    target
        .to_str()
        .and_then(|t| t.strip_prefix("socket:["))
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("fd {fd} is not a socket: {target:?}")))
}

/// Whether a line of an epoll instance's fdinfo (`tfd: FD events: … ino:HEX sdev:…`)
/// registers `fd` of inode `inode`.
fn registers(line: &str, fd: RawFd, inode: u64) -> bool {
    let Some(rest) = line.strip_prefix("tfd:") else {
        return false;
    };
    let mut words = rest.split_whitespace();
    let same_fd = words.next().and_then(|w| w.parse().ok()) == Some(fd);
    let same_inode = words
        .find_map(|w| w.strip_prefix("ino:"))
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        == Some(inode);
    same_fd && same_inode
}

/// The machine's CPU pressure, read at most every [`PRESSURE_SAMPLE`]: high while the
/// share of the last sample's time in which some runnable thread waited for a CPU was
/// above [`PRESSURE_LIMIT`], when it cannot be read, and while the gateway's cgroup was
/// lately throttled.
struct Pressure {
    file: Option<std::fs::File>,
    throttling: throttled::Throttling,
    /// The last reading: when, and the "some" stall total then (µs).
    last: Option<(Instant, u64)>,
    high: bool,
}

impl Pressure {
    fn new() -> Self {
        Self {
            file: None,
            throttling: throttled::Throttling::new(),
            last: None,
            high: true,
        }
    }

    fn high(&mut self, now: Instant) -> bool {
        if let Some((at, _)) = self.last
            && now - at < PRESSURE_SAMPLE
        {
            return self.high;
        }
        if self.file.is_none() {
            self.file = std::fs::File::open(PRESSURE_FILE).ok();
        }
        let Some(stalled) = self.file.as_ref().and_then(read_some_total_us) else {
            self.high = true;
            return true;
        };
        self.high = match self.last {
            // The first reading only starts the count.
            None => true,
            Some((at, before)) => {
                let share = stalled.saturating_sub(before) as f64 / (now - at).as_micros() as f64;
                share > PRESSURE_LIMIT
            }
        };
        // Read at every sample, so that a throttling during high pressure is not missed.
        let throttled = self.throttling.recent(now);
        self.high |= throttled;
        self.last = Some((now, stalled));
        self.high
    }
}

fn read_some_total_us(file: &std::fs::File) -> Option<u64> {
    some_total_us(read_text(file, &mut [0u8; 256])?)
}

/// A small kernel file's text, read again from its start: an open file shows the new
/// values at each read.
fn read_text<'a>(file: &std::fs::File, buf: &'a mut [u8]) -> Option<&'a str> {
    use std::os::unix::fs::FileExt;
    let read = file.read_at(buf, 0).ok()?;
    std::str::from_utf8(&buf[..read]).ok()
}

/// The `total=` (µs) of a PSI file's "some" line.
fn some_total_us(text: &str) -> Option<u64> {
    let some = text.lines().find(|line| line.starts_with("some "))?;
    some.split("total=").nth(1)?.trim().parse().ok()
}

/// One worker's counts since they were last added to the metrics.
struct Tally {
    caught: u64,
    missed: u64,
    pressed: u64,
    polled: Duration,
    flushed_at: Instant,
}

impl Tally {
    fn new() -> Self {
        Self {
            caught: 0,
            missed: 0,
            pressed: 0,
            polled: Duration::ZERO,
            flushed_at: Instant::now(),
        }
    }

    fn add(&mut self, outcome: Outcome, polled: Duration) {
        match outcome {
            Outcome::Caught => self.caught += 1,
            Outcome::Missed => self.missed += 1,
            Outcome::Pressed => self.pressed += 1,
            Outcome::Slept => {}
        }
        self.polled += polled;
    }

    /// Adds the counts to the metrics about once a second: the metrics recorder is
    /// installed after the first worker starts, and a lookup per park would cost more
    /// than the park's bookkeeping.
    fn flush_if_due(&mut self, now: Instant) {
        if now - self.flushed_at < TALLY_FLUSH {
            return;
        }
        metrics::idle_polls(self.caught, self.missed, self.pressed, self.polled);
        *self = Self::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_grows_while_sleeps_are_short_and_shrinks_to_zero_when_long() {
        let cap = Duration::from_micros(100);
        let short = Duration::from_micros(40);
        let long = Duration::from_millis(5);
        let mut window = Duration::ZERO;
        let mut grown = Vec::new();
        for _ in 0..5 {
            window = next_window(window, short, cap);
            grown.push(window.as_micros());
        }
        assert_eq!(grown, [10, 20, 40, 80, 100]);
        let mut shrunk = Vec::new();
        for _ in 0..5 {
            window = next_window(window, long, cap);
            shrunk.push(window.as_micros());
        }
        assert_eq!(shrunk, [50, 25, 12, 0, 0]);
    }

    #[test]
    fn an_fdinfo_line_names_the_registered_fd_and_its_inode() {
        let line = "tfd:       12 events:       19 data:     7f1e5c004c80  pos:0 ino:1a2b sdev:8";
        assert!(registers(line, 12, 0x1a2b));
        assert!(
            !registers(line, 12, 0x1a2c),
            "another socket under a reused number"
        );
        assert!(!registers(line, 2, 0x1a2b));
        assert!(!registers("pos:\t0", 12, 0x1a2b));
    }

    #[test]
    fn the_stall_total_is_read_from_the_some_line() {
        let psi = "some avg10=4.82 avg60=31.73 avg300=29.19 total=629108957\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(some_total_us(psi), Some(629_108_957));
        assert_eq!(some_total_us("full avg10=0.00 total=5\n"), None);
    }

    /// The peek sees the runtime's events: quiet once the runtime has taken them, ready
    /// as soon as a socket registered with the runtime has a datagram.
    #[test]
    fn the_watch_is_ready_exactly_when_the_runtime_has_an_event() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut peek = RuntimePeek::runtime().expect("the runtime's epoll instance");
            let (ours, theirs) = tokio::net::UnixDatagram::pair().unwrap();
            // Registration events (writable) are the runtime's to take first.
            let deadline = Instant::now() + Duration::from_secs(10);
            while peek.ready() {
                assert!(
                    Instant::now() < deadline,
                    "the runtime's events stay unread"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            theirs.send(b"x").await.unwrap();
            assert!(
                peek.ready(),
                "a datagram arrived and the peek did not see it"
            );
            let mut buf = [0u8; 4];
            assert_eq!(ours.recv(&mut buf).await.unwrap(), 1);
        });
    }

    /// A runtime that polls before it sleeps still serves I/O and timers.
    #[test]
    fn a_polling_runtime_answers_a_ping_pong_and_fires_timers() {
        let runtime = worker_runtime(Duration::from_micros(100)).unwrap();
        runtime.block_on(async {
            let (ours, theirs) = tokio::net::UnixDatagram::pair().unwrap();
            let echo = tokio::spawn(async move {
                let mut buf = [0u8; 8];
                for _ in 0..200 {
                    let n = theirs.recv(&mut buf).await.unwrap();
                    theirs.send(&buf[..n]).await.unwrap();
                }
            });
            let mut buf = [0u8; 8];
            for i in 0..200u8 {
                ours.send(&[i]).await.unwrap();
                assert_eq!(ours.recv(&mut buf).await.unwrap(), 1);
                assert_eq!(buf[0], i);
            }
            echo.await.unwrap();
            tokio::time::timeout(
                Duration::from_secs(10),
                tokio::time::sleep(Duration::from_millis(5)),
            )
            .await
            .expect("a timer fires");
        });
    }
}
