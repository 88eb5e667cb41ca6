//! The upstream's side of a watched call: its answer, read as far as the watcher got.

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::Collect;
use hyper::body::{Frame, Incoming};

use super::events::Events;
use crate::upstream::stream::PendingHead;
use crate::upstream::{CallStream, UpstreamError};
use mtg_transport::CallBody;

/// The upstream's side of the call.
pub(super) enum Answer {
    /// The response head has not come.
    Waiting(PendingHead),
    /// An SSE stream, cut into events.
    Sse {
        body: Incoming,
        events: Events,
    },
    /// Any other body, read whole: one JSON message, or an error the client gets as it
    /// came.
    Whole {
        head: http::response::Parts,
        body: Collect<CallBody>,
    },
    Ended,
}

/// What the upstream did next.
pub(super) enum Step {
    Head(Result<hyper::Response<Incoming>, UpstreamError>),
    Frame(Option<Result<Frame<Bytes>, hyper::Error>>),
    Whole(Result<Bytes, mtg_transport::CallBodyError>),
}

impl Answer {
    /// Cancel-safe: each state keeps what it read.
    pub(super) async fn step(&mut self) -> Step {
        match self {
            Answer::Waiting(head) => Step::Head(head.await),
            Answer::Sse { body, .. } => Step::Frame(body.frame().await),
            Answer::Whole { body, .. } => Step::Whole((&mut *body).await.map(|c| c.to_bytes())),
            Answer::Ended => std::future::pending().await,
        }
    }

    /// What is left to read, for a task's runner.
    pub(super) fn into_stream(self) -> Option<CallStream> {
        match self {
            Answer::Waiting(head) => Some(CallStream::pending(head)),
            Answer::Sse { body, events } => Some(CallStream::resumed(events.rest(), body)),
            Answer::Whole { body, .. } => Some(CallStream::Json(Some(body))),
            Answer::Ended => None,
        }
    }
}
