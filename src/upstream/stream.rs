//! Reading what the upstream sends back for one POST: a JSON body or an SSE stream of
//! JSON-RPC messages.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::Collect;
use hyper::body::Incoming;
use sse_stream::SseStream;

use super::UpstreamError;
use mtg_protocol::jsonrpc::Message;
use mtg_transport::CallBody;

/// One message from the upstream during a call: a server-to-client request
/// (elicitation, sampling, roots, ping), a notification (progress, logging, ...), or the
/// final answer. The same shape as any JSON-RPC message.
pub(crate) type UpstreamEvent = Message;

pub enum CallStream {
    /// A JSON body being read. The read lives here, not in `next()`'s future, so that a
    /// caller's `select!` may drop `next()` halfway without losing the body.
    Json(Option<Collect<CallBody>>),
    Sse(Box<SseStream<CallBody>>),
    /// The rest of a pass-through client's SSE answer the gateway read part of:
    /// `Resumed` starts with the unread part of an event cut by the last chunk read.
    Resumed(Box<SseStream<Resumed>>),
    /// A pass-through client's request whose answer has not begun (a JSON-response
    /// upstream answers only when the call ends). Behind a lock only to be `Sync`: it
    /// is reached through `&mut self`, never locked.
    Pending(Mutex<PendingHead>),
}

/// The upstream's answer to a request sent by the pass-through client, not come yet.
pub(crate) type PendingHead =
    Pin<Box<dyn Future<Output = Result<hyper::Response<Incoming>, UpstreamError>> + Send>>;

/// A body that yields `prefix` before `inner`'s frames.
pub struct Resumed {
    prefix: Option<Bytes>,
    inner: Incoming,
}

impl Body for Resumed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl CallStream {
    pub fn new(body: impl Into<CallBody>, content_type: Option<&str>) -> Self {
        let body = body.into();
        if content_type.is_some_and(|ct| ct.starts_with("text/event-stream")) {
            CallStream::Sse(Box::new(SseStream::new(body)))
        } else {
            CallStream::Json(Some(body.collect()))
        }
    }

    /// The rest of an SSE answer of which `prefix` (the start of an event) was read.
    pub fn resumed(prefix: Bytes, body: Incoming) -> Self {
        let prefix = (!prefix.is_empty()).then_some(prefix);
        CallStream::Resumed(Box::new(SseStream::new(Resumed {
            prefix,
            inner: body,
        })))
    }

    /// An answer whose head is still to come.
    pub fn pending(head: PendingHead) -> Self {
        CallStream::Pending(Mutex::new(head))
    }

    /// The next message; `None` when the upstream ended the stream. Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<UpstreamEvent, UpstreamError>> {
        if let CallStream::Pending(head) = self {
            let head = head.get_mut().unwrap_or_else(|p| p.into_inner());
            let response = match head.await {
                Ok(response) => response,
                Err(e) => return Some(Err(e)),
            };
            if !response.status().is_success() {
                return Some(Err(UpstreamError::Status {
                    status: response.status().as_u16(),
                    body: String::new(),
                }));
            }
            let content_type = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            *self = CallStream::new(response.into_body(), content_type.as_deref());
        }
        match self {
            CallStream::Pending(_) => None,
            CallStream::Resumed(stream) => next_sse(stream).await,
            CallStream::Json(read) => {
                let collected = read.as_mut()?.await;
                *read = None;
                Some(match collected {
                    Ok(collected) => parse_event(&collected.to_bytes()),
                    Err(e) => Err(UpstreamError::Lost(e.to_string())),
                })
            }
            CallStream::Sse(stream) => next_sse(stream).await,
        }
    }
}

/// The next JSON-RPC message of an SSE stream. Cancel-safe.
async fn next_sse<B>(stream: &mut SseStream<B>) -> Option<Result<UpstreamEvent, UpstreamError>>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    loop {
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
    }
}

fn parse_event(bytes: &[u8]) -> Result<UpstreamEvent, UpstreamError> {
    Message::parse(bytes).map_err(|e| UpstreamError::Protocol(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::Empty;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::oneshot;

    use super::*;

    /// A JSON answer whose body arrives in two parts, the second only when `rest` fires.
    async fn json_in_two_parts(rest: oneshot::Receiver<()>) -> Incoming {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await.unwrap();
            let body = br#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#;
            let (head, tail) = body.split_at(10);
            let header = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            socket.write_all(header.as_bytes()).await.unwrap();
            socket.write_all(head).await.unwrap();
            rest.await.unwrap();
            socket.write_all(tail).await.unwrap();
        });
        let stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = hyper::Request::post("/")
            .body(Empty::<Bytes>::new())
            .unwrap();
        sender.send_request(request).await.unwrap().into_body()
    }

    /// The task runner selects over `next()` and wake-ups: a wake-up that drops `next()`
    /// halfway through a JSON body must not lose the answer.
    #[tokio::test]
    async fn a_dropped_next_keeps_the_half_read_json_body() {
        let (send_rest, rest) = oneshot::channel();
        let mut stream = CallStream::new(json_in_two_parts(rest).await, Some("application/json"));
        let dropped = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        assert!(dropped.is_err(), "the body's second part was not sent yet");
        send_rest.send(()).unwrap();
        match stream.next().await {
            Some(Ok(Message::Response {
                id,
                outcome: Ok(result),
            })) => {
                assert_eq!(id, 7);
                assert_eq!(result["ok"], true);
            }
            other => panic!("expected the answer, got {:?}", other.map(|r| r.is_ok())),
        }
        assert!(
            stream.next().await.is_none(),
            "one JSON body is one message"
        );
    }
}
