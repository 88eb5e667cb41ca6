//! `--max-task-requests-per-second`: each caller (principal) may send that many
//! `tasks/*` requests a second on this instance (a burst of as many at once); more are
//! answered HTTP 429 with `Retry-After`, so a client polling in a tight loop slows down
//! instead of loading the store for everyone.

use std::num::NonZeroU32;
use std::sync::{Arc, Weak};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use http::{StatusCode, header};

use crate::server::reply::{self, Body};
use mtg_protocol::jsonrpc::{ErrorObject, code};
use serde_json::{Value, json};

/// Idle callers' buckets are dropped this often, so the table does not grow forever.
const FORGET_EVERY: Duration = Duration::from_secs(60);

pub(crate) struct TaskRequestRate {
    limiter: Arc<DefaultKeyedRateLimiter<String>>,
    per_second: NonZeroU32,
}

impl TaskRequestRate {
    /// `None` when `per_second` is 0 (no limit).
    pub(crate) fn new(per_second: u32) -> Option<Self> {
        let per_second = NonZeroU32::new(per_second)?;
        let limiter = Arc::new(DefaultKeyedRateLimiter::keyed(Quota::per_second(
            per_second,
        )));
        let weak: Weak<DefaultKeyedRateLimiter<String>> = Arc::downgrade(&limiter);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(FORGET_EVERY);
                loop {
                    tick.tick().await;
                    let Some(limiter) = weak.upgrade() else {
                        return;
                    };
                    limiter.retain_recent();
                }
            });
        }
        Some(Self {
            limiter,
            per_second,
        })
    }

    /// The refusal of one more `tasks/*` request of `principal`, if it is over its rate.
    pub(crate) fn check(
        &self,
        principal: &str,
        id: Option<&Value>,
    ) -> Option<http::Response<Body>> {
        let not_until = self.limiter.check_key(&principal.to_owned()).err()?;
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        // Whole seconds, rounded up: Retry-After has no finer unit.
        let seconds = wait.as_millis().div_ceil(1000).max(1);
        let error = ErrorObject::new(
            code::TOO_MANY_TASK_REQUESTS,
            format!(
                "too many tasks/* requests: at most {} a second per caller; retry in {} ms",
                self.per_second,
                wait.as_millis()
            ),
        )
        .with_data(json!({"retryAfterMs": wait.as_millis() as u64}));
        let mut response = reply::json(
            StatusCode::TOO_MANY_REQUESTS,
            mtg_protocol::jsonrpc::error_body(id, &error),
        );
        if let Ok(value) = http::HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        Some(response)
    }
}
