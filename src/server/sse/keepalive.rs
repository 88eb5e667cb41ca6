//! Progress keep-alive (`--progress-keepalive-ms`): a call whose client sent
//! `_meta.progressToken` hears a `notifications/progress` for that token whenever the
//! period passed without one, so hosts whose idle timer resets on progress never drop a
//! live call. Progress must increase for a token: a keep-alive is a hair above the last
//! value sent, and an upstream value at or below it is raised just above it, so the
//! upstream's own steps keep their meaning.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::sse_event;
use mtg_protocol::jsonrpc;
use mtg_protocol::names::method;

/// How far above the last value a keep-alive (or a raised upstream value) goes.
const STEP: f64 = 1e-6;

/// `--progress-keepalive-ms` for one upstream's calls.
#[derive(Clone)]
pub(crate) struct Every {
    pub period: Duration,
    /// Counts the keep-alives sent.
    pub meter: crate::telemetry::Meter,
}

/// The keep-alive of one streamed call.
pub(crate) struct ProgressKeepAlive {
    token: Value,
    every: Duration,
    meter: crate::telemetry::Meter,
    started: Instant,
    /// The last progress value sent for the token, and when.
    last: Option<f64>,
    last_at: Instant,
}

impl ProgressKeepAlive {
    /// For a request whose client asked for progress, when keep-alive is on.
    pub(crate) fn for_request(params: Option<&Value>, every: Option<&Every>) -> Option<Self> {
        let every = every.filter(|every| !every.period.is_zero())?;
        let token = params?.pointer("/_meta/progressToken")?.clone();
        let now = Instant::now();
        Some(Self {
            token,
            every: every.period,
            meter: every.meter.clone(),
            started: now,
            last: None,
            last_at: now,
        })
    }

    /// When the next keep-alive is due.
    pub(crate) fn due(&self) -> Instant {
        self.last_at + self.every
    }

    /// A frame on its way to the client: a progress notification for the token is noted,
    /// its value raised above the last one sent when it is not.
    pub(crate) fn pass(&mut self, frame: Bytes) -> Bytes {
        const MARK: &[u8] = b"notifications/progress";
        if memchr::memmem::find(&frame, MARK).is_none() {
            return frame;
        }
        let Some(mut message) = frame
            .strip_prefix(b"event: message\ndata: ")
            .and_then(|rest| serde_json::from_slice::<Value>(rest.trim_ascii_end()).ok())
        else {
            return frame;
        };
        let Some(params) = message.get_mut("params").filter(|p| self.is_for_token(p)) else {
            return frame;
        };
        if !self.raise(params) {
            return frame;
        }
        sse_event(&serde_json::to_vec(&message).unwrap_or_default())
    }

    /// Whether `params` are of a progress notification for this call's token.
    pub(crate) fn is_for_token(&self, params: &Value) -> bool {
        params.get("progressToken") == Some(&self.token)
    }

    /// Notes the progress in `params` (the token's) as sent; `true` when its value had
    /// to be raised above the last one sent, which `params` then carry.
    pub(crate) fn raise(&mut self, params: &mut Value) -> bool {
        let value = params["progress"].as_f64().unwrap_or(0.0);
        let sent = match self.last {
            Some(last) if value <= last => last + STEP,
            _ => value,
        };
        self.last = Some(sent);
        self.last_at = Instant::now();
        if sent == value {
            return false;
        }
        params["progress"] = json!(sent);
        true
    }

    /// The keep-alive to send now.
    pub(crate) fn tick(&mut self) -> Bytes {
        self.meter.calls().progress_keepalive_sent();
        let progress = self.last.map_or(0.0, |last| last + STEP);
        self.last = Some(progress);
        self.last_at = Instant::now();
        let running = Duration::from_secs(self.started.elapsed().as_secs());
        let params = json!({
            "progressToken": self.token,
            "progress": progress,
            "message": format!("still running ({})", humantime::format_duration(running)),
        });
        let message = jsonrpc::notification_value(method::PROGRESS, Some(params));
        sse_event(&serde_json::to_vec(&message).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keepalive() -> ProgressKeepAlive {
        let params = json!({"_meta": {"progressToken": "t"}});
        let every = Every {
            period: Duration::from_secs(1),
            meter: crate::telemetry::Meter::new(None),
        };
        ProgressKeepAlive::for_request(Some(&params), Some(&every)).unwrap()
    }

    fn progress_of(frame: &Bytes) -> f64 {
        let json = frame.strip_prefix(b"event: message\ndata: ").unwrap();
        let message: Value = serde_json::from_slice(json.trim_ascii_end()).unwrap();
        message["params"]["progress"].as_f64().unwrap()
    }

    fn upstream(token: &str, progress: f64) -> Bytes {
        let message = jsonrpc::notification_value(
            method::PROGRESS,
            Some(json!({"progressToken": token, "progress": progress, "total": 3})),
        );
        sse_event(&serde_json::to_vec(&message).unwrap())
    }

    #[test]
    fn values_only_increase_and_the_upstreams_steps_keep_their_meaning() {
        let mut k = keepalive();
        let first = k.tick();
        assert_eq!(progress_of(&first), 0.0);
        // The upstream's 0 would not increase: raised a hair.
        let raised = progress_of(&k.pass(upstream("t", 0.0)));
        assert!(raised > 0.0 && raised < 0.001);
        let after = progress_of(&k.tick());
        assert!(after > raised);
        // The upstream's next step passes as it is.
        let step = k.pass(upstream("t", 1.0));
        assert_eq!(step, upstream("t", 1.0));
        assert!(progress_of(&k.tick()) > 1.0);
    }

    #[test]
    fn other_tokens_and_other_messages_pass_untouched() {
        let mut k = keepalive();
        k.tick();
        let other = upstream("other", 0.0);
        assert_eq!(k.pass(other.clone()), other);
        let log = sse_event(br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#);
        assert_eq!(k.pass(log.clone()), log);
    }

    #[test]
    fn no_token_or_a_zero_period_means_no_keepalive() {
        let every = |period| Every {
            period,
            meter: crate::telemetry::Meter::new(None),
        };
        let second = every(Duration::from_secs(1));
        assert!(ProgressKeepAlive::for_request(Some(&json!({})), Some(&second)).is_none());
        let params = json!({"_meta": {"progressToken": 1}});
        let zero = every(Duration::ZERO);
        assert!(ProgressKeepAlive::for_request(Some(&params), Some(&zero)).is_none());
        assert!(ProgressKeepAlive::for_request(Some(&params), None).is_none());
    }
}
