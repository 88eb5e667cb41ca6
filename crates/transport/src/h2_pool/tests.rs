//! The pool against a real hyper HTTP/2 server on 127.0.0.1 that caps each connection
//! at a few concurrent streams and holds every request open, as a slow tool does.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::{H2Pool, PoolSettings};

const SERVER_CAP: u32 = 4;
const CALLS: usize = 10;
const DEADLINE: Duration = Duration::from_secs(10);

/// Requests the server keeps open now, and connections it accepted.
#[derive(Default)]
struct Seen {
    open: AtomicUsize,
    connections: AtomicUsize,
}

/// One request the server keeps open, counted in [`Seen`] until it is dropped.
struct OpenRequest(Arc<Seen>);

impl Drop for OpenRequest {
    /// The request's stream was reset or its connection lost.
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An h2c server (prior knowledge) that never answers; its URL.
async fn holding_server(seen: Arc<Seen>) -> String {
    holding_server_with_goaway(seen, tokio::sync::watch::channel(()).1).await
}

/// The same, whose connections open when `goaway` changes shut down gracefully: a
/// GOAWAY, the streams already open left to finish.
async fn holding_server_with_goaway(
    seen: Arc<Seen>,
    goaway: tokio::sync::watch::Receiver<()>,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            seen.connections.fetch_add(1, Ordering::Relaxed);
            let mut goaway = goaway.clone();
            goaway.mark_unchanged();
            let seen = seen.clone();
            let service = hyper::service::service_fn(move |_request| {
                let seen = seen.clone();
                async move {
                    seen.open.fetch_add(1, Ordering::Relaxed);
                    let _open = OpenRequest(seen);
                    std::future::pending::<()>().await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                }
            });
            tokio::spawn(async move {
                let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .max_concurrent_streams(SERVER_CAP)
                    .serve_connection(TokioIo::new(stream), service);
                let mut connection = std::pin::pin!(connection);
                tokio::select! {
                    _ = connection.as_mut() => {}
                    Ok(()) = goaway.changed() => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.await;
                    }
                }
            });
        }
    });
    url
}

fn post(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

async fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The bug the pool exists for: hyper-util's pooled client keeps one HTTP/2 connection
/// per host, so requests past the server's stream cap wait behind the open ones.
#[tokio::test]
async fn hyper_utils_client_holds_no_more_than_one_connections_cap() {
    let seen = Arc::new(Seen::default());
    let url = holding_server(seen.clone()).await;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let calls: Vec<_> = (0..CALLS)
        .map(|_| tokio::spawn(client.request(post(&url))))
        .collect();
    until("the first connection's cap in flight", || {
        seen.open.load(Ordering::Relaxed) == SERVER_CAP as usize
    })
    .await;
    // Each of the others is waiting to be sent; none gets through while these stay open.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_millis(500) {
        assert_eq!(seen.open.load(Ordering::Relaxed), SERVER_CAP as usize);
        assert_eq!(seen.connections.load(Ordering::Relaxed), 1);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    calls.iter().for_each(|call| call.abort());
}

#[tokio::test]
async fn the_pool_opens_connections_so_that_every_call_stays_open_upstream_and_resets_reach_it() {
    let seen = Arc::new(Seen::default());
    let url = holding_server(seen.clone()).await;
    let pool = Arc::new(H2Pool::new(
        &url.parse().unwrap(),
        crate::connector(),
        crate::call_client(2048),
        PoolSettings {
            max_streams: SERVER_CAP as usize,
        },
    ));
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let (pool, request) = (pool.clone(), post(&url));
            tokio::spawn(async move { pool.request(request).await.map(|_| ()) })
        })
        .collect();
    until("every call in flight upstream", || {
        seen.open.load(Ordering::Relaxed) == CALLS
    })
    .await;
    assert_eq!(
        seen.connections.load(Ordering::Relaxed),
        CALLS.div_ceil(SERVER_CAP as usize)
    );
    // A call given up (a cancelled task's dropped request) resets its stream upstream.
    calls.iter().for_each(|call| call.abort());
    until("every stream reset upstream", || {
        seen.open.load(Ordering::Relaxed) == 0
    })
    .await;
    // Their places are free again: new calls go on the open connections.
    let again: Vec<_> = (0..SERVER_CAP)
        .map(|_| {
            let (pool, request) = (pool.clone(), post(&url));
            tokio::spawn(async move { pool.request(request).await.map(|_| ()) })
        })
        .collect();
    until("the new calls in flight", || {
        seen.open.load(Ordering::Relaxed) == SERVER_CAP as usize
    })
    .await;
    assert_eq!(
        seen.connections.load(Ordering::Relaxed),
        CALLS.div_ceil(SERVER_CAP as usize),
        "no new connection while the pool has room"
    );
    again.iter().for_each(|call| call.abort());
}

/// A server closing a connection gracefully (GOAWAY) lets its open streams finish; the
/// pool then sends new calls on another connection, and loses none.
#[tokio::test]
async fn after_a_goaway_new_calls_go_on_a_new_connection_and_open_ones_stay() {
    let seen = Arc::new(Seen::default());
    let (goaway, on_goaway) = tokio::sync::watch::channel(());
    let url = holding_server_with_goaway(seen.clone(), on_goaway).await;
    let pool = Arc::new(H2Pool::new(
        &url.parse().unwrap(),
        crate::connector(),
        crate::call_client(2048),
        PoolSettings {
            max_streams: SERVER_CAP as usize,
        },
    ));
    let call = |pool: &Arc<H2Pool>| {
        let (pool, request) = (pool.clone(), post(&url));
        tokio::spawn(async move { pool.request(request).await.map(|_| ()) })
    };
    let first: Vec<_> = (0..2).map(|_| call(&pool)).collect();
    until("the first calls in flight", || {
        seen.open.load(Ordering::Relaxed) == 2
    })
    .await;
    goaway.send(()).unwrap();
    // hyper's client takes no new request on a connection after its GOAWAY: one sent
    // then comes back unsent and goes on a new connection. Until the GOAWAY arrives, the
    // old connection still takes them. Either way no call may fail: each new call must
    // stay open upstream, until one was sent on a second connection.
    let mut later = Vec::new();
    let start = Instant::now();
    while seen.connections.load(Ordering::Relaxed) < 2 {
        assert!(
            start.elapsed() < DEADLINE,
            "no new connection after the GOAWAY"
        );
        later.push(call(&pool));
        let expected = first.len() + later.len();
        until("every call open upstream", || {
            seen.open.load(Ordering::Relaxed) == expected
        })
        .await;
    }
    for call in first.iter().chain(&later) {
        assert!(!call.is_finished(), "no call ended");
    }
    first.iter().chain(&later).for_each(|call| call.abort());
}

/// The pool's failures are blamed where they belong (#43): nothing listening is the
/// upstream's (`unreachable`); a request for another origin is the gateway's own.
#[tokio::test]
async fn pool_failures_are_blamed_on_their_party() {
    use crate::{CallError, Party};
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let pool = H2Pool::new(
        &url.parse().unwrap(),
        crate::connector(),
        crate::call_client(2048),
        PoolSettings { max_streams: 4 },
    );
    let refused = pool
        .request(post(&url))
        .await
        .err()
        .expect("nothing listens");
    assert_eq!(
        (refused.party(), refused.kind()),
        (Party::Upstream, "unreachable")
    );
    let elsewhere = pool
        .request(post("http://127.0.0.1:9/other"))
        .await
        .err()
        .expect("another origin");
    assert!(matches!(elsewhere, CallError::Http2(_)), "{elsewhere}");
    assert_eq!(
        (elsewhere.party(), elsewhere.kind()),
        (Party::Gateway, "request_encoding")
    );
}
