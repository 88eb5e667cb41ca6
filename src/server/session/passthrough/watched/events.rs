//! Cuts an upstream's SSE bytes into whole events, each kept as the bytes that came, so
//! that a watched answer is passed on unchanged and its messages can still be read.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

/// SSE bytes read so far, not yet handed out as events.
#[derive(Default)]
pub(super) struct Events {
    buffer: BytesMut,
    /// Where the scan for the next line end stopped.
    scanned: usize,
    /// Where the current line began.
    line_start: usize,
    /// The last line ended with `\r`: a `\n` right after it belongs to that end.
    after_cr: bool,
}

impl Events {
    pub(super) fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next whole event (through the blank line that ends it), as it came.
    pub(super) fn next_event(&mut self) -> Option<Bytes> {
        let mut at = self.scanned;
        while at < self.buffer.len() {
            let byte = self.buffer[at];
            at += 1;
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                self.line_start = at;
                continue;
            }
            if byte != b'\n' && byte != b'\r' {
                continue;
            }
            let blank = at - 1 == self.line_start;
            self.after_cr = byte == b'\r';
            self.line_start = at;
            if blank {
                if self.after_cr && self.buffer.get(at) == Some(&b'\n') {
                    at += 1;
                    self.after_cr = false;
                }
                self.scanned = 0;
                self.line_start = 0;
                return Some(self.buffer.split_to(at).freeze());
            }
        }
        self.scanned = at;
        None
    }

    /// The bytes of an event not yet whole.
    pub(super) fn rest(self) -> Bytes {
        self.buffer.freeze()
    }
}

/// The JSON-RPC message an event carries (its `data:` lines), if any.
pub(super) fn message_of(event: &[u8]) -> Option<Value> {
    let mut data = Vec::new();
    let mut found = false;
    for line in event.split(|b| *b == b'\n' || *b == b'\r') {
        if let Some(value) = line.strip_prefix(b"data:") {
            if found {
                data.push(b'\n');
            }
            found = true;
            data.extend_from_slice(value.strip_prefix(b" ").unwrap_or(value));
        }
    }
    if !found {
        return None;
    }
    serde_json::from_slice(&data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(events: &mut Events) -> Vec<Bytes> {
        std::iter::from_fn(|| events.next_event()).collect()
    }

    #[test]
    fn events_come_whole_and_as_they_came_whatever_the_chunks() {
        let stream: &[u8] = b"id: 1\nevent: message\ndata: {\"a\":1}\n\n: note\r\n\r\ndata: {\"b\"\ndata: :2}\r\rdata: {}";
        for size in 1..stream.len() {
            let mut events = Events::default();
            let mut seen = Vec::new();
            for chunk in stream.chunks(size) {
                events.push(chunk);
                seen.extend(all(&mut events));
            }
            let rest = events.rest();
            let joined: Vec<u8> = seen
                .iter()
                .flat_map(|e| e.to_vec())
                .chain(rest.to_vec())
                .collect();
            assert_eq!(joined, stream, "chunks of {size}");
            assert_eq!(seen.len(), 3, "chunks of {size}: {seen:?}");
            // A `\n` that comes after the `\r` ending an event leads the next one.
            assert!(seen[1].starts_with(b": note\r\n\r"), "{:?}", seen[1]);
            assert_eq!(rest.as_ref(), b"data: {}");
        }
    }

    #[test]
    fn the_message_is_read_from_the_data_lines() {
        assert_eq!(
            message_of(b"id: 7\nevent: message\ndata: {\"a\":\ndata: 1}\n\n"),
            Some(serde_json::json!({"a": 1}))
        );
        assert_eq!(message_of(b": comment\n\n"), None);
        assert_eq!(message_of(b"id: 3\ndata:\n\n"), None);
    }
}
