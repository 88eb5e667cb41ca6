//! Where each request head of an HTTP/1.1 connection starts and ends, and whether it
//! holds a byte HTTP forbids. Sans-IO: fed the bytes hyper is about to read, in order.
//!
//! It reads a head as httparse does (lines end in CRLF or LF, empty lines before the
//! request line are skipped) and a body as hyper does (`Transfer-Encoding` before
//! `Content-Length`, `chunked.rs`), so that both find the next head at the same byte.
//! It refuses only what httparse refuses too; anything else is hyper's to judge.

use super::HeadError;
use super::chunked::{Advanced, Chunked};

/// What hyper reads before it calls a connection HTTP/2 (hyper-util's `auto`).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// hyper's read buffer limit (`DEFAULT_MAX_BUFFER_SIZE`): a head not whole within it gets
/// hyper's 431, so past it the framer lets bytes through rather than hold them.
pub(super) const MAX_HEAD: usize = 8192 + 4096 * 100;

/// What [`Framer::scan`] made of the bytes it was given.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Scanned {
    /// How many bytes, from the first, hyper may read.
    pub(super) clear: usize,
    /// A head refused, starting at `clear`. Without one, the bytes after `clear` are an
    /// unfinished head, to be given again with what follows them.
    pub(super) refused: Option<HeadError>,
}

#[derive(Debug)]
pub(super) struct Framer {
    state: State,
}

#[derive(Debug)]
enum State {
    /// The connection's first bytes: HTTP/2's preface or a first head.
    Start,
    Head(HeadScan),
    Length(u64),
    Chunked(Chunked),
    /// Framing this does not follow (HTTP/2, an upgrade, a body hyper refuses): the
    /// bytes pass unchecked from here on.
    Unchecked,
}

impl Framer {
    pub(super) fn new() -> Self {
        Self {
            state: State::Start,
        }
    }

    /// Stops checking: from now on every byte passes.
    pub(super) fn stop(&mut self) {
        self.state = State::Unchecked;
    }

    /// Reads `bytes`: the first byte this has not cleared yet (an unfinished head is
    /// given again from its start) and those after it.
    pub(super) fn scan(&mut self, bytes: &[u8]) -> Scanned {
        let mut at = 0;
        loop {
            let rest = &bytes[at..];
            match &mut self.state {
                State::Unchecked => {
                    return Scanned {
                        clear: bytes.len(),
                        refused: None,
                    };
                }
                State::Start => {
                    let n = rest.len().min(H2_PREFACE.len());
                    self.state = if rest[..n] != H2_PREFACE[..n] {
                        State::Head(HeadScan::default())
                    } else if n == H2_PREFACE.len() {
                        State::Unchecked
                    } else {
                        return Scanned {
                            clear: at,
                            refused: None,
                        };
                    };
                }
                // Not past hyper's limit: a head not whole within it gets hyper's 431.
                State::Head(head) => match head.advance(&rest[..rest.len().min(MAX_HEAD)]) {
                    Head::Unfinished if rest.len() > MAX_HEAD => self.state = State::Unchecked,
                    Head::Unfinished => {
                        return Scanned {
                            clear: at,
                            refused: None,
                        };
                    }
                    Head::Refused(error) => {
                        return Scanned {
                            clear: at,
                            refused: Some(error),
                        };
                    }
                    Head::Ends(length, body) => {
                        at += length;
                        self.state = match body {
                            Body::Length(0) => State::Head(HeadScan::default()),
                            Body::Length(n) => State::Length(n),
                            Body::Chunked => State::Chunked(Chunked::new()),
                            Body::Unknown => State::Unchecked,
                        };
                    }
                },
                State::Length(left) => {
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(rest.len());
                    at += take;
                    *left -= take as u64;
                    if *left > 0 {
                        return Scanned {
                            clear: at,
                            refused: None,
                        };
                    }
                    self.state = State::Head(HeadScan::default());
                }
                State::Chunked(chunked) => match chunked.advance(rest) {
                    Advanced::More => {
                        return Scanned {
                            clear: bytes.len(),
                            refused: None,
                        };
                    }
                    Advanced::Done(length) => {
                        at += length;
                        self.state = State::Head(HeadScan::default());
                    }
                    Advanced::Invalid => self.state = State::Unchecked,
                },
            }
        }
    }
}

/// What the body after a head is, as hyper reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Length(u64),
    Chunked,
    /// Not followed: an upgrade (hyper may hand the connection over), or framing
    /// hyper refuses (and then closes).
    Unknown,
}

/// What [`HeadScan::advance`] found.
enum Head {
    Unfinished,
    Refused(HeadError),
    /// The head is this long, and this body follows it.
    Ends(usize, Body),
}

/// Which part of the head the next byte is in.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Empty lines before the request line, which httparse skips.
    #[default]
    Blank,
    RequestLine,
    /// The first byte of a header line, or of the empty line ending the head.
    LineStart,
    Name,
    /// Whitespace after the colon.
    Gap,
    Value,
}

/// One head, read as it arrives; positions count from its first byte, which every
/// call gives again.
#[derive(Debug, Default)]
struct HeadScan {
    /// Bytes looked at.
    pos: usize,
    part: Part,
    /// Where the current line starts.
    line: usize,
    /// The current header line's colon, and where its value starts.
    colon: usize,
    value: usize,
    framing: Framing,
}

impl HeadScan {
    fn advance(&mut self, head: &[u8]) -> Head {
        while self.pos < head.len() {
            let step = match self.part {
                Part::Blank => self.step_blank(head),
                Part::RequestLine => self.step_request_line(head),
                Part::LineStart => self.step_line_start(head),
                Part::Name => self.step_name(head),
                Part::Gap => self.step_gap(head),
                Part::Value => self.step_value(head),
            };
            if let Some(done) = step {
                return done;
            }
        }
        Head::Unfinished
    }

    // Each step reads from `self.pos`; `None` means go on with the next part.

    fn step_blank(&mut self, head: &[u8]) -> Option<Head> {
        let at = self.pos;
        match head[at] {
            b'\n' => self.pos += 1,
            b'\r' => match head.get(at + 1) {
                None => return Some(Head::Unfinished),
                Some(b'\n') => self.pos += 2,
                Some(_) => return Some(request_line_error(b'\r', 0)),
            },
            _ => {
                self.line = at;
                self.part = Part::RequestLine;
            }
        }
        None
    }

    /// The rest of the line from `self.pos`: `Ok((stop, next))`, where it stops and where
    /// the next line starts; `Err(Some(at))`, a byte HTTP forbids at `at`; `Err(None)`,
    /// more bytes are needed.
    fn rest_of_line(&mut self, head: &[u8]) -> Result<(usize, usize), Option<usize>> {
        let Some(stop) = find(head, self.pos, |b| forbidden(b) || b == b'\n') else {
            self.pos = head.len();
            return Err(None);
        };
        match line_end(head, stop) {
            LineEnd::Unknown => {
                self.pos = stop;
                Err(None)
            }
            LineEnd::No => Err(Some(stop)),
            LineEnd::Yes(next) => Ok((stop, next)),
        }
    }

    fn step_request_line(&mut self, head: &[u8]) -> Option<Head> {
        let (stop, end) = match self.rest_of_line(head) {
            Ok(line) => line,
            Err(None) => return Some(Head::Unfinished),
            Err(Some(at)) => return Some(request_line_error(head[at], at - self.line)),
        };
        self.framing.request_line(&head[self.line..stop]);
        self.next_line(end);
        None
    }

    fn step_line_start(&mut self, head: &[u8]) -> Option<Head> {
        let at = self.pos;
        match line_end(head, at) {
            LineEnd::Unknown => Some(Head::Unfinished),
            LineEnd::Yes(next) => Some(Head::Ends(next, self.framing.body())),
            LineEnd::No if is_tchar(head[at]) => {
                self.line = at;
                self.part = Part::Name;
                None
            }
            LineEnd::No => Some(name_error(head, at, at)),
        }
    }

    fn step_name(&mut self, head: &[u8]) -> Option<Head> {
        let Some(stop) = find(head, self.pos, |b| !is_tchar(b)) else {
            self.pos = head.len();
            return Some(Head::Unfinished);
        };
        if head[stop] != b':' {
            return Some(name_error(head, self.line, stop));
        }
        self.colon = stop;
        self.pos = stop + 1;
        self.part = Part::Gap;
        None
    }

    fn step_gap(&mut self, head: &[u8]) -> Option<Head> {
        match head[self.pos] {
            b' ' | b'\t' => self.pos += 1,
            _ => {
                self.value = self.pos;
                self.part = Part::Value;
            }
        }
        None
    }

    fn step_value(&mut self, head: &[u8]) -> Option<Head> {
        let (stop, end) = match self.rest_of_line(head) {
            Ok(line) => line,
            Err(None) => return Some(Head::Unfinished),
            Err(Some(at)) => {
                return Some(Head::Refused(HeadError::value(
                    &head[self.line..self.colon],
                    head[at],
                    at - self.value,
                )));
            }
        };
        let value = trim_end(&head[self.value..stop]);
        self.framing.header(&head[self.line..self.colon], value);
        self.next_line(end);
        None
    }

    fn next_line(&mut self, start: usize) {
        self.pos = start;
        self.line = start;
        self.part = Part::LineStart;
    }
}

/// Whether a line ends at `at`: CRLF or a bare LF. A CR followed by anything else is
/// a byte HTTP forbids inside a line.
enum LineEnd {
    /// It does; the next line starts here.
    Yes(usize),
    No,
    /// A CR is the last byte so far.
    Unknown,
}

fn line_end(head: &[u8], at: usize) -> LineEnd {
    match (head[at], head.get(at + 1)) {
        (b'\n', _) => LineEnd::Yes(at + 1),
        (b'\r', Some(b'\n')) => LineEnd::Yes(at + 2),
        (b'\r', None) => LineEnd::Unknown,
        _ => LineEnd::No,
    }
}

/// The first byte from `from` on that `stop` picks.
fn find(head: &[u8], from: usize, stop: impl Fn(u8) -> bool) -> Option<usize> {
    head[from..]
        .iter()
        .position(|&b| stop(b))
        .map(|offset| from + offset)
}

/// A byte HTTP forbids in a field value (RFC 9110 §5.5) and in the request line: a
/// control other than HTAB, or DEL. CR is allowed only right before LF.
fn forbidden(byte: u8) -> bool {
    (byte < 0x20 && byte != b'\t') || byte == 0x7f
}

/// tchar (RFC 9110 §5.6.2): what a field name is made of.
fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// A value as httparse gives it: without its trailing whitespace.
fn trim_end(value: &[u8]) -> &[u8] {
    let end = value
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(0, |last| last + 1);
    &value[..end]
}

fn request_line_error(byte: u8, offset: usize) -> Head {
    Head::Refused(HeadError::RequestLine { byte, offset })
}

fn name_error(head: &[u8], line: usize, at: usize) -> Head {
    Head::Refused(HeadError::name(&head[line..at], head[at], at - line))
}

/// What the head says of the body after it, read as hyper's `Server::parse` does.
#[derive(Debug, Default)]
struct Framing {
    http10: bool,
    /// `CONNECT`, or `Upgrade` on HTTP/1.1.
    upgrade: bool,
    length: Option<u64>,
    /// A `Content-Length` hyper refuses (not digits, too large, two that differ).
    bad_length: bool,
    transfer_encoding: bool,
    /// Whether the last `Transfer-Encoding` ends in `chunked`.
    chunked: bool,
}

impl Framing {
    fn request_line(&mut self, line: &[u8]) {
        self.http10 = line.ends_with(b" HTTP/1.0");
        self.upgrade = line.starts_with(b"CONNECT ");
    }

    fn header(&mut self, name: &[u8], value: &[u8]) {
        if name.eq_ignore_ascii_case(b"content-length") {
            if self.transfer_encoding {
                return;
            }
            match digits(value) {
                Some(n) if self.length.is_none_or(|seen| seen == n) => self.length = Some(n),
                _ => self.bad_length = true,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.transfer_encoding = true;
            self.chunked = ends_in_chunked(value);
        } else if name.eq_ignore_ascii_case(b"upgrade") && !self.http10 {
            self.upgrade = true;
        }
    }

    fn body(&self) -> Body {
        if self.upgrade {
            Body::Unknown
        } else if self.transfer_encoding {
            match self.chunked && !self.http10 {
                true => Body::Chunked,
                false => Body::Unknown,
            }
        } else if self.bad_length {
            Body::Unknown
        } else {
            Body::Length(self.length.unwrap_or(0))
        }
    }
}

/// hyper's `from_digits`, and its limit on a length (`DecodedLength::MAX_LEN`).
fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    let n = value.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then_some(())?;
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })?;
    (n <= u64::MAX - 2).then_some(n)
}

/// hyper's `is_chunked_`: visible ASCII, the last encoding `chunked`.
fn ends_in_chunked(value: &[u8]) -> bool {
    let visible = value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
    visible && last.trim_ascii().eq_ignore_ascii_case(b"chunked")
}
