//! What a request is: its bytes, how they go on the wire and what the answer must be;
//! the seeded random numbers every request is drawn from.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};

use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;

use http_body_util::combinators::UnsyncBoxBody;

/// The body of every request the campaign sends.
pub(crate) type ReqBody = UnsyncBoxBody<Bytes, Infallible>;

/// splitmix64: every request is a pure function of the seed and its index.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn for_case(seed: u64, index: u64) -> Self {
        let mut rng = Rng(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        rng.next_u64();
        rng
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Sizes spread evenly over orders of magnitude.
    pub(crate) fn log_size(&mut self, low: usize, high: usize) -> usize {
        let (low, high) = ((low.max(1)) as f64, high as f64);
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (low * (high / low).powf(unit)) as usize
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// Text with what trips parsers: quotes, escapes, controls, non-ASCII, lone `%`.
    pub(crate) fn text(&mut self, n: usize) -> String {
        const PIECES: &[&str] = &[
            "a",
            "Z",
            "0",
            " ",
            "\"",
            "\\",
            "/",
            "\t",
            "\n",
            "\u{0}",
            "\u{7f}",
            "é",
            "世",
            "🦀",
            "\u{feff}",
            "\u{202e}",
            "%",
            "%00",
            "=?base64?",
            "?=",
            "{",
            "]",
            ",",
        ];
        (0..n).map(|_| *self.pick(PIECES)).collect()
    }
}

/// What every generated request needs to know.
pub(crate) struct Context {
    pub(crate) addr: SocketAddr,
    pub(crate) seed: u64,
    pub(crate) max_body_bytes: usize,
    /// Bytes to slice oversized bodies from, made once.
    pub(crate) filler: Bytes,
    /// A pass-through session opened through the gateway before the campaign, for
    /// requests that need a real one.
    pub(crate) session: Option<String>,
    /// `--class`: only the classes whose name holds this are drawn.
    pub(crate) class: Option<String>,
}

impl Context {
    pub(crate) fn new(addr: SocketAddr, seed: u64, max_body_bytes: usize) -> Self {
        Self {
            addr,
            seed,
            max_body_bytes,
            filler: Bytes::from(vec![b'x'; max_body_bytes + 128 * 1024]),
            session: None,
            class: None,
        }
    }

    pub(crate) fn host(&self) -> String {
        self.addr.to_string()
    }
}

/// One request: its class, its bytes, and what its answer must be.
pub(crate) struct Case {
    pub(crate) class: &'static str,
    pub(crate) wire: Wire,
    pub(crate) expect: Expect,
    /// The connection may end without a response (broken framing, cut-off requests,
    /// bodies the gateway stops reading).
    pub(crate) may_close: bool,
}

impl Case {
    pub(crate) fn http(class: &'static str, http: HttpCase) -> Self {
        Self {
            class,
            wire: Wire::Http(http),
            expect: Expect::Anything,
            may_close: false,
        }
    }

    pub(crate) fn raw(class: &'static str, raw: RawCase) -> Self {
        Self {
            class,
            wire: Wire::Raw(raw),
            expect: Expect::Anything,
            may_close: true,
        }
    }

    pub(crate) fn expecting(mut self, expect: Expect) -> Self {
        self.expect = expect;
        self
    }

    pub(crate) fn is_head(&self) -> bool {
        match &self.wire {
            Wire::Http(http) => http.method == Method::HEAD,
            Wire::Raw(raw) => raw.head_request,
        }
    }

    /// JSON answers elsewhere (`/readyz`) are not JSON-RPC.
    pub(crate) fn path_is_mcp(&self) -> bool {
        match &self.wire {
            Wire::Http(http) => http.path.starts_with("/mcp"),
            Wire::Raw(_) => true,
        }
    }

    /// The bytes as they go on the wire (an HTTP case as HTTP/1.1 text), to reproduce it.
    pub(crate) fn render(&self) -> Vec<u8> {
        match &self.wire {
            Wire::Raw(raw) => raw.bytes.clone(),
            Wire::Http(http) => http.render(),
        }
    }
}

pub(crate) enum Wire {
    Http(HttpCase),
    Raw(RawCase),
}

pub(crate) struct HttpCase {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Bytes,
    /// Send the body in pieces of this size with this pause between them.
    pub(crate) dribble: Option<(usize, Duration)>,
    /// Send the body with chunked encoding instead of a Content-Length.
    pub(crate) chunked: bool,
}

impl HttpCase {
    pub(crate) fn post(context: &Context, body: Vec<u8>) -> Self {
        let mut case = Self {
            method: Method::POST,
            path: "/mcp".into(),
            headers: Vec::new(),
            body: Bytes::from(body),
            dribble: None,
            chunked: false,
        };
        case.header("host", context.host().as_bytes());
        case.header("content-type", b"application/json");
        case.header("accept", b"application/json, text/event-stream");
        case
    }

    pub(crate) fn header(&mut self, name: &str, value: &[u8]) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            self.headers.push((name, value));
        }
    }

    pub(crate) fn remove(&mut self, name: &str) {
        self.headers.retain(|(n, _)| n.as_str() != name);
    }

    pub(crate) fn request(&self) -> Result<Request<ReqBody>, http::Error> {
        let mut builder = Request::builder()
            .method(self.method.clone())
            .uri(self.path.as_str());
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        if !self.chunked && self.dribble.is_some() {
            builder = builder.header("content-length", self.body.len());
        }
        builder.body(self.body())
    }

    /// A whole body gets a Content-Length from hyper; a dribbled or chunked one is a
    /// stream of frames.
    fn body(&self) -> ReqBody {
        let stream = match (self.dribble, self.chunked) {
            (None, false) => return Full::new(self.body.clone()).boxed_unsync(),
            (None, true) => (self.body.len().max(1), Duration::ZERO),
            (Some(dribble), _) => dribble,
        };
        let pieces: Vec<Bytes> = self
            .body
            .chunks(stream.0.max(1))
            .map(|piece| self.body.slice_ref(piece))
            .collect();
        let pause = stream.1;
        let frames =
            futures_util::stream::unfold(pieces.into_iter(), move |mut pieces| async move {
                let piece = pieces.next()?;
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                Some((Ok::<_, Infallible>(Frame::data(piece)), pieces))
            });
        StreamBody::new(frames).boxed_unsync()
    }

    pub(crate) fn render(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.path).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if self.chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        } else if !self.body.is_empty() || self.method == Method::POST {
            out.extend_from_slice(format!("content-length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

pub(crate) struct RawCase {
    pub(crate) bytes: Vec<u8>,
    pub(crate) end: End,
    pub(crate) dribble: Option<(usize, Duration)>,
    /// Starts with the HTTP/2 preface: the answer is frames, not HTTP/1.1.
    pub(crate) h2: bool,
    pub(crate) head_request: bool,
}

impl RawCase {
    pub(crate) fn new(bytes: Vec<u8>, end: End) -> Self {
        let h2 = bytes.starts_with(b"PRI * HTTP/2.0");
        let head_request = bytes.starts_with(b"HEAD ");
        Self {
            bytes,
            end,
            dribble: None,
            h2,
            head_request,
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) enum End {
    /// Shut down the write half: the gateway sees the end of the request stream.
    HalfClose,
    /// Reset the connection without reading (SO_LINGER 0).
    Abort,
    /// Wait a moment for the answer (the bytes ask for `Connection: close`), then shut
    /// down the write half for requests the gateway still waits on.
    Linger,
}

/// What a class promises beyond well-formedness.
#[derive(Clone, Copy)]
pub(crate) enum Expect {
    Anything,
    /// Not JSON-RPC at all (random bytes, nesting past the limit): 400 and one of these.
    ParseOrInvalid,
    /// A body over the limit.
    TooLarge,
    /// A task id no task has, with matching headers.
    NoSuchTask,
    /// Some 4xx: the request is refused.
    Refused,
    /// A head the gateway refuses before hyper reads it (#43): 400, -32600, the message
    /// naming this header.
    HeadRefused(&'static str),
    /// Anything well-formed but a 5xx or -32603: what the client sent is never the
    /// upstream's (or the gateway's) failure.
    NotTheUpstreamsFault,
    /// The answer of one generation, as the rule names it.
    Answering(Answering),
}

/// Who must answer a request whose revision signals disagree: a generation, or a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answering {
    /// 2026-07-28: HTTP 200; a result carries `resultType`.
    Stateless,
    /// The campaign's real session: no `resultType`, not 404, not 5xx.
    Session,
    /// A session id no session has: 404.
    UnknownSession,
    /// Session traffic without a session id: a 4xx, no `resultType`.
    NoSession,
    /// HTTP 400 with this code.
    Refused(i64),
}

impl Expect {
    pub(crate) fn check(self, status: u16, codes: &[Option<i64>]) -> Result<(), String> {
        let ok = match self {
            Expect::Anything => true,
            Expect::ParseOrInvalid => status == 400 && matches!(codes, [Some(-32700 | -32600)]),
            Expect::TooLarge => status == 413,
            Expect::NoSuchTask => status == 200 && matches!(codes, [Some(-32602)]),
            Expect::Refused => (400..500).contains(&status),
            Expect::HeadRefused(_) => status == 400 && codes == [Some(-32600)],
            Expect::NotTheUpstreamsFault => status < 500 && !codes.contains(&Some(-32603)),
            Expect::Answering(generation) => match generation {
                Answering::Stateless => status == 200,
                Answering::Session => status < 500 && status != 404,
                Answering::UnknownSession => status == 404,
                Answering::NoSession => (400..500).contains(&status),
                Answering::Refused(code) => status == 400 && codes == [Some(code)],
            },
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "expected {}, got HTTP {status} with {codes:?}",
                self.describe()
            ))
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Expect::Anything => "anything well-formed",
            Expect::ParseOrInvalid => "400 with -32700 or -32600",
            Expect::TooLarge => "413",
            Expect::NoSuchTask => "200 with -32602",
            Expect::Refused => "a 4xx",
            Expect::HeadRefused(_) => "400 with -32600 naming the header",
            Expect::NotTheUpstreamsFault => "no 5xx and no -32603",
            Expect::Answering(Answering::Stateless) => "a 2026-07-28 answer (200)",
            Expect::Answering(Answering::Session) => "the session's answer",
            Expect::Answering(Answering::UnknownSession) => "404 (no such session)",
            Expect::Answering(Answering::NoSession) => "a 4xx (no session)",
            Expect::Answering(Answering::Refused(_)) => "400 with the rule's code",
        }
    }

    /// The error of a JSON-RPC answer: a refused head's names its header.
    pub(crate) fn check_error(self, error: &serde_json::Value) -> Result<(), String> {
        let Expect::HeadRefused(name) = self else {
            return Ok(());
        };
        let message = error["message"].as_str().unwrap_or_default();
        if message.starts_with(&format!("header \"{name}\" holds byte ")) {
            Ok(())
        } else {
            Err(format!(
                "a refusal that does not name {name:?}: {message:?}"
            ))
        }
    }

    /// The shape of a result: `resultType` exactly on 2026-07-28 answers.
    pub(crate) fn check_result(self, result: &serde_json::Value) -> Result<(), String> {
        let Expect::Answering(generation) = self else {
            return Ok(());
        };
        let stateless = result.get("resultType").is_some();
        let session_shaped = result.get("ttl").is_some() || result.get("pollInterval").is_some();
        match generation {
            Answering::Stateless if !stateless || session_shaped => {
                Err(format!("a 2026-07-28 request got another shape: {result}"))
            }
            Answering::Session | Answering::NoSession | Answering::UnknownSession if stateless => {
                Err(format!("session traffic got a 2026-07-28 shape: {result}"))
            }
            _ => Ok(()),
        }
    }
}
