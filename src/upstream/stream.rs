//! Reading what the upstream sends back for one POST: a JSON body or an SSE stream of
//! JSON-RPC messages.

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use http_body_util::combinators::Collect;
use hyper::body::Incoming;
use sse_stream::SseStream;

use super::UpstreamError;
use mtg_protocol::jsonrpc::Message;

/// One message from the upstream during a call: a server-to-client request
/// (elicitation, sampling, roots, ping), a notification (progress, logging, ...), or the
/// final answer. The same shape as any JSON-RPC message.
pub type UpstreamEvent = Message;

pub enum CallStream {
    /// A JSON body being read. The read lives here, not in `next()`'s future, so that a
    /// caller's `select!` may drop `next()` halfway without losing the body.
    Json(Option<Collect<Incoming>>),
    Sse(Box<SseStream<Incoming>>),
}

impl CallStream {
    pub fn new(body: Incoming, content_type: Option<&str>) -> Self {
        if content_type.is_some_and(|ct| ct.starts_with("text/event-stream")) {
            CallStream::Sse(Box::new(SseStream::new(body)))
        } else {
            CallStream::Json(Some(body.collect()))
        }
    }

    /// The next message; `None` when the upstream ended the stream. Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<UpstreamEvent, UpstreamError>> {
        match self {
            CallStream::Json(read) => {
                let collected = read.as_mut()?.await;
                *read = None;
                Some(match collected {
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
