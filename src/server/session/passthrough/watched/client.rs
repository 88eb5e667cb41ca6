//! The client's side of a watched call: nothing sent yet, or a stream of events.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::{mpsc, oneshot};

use crate::server::reply::{self, Body};
use crate::server::sse::sse_event;

/// Room for events the client has not read yet.
pub(super) const BACKLOG: usize = 64;

/// The client's side.
pub(super) enum Client {
    /// Nothing sent yet.
    Unanswered(oneshot::Sender<Response<Body>>),
    /// A stream of events: the upstream's SSE, or the gateway's own.
    Streaming(mpsc::Sender<Bytes>),
    /// Answered in full.
    Done,
}

impl Client {
    /// Resolves when the client went away.
    pub(super) async fn gone(&mut self) {
        match self {
            Client::Unanswered(answer) => answer.closed().await,
            Client::Streaming(events) => events.closed().await,
            Client::Done => std::future::pending().await,
        }
    }

    /// The client's last message: a JSON body, or the last event of its stream.
    pub(super) async fn finish(self, message: Vec<u8>) {
        match self {
            Client::Unanswered(answer) => {
                let _ = answer.send(reply::json(StatusCode::OK, message));
            }
            Client::Streaming(events) => {
                let _ = events.send(sse_event(&message)).await;
            }
            Client::Done => {}
        }
    }
}

/// A response body of the events sent on the channel.
pub(super) fn channel_body(mut events: mpsc::Receiver<Bytes>) -> Body {
    let frames = futures_util::stream::poll_fn(move |cx| {
        events
            .poll_recv(cx)
            .map(|event| event.map(|bytes| Ok::<_, Infallible>(Frame::data(bytes))))
    });
    StreamBody::new(frames)
        .map_err(|never| match never {})
        .boxed()
}
