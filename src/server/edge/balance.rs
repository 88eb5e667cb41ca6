//! Spreading client connections evenly over the worker threads.
//!
//! Every worker accepts on the same listening socket, and whichever wakes first wins a
//! new connection; left at that, a burst of connections lands mostly on one worker, and
//! since a connection never moves, that worker's clients wait while another idles (12
//! connections over 3 workers came out 7/4/1 in a test). So the worker that accepted a
//! connection hands it to the worker with the fewest open connections (itself on a tie),
//! as Envoy's exact connection balancer does. A connection moves at most once, before
//! its first byte is read, so its requests still stay on one thread.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::server::edge::accept;

/// The open connections of every worker, and the way to hand one a connection.
pub(crate) struct Balance {
    open: Mutex<Vec<usize>>,
    gauges: Vec<metrics::Gauge>,
    handoffs: Vec<mpsc::UnboundedSender<std::net::TcpStream>>,
}

/// One worker's place in the [`Balance`]: where its connections come from.
pub(crate) struct Seat {
    index: usize,
    balance: Arc<Balance>,
    handed_over: mpsc::UnboundedReceiver<std::net::TcpStream>,
}

/// Counts a connection as open on its worker until dropped.
pub(crate) struct OpenConnection {
    worker: usize,
    balance: Arc<Balance>,
}

impl Balance {
    /// The seats of `count` workers, worker 0 first.
    pub(crate) fn seats(count: usize) -> Vec<Seat> {
        let (handoffs, receivers): (Vec<_>, Vec<_>) =
            (0..count).map(|_| mpsc::unbounded_channel()).unzip();
        let balance = Arc::new(Balance {
            open: Mutex::new(vec![0; count]),
            gauges: (0..count).map(crate::telemetry::connections_open).collect(),
            handoffs,
        });
        receivers
            .into_iter()
            .enumerate()
            .map(|(index, handed_over)| Seat {
                index,
                balance: balance.clone(),
                handed_over,
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<usize>> {
        // Counts only; a panic elsewhere cannot leave them half-written.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Picks the worker with the fewest open connections, preferring `from`, and counts
    /// the new connection there.
    fn assign(&self, from: usize) -> usize {
        let mut open = self.lock();
        let fewest = open.iter().copied().min().unwrap_or_default();
        let target = if open[from] == fewest {
            from
        } else {
            open.iter().position(|&n| n == fewest).unwrap_or(from)
        };
        open[target] += 1;
        self.gauges[target].increment(1.0);
        target
    }

    /// Moves one counted connection from worker `from` to worker `to`.
    fn recount(&self, from: usize, to: usize) {
        let mut open = self.lock();
        open[from] -= 1;
        open[to] += 1;
        self.gauges[from].decrement(1.0);
        self.gauges[to].increment(1.0);
    }

    fn closed(&self, worker: usize) {
        self.lock()[worker] -= 1;
        self.gauges[worker].decrement(1.0);
    }
}

impl Seat {
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The next connection this worker serves: one it accepted and keeps, or one another
    /// worker handed over. Cancel-safe: nothing awaits once a connection is in hand.
    pub(crate) async fn next_connection(
        &mut self,
        listener: &TcpListener,
    ) -> (TcpStream, SocketAddr, OpenConnection) {
        loop {
            tokio::select! {
                (stream, peer) = accept::next_connection(listener) => {
                    if let Some(kept) = self.place(stream, peer) {
                        return kept;
                    }
                }
                Some(stream) = self.handed_over.recv() => {
                    match registered(stream) {
                        Ok((stream, peer)) => return (stream, peer, self.open_here()),
                        Err(e) => {
                            // Usually a client that left before it was taken over.
                            self.balance.closed(self.index);
                            tracing::debug!(error = %e, "cannot take over a connection");
                        }
                    }
                }
            }
        }
    }

    /// Keeps a connection accepted here, or hands it to a worker with fewer.
    fn place(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
    ) -> Option<(TcpStream, SocketAddr, OpenConnection)> {
        let target = self.balance.assign(self.index);
        if target == self.index {
            return Some((stream, peer, self.open_here()));
        }
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                self.balance.closed(target);
                tracing::warn!(%peer, error = %e, "cannot hand over a connection");
                return None;
            }
        };
        // A worker that has stopped (shutdown) no longer takes connections.
        let Err(mpsc::error::SendError(stream)) = self.balance.handoffs[target].send(stream) else {
            return None;
        };
        self.balance.recount(target, self.index);
        match TcpStream::from_std(stream) {
            Ok(stream) => Some((stream, peer, self.open_here())),
            Err(e) => {
                self.balance.closed(self.index);
                tracing::warn!(%peer, error = %e, "cannot take back a connection");
                None
            }
        }
    }

    /// A guard for a connection already counted on this worker.
    fn open_here(&self) -> OpenConnection {
        OpenConnection {
            worker: self.index,
            balance: self.balance.clone(),
        }
    }
}

impl Drop for Seat {
    /// A worker that stops serving closes the connections still waiting for it, and no
    /// longer counts them.
    fn drop(&mut self) {
        self.handed_over.close();
        while self.handed_over.try_recv().is_ok() {
            self.balance.closed(self.index);
        }
    }
}

/// A connection handed over from another worker, registered with this thread's runtime.
fn registered(stream: std::net::TcpStream) -> std::io::Result<(TcpStream, SocketAddr)> {
    let peer = stream.peer_addr()?;
    Ok((TcpStream::from_std(stream)?, peer))
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.balance.closed(self.worker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(seat: &Seat) -> Vec<usize> {
        seat.balance.lock().clone()
    }

    #[test]
    fn a_connection_goes_to_the_worker_with_the_fewest_preferring_the_one_that_accepted_it() {
        let seats = Balance::seats(3);
        let balance = &seats[0].balance;
        assert_eq!(balance.assign(1), 1, "a tie keeps it where it was accepted");
        assert_eq!(balance.assign(1), 0);
        assert_eq!(balance.assign(1), 2);
        assert_eq!(balance.assign(2), 2, "all at one each: a tie again");
        assert_eq!(counts(&seats[0]), vec![1, 1, 2]);
        balance.closed(0);
        assert_eq!(balance.assign(2), 0);
        balance.recount(0, 1);
        assert_eq!(counts(&seats[0]), vec![0, 2, 2]);
    }

    #[tokio::test]
    async fn a_connection_is_handed_over_unless_the_other_worker_has_stopped() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut seats = Balance::seats(2);
        let mut second = seats.pop().unwrap();
        let first = seats.pop().unwrap();
        first.balance.assign(0); // worker 0 already has one

        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (stream, accepted_from) = listener.accept().await.unwrap();
        assert!(
            first.place(stream, accepted_from).is_none(),
            "handed to worker 1"
        );
        let (_stream, peer, open) = second.next_connection(&listener).await;
        assert_eq!(peer, accepted_from);
        assert_eq!(counts(&first), vec![1, 1]);
        drop(open);
        assert_eq!(counts(&first), vec![1, 0]);

        // Handed over but not yet taken when worker 1 stops: closed, and not counted.
        let mut waiting = std::net::TcpStream::connect(addr).unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        assert!(first.place(stream, peer).is_none());
        assert_eq!(counts(&first), vec![1, 1]);
        drop(second);
        assert_eq!(counts(&first), vec![1, 0]);
        waiting
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let read = std::io::Read::read(&mut waiting, &mut [0; 1]).unwrap();
        assert_eq!(read, 0, "the client sees the connection closed");

        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let kept = first.place(stream, peer);
        assert!(kept.is_some(), "kept: worker 1 has stopped");
        assert_eq!(counts(&first), vec![2, 0]);
    }
}
