//! Fewer, fuller writes for streamed pass-through responses.
//!
//! Upstreams often flush a response's head before its first SSE event, and the chunked
//! terminator arrives after the last one. Forwarded as they come, one answer costs the
//! client three writes (head, event, `0\r\n\r\n`); on loopback and in VMs each write
//! also pays for waking the reader, which dominated the gateway's CPU per request.
//!
//! Each wait first lets a task hop or two pass (hyper's connection task hands over what it
//! has already read) and only then arms a timer: registering a timer due sooner than the
//! runtime's next wake-up writes to the runtime's eventfd, even from the runtime's own
//! thread, and these writes were about a quarter of the gateway's system calls per
//! pass-through request (docs/benchmarks.md, run 19).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// How long the head may wait for the body's first frame. Quick answers follow their
/// head within microseconds; for slow ones a head a few milliseconds late goes unseen.
pub(crate) const FIRST_FRAME_WINDOW: Duration = Duration::from_millis(5);

/// How long a frame may wait to learn whether the stream ends after it. hyper's client
/// hands over one chunk at a time, so the end of a stream is seen one task hop after
/// its last chunk; without the wait the terminator costs a write of its own.
pub(crate) const END_WINDOW: Duration = Duration::from_millis(1);

/// `body` with its first frame fetched and settled, if that happens within
/// [`FIRST_FRAME_WINDOW`], so that the head leaves in the same write as that frame.
pub(crate) async fn with_first_frame<B>(body: B) -> Coalesced<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    let ended = body.is_end_stream();
    let mut body = Coalesced {
        inner: body,
        staged: None,
        ahead: None,
        window: None,
        end_deadline: None,
        hopped: false,
        ended,
    };
    if !ended && !within_hops(|cx| body.poll_settled(cx)).await {
        // On time-out the state stays consistent: a frame already staged is handed out later.
        let _ = tokio::time::timeout(
            FIRST_FRAME_WINDOW,
            std::future::poll_fn(|cx| body.poll_settled(cx)),
        )
        .await;
    }
    body
}

/// Task hops a settling waits before it arms a timer: the first frame comes one hop after
/// a head read with it, and the end one hop after the last chunk read with it.
const HOPS: u8 = 2;

/// Whether `poll` is ready now or within [`HOPS`] task hops (wake-ups of this task
/// queued behind the tasks woken before it), without a timer.
async fn within_hops(mut poll: impl FnMut(&mut Context<'_>) -> Poll<()>) -> bool {
    let mut hops = 0;
    std::future::poll_fn(|cx| match poll(cx) {
        Poll::Ready(()) => Poll::Ready(true),
        Poll::Pending if hops == HOPS => Poll::Ready(false),
        Poll::Pending => {
            hops += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

/// A body that stages each frame until it knows what follows (or [`END_WINDOW`]
/// passes), so that it can tell hyper the stream has ended together with the last
/// frame; hyper then writes the last chunk and the terminator at once.
pub(crate) struct Coalesced<B: Body> {
    inner: B,
    /// The next frame to hand out, once settled.
    staged: Option<Result<Frame<Bytes>, B::Error>>,
    /// The frame after `staged`, read while looking ahead.
    ahead: Option<Result<Frame<Bytes>, B::Error>>,
    /// The [`END_WINDOW`] timer, made on first use and reset for each frame that needs it.
    window: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the staged frame's [`END_WINDOW`] closes; the timer is armed only once a look
    /// ahead has found nothing twice, a task hop apart.
    end_deadline: Option<tokio::time::Instant>,
    /// The look ahead for the staged frame has already waited one task hop.
    hopped: bool,
    /// `inner` has ended.
    ended: bool,
}

impl<B> Coalesced<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    /// Ready once the next frame to hand out is known (`staged`, or none at the end) and
    /// so is whether anything follows it, or the window for finding out has closed.
    fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.staged.is_none() {
            let frame = match self.ahead.take() {
                Some(frame) => frame,
                None if self.ended => return Poll::Ready(()),
                None => match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                    Some(frame) => frame,
                    None => {
                        self.ended = true;
                        return Poll::Ready(());
                    }
                },
            };
            let look_ahead = frame.is_ok() && !self.ended;
            self.staged = Some(frame);
            if !look_ahead {
                return Poll::Ready(());
            }
            self.end_deadline = Some(tokio::time::Instant::now() + END_WINDOW);
            self.hopped = false;
        }
        let looking = matches!(self.staged, Some(Ok(_))) && self.ahead.is_none() && !self.ended;
        if looking {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(next)) => self.ahead = Some(next),
                Poll::Ready(None) => self.ended = true,
                // The end usually came in the same read as the last chunk, and hyper
                // hands it over one task hop later: look once more before a timer.
                Poll::Pending if !self.hopped => {
                    self.hopped = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Pending => ready!(self.poll_end_window(cx)),
            }
        }
        Poll::Ready(())
    }

    /// Ready once the staged frame's [`END_WINDOW`] has closed; arms the timer on first use.
    fn poll_end_window(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // The deadline is taken when the timer is set to it.
        if let Some(deadline) = self.end_deadline.take() {
            match &mut self.window {
                Some(window) => window.as_mut().reset(deadline),
                None => self.window = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        match &mut self.window {
            Some(window) => window.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }
}

// Nothing in it is pinned structurally: `inner` is `Unpin`, the rest is never pinned.
impl<B: Body + Unpin> Unpin for Coalesced<B> {}

impl<B> Body for Coalesced<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        ready!(this.poll_settled(cx));
        Poll::Ready(this.staged.take())
    }

    fn is_end_stream(&self) -> bool {
        self.staged.is_none() && self.ahead.is_none() && self.ended
    }

    fn size_hint(&self) -> SizeHint {
        let buffered: u64 = [&self.staged, &self.ahead]
            .into_iter()
            .flatten()
            .filter_map(|frame| frame.as_ref().ok()?.data_ref())
            .map(|data| data.len() as u64)
            .sum();
        let rest = if self.ended {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        };
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + buffered);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + buffered);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;

    fn frames(parts: &[&'static str]) -> Vec<Result<Frame<Bytes>, Infallible>> {
        parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect()
    }

    #[tokio::test]
    async fn the_last_frame_comes_with_the_end_of_the_stream() {
        let body = StreamBody::new(stream::iter(frames(&["a", "b"])));
        let mut body = with_first_frame(body).await;
        assert!(!body.is_end_stream());
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "a");
        assert!(!body.is_end_stream());
        let last = body.frame().await.unwrap().unwrap();
        assert_eq!(last.into_data().unwrap(), "b");
        // Known before the next poll: hyper writes "b" and the terminator together.
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_body_that_is_slow_to_start_is_passed_on_unfetched() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
        let body = StreamBody::new(tokio_stream_of(rx));
        let mut body = with_first_frame(body).await;
        assert!(body.staged.is_none(), "nothing came within the window");
        tx.send(Ok(Frame::data(Bytes::from_static(b"late"))))
            .await
            .unwrap();
        drop(tx);
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "late");
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn a_frame_of_a_stream_that_stays_open_is_not_kept_back_for_the_next() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tx.send(Ok(Frame::data(Bytes::from_static(b"progress"))))
            .await
            .unwrap();
        let mut body = with_first_frame(StreamBody::new(tokio_stream_of(rx))).await;
        let started = std::time::Instant::now();
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("handed out once the window closes")
            .unwrap()
            .unwrap();
        assert_eq!(frame.into_data().unwrap(), "progress");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(!body.is_end_stream(), "the sender is still open");
        drop(tx);
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn an_end_one_task_hop_after_the_last_frame_is_found_without_a_timer() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
        // As hyper's client does: the chunk first, the end once its connection task has
        // been woken again.
        tokio::spawn(async move {
            tx.send(Ok(Frame::data(Bytes::from_static(b"event"))))
                .await
                .unwrap();
            hop().await;
            drop(tx);
        });
        let mut body = with_first_frame(StreamBody::new(tokio_stream_of(rx))).await;
        assert!(body.window.is_none(), "no END_WINDOW timer was armed");
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "event");
        assert!(body.is_end_stream(), "the end is known with the last frame");
    }

    /// One wake-up of this task, queued behind the tasks woken before it.
    async fn hop() {
        let mut woken = false;
        std::future::poll_fn(|cx| {
            if woken {
                return Poll::Ready(());
            }
            woken = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    fn tokio_stream_of<T>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_util::Stream<Item = T> + Unpin {
        Box::pin(stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
