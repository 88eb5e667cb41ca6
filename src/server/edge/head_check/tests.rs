use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use super::framing::{Framer, MAX_HEAD, Scanned};
use super::*;

/// A socket that yields `chunks` one read at a time (each cut to the reader's room),
/// with a `Pending` before each when `stalls`, then the end of the stream.
struct Script {
    chunks: VecDeque<Vec<u8>>,
    stalls: bool,
    stalled: bool,
}

impl AsyncRead for Script {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.stalls && !self.stalled && !self.chunks.is_empty() {
            self.stalled = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.stalled = false;
        if let Some(chunk) = self.chunks.front_mut() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            chunk.drain(..n);
            if chunk.is_empty() {
                self.chunks.pop_front();
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// What hyper reads through a [`HeadCheck`] from a socket yielding `chunks`, with a
/// buffer of `room` bytes; and the refusal, if any.
fn through(chunks: Vec<Vec<u8>>, room: usize, stalls: bool) -> (Vec<u8>, Option<HeadError>) {
    let script = Script {
        chunks: chunks.into_iter().filter(|c| !c.is_empty()).collect(),
        stalls,
        stalled: false,
    };
    let refusals = Arc::new(Refusals::default());
    let mut check = HeadCheck {
        grace: Duration::ZERO,
        ..HeadCheck::new(script, refusals.clone())
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let seen = runtime.block_on(async {
        let mut seen = Vec::new();
        loop {
            let mut buf = vec![0; room];
            let n = check.read(&mut buf).await.unwrap();
            if n == 0 {
                return seen;
            }
            seen.extend_from_slice(&buf[..n]);
        }
    });
    let refused = refusals.0.get().map(|refused| refused.error.clone());
    (seen, refused)
}

/// `stream` cut in two at every byte, and byte by byte; through small and large
/// buffers, with and without stalls. Each must give the same as the whole.
fn every_split(stream: &[u8]) -> (Vec<u8>, Option<HeadError>) {
    let whole = through(vec![stream.to_vec()], 8192, false);
    for room in [24, 8192] {
        for stalls in [false, true] {
            for cut in 0..=stream.len() {
                let chunks = vec![stream[..cut].to_vec(), stream[cut..].to_vec()];
                let got = through(chunks, room, stalls);
                assert_same(&got, &whole, &format!("cut at {cut}, room {room}"));
            }
            let bytes = stream.iter().map(|b| vec![*b]).collect();
            let got = through(bytes, room, stalls);
            assert_same(&got, &whole, &format!("byte by byte, room {room}"));
        }
    }
    whole
}

/// The same bytes but for the stand-in's mark, drawn per refusal.
fn assert_same(got: &(Vec<u8>, Option<HeadError>), want: &(Vec<u8>, Option<HeadError>), how: &str) {
    assert_eq!(got.1, want.1, "{how}");
    assert_eq!(without_mark(&got.0), without_mark(&want.0), "{how}");
}

fn without_mark(bytes: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    match text.find(MARK) {
        Some(at) => text[..at].as_bytes().to_vec(),
        None => bytes.to_vec(),
    }
}

/// What hyper reads instead of a refused head: clean bytes, then the stand-in.
fn refused_after(clean: &[u8], seen: &[u8]) {
    let stand_in = b"GET / HTTP/1.1\r\nx-mtg-refused-head: ";
    assert!(
        seen.starts_with(clean),
        "{:?}",
        String::from_utf8_lossy(seen)
    );
    let rest = &seen[clean.len()..];
    assert!(
        rest.starts_with(stand_in),
        "{:?}",
        String::from_utf8_lossy(rest)
    );
    assert!(rest.ends_with(b"\r\nconnection: close\r\n\r\n"));
    assert_eq!(
        rest.len(),
        stand_in.len() + 32 + 23,
        "{:?}",
        String::from_utf8_lossy(rest)
    );
}

fn post(headers: &[u8], body: &str) -> Vec<u8> {
    let length = format!("content-length: {}\r\n\r\n", body.len());
    [
        b"POST /mcp HTTP/1.1\r\nhost: x\r\n",
        headers,
        length.as_bytes(),
        body.as_bytes(),
    ]
    .concat()
}

const CHUNKED: &[u8] = b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
    5;name=\"v a\";x\r\nhello\r\n1A \t;ext\r\n\0\0\r\n\r\nGET / HTTP/1.1\0\r\n\n\x7fa\r\n\
    0\r\nX-Trailer: a\tb\r\nX-Other: c\r\n\r\n";

fn keep_alive_stream() -> Vec<u8> {
    let mut stream = post(
        b"authorization: Bearer \xff\xfe\tcaf\xe9\r\n",
        r#"{"id":1}"#,
    );
    stream.extend_from_slice(CHUNKED);
    // LF-only lines and an empty line before the request line, which httparse allows.
    stream.extend_from_slice(b"\r\nGET /healthz HTTP/1.1\nx-note: na\xefve\tv \t\n\n");
    stream
}

#[test]
fn bytes_http_permits_pass_unchanged_however_they_are_read() {
    let stream = keep_alive_stream();
    let (seen, refused) = every_split(&stream);
    assert_eq!(refused, None);
    assert_eq!(seen, stream);
}

#[test]
fn a_forbidden_byte_in_the_first_request_is_all_hyper_reads() {
    let mut stream = post(b"authorization: Bearer a\0b\r\n", "{}");
    stream.extend_from_slice(&post(b"", "{}"));
    let (seen, refused) = every_split(&stream);
    refused_after(b"", &seen);
    assert_eq!(
        refused,
        Some(HeadError::Value {
            name: "authorization".into(),
            byte: 0,
            offset: 8
        })
    );
}

#[test]
fn a_forbidden_byte_in_the_third_request_leaves_the_first_two_whole() {
    let clean = keep_alive_stream();
    let mut stream = clean.clone();
    stream.extend_from_slice(&post(b"X-Note:  a\x01b \r\n", "{}"));
    stream.extend_from_slice(&post(b"", "{}"));
    let (seen, refused) = every_split(&stream);
    refused_after(&clean, &seen);
    assert_eq!(
        refused,
        Some(HeadError::Value {
            name: "x-note".into(),
            byte: 1,
            offset: 1
        })
    );
}

#[test]
fn each_forbidden_byte_is_named_with_its_header() {
    for byte in (0u8..0x20)
        .filter(|b| *b != b'\t' && *b != b'\n')
        .chain([0x7f])
    {
        let line = [&b"cookie: ab"[..], &[byte], b"c\r\n"].concat();
        let stream = [&b"GET / HTTP/1.1\r\n"[..], &line, b"\r\n"].concat();
        let (seen, refused) = through(vec![stream], 8192, false);
        refused_after(b"", &seen);
        let want = HeadError::Value {
            name: "cookie".into(),
            byte,
            offset: 2,
        };
        assert_eq!(refused.as_ref(), Some(&want), "{byte:#04x}");
        let message = want.to_string();
        assert!(
            message.starts_with("header \"cookie\" holds byte "),
            "{message}"
        );
        assert!(
            message.contains(&format!("{byte:#04x} at value offset 2")),
            "{message}"
        );
    }
}

#[test]
fn a_bare_cr_inside_a_value_is_refused() {
    let stream = post(b"x-note: a\rb\r\n", "{}");
    let (seen, refused) = every_split(&stream);
    refused_after(b"", &seen);
    assert_eq!(
        refused,
        Some(HeadError::Value {
            name: "x-note".into(),
            byte: b'\r',
            offset: 1
        })
    );
}

#[test]
fn a_request_line_with_a_forbidden_byte_is_refused() {
    let cases: [(&[u8], u8, usize); 4] = [
        (b"POST /m\0cp HTTP/1.1\r\n\r\n", 0, 7),
        (b"\x16\x03\x01\x02\0", 0x16, 0),
        (b"GET / HTTP/1.1\rx\r\n\r\n", b'\r', 14),
        (b"\r\n\r\nGET /\x7f HTTP/1.1\r\n\r\n", 0x7f, 5),
    ];
    for (stream, byte, offset) in cases {
        let (seen, refused) = every_split(stream);
        refused_after(b"", &seen);
        assert_eq!(refused, Some(HeadError::RequestLine { byte, offset }));
    }
    let mut stream = post(b"", "{}");
    stream.extend_from_slice(b"\r\x00GET / HTTP/1.1\r\n\r\n");
    let (seen, refused) = every_split(&stream);
    refused_after(&post(b"", "{}"), &seen);
    assert_eq!(
        refused,
        Some(HeadError::RequestLine {
            byte: b'\r',
            offset: 0
        })
    );
}

#[test]
fn a_field_name_that_is_not_a_token_is_refused() {
    let cases: [(&[u8], &str, u8, usize); 5] = [
        (b"Content-Length : 2\r\n", "content-length", b' ', 14),
        (b"x-n\0te: a\r\n", "x-n", 0, 3),
        (b"x-folded: a\r\n b\r\n", "", b' ', 0),
        (b"no-colon\r\n", "no-colon", b'\r', 8),
        (b"caf\xe9: a\r\n", "caf", 0xe9, 3),
    ];
    for (line, name, byte, offset) in cases {
        let stream = [&b"POST / HTTP/1.1\r\nHost: x\r\n"[..], line, b"\r\n{}"].concat();
        let (seen, refused) = every_split(&stream);
        refused_after(b"", &seen);
        let want = HeadError::Name {
            name: name.into(),
            byte,
            offset,
        };
        assert_eq!(refused, Some(want));
    }
}

#[test]
fn a_name_is_shown_escaped_and_cut() {
    let error = HeadError::name(b"X-\"A\"\x01", 1, 6);
    assert_eq!(
        error.to_string(),
        "header name \"x-\\\"a\\\"\\x01\" holds byte 0x01 at offset 6; a field name is a token ended by ':'"
    );
    let long = HeadError::value(&[b'a'; 100], 0, 0);
    let HeadError::Value { name, .. } = long else {
        unreachable!()
    };
    assert_eq!(name, format!("{}…", "a".repeat(64)));
}

#[test]
fn http2_passes_unchecked() {
    let mut stream = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    stream.extend_from_slice(b"\0\0\0\x04\0\0\0\0\0\0\0\x0a\x01\x05\0\0\0\x01\x0fauth\0b\r\n\x7f");
    let (seen, refused) = every_split(&stream);
    assert_eq!(refused, None);
    assert_eq!(seen, stream);
}

#[test]
fn after_an_upgrade_or_framing_hyper_refuses_bytes_pass_unchecked() {
    let after: &[u8] = b"\0\x01anything\r\n\r\n";
    let heads: [&[u8]; 7] = [
        b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ];
    for head in heads {
        let stream = [head, after].concat();
        let (seen, refused) = every_split(&stream);
        assert_eq!(refused, None, "{:?}", String::from_utf8_lossy(head));
        assert_eq!(seen, stream);
    }
}

#[test]
fn bodies_are_skipped_as_hyper_reads_them() {
    let bad = post(b"x: \0\r\n", "");
    let cases: [&[u8]; 5] = [
        // Upgrade on HTTP/1.0 is no upgrade; the NUL is the body's.
        b"POST / HTTP/1.0\r\nUpgrade: x\r\nContent-Length: 4\r\n\r\nx\0\0\r",
        // Two equal lengths; then a length after Transfer-Encoding, which hyper ignores.
        b"POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n\0\0",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n2\r\n\0\0\r\n0\r\n\r\n",
        // A length before Transfer-Encoding: hyper reads the chunks.
        b"POST / HTTP/1.1\r\nContent-Length: 9\r\nTransfer-Encoding: CHUNKED\r\n\r\nA\r\n\0\0\0\0\0\0\0\0\0\0\r\n0\r\n\r\n",
        CHUNKED,
    ];
    for clean in cases {
        let stream = [clean, &bad].concat();
        let (seen, refused) = every_split(&stream);
        refused_after(clean, &seen);
        assert!(
            matches!(refused, Some(HeadError::Value { .. })),
            "{refused:?}"
        );
    }
}

#[test]
fn a_head_past_hyper_limit_is_left_to_hyper() {
    // Past the limit with a NUL, or with a CR as its last byte: nothing is held past it.
    for (at, bytes) in [
        (MAX_HEAD + 10, &b"\0\r\n\r\n"[..]),
        (MAX_HEAD - 1, b"\rx\0\r\n\r\n"),
    ] {
        let mut stream = b"GET / HTTP/1.1\r\nx-big: ".to_vec();
        stream.resize(at, b'a');
        stream.extend_from_slice(bytes);
        let (seen, refused) = through(vec![stream.clone()], 8192, false);
        assert_eq!(refused, None);
        assert_eq!(seen, stream);
    }
}

#[test]
fn an_unfinished_head_at_the_end_of_the_stream_goes_to_hyper() {
    let mut stream = post(b"", "{}");
    stream.extend_from_slice(b"POST /mcp HTTP/1.1\r\nx-note: a");
    let (seen, refused) = every_split(&stream);
    assert_eq!(refused, None);
    assert_eq!(seen, stream);
}

#[test]
fn the_framer_clears_whole_messages_and_holds_an_unfinished_head() {
    let mut framer = Framer::new();
    let request = post(b"", "{}");
    let mut bytes = request.clone();
    bytes.extend_from_slice(b"GET / HT");
    assert_eq!(
        framer.scan(&bytes),
        Scanned {
            clear: request.len(),
            refused: None
        }
    );
    // Given again from its start, with what follows.
    assert_eq!(
        framer.scan(b"GET / HTTP/1.1\r\n\r\n"),
        Scanned {
            clear: 18,
            refused: None
        }
    );
}

#[test]
fn the_stand_in_is_answered_with_a_named_json_rpc_error_and_only_it() {
    let refusals = Refusals::default();
    let plain = http::Request::new(());
    assert!(refusals.answer(&plain).is_none());
    let stand_in = refusals.refuse(HeadError::value(b"Authorization", 0, 7));
    let text = String::from_utf8(stand_in).unwrap();
    let mark = text
        .lines()
        .find_map(|line| line.strip_prefix("x-mtg-refused-head: "))
        .unwrap();
    assert!(refusals.answer(&plain).is_none());
    let forged = http::Request::builder()
        .header(MARK, "0123456789abcdef0123456789abcdef")
        .body(())
        .unwrap();
    assert!(refusals.answer(&forged).is_none());
    let request = http::Request::builder()
        .header(MARK, mark)
        .body(())
        .unwrap();
    let answer = refusals.answer(&request).unwrap();
    assert_eq!(answer.status(), 400);
    assert_eq!(answer.headers()["connection"], "close");
    assert_eq!(answer.headers()["content-type"], "application/json");
}

#[test]
fn after_a_refusal_the_end_of_the_stream_waits_for_the_answer() {
    // hyper looks for the end before it writes the answer, and would drop the answer of
    // a client that shut its side: that end is held back.
    let script = Script {
        chunks: [post(b"x: \0\r\n", "{}")].into(),
        stalls: false,
        stalled: false,
    };
    let mut check = HeadCheck::new(script, Arc::new(Refusals::default()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut buf = vec![0; 8192];
        let n = check.read(&mut buf).await.unwrap();
        refused_after(b"", &buf[..n]);
        let next = futures_util::FutureExt::now_or_never(check.read(&mut buf));
        assert!(
            next.is_none(),
            "the end of the stream came at once: {next:?}"
        );
    });
}
