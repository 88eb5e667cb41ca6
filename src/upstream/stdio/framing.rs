//! Newline-delimited messages from a child's stdout or stderr, with a bound on a
//! line's length so that a runaway process cannot exhaust the gateway's memory.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What one read produced.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line {
    /// A line without its `\n` (and `\r`).
    Text(Vec<u8>),
    /// A line longer than the limit; its bytes were skipped. Carries the length seen.
    TooLong(usize),
}

pub(super) struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub(super) fn new(inner: R, max: usize) -> Self {
        Self { inner, max }
    }

    /// The next line; `None` at end of stream (a final unterminated line is returned
    /// first).
    pub(super) async fn next(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut skipped = 0usize;
        loop {
            let buffer = self.inner.fill_buf().await?;
            if buffer.is_empty() {
                return Ok(match (skipped, line.is_empty()) {
                    (0, true) => None,
                    (0, false) => Some(Line::Text(trim_cr(line))),
                    (n, _) => Some(Line::TooLong(n)),
                });
            }
            let (chunk, found_end) = match buffer.iter().position(|&b| b == b'\n') {
                Some(at) => (&buffer[..at], true),
                None => (buffer, false),
            };
            if skipped > 0 || line.len() + chunk.len() > self.max {
                skipped += line.len() + chunk.len();
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
            let used = chunk.len() + usize::from(found_end);
            self.inner.consume(used);
            if found_end {
                return Ok(Some(if skipped > 0 {
                    Line::TooLong(skipped)
                } else {
                    Line::Text(trim_cr(line))
                }));
            }
        }
    }
}

fn trim_cr(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn splits_lines_and_skips_overlong_ones() {
        let input: &[u8] = b"one\r\n0123456789abc\ntwo\nlast";
        let mut reader = LineReader::new(tokio::io::BufReader::with_capacity(4, input), 8);
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Line::Text(b"one".to_vec()))
        );
        assert_eq!(reader.next().await.unwrap(), Some(Line::TooLong(13)));
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Line::Text(b"two".to_vec()))
        );
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Line::Text(b"last".to_vec()))
        );
        assert_eq!(reader.next().await.unwrap(), None);
    }
}
