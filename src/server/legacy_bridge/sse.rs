//! Server-Sent Events answers for legacy clients.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::mpsc;

use crate::server::reply::Body;

pub(super) fn sse_event(json: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(json.len() + 24);
    frame.extend_from_slice(b"event: message\ndata: ");
    frame.extend_from_slice(json);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

pub(super) fn sse_response(events: mpsc::Receiver<Bytes>) -> Response<Body> {
    let frames = futures_util::stream::unfold(events, |mut events| async move {
        let event = events.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(event)), events))
    });
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
