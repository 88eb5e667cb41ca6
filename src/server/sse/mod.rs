//! Server-Sent Events answers: a gateway-served session's streamed calls, and the
//! notifications of a bridged 2026-07-28 call.

pub(super) mod keepalive;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::mpsc;

use crate::server::reply::Body;
use keepalive::ProgressKeepAlive;

/// One JSON-RPC message as an SSE event.
pub(crate) fn sse_event(json: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(json.len() + 24);
    frame.extend_from_slice(b"event: message\ndata: ");
    frame.extend_from_slice(json);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// While the client takes its time to answer, a comment now and then keeps proxies from
/// closing the idle stream.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// A response streaming `events` until their sender is dropped.
pub(crate) fn sse_response(events: mpsc::Receiver<Bytes>) -> Response<Body> {
    sse_response_kept(events, None)
}

/// The same, with the progress keep-alive of a call whose client asked for progress.
pub(crate) fn sse_response_kept(
    events: mpsc::Receiver<Bytes>,
    keepalive: Option<ProgressKeepAlive>,
) -> Response<Body> {
    let frames = futures_util::stream::unfold(
        (events, keepalive),
        |(mut events, mut keepalive)| async move {
            let due = keepalive.as_ref().map_or_else(
                || tokio::time::Instant::now() + KEEP_ALIVE_EVERY,
                ProgressKeepAlive::due,
            );
            let event = match tokio::time::timeout_at(due, events.recv()).await {
                Ok(event) => match keepalive.as_mut() {
                    Some(keepalive) => keepalive.pass(event?),
                    None => event?,
                },
                Err(_) => match keepalive.as_mut() {
                    Some(keepalive) => keepalive.tick(),
                    None => Bytes::from_static(KEEP_ALIVE),
                },
            };
            Some((Ok::<_, Infallible>(Frame::data(event)), (events, keepalive)))
        },
    );
    let body = StreamBody::new(frames)
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_are_framed() {
        assert_eq!(
            sse_event(br#"{"a":1}"#),
            Bytes::from_static(b"event: message\ndata: {\"a\":1}\n\n")
        );
    }
}
