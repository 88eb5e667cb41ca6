//! Worker threads: one single-threaded runtime each, all accepting on copies of one
//! listening socket and spreading the connections evenly (`balance`).
//!
//! A connection, its requests and their upstream exchanges then stay on one thread: no
//! work stealing and no waking of another worker between a request and its answer. On
//! the benchmark VM this took 15–30 % less CPU per proxied request than one
//! work-stealing runtime over the same cores (docs/benchmarks.md). The first worker is
//! the runtime the gateway started on, which also carries the background work (the
//! store's connections, cluster membership, stdio upstreams); work a request starts
//! (a task's runner) stays on that request's thread.

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::server::Routes;
use crate::server::edge::balance::{Balance, Seat};

/// The extra worker threads, kept running after serving stops so that the work they
/// carry (running tasks) can finish during the drain.
pub(crate) struct Workers {
    stop: CancellationToken,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    /// Ends the extra threads' runtimes (what still runs there is dropped) and waits
    /// for the threads.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let threads = self.threads;
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                if thread.join().is_err() {
                    tracing::error!("a worker thread panicked");
                }
            }
        });
        let _ = joined.await;
    }
}

/// Serves `listener` on `count` threads (this one and `count - 1` new ones, each polling
/// up to `idle_poll` before it sleeps) until `shutdown` resolves and every thread has
/// finished its in-flight requests.
pub(crate) async fn serve(
    listener: TcpListener,
    routes: Arc<Routes>,
    count: NonZeroUsize,
    idle_poll: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<Workers> {
    let listener = listener.into_std()?;
    // This thread's copy first: failing here leaves no other thread to stop.
    let own_listener = TcpListener::from_std(listener.try_clone()?)?;
    let stop_accepting = CancellationToken::new();
    let mut workers = Workers {
        stop: CancellationToken::new(),
        threads: Vec::with_capacity(count.get() - 1),
    };
    let mut seats = Balance::seats(count.get()).into_iter();
    let this_seat = seats.next().expect("at least one worker");
    let mut served = Vec::with_capacity(count.get() - 1);
    for seat in seats {
        let spawned = listener.try_clone().and_then(|copy| {
            spawn_worker(
                seat,
                copy,
                &routes,
                idle_poll,
                &stop_accepting,
                &workers.stop,
            )
        });
        match spawned {
            Ok((thread, finished)) => {
                workers.threads.push(thread);
                served.push(finished);
            }
            Err(e) => {
                // The threads already started stop serving and end.
                stop_accepting.cancel();
                workers.stop().await;
                return Err(e);
            }
        }
    }
    // Every copy is made; this one would keep the socket listening after serving stops.
    drop(listener);
    super::serve(own_listener, routes, this_seat, async {
        shutdown.await;
        stop_accepting.cancel();
    })
    .await;
    // Each thread reports once its in-flight requests are done (or it has panicked).
    for finished in served {
        let _ = finished.await;
    }
    Ok(workers)
}

/// Starts the worker of `seat`: it serves `listener` until `stop_accepting`, reports that
/// on the returned receiver, and keeps its runtime running until `stop`.
fn spawn_worker(
    seat: Seat,
    listener: std::net::TcpListener,
    routes: &Arc<Routes>,
    idle_poll: Duration,
    stop_accepting: &CancellationToken,
    stop: &CancellationToken,
) -> std::io::Result<(std::thread::JoinHandle<()>, oneshot::Receiver<()>)> {
    let runtime = super::idle_poll::worker_runtime(idle_poll)?;
    let (done, finished) = oneshot::channel();
    let (routes, stop_accepting, stop) = (routes.clone(), stop_accepting.clone(), stop.clone());
    let index = seat.index();
    let thread = std::thread::Builder::new()
        .name(format!("mtg-worker-{index}"))
        .spawn(move || {
            runtime.block_on(async move {
                // Registering the copy with this thread's runtime.
                match TcpListener::from_std(listener) {
                    Ok(listener) => {
                        super::serve(listener, routes, seat, stop_accepting.cancelled_owned()).await
                    }
                    Err(e) => {
                        tracing::error!(worker = index, error = %e, "worker cannot serve")
                    }
                }
                let _ = done.send(());
                stop.cancelled().await;
            });
        })?;
    Ok((thread, finished))
}
