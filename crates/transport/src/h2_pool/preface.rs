//! Whether the server at the other end of a connection spoke HTTP/2 at all.
//!
//! An HTTP/2 server's first frame is SETTINGS (RFC 9113 §3.4). An HTTP/1.1-only server
//! that gets the client's preface answers "HTTP/1.1 400" or just closes, and hyper then
//! reports a broken pipe or a protocol error: true, but it does not say that the
//! upstream lacks HTTP/2. This wrapper looks at the server's first bytes so that the pool
//! can say so.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The frame type of SETTINGS: the fourth byte of a frame header.
const SETTINGS: u8 = 0x4;

const UNKNOWN: u8 = 0;
const HTTP2: u8 = 1;
const OTHER: u8 = 2;

/// What the server's first bytes were, shared by the connection's wrapper and the pool.
#[derive(Clone)]
pub(crate) struct Preface(Arc<AtomicU8>);

impl Default for Preface {
    fn default() -> Self {
        Self(Arc::new(AtomicU8::new(UNKNOWN)))
    }
}

impl Preface {
    /// True once the server's first frame was SETTINGS. False while it sent nothing, or
    /// when it sent something else.
    pub(crate) fn spoke_http2(&self) -> bool {
        self.0.load(Ordering::Relaxed) == HTTP2
    }
}

/// A stream that notes the server's first bytes in a [`Preface`].
pub(crate) struct Watched<S> {
    inner: S,
    preface: Preface,
    /// The first bytes read, until the frame type (the fourth byte) is known.
    seen: [u8; 4],
    filled: usize,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, preface: Preface) -> Self {
        Self {
            inner,
            preface,
            seen: [0; 4],
            filled: 0,
        }
    }

    fn note(&mut self, bytes: &[u8]) {
        if self.filled == self.seen.len() {
            return;
        }
        let take = bytes.len().min(self.seen.len() - self.filled);
        self.seen[self.filled..self.filled + take].copy_from_slice(&bytes[..take]);
        self.filled += take;
        if self.filled == self.seen.len() {
            let verdict = if self.seen[3] == SETTINGS {
                HTTP2
            } else {
                OTHER
            };
            self.preface.0.store(verdict, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.filled < self.seen.len() && buf.filled().len() > before {
            self.note(&buf.filled()[before..]);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict_of(chunks: &[&[u8]]) -> u8 {
        let preface = Preface::default();
        let mut watched = Watched::new(tokio::io::empty(), preface.clone());
        for chunk in chunks {
            watched.note(chunk);
        }
        preface.0.load(Ordering::Relaxed)
    }

    #[test]
    fn a_settings_frame_first_is_http2_and_anything_else_is_not() {
        // An empty SETTINGS frame: length 0, type 4, flags 0, stream 0.
        assert_eq!(verdict_of(&[&[0, 0, 0, 4, 0, 0, 0, 0, 0]]), HTTP2);
        assert_eq!(verdict_of(&[&[0, 0], &[18], &[4, 0]]), HTTP2);
        assert_eq!(verdict_of(&[b"HTTP/1.1 400 Bad Request\r\n"]), OTHER);
        assert_eq!(verdict_of(&[b"HT"]), UNKNOWN);
        assert_eq!(verdict_of(&[]), UNKNOWN);
    }
}
