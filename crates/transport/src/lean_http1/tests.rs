//! The lean client against real sockets on 127.0.0.1, served by scripts that write the
//! bytes an HTTP/1.1 server would: lengths, chunks, early closes, keep-alive races.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{LeanBody, LeanError, LeanPool};

const DEADLINE: Duration = Duration::from_secs(10);

/// A request as the server read it.
#[derive(Debug)]
struct Received {
    head: String,
    body: Vec<u8>,
}

impl Received {
    fn method(&self) -> String {
        self.head.split(' ').next().unwrap_or_default().to_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// Reads one request; `None` when the client closed the connection first.
async fn read_request(socket: &mut TcpStream) -> Option<Received> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(bytes[..head_end].to_vec()).unwrap();
    let mut received = Received {
        head,
        body: bytes[head_end..].to_vec(),
    };
    let length: usize = received
        .header("content-length")
        .map_or(0, |v| v.parse().unwrap());
    while received.body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        received.body.extend_from_slice(&chunk[..n]);
    }
    Some(received)
}

/// A server that runs `script` on each connection it accepts, with the connection's
/// index; its URL, and the count of connections accepted.
async fn serve<F, Fut>(script: F) -> (String, Arc<AtomicUsize>)
where
    F: Fn(usize, TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let index = counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(script(index, socket));
        }
    });
    (url, accepted)
}

fn post(url: &str, body: &'static str) -> Request<Bytes> {
    Request::post(url)
        .header("content-type", "application/json")
        .header("mcp-session-id", "s-1")
        .body(Bytes::from_static(body.as_bytes()))
        .unwrap()
}

fn pool() -> Arc<LeanPool> {
    LeanPool::new(crate::tcp(), 2048)
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no result within {DEADLINE:?}"))
}

const JSON: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}";

/// Sends an empty JSON body, within the deadline.
async fn call(pool: &Arc<LeanPool>, url: &str) -> Result<Response<LeanBody>, LeanError> {
    within("the call", pool.request(post(url, "{}"))).await
}

/// Answers every request left on `socket` with [`JSON`], until the client closes.
async fn answer_json(socket: &mut TcpStream) {
    while read_request(socket).await.is_some() {
        socket.write_all(JSON.as_bytes()).await.unwrap();
    }
}

#[tokio::test]
async fn a_request_goes_out_as_sent_and_its_connection_serves_the_next() {
    let (seen, mut requests) = mpsc::unbounded_channel();
    let (url, accepted) = serve(move |_, mut socket| {
        let seen = seen.clone();
        async move {
            while let Some(request) = read_request(&mut socket).await {
                seen.send(request).unwrap();
                socket.write_all(JSON.as_bytes()).await.unwrap();
            }
        }
    })
    .await;
    let pool = pool();
    for _ in 0..3 {
        let response = within("the call", pool.request(post(&url, r#"{"id":1}"#)))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/json");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], br#"{"ok":true}"#);
    }
    let request = requests.recv().await.unwrap();
    assert!(
        request.head.starts_with("POST /mcp HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    let authority = url.trim_start_matches("http://").trim_end_matches("/mcp");
    assert_eq!(request.header("host"), Some(authority));
    assert_eq!(request.header("content-length"), Some("8"));
    assert_eq!(request.header("mcp-session-id"), Some("s-1"));
    assert_eq!(request.body, br#"{"id":1}"#);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection, kept alive"
    );
    assert_eq!(pool.idle_count(), 1);
}

#[tokio::test]
async fn an_event_stream_arrives_event_by_event_and_ends_with_its_last_chunk() {
    let (next, go_on) = mpsc::unbounded_channel::<()>();
    let go_on = Arc::new(tokio::sync::Mutex::new(go_on));
    let (url, accepted) = serve(move |_, mut socket| {
        let go_on = go_on.clone();
        async move {
            read_request(&mut socket).await.unwrap();
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\n\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            socket.write_all(b"d\r\ndata: first\n\n\r\n").await.unwrap();
            go_on.lock().await.recv().await;
            // The next chunk's size line is split from its data, as TCP may cut it.
            socket.write_all(b"e\r").await.unwrap();
            socket
                .write_all(b"\ndata: second\n\n\r\n0\r\n\r\n")
                .await
                .unwrap();
            let _ = read_request(&mut socket).await;
        }
    })
    .await;
    let pool = pool();
    let response = within("the head", pool.request(post(&url, "{}")))
        .await
        .unwrap();
    let mut body = response.into_body();
    let first = within("the first event", body.frame())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "data: first\n\n");
    next.send(()).unwrap();
    let mut rest = Vec::new();
    while let Some(frame) = within("the rest", body.frame()).await {
        rest.extend_from_slice(&frame.unwrap().into_data().unwrap());
    }
    assert_eq!(rest, b"data: second\n\n");
    assert_eq!(
        pool.idle_count(),
        1,
        "a chunked body read to its end frees its socket"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_accepted_notification_frees_its_socket_at_once() {
    let (url, accepted) = serve(|_, mut socket| async move {
        while read_request(&mut socket).await.is_some() {
            let reply = "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
            socket.write_all(reply.as_bytes()).await.unwrap();
        }
    })
    .await;
    let pool = pool();
    for _ in 0..2 {
        let response = within("the post", pool.request(post(&url, "{}")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert_eq!(pool.idle_count(), 1);
        assert!(
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .is_empty()
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_without_length_ends_when_the_upstream_closes() {
    let (url, _) = serve(|_, mut socket| async move {
        read_request(&mut socket).await.unwrap();
        let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     connection: close\r\n\r\n{\"ok\":1}";
        socket.write_all(reply.as_bytes()).await.unwrap();
    })
    .await;
    let pool = pool();
    let response = call(&pool, &url).await.unwrap();
    let body = within("the body", response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], br#"{"ok":1}"#);
    assert_eq!(pool.idle_count(), 0, "a closed connection is not kept");
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_not_an_end() {
    let (url, _) = serve(|_, mut socket| async move {
        read_request(&mut socket).await.unwrap();
        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{\"partial\":";
        socket.write_all(reply.as_bytes()).await.unwrap();
    })
    .await;
    let pool = pool();
    let response = call(&pool, &url).await.unwrap();
    let read = within("the body", response.into_body().collect()).await;
    assert!(
        matches!(read, Err(LeanError::Closed)),
        "{:?}",
        read.map(|_| ())
    );
}

/// Each connection answers its first request, then reads the next and closes without
/// an answer: an upstream's keep-alive timeout racing the reuse, or one that died while
/// running the call. A `tools/call` may have started, so it is not sent again; a GET is.
#[tokio::test]
async fn a_written_request_left_unanswered_is_sent_again_only_if_idempotent() {
    let (seen, mut requests) = mpsc::unbounded_channel();
    let (url, accepted) = serve(move |_, mut socket| {
        let seen = seen.clone();
        async move {
            let first = read_request(&mut socket).await.unwrap();
            seen.send(first.method()).unwrap();
            socket.write_all(JSON.as_bytes()).await.unwrap();
            if let Some(second) = read_request(&mut socket).await {
                seen.send(second.method()).unwrap();
            }
        }
    })
    .await;
    let pool = pool();
    let ok = |response: Response<LeanBody>| async move {
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], br#"{"ok":true}"#);
    };
    ok(call(&pool, &url).await.unwrap()).await;
    let unanswered = call(&pool, &url).await;
    assert!(
        matches!(unanswered, Err(LeanError::Closed)),
        "{:?}",
        unanswered.map(|_| ())
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the POST was not sent again"
    );

    ok(call(&pool, &url).await.unwrap()).await;
    let get = Request::get(&url).body(Bytes::new()).unwrap();
    ok(within("the GET", pool.request(get)).await.unwrap()).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "the GET went again on a new connection"
    );
    let methods: Vec<String> = std::iter::from_fn(|| requests.try_recv().ok()).collect();
    let count = |method: &str| methods.iter().filter(|m| *m == method).count();
    assert_eq!((count("POST"), count("GET")), (3, 2), "{methods:?}");
}

#[tokio::test]
async fn a_socket_closed_while_idle_is_not_reused() {
    let (closed, mut was_closed) = mpsc::unbounded_channel();
    let (url, accepted) = serve(move |_, mut socket| {
        let closed = closed.clone();
        async move {
            read_request(&mut socket).await.unwrap();
            socket.write_all(JSON.as_bytes()).await.unwrap();
            drop(socket);
            closed.send(()).unwrap();
        }
    })
    .await;
    let pool = pool();
    let response = call(&pool, &url).await.unwrap();
    response.into_body().collect().await.unwrap();
    within("the close", was_closed.recv()).await.unwrap();
    let response = within("the next call", pool.request(post(&url, "{}")))
        .await
        .unwrap();
    response.into_body().collect().await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A task that ends drops its call: the upstream must see its connection close, which
/// is how a plain server learns that no one waits for the call.
#[tokio::test]
async fn dropping_a_body_halfway_closes_the_upstream_connection() {
    let (ended, mut saw_end) = mpsc::unbounded_channel();
    let (url, _) = serve(move |_, mut socket| {
        let ended = ended.clone();
        async move {
            read_request(&mut socket).await.unwrap();
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            let mut rest = [0u8; 16];
            let closed = matches!(socket.read(&mut rest).await, Ok(0) | Err(_));
            ended.send(closed).unwrap();
        }
    })
    .await;
    let pool = pool();
    let response = call(&pool, &url).await.unwrap();
    let mut body = response.into_body();
    within("the first chunk", body.frame())
        .await
        .unwrap()
        .unwrap();
    drop(body);
    assert!(within("the upstream's read", saw_end.recv()).await.unwrap());
    assert_eq!(pool.idle_count(), 0);
}

#[tokio::test]
async fn an_upstream_that_is_not_there_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let failed = call(&pool(), &url).await;
    assert!(
        matches!(failed, Err(LeanError::Connect(_))),
        "{:?}",
        failed.map(|_| ())
    );
}

#[tokio::test]
async fn a_head_that_is_not_http_is_a_protocol_error() {
    let (url, _) = serve(|_, mut socket| async move {
        read_request(&mut socket).await.unwrap();
        socket.write_all(b"SSH-2.0-OpenSSH\r\n\r\n").await.unwrap();
        let _ = read_request(&mut socket).await;
    })
    .await;
    let failed = call(&pool(), &url).await;
    assert!(
        matches!(failed, Err(LeanError::Protocol(_))),
        "{:?}",
        failed.map(|_| ())
    );
}

/// A task's runner drops its call's stream once the answer's event came: the stream's
/// last chunk, already arrived, is read then, and the connection serves the next call.
#[tokio::test]
async fn a_body_dropped_after_its_last_chunk_came_keeps_its_connection() {
    let (sent, mut end_sent) = mpsc::unbounded_channel();
    let (event_read, on_event_read) = mpsc::unbounded_channel::<()>();
    let on_event_read = Arc::new(tokio::sync::Mutex::new(on_event_read));
    let (url, accepted) = serve(move |_, mut socket| {
        let (sent, on_event_read) = (sent.clone(), on_event_read.clone());
        async move {
            read_request(&mut socket).await.unwrap();
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\n\r\ne\r\ndata: answer\n\n\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            // The end comes once the event was read: the body has not seen it.
            on_event_read.lock().await.recv().await;
            socket.write_all(b"0\r\n\r\n").await.unwrap();
            sent.send(()).unwrap();
            answer_json(&mut socket).await;
        }
    })
    .await;
    let pool = pool();
    let response = call(&pool, &url).await.unwrap();
    let mut body = response.into_body();
    let event = within("the event", body.frame()).await.unwrap().unwrap();
    assert_eq!(event.into_data().unwrap(), "data: answer\n\n");
    event_read.send(()).unwrap();
    within("the end's write", end_sent.recv()).await.unwrap();
    drop(body);
    assert_eq!(
        pool.idle_count(),
        1,
        "the drained connection went back to the pool"
    );
    let response = within("the next call", pool.request(post(&url, "{}")))
        .await
        .unwrap();
    response.into_body().collect().await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// Each worker thread runs its own runtime, which drives the sockets it opened: an idle
/// socket is reused only on the runtime it came from.
#[test]
fn an_idle_socket_is_reused_only_on_its_own_runtime() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let (first, second) = (runtime(), runtime());
    let (url, accepted) = first.block_on(serve(|_, mut socket| async move {
        answer_json(&mut socket).await;
    }));
    // The first runtime keeps serving from a thread of its own.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || first.block_on(stopped));
    let pool = pool();
    let call_on = |runtime: &tokio::runtime::Runtime| {
        runtime.block_on(async {
            let response = call(&pool, &url).await.unwrap();
            response.into_body().collect().await.unwrap();
        })
    };
    let other = runtime();
    for _ in 0..2 {
        call_on(&second);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "reused on its own runtime"
    );
    call_on(&other);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "another runtime opens its own"
    );
    assert_eq!(pool.idle_count(), 2);
    stop.send(()).unwrap();
    server.join().unwrap().unwrap();
}

/// An open call waits minutes without a byte: the socket must notice a peer that vanished
/// without a FIN, and keep idle timers on the path from dropping it.
#[tokio::test]
async fn upstream_sockets_are_kept_alive_at_the_tcp_level() {
    let (url, _) = serve(|_, mut socket| async move {
        answer_json(&mut socket).await;
    })
    .await;
    let stream = super::connect(&crate::tcp(), url.parse().unwrap())
        .await
        .unwrap();
    let socket = socket2::SockRef::from(&stream);
    assert!(socket.keepalive().unwrap());
    assert_eq!(
        socket.tcp_keepalive_time().unwrap(),
        crate::TCP_KEEPALIVE_IDLE
    );
    assert_eq!(
        socket.tcp_keepalive_interval().unwrap(),
        crate::TCP_KEEPALIVE_INTERVAL
    );
    assert_eq!(
        socket.tcp_keepalive_retries().unwrap(),
        crate::TCP_KEEPALIVE_PROBES
    );
}

/// What HTTP/1.1 permits in a field value (obs-text, HTAB) is written as it came, in
/// `Authorization` too (ureq-proto refuses that one unless visible ASCII), once; a
/// client's `Expect: 100-continue` does not stop the body, which is here whole.
#[test]
fn permitted_header_bytes_are_written_unchanged() {
    let value = http::HeaderValue::from_bytes(b"Bearer \xff\xfe\tcaf\xe9").unwrap();
    let request = Request::post("http://127.0.0.1:9/mcp")
        .header("authorization", value.clone())
        .header("x-note", value)
        .header("expect", "100-continue")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    let wire = super::Outgoing::new(request).unwrap().wire;
    let end = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let (head, body) = wire.split_at(end);
    let lines: Vec<&[u8]> = head.split(|&b| b == b'\n').collect();
    let line = |name: &[u8]| -> Vec<&[u8]> {
        lines
            .iter()
            .copied()
            .filter(|l| l.to_ascii_lowercase().starts_with(name))
            .collect()
    };
    assert_eq!(
        line(b"authorization:"),
        [&b"authorization: Bearer \xff\xfe\tcaf\xe9\r"[..]]
    );
    assert_eq!(
        line(b"x-note:"),
        [&b"x-note: Bearer \xff\xfe\tcaf\xe9\r"[..]]
    );
    assert_eq!(body, b"{}");
}

/// Each failure is blamed on its party, with its metric label: the client's request
/// (a value HTTP forbids), the gateway's (a request of its own ureq-proto cannot encode), the
/// upstream's (refused connection, broken response).
#[tokio::test]
async fn each_failure_is_blamed_on_its_party() {
    use crate::Party;
    let forbidden = LeanError::HeaderValue(http::header::AUTHORIZATION);
    assert_eq!(
        (forbidden.party(), forbidden.kind()),
        (Party::Client, "header_value")
    );
    assert!(forbidden.to_string().contains("authorization"));
    assert!(super::is_field_value(b"Bearer \xff\t ~"));
    for bad in [0u8, 1, 0x0a, 0x0d, 0x1f, 0x7f] {
        assert!(!super::is_field_value(&[b'a', bad]), "{bad:#04x}");
    }

    // Two `Host` headers: only the gateway's own request can have them (pass-through
    // drops the client's).
    let two_hosts = Request::get("http://127.0.0.1:9/mcp")
        .header("host", "a")
        .header("host", "b")
        .body(Bytes::new())
        .unwrap();
    let encode = super::Outgoing::new(two_hosts).err().expect("two hosts");
    assert!(matches!(encode, LeanError::Encode(_)), "{encode}");
    assert_eq!(
        (encode.party(), encode.kind()),
        (Party::Gateway, "request_encoding")
    );

    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let pool = LeanPool::new(crate::tcp(), 4096);
    let refused = pool
        .request(
            Request::get(format!("http://127.0.0.1:{port}/mcp"))
                .body(Bytes::new())
                .unwrap(),
        )
        .await
        .err()
        .expect("nothing listens");
    assert_eq!(
        (refused.party(), refused.kind()),
        (Party::Upstream, "unreachable")
    );
    let broken = LeanError::Protocol(ureq_proto::Error::HttpParseFail("x".into()));
    assert_eq!(
        (broken.party(), broken.kind()),
        (Party::Upstream, "protocol")
    );
    assert_eq!(LeanError::Closed.party(), Party::Upstream);
}

/// A client's method and body go on as they came (hyper's client sent them): a method
/// token HTTP allows but ureq-proto does not know, or a body on a method without one,
/// is the upstream's to answer, not a request the gateway cannot encode.
#[test]
fn any_method_token_and_its_body_are_written() {
    for (method, body) in [
        ("BREW", &b"{}"[..]),
        ("post", b"{}"),
        ("HEAD", b"x"),
        ("GET", b""),
    ] {
        let request = Request::builder()
            .method(method)
            .uri("http://127.0.0.1:9/mcp")
            .body(Bytes::from_static(body))
            .unwrap();
        let wire = super::Outgoing::new(request)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
            .wire;
        assert!(wire.starts_with(format!("{method} /mcp HTTP/1.1\r\n").as_bytes()));
        assert!(wire.ends_with(&[b"\r\n\r\n", body].concat()), "{method}");
    }
}

/// The response is read by a stand-in for the request (`stand_in`): a `HEAD`'s answer
/// still has no body, whatever length its head gives, and its connection serves the next.
#[tokio::test]
async fn a_head_answer_has_no_body_and_keeps_its_connection() {
    let (url, accepted) = serve(|_, mut socket| async move {
        while let Some(request) = read_request(&mut socket).await {
            let answer = match request.method().as_str() {
                "HEAD" => "HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n",
                _ => JSON,
            };
            socket.write_all(answer.as_bytes()).await.unwrap();
        }
    })
    .await;
    let pool = pool();
    let head = Request::head(&url).body(Bytes::new()).unwrap();
    let response = within("the HEAD", pool.request(head)).await.unwrap();
    assert_eq!(response.headers()["content-length"], "11");
    let body = within("the HEAD's body", response.into_body().collect()).await;
    assert!(body.unwrap().to_bytes().is_empty());
    let response = call(&pool, &url).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], br#"{"ok":true}"#);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the HEAD's connection served the POST"
    );
}

/// A request that asked to close its connection does not leave it in the pool, though
/// the upstream's answer would allow it.
#[tokio::test]
async fn a_request_that_asks_to_close_leaves_no_connection_behind() {
    let (url, _) = serve(|_, mut socket| async move { answer_json(&mut socket).await }).await;
    let pool = pool();
    let mut request = post(&url, "{}");
    request
        .headers_mut()
        .insert("connection", http::HeaderValue::from_static("close"));
    let response = within("the call", pool.request(request)).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], br#"{"ok":true}"#);
    assert_eq!(pool.idle_count(), 0);
    // The same request without it leaves its connection for the next.
    let response = call(&pool, &url).await.unwrap();
    response.into_body().collect().await.unwrap();
    assert_eq!(pool.idle_count(), 1);
}
