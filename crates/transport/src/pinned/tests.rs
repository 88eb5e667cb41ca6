//! The pinned connection against real upstreams on 127.0.0.1: hyper's server, and
//! scripts that write an HTTP/1.1 server's bytes where a test needs an upstream that
//! misbehaves on cue.

use std::convert::Infallible;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::*;
use crate::pinned_connectors;

const OK_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
const STREAM_HEAD_AND_FIRST_EVENT: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n";

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .expect("within 10 s")
}

/// Reads one request's head and its `Content-Length` body; its method, or `None` when
/// the connection closed first.
async fn read_request(socket: &mut TcpStream) -> Option<String> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while bytes.len() < end + 4 + length {
                let n = socket.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                bytes.extend_from_slice(&chunk[..n]);
            }
            return head.split(' ').next().map(str::to_ascii_uppercase);
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// A server that runs `script` on each connection it accepts, with the connection's
/// index; its URL, the count of connections accepted, and the scripts' results as they
/// end.
async fn scripted<F, Fut>(script: F) -> (Uri, Arc<AtomicUsize>, mpsc::UnboundedReceiver<bool>)
where
    F: Fn(usize, TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let (ended, results) = mpsc::unbounded_channel();
    let script = Arc::new(script);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let index = counted.fetch_add(1, SeqCst);
            let (script, ended) = (script.clone(), ended.clone());
            tokio::spawn(async move {
                let _ = ended.send(script(index, socket).await);
            });
        }
    });
    (url.parse().unwrap(), accepted, results)
}

/// An HTTP/1.1 server on 127.0.0.1 that answers "ok", counting the connections it
/// accepted and those still open.
struct Upstream {
    url: Uri,
    accepted: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
}

async fn upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicUsize::new(0));
    let (count_accepted, count_open) = (accepted.clone(), open.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count_accepted.fetch_add(1, SeqCst);
            count_open.fetch_add(1, SeqCst);
            let count_open = count_open.clone();
            tokio::spawn(async move {
                let ok = hyper::service::service_fn(|_| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = http1_server()
                    .serve_connection(TokioIo::new(stream), ok)
                    .await;
                count_open.fetch_sub(1, SeqCst);
            });
        }
    });
    Upstream {
        url: url.parse().unwrap(),
        accepted,
        open,
    }
}

fn http1_server() -> hyper::server::conn::http1::Builder {
    hyper::server::conn::http1::Builder::new()
}

async fn send(pinned: &PinnedConn, url: &Uri) -> Response<PinnedBody> {
    match pinned.send(url, Request::new(Bytes::new())).await {
        Ok(response) => response,
        Err(e) => panic!("{e}"),
    }
}

async fn get(pinned: &PinnedConn, url: &Uri) -> Bytes {
    let body = send(pinned, url).await.into_body();
    body.collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn one_connection_carries_the_requests_one_after_another() {
    let upstream = upstream().await;
    let pinned = PinnedConn::new(pinned_connectors(), IDLE_LIMIT);
    for _ in 0..3 {
        assert_eq!(get(&pinned, &upstream.url).await, "ok");
    }
    assert_eq!(upstream.accepted.load(SeqCst), 1);
}

#[tokio::test]
async fn a_request_that_finds_the_pinned_connection_busy_is_given_back() {
    let upstream = upstream().await;
    let pinned = PinnedConn::new(pinned_connectors(), IDLE_LIMIT);
    let unread = send(&pinned, &upstream.url).await;
    let second = pinned.send(&upstream.url, Request::new(Bytes::new())).await;
    assert!(matches!(second, Err(PinnedError::Busy(_))));
    // Read to its end, the first answer hands the connection back.
    assert_eq!(unread.into_body().collect().await.unwrap().to_bytes(), "ok");
    assert_eq!(get(&pinned, &upstream.url).await, "ok");
    assert_eq!(upstream.accepted.load(SeqCst), 1);
}

/// The rest of an answer that has all arrived is read when it is dropped: the
/// connection is whole and serves the next request.
#[tokio::test]
async fn an_answer_dropped_after_it_arrived_keeps_its_connection() {
    let (url, accepted, _closed) = scripted(|_, mut socket| async move {
        // Head and body in one write: they arrive together.
        while read_request(&mut socket).await.is_some() {
            socket.write_all(OK_RESPONSE).await.unwrap();
        }
        true
    })
    .await;
    let pinned = PinnedConn::new(pinned_connectors(), IDLE_LIMIT);
    drop(send(&pinned, &url).await);
    assert_eq!(get(&pinned, &url).await, "ok");
    assert_eq!(accepted.load(SeqCst), 1);
}

/// An answer dropped halfway (the client went away) closes its upstream connection,
/// which is how the upstream learns no one waits for the call; the next request opens
/// a new one.
#[tokio::test]
async fn an_answer_dropped_halfway_closes_its_upstream_connection() {
    let (url, accepted, mut closed) = scripted(|index, mut socket| async move {
        let _ = read_request(&mut socket).await;
        if index == 0 {
            socket.write_all(STREAM_HEAD_AND_FIRST_EVENT).await.unwrap();
            // Waits for the gateway to close the connection.
            let mut rest = Vec::new();
            let _ = socket.read_to_end(&mut rest).await;
            return true;
        }
        socket.write_all(OK_RESPONSE).await.unwrap();
        let mut rest = Vec::new();
        let _ = socket.read_to_end(&mut rest).await;
        false
    })
    .await;
    let pinned = PinnedConn::new(pinned_connectors(), IDLE_LIMIT);
    let mut body = send(&pinned, &url).await.into_body();
    let first = within(body.frame()).await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "data: 1\n\n");
    drop(body);
    assert!(
        within(closed.recv()).await.unwrap(),
        "the stream's connection closed"
    );
    assert_eq!(get(&pinned, &url).await, "ok");
    assert_eq!(accepted.load(SeqCst), 2);
}

/// The upstream closed the kept connection while it was idle (its keep-alive timeout):
/// the next request, a POST that must not be sent on a connection that may be dead,
/// goes on a new one.
#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_not_used() {
    let (url, accepted, mut closed) = scripted(|_, mut socket| async move {
        let _ = read_request(&mut socket).await;
        socket.write_all(OK_RESPONSE).await.unwrap();
        true
    })
    .await;
    let pinned = PinnedConn::new(pinned_connectors(), IDLE_LIMIT);
    assert_eq!(get(&pinned, &url).await, "ok");
    assert!(within(closed.recv()).await.unwrap());
    let response = within(pinned.send(&url, post(&url))).await.unwrap();
    let body = within(response.into_body().collect()).await.unwrap();
    assert_eq!(body.to_bytes(), "ok");
    assert_eq!(accepted.load(SeqCst), 2);
}

fn post(url: &Uri) -> Request<Bytes> {
    Request::post(url.clone())
        .body(Bytes::from_static(b"{}"))
        .unwrap()
}

/// A request written on a reused connection that broke before any answer: a GET goes
/// again on a new connection; a POST (a `tools/call`, which the upstream may have
/// started) is never sent twice, and fails.
#[tokio::test]
async fn a_written_request_left_unanswered_goes_again_only_if_idempotent() {
    let (url, accepted, _) = hangs_up_on_the_second_request().await;
    let pinned = PinnedConn::new(pinned_connectors(), IDLE_LIMIT);
    assert_eq!(get(&pinned, &url).await, "ok");
    assert_eq!(get(&pinned, &url).await, "ok", "the GET went again");
    assert_eq!(accepted.load(SeqCst), 2);

    let (url, _, posts) = hangs_up_on_the_second_request().await;
    let pinned = PinnedConn::new(pinned_connectors(), IDLE_LIMIT);
    let first = within(pinned.send(&url, post(&url))).await.unwrap();
    within(first.into_body().collect()).await.unwrap();
    let second = within(pinned.send(&url, post(&url))).await;
    assert!(
        matches!(second, Err(PinnedError::Failed { .. })),
        "the POST failed"
    );
    assert_eq!(posts.load(SeqCst), 2, "each POST was sent once");
}

/// An upstream whose first connection answers one request, then reads the next and
/// closes without a word; later connections answer everything. Its URL, the count of
/// connections, and the count of POSTs it read.
async fn hangs_up_on_the_second_request() -> (Uri, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let posts = Arc::new(AtomicUsize::new(0));
    let counted = posts.clone();
    let (url, accepted, _) = scripted(move |index, mut socket| {
        let counted = counted.clone();
        async move {
            let mut answered = 0;
            while let Some(method) = read_request(&mut socket).await {
                if method == "POST" {
                    counted.fetch_add(1, SeqCst);
                }
                if index == 0 && answered == 1 {
                    break;
                }
                socket.write_all(OK_RESPONSE).await.unwrap();
                answered += 1;
            }
            true
        }
    })
    .await;
    (url, accepted, posts)
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_limit_and_reopened_on_use() {
    let upstream = upstream().await;
    let pinned = PinnedConn::new(pinned_connectors(), Duration::from_millis(200));
    assert_eq!(get(&pinned, &upstream.url).await, "ok");
    let deadline = Instant::now() + Duration::from_secs(10);
    while upstream.open.load(SeqCst) > 0 {
        assert!(
            Instant::now() < deadline,
            "the idle connection is still open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(get(&pinned, &upstream.url).await, "ok");
    assert_eq!(upstream.accepted.load(SeqCst), 2);
}
