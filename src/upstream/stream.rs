//! Reading what the upstream sends back for one POST: a JSON body or an SSE stream of
//! JSON-RPC messages.

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use sse_stream::SseStream;

use super::UpstreamError;
use crate::protocol::jsonrpc::Message;

/// One message from the upstream during a call: a server-to-client request
/// (elicitation, sampling, roots, ping), a notification (progress, logging, ...), or the
/// final answer. The same shape as any JSON-RPC message.
pub type UpstreamEvent = Message;

pub enum CallStream {
    /// A JSON body, not read yet.
    Json(Option<Incoming>),
    Sse(Box<SseStream<Incoming>>),
}

impl CallStream {
    pub fn new(body: Incoming, content_type: Option<&str>) -> Self {
        if content_type.is_some_and(|ct| ct.starts_with("text/event-stream")) {
            CallStream::Sse(Box::new(SseStream::new(body)))
        } else {
            CallStream::Json(Some(body))
        }
    }

    /// The next message; `None` when the upstream ended the stream.
    pub async fn next(&mut self) -> Option<Result<UpstreamEvent, UpstreamError>> {
        match self {
            CallStream::Json(body) => {
                let body = body.take()?;
                Some(match body.collect().await {
                    Ok(collected) => parse_event(&collected.to_bytes()),
                    Err(e) => Err(UpstreamError::Lost(e.to_string())),
                })
            }
            CallStream::Sse(stream) => loop {
                match stream.next().await? {
                    Err(e) => return Some(Err(UpstreamError::Lost(e.to_string()))),
                    // Priming events (an id and no data) exist for resumption only.
                    Ok(sse) => match sse.data {
                        Some(data) if !data.trim().is_empty() => {
                            return Some(parse_event(&Bytes::from(data)));
                        }
                        _ => continue,
                    },
                }
            },
        }
    }
}

fn parse_event(bytes: &[u8]) -> Result<UpstreamEvent, UpstreamError> {
    Message::parse(bytes).map_err(|e| UpstreamError::Protocol(e.to_string()))
}
