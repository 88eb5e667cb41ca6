//! One delivery attempt: the signed POST, and what its answer means. 2xx acknowledges;
//! 408, 429 (with its `Retry-After`), 5xx, a timeout or a connection error is tried
//! again; a redirect (never followed) or any other 4xx gives up at once. At most 64 KiB
//! of the answer is read.

use std::time::Duration;

use super::Subscription;
use super::guard::{self, CheckedResolver};
use super::sign;

/// The most of a receiver's answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The most of it quoted in an error.
const QUOTED_BYTES: usize = 200;

/// What an attempt means for the event.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    Delivered,
    /// Try again, not before `after` if the receiver said (`Retry-After`).
    Retry {
        error: String,
        after: Option<Duration>,
    },
    GiveUp(String),
}

/// The HTTP client of one world's deliveries.
#[derive(Clone)]
pub(crate) struct Sender {
    client: reqwest::Client,
    allow_private: bool,
}

impl Sender {
    /// `ca`: PEM roots instead of the system's (`--webhook-ca-file`).
    pub(crate) fn new(allow_private: bool, ca: Option<&[u8]>) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(CheckedResolver::shared(allow_private))
            .user_agent(concat!("mcp-task-gateway/", env!("CARGO_PKG_VERSION")))
            .pool_idle_timeout(Duration::from_secs(60));
        if let Some(pem) = ca {
            builder = builder.tls_built_in_root_certs(false);
            for cert in reqwest::Certificate::from_pem_bundle(pem)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Self {
            client: builder.build()?,
            allow_private,
        })
    }

    /// POSTs `body` as event `id` to `subscription`, signed now.
    pub(crate) async fn send(
        &self,
        subscription: &Subscription,
        id: &str,
        body: Vec<u8>,
    ) -> Verdict {
        // reqwest resolves names through `CheckedResolver`; an address literal it
        // connects to directly, so that one is checked here.
        if let Some(host) = subscription.url.host()
            && let Err(refused) = literal_allowed(host, self.allow_private)
        {
            return Verdict::Retry {
                error: refused.to_string(),
                after: None,
            };
        }
        let timestamp = mtg_store::now_ms() / 1000;
        let signature = sign::signature(&subscription.secrets, id, timestamp, &body);
        let request = self
            .client
            .post(subscription.url.to_string())
            .timeout(subscription.timeout)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body);
        match request.send().await {
            Ok(response) => judge(response).await,
            Err(e) => Verdict::Retry {
                error: describe(&e),
                after: None,
            },
        }
    }
}

fn literal_allowed(host: &str, allow_private: bool) -> Result<(), guard::Refused> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) if !allow_private => match guard::refused(ip) {
            Some(why) => Err(guard::Refused::Address {
                host: host.to_owned(),
                ip,
                why,
            }),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// An error with its causes, as an operator reads it in the outbox.
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn judge(mut response: reqwest::Response) -> Verdict {
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let answer = read_capped(&mut response).await;
    let quoted = String::from_utf8_lossy(&answer[..answer.len().min(QUOTED_BYTES)]).into_owned();
    let code = status.as_u16();
    match code {
        200..=299 => Verdict::Delivered,
        300..=399 => Verdict::GiveUp(format!(
            "HTTP {code}: redirects are not followed (to {})",
            location.as_deref().unwrap_or("nowhere")
        )),
        408 | 429 | 500..=599 => Verdict::Retry {
            error: format!("HTTP {code} {quoted}").trim_end().to_owned(),
            after: if code == 429 || code == 503 {
                retry_after
            } else {
                None
            },
        },
        _ => Verdict::GiveUp(format!("HTTP {code} {quoted}").trim_end().to_owned()),
    }
}

/// At most [`MAX_ANSWER_BYTES`] of the answer; the rest is not read.
async fn read_capped(response: &mut reqwest::Response) -> Vec<u8> {
    let mut answer = Vec::new();
    while answer.len() < MAX_ANSWER_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_ANSWER_BYTES - answer.len();
                answer.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    answer
}
