//! The load generator: keep-alive HTTP/1.1 connections on one current-thread runtime,
//! a warm-up, a measured window, latency percentiles and CPU per request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use test_support::{Proc, descendants_of};

use crate::{Args, BoxError};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::readings::cpu_seconds;
use crate::workloads::Expect;
use crate::workloads::Req;
use crate::workloads::Workload;
use crate::workloads::contains;
use crate::workloads::task_id_of;
use crate::workloads::tasks_get_request;

#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) host: HeaderValue,
    pub(crate) path: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Self {
        let uri: http::Uri = url.parse().expect("a URL");
        let authority = uri.authority().expect("host:port").as_str().to_owned();
        Self {
            addr: authority.parse().expect("an IP:port"),
            host: HeaderValue::from_str(&authority).expect("ASCII"),
            path: uri.path().to_owned(),
        }
    }

    pub(crate) async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, BoxError> {
        let stream = tokio::net::TcpStream::connect(self.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    pub(crate) async fn send_full(
        &self,
        conn: &mut SendRequest<Full<Bytes>>,
        request: &Req,
    ) -> Result<(StatusCode, HeaderMap, Bytes), BoxError> {
        conn.ready().await?;
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.path.as_str())
            .header(header::HOST, self.host.clone());
        if let Some(headers) = builder.headers_mut() {
            headers.extend(request.headers.clone());
        }
        let response = conn
            .send_request(builder.body(Full::new(request.body.clone()))?)
            .await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok((parts.status, parts.headers, body))
    }
}

/// Processes whose CPU time is measured over a run.
#[derive(Clone, Copy)]
pub(crate) struct Pids {
    pub(crate) gateway: Option<u32>,
    pub(crate) upstream: Option<u32>,
    pub(crate) redis: Option<u32>,
    pub(crate) other: Option<u32>,
    /// The upstream is this process's descendants (a stdio server under a proxy).
    pub(crate) upstream_children_of: Option<u32>,
}

impl Pids {
    pub(crate) fn new(gateway: Option<&Proc>, upstream: Option<&Proc>) -> Self {
        Self {
            gateway: gateway.map(Proc::pid),
            upstream: upstream.map(Proc::pid),
            redis: None,
            other: None,
            upstream_children_of: None,
        }
    }

    /// The upstream is whatever `parent` runs (its stdio server).
    pub(crate) fn with_upstream_children_of(mut self, parent: &Proc) -> Self {
        self.upstream_children_of = Some(parent.pid());
        self
    }

    pub(crate) fn with_redis(mut self, redis: Option<u32>) -> Self {
        self.redis = redis;
        self
    }

    pub(crate) fn with_other(mut self, other: &Proc) -> Self {
        self.other = Some(other.pid());
        self
    }

    /// CPU seconds so far of the gateway, upstream, Redis, other proxy, and this load
    /// generator: on a machine of few cores the generator's share bounds what the others
    /// can reach.
    pub(crate) fn sample(&self) -> [Option<f64>; 5] {
        let own = Some(std::process::id());
        let mut sample = [self.gateway, self.upstream, self.redis, self.other, own]
            .map(|p| p.and_then(cpu_seconds));
        if let Some(parent) = self.upstream_children_of {
            sample[1] = Some(
                descendants_of(parent)
                    .into_iter()
                    .filter_map(cpu_seconds)
                    .sum(),
            );
        }
        sample
    }
}

pub(crate) struct Stats {
    pub(crate) conns: usize,
    /// Operations completed in the window (one per request; one per lifecycle in d).
    pub(crate) ops: u64,
    /// HTTP requests completed in the window.
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) window: Duration,
    /// Sorted latencies of the operations, nanoseconds.
    pub(crate) latencies: Vec<u64>,
    /// CPU seconds over the window: gateway, upstream, redis, other proxy, load generator.
    pub(crate) cpu: [Option<f64>; 5],
}

impl Stats {
    pub(crate) fn p(&self, percentile: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((percentile / 100.0) * self.latencies.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies.len()) - 1;
        self.latencies[index] as f64 / 1e6
    }

    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.window.as_secs_f64()
    }

    pub(crate) fn requests_per_sec(&self) -> f64 {
        self.requests as f64 / self.window.as_secs_f64()
    }

    /// CPU microseconds per HTTP request of process `which` (0 gateway, 1 upstream,
    /// 2 redis, 3 other proxy, 4 load generator).
    pub(crate) fn cpu_us_per_request(&self, which: usize) -> Option<f64> {
        self.cpu[which].map(|s| s * 1e6 / self.requests.max(1) as f64)
    }
}

/// Drives `workload` over `conns` keep-alive connections: `--warmup` seconds unmeasured,
/// then `--duration` seconds measured, bounded by `--max-requests`.
pub(crate) async fn load(
    args: &Args,
    target: &Target,
    workload: &Workload,
    conns: usize,
    pids: &Pids,
) -> Stats {
    if let Workload::Unusable(why) = workload {
        return Stats {
            conns,
            ops: 0,
            requests: 0,
            errors: 1,
            first_error: Some(why.clone()),
            window: Duration::from_secs(1),
            latencies: Vec::new(),
            cpu: [None; 5],
        };
    }
    let now = Instant::now();
    let start = now + Duration::from_secs_f64(args.warmup);
    let end = start + Duration::from_secs_f64(args.duration);
    let budget = Arc::new(AtomicU64::new(args.max_requests));
    let next = Arc::new(AtomicUsize::new(0));
    let shared = Arc::new(SharedWorkload::from(workload));

    let sampler = {
        let pids = *pids;
        tokio::spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let before = pids.sample();
            tokio::time::sleep_until(end.into()).await;
            let after = pids.sample();
            let mut delta = [None; 5];
            for i in 0..5 {
                if let (Some(a), Some(b)) = (after[i], before[i]) {
                    delta[i] = Some(a - b);
                }
            }
            delta
        })
    };

    let mut handles = Vec::with_capacity(conns);
    for _ in 0..conns {
        let target = target.clone();
        let budget = budget.clone();
        let next = next.clone();
        let shared = shared.clone();
        handles.push(tokio::spawn(async move {
            connection_loop(&target, &shared, &next, &budget, start, end).await
        }));
    }
    let mut totals = ConnResult::default();
    for handle in handles {
        let result = handle.await.expect("connection task");
        totals.merge(result);
    }
    let cpu = sampler.await.expect("sampler");
    totals.latencies.sort_unstable();
    let window = match totals.last_done {
        Some(last) if last < end => last.saturating_duration_since(start),
        _ => end - start,
    };
    Stats {
        conns,
        ops: totals.latencies.len() as u64,
        requests: totals.requests,
        errors: totals.errors,
        first_error: totals.first_error,
        window: window.max(Duration::from_millis(1)),
        latencies: totals.latencies,
        cpu,
    }
}

/// The workload as the connection tasks share it.
pub(crate) enum SharedWorkload {
    Fixed { requests: Vec<Req>, expect: Expect },
    Lifecycle { create: Req },
}

impl From<&Workload> for SharedWorkload {
    fn from(workload: &Workload) -> Self {
        match workload {
            Workload::Fixed { requests, expect } => SharedWorkload::Fixed {
                requests: requests.clone(),
                expect: *expect,
            },
            Workload::Lifecycle { create } => SharedWorkload::Lifecycle {
                create: create.clone(),
            },
            Workload::Unusable(_) => unreachable!("checked by load()"),
        }
    }
}

#[derive(Default)]
pub(crate) struct ConnResult {
    pub(crate) latencies: Vec<u64>,
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) last_done: Option<Instant>,
}

impl ConnResult {
    pub(crate) fn merge(&mut self, other: ConnResult) {
        self.latencies.extend(other.latencies);
        self.requests += other.requests;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.last_done = match (self.last_done, other.last_done) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    pub(crate) fn error(&mut self, what: String, measured: bool) {
        if measured {
            self.errors += 1;
        }
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }
}

pub(crate) async fn connection_loop(
    target: &Target,
    workload: &SharedWorkload,
    next: &AtomicUsize,
    budget: &AtomicU64,
    start: Instant,
    end: Instant,
) -> ConnResult {
    let mut result = ConnResult::default();
    let mut conn = None;
    let take = || {
        budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    };
    while Instant::now() < end && take() {
        if conn.is_none() {
            match target.connect().await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    result.error(format!("connect: {e}"), Instant::now() >= start);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let sender = conn.as_mut().expect("connected");
        let began = Instant::now();
        let outcome = match workload {
            SharedWorkload::Fixed { requests, expect } => {
                let request = &requests[next.fetch_add(1, Ordering::Relaxed) % requests.len()];
                match target.send_full(sender, request).await {
                    Ok((status, _, body)) if expect.ok(status, &body) => Ok(1),
                    Ok((status, _, body)) => Err((
                        format!(
                            "unexpected answer {status}: {}",
                            String::from_utf8_lossy(&body[..body.len().min(300)])
                        ),
                        false,
                    )),
                    Err(e) => Err((format!("request: {e}"), true)),
                }
            }
            SharedWorkload::Lifecycle { create } => lifecycle(target, sender, create).await,
        };
        let done = Instant::now();
        let measured = began >= start && done <= end;
        match outcome {
            Ok(requests) => {
                if measured {
                    result.latencies.push((done - began).as_nanos() as u64);
                    result.requests += requests;
                    result.last_done = Some(done);
                }
            }
            Err((what, broken)) => {
                result.error(what, measured);
                if broken {
                    conn = None;
                }
            }
        }
    }
    result
}

/// One task's life: create, then `tasks/get` until `completed`. Returns the number of
/// HTTP requests it took.
pub(crate) async fn lifecycle(
    target: &Target,
    conn: &mut SendRequest<Full<Bytes>>,
    create: &Req,
) -> Result<u64, (String, bool)> {
    let (_, _, body) = target
        .send_full(conn, create)
        .await
        .map_err(|e| (format!("create: {e}"), true))?;
    let id = task_id_of(&body).ok_or_else(|| {
        (
            format!("not a task: {}", String::from_utf8_lossy(&body)),
            false,
        )
    })?;
    let get = tasks_get_request(&id);
    let mut requests = 1;
    for _ in 0..10_000 {
        let (_, _, body) = target
            .send_full(conn, &get)
            .await
            .map_err(|e| (format!("tasks/get: {e}"), true))?;
        requests += 1;
        if contains(&body, br#""status":"completed""#) {
            return Ok(requests);
        }
        if !contains(&body, br#""status":"working""#) {
            return Err((
                format!("unexpected task: {}", String::from_utf8_lossy(&body)),
                false,
            ));
        }
    }
    Err(("task never completed".into(), false))
}
