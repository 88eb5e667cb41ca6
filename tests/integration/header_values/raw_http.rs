//! Requests written and answers read byte for byte on a plain socket: bytes no HTTP
//! client would send, and answers judged as they came (HTTP/1.1 and HTTP/2 frames).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One HTTP/1.1 answer as it came.
pub struct Answer {
    pub status: u16,
    headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message of a JSON or SSE body (the last one of a stream).
    pub fn message(&self) -> Value {
        let text = String::from_utf8_lossy(&self.body);
        let data = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .rfind(|data| !data.trim().is_empty())
            .unwrap_or(&text);
        serde_json::from_str(data.trim()).unwrap_or_else(|e| panic!("{e}: {text:?}"))
    }

    /// Asserts a -32600 refusal naming `header` and `byte`, closing the connection.
    pub fn assert_refused(&self, header: &str, byte: u8) {
        let message = self.message();
        assert_eq!(self.status, 400, "{message}");
        assert_eq!(self.header("content-type"), Some("application/json"));
        assert_eq!(self.header("connection"), Some("close"));
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        assert_eq!(message["id"], Value::Null, "{message}");
        assert_eq!(message["error"]["code"], -32600, "{message}");
        let text = message["error"]["message"].as_str().unwrap();
        assert!(
            text.starts_with(&format!("header \"{header}\" holds byte {byte:#04x} ")),
            "{text}"
        );
    }
}

/// A 2025-11-25 `POST /mcp` with `headers` (whole lines) and `body`.
pub fn post(addr: &str, headers: &[u8], body: &[u8]) -> Vec<u8> {
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n"
    );
    let length = format!("content-length: {}\r\n\r\n", body.len());
    [head.as_bytes(), headers, length.as_bytes(), body].concat()
}

pub fn connect(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Writes `request` on a new connection and reads until the gateway closes it.
pub fn exchange(addr: &str, request: &[u8]) -> Vec<Answer> {
    exchange_and(addr, request, |_| {})
}

/// The same, the write side shut once `request` is written.
pub fn exchange_then_shut(addr: &str, request: &[u8]) -> Vec<Answer> {
    exchange_and(addr, request, |stream| {
        stream.shutdown(std::net::Shutdown::Write).unwrap()
    })
}

fn exchange_and(addr: &str, request: &[u8], then: impl FnOnce(&TcpStream)) -> Vec<Answer> {
    let mut stream = connect(addr);
    stream.write_all(request).unwrap();
    then(&stream);
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    answers(&bytes)
}

/// The answers `bytes` hold, which must be whole.
pub fn answers(bytes: &[u8]) -> Vec<Answer> {
    let (answers, rest) = parse(bytes);
    assert!(
        rest.is_empty(),
        "left over: {:?}",
        String::from_utf8_lossy(rest)
    );
    answers
}

/// Reads until `count` whole answers came on `stream`.
pub fn read_answers(stream: &mut TcpStream, count: usize) -> Vec<Answer> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut bytes = Vec::new();
    let mut chunk = [0; 8192];
    loop {
        let (answers, _) = parse(&bytes);
        if answers.len() >= count {
            return answers;
        }
        assert!(
            Instant::now() < deadline,
            "{:?}",
            String::from_utf8_lossy(&bytes)
        );
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// The whole answers in `bytes`, and what follows them.
fn parse(mut bytes: &[u8]) -> (Vec<Answer>, &[u8]) {
    let mut answers = Vec::new();
    while let Some((answer, rest)) = parse_one(bytes) {
        answers.push(answer);
        bytes = rest;
    }
    (answers, bytes)
}

fn parse_one(bytes: &[u8]) -> Option<(Answer, &[u8])> {
    let end = find(bytes, b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut answer = Answer {
        status,
        headers,
        body: Vec::new(),
    };
    let mut rest = &bytes[end + 4..];
    if answer.header("transfer-encoding") == Some("chunked") {
        loop {
            let line = find(rest, b"\r\n")?;
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).ok()?, 16).ok()?;
            rest = &rest[line + 2..];
            if size == 0 {
                return Some((answer, rest.strip_prefix(b"\r\n")?));
            }
            answer.body.extend_from_slice(rest.get(..size)?);
            rest = rest.get(size + 2..)?;
        }
    }
    let length = match answer.header("content-length") {
        Some(length) => length.parse().ok()?,
        None => rest.len(),
    };
    answer.body = rest.get(..length)?.to_vec();
    Some((answer, &rest[length..]))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// An HTTP/2 frame: type, flags, stream, payload.
pub struct Frame {
    pub kind: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = (payload.len() as u32).to_be_bytes();
    [&length[1..], &[kind, flags], &stream.to_be_bytes(), payload].concat()
}

/// The frames in `bytes` (a partial last one is left out).
pub fn frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while bytes.len() >= 9 {
        let length = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        let Some(payload) = bytes.get(9..9 + length) else {
            break;
        };
        frames.push(Frame {
            kind: bytes[3],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
            payload: payload.to_vec(),
        });
        bytes = &bytes[9 + length..];
    }
    frames
}

/// An HPACK literal field without indexing, its name the static table's `index`
/// (under 15) or, at 0, written out; no Huffman coding.
pub fn literal(index: u8, name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut field = vec![index];
    if index == 0 {
        field.push(name.len() as u8);
        field.extend_from_slice(name);
    }
    field.push(value.len() as u8);
    field.extend_from_slice(value);
    field
}
