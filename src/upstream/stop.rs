//! Stops: a call the gateway ends before the upstream's final answer. Every stop names
//! its reason ([`StopReason`]) and reaches the upstream the same way, by one explicit
//! call on the call's exchange, [`super::Exchange::stop`], which each transport
//! carries out as its protocol says:
//!
//! - a 2025-xx session upstream (`session_http/`), SSE or JSON response:
//!   `notifications/cancelled` POSTed in the call's session. The exchange exists from
//!   the moment the request is sent, before its response head (which a JSON-response
//!   upstream sends only when the call ends), so a stop reaches such a call too;
//! - a stdio server (`stdio/exchange.rs`): `notifications/cancelled` written to its
//!   process;
//! - a 2026-07-28 upstream (`stateless_http.rs`): the request's stream is closed, which
//!   on 2026-07-28 HTTP is the cancellation.
//!
//! Who stops a call: a task's runner (cancel, timeout, drain, expiry, a held call's
//! unanswered input: `tasks/runner.rs`), a forwarded request (its client left, its
//! timeout: `forward.rs`), a watched pass-through call whose client left, a
//! gateway-served session's call its client cancelled, a `subscriptions/listen` stream.
//! A stop before the request is sent (while an upstream session opens, or a stdio
//! process is leased) has nothing to reach: the step is dropped.
//!
//! An exchange's `Drop` is a safety net only, for a call whose future is dropped from
//! outside (a client that hung up while its handler awaited, a panic): unsettled, it
//! stops the call as [`StopReason::Abandoned`].

/// Why the gateway stops a call before the upstream's final answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The task was cancelled (by its client, an operator, a session client) or ended
    /// otherwise elsewhere.
    Cancelled,
    /// The gateway's upstream timeout (`--upstream-timeout-ms`) passed.
    TimedOut,
    /// The task's TTL passed: nobody can read its outcome any more.
    Expired,
    /// The task is another instance's now: handed over at the drain, or taken over
    /// while this instance was cut off.
    Moved,
    /// A held call's client did not come back with its answers in time
    /// (`--input-wait-timeout-ms`).
    Unanswered,
    /// The client closed its request or stream.
    ClientLeft,
    /// The gateway shuts down: a long-lived stream ends.
    ShuttingDown,
    /// The client cancelled its request (`notifications/cancelled` in a gateway-served
    /// session).
    ClientCancelled,
    /// The gateway cannot carry the call on (its caller has too many calls running, or
    /// it asked for input where none can be passed on).
    Refused,
    /// The call's future was dropped from outside without a stop (the safety net).
    Abandoned,
}

impl StopReason {
    /// The words the upstream gets as `notifications/cancelled`'s `reason`.
    pub fn words(self) -> &'static str {
        match self {
            Self::Cancelled => "the task was cancelled",
            Self::TimedOut => "the gateway's upstream timeout passed",
            Self::Expired => "the task expired",
            Self::Moved => "the task moved to another gateway instance",
            Self::Unanswered => "the client did not answer in time",
            Self::ClientLeft => "the client closed its request",
            Self::ShuttingDown => "the gateway is shutting down",
            Self::ClientCancelled => "cancelled by the client",
            Self::Refused => "the gateway cannot carry the call on",
            Self::Abandoned => "the gateway's caller stopped waiting",
        }
    }
}
