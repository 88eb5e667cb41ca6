//! Issue #43's two classes: header values with bytes beyond visible ASCII (what HTTP
//! permits must never come back as the upstream's failure; what it forbids is refused
//! with a 400 and -32600 naming the header), and requests whose revision signals disagree (`MCP-Protocol-Version`,
//! the `_meta` version, `Mcp-Session-Id`, the method), whose answer must be of the one
//! generation the rule in ARCHITECTURE.md ("The generation") names, never a mix.

use serde_json::{Value, json};

use crate::case::{Answering, Case, Context, End, Expect, HttpCase, RawCase, Rng};
use crate::{SESSION, STATELESS, TASKS_EXTENSION};

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// The headers a pass-through or bridged request carries upstream, and a few the
/// gateway reads itself.
const FORWARDED: &[&str] = &[
    "authorization",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "accept",
    "user-agent",
    "traceparent",
    "tracestate",
    "x-request-id",
    "last-event-id",
    "cookie",
    "accept-language",
];

/// `Authorization` values beyond visible ASCII: a fixed few, so that upstream sessions
/// (keyed by credential) are not multiplied (docs/security.md, Findings 1).
const OBS_TEXT_CREDENTIALS: &[&[u8]] = &[
    b"Bearer \xff\xfe",
    b"Bearer caf\xe9\ttoken",
    b"Basic \x80\x81\x82==",
    b"Bearer \xc3\xa9l\xc3\xa8ve",
];

/// A value HTTP/1.1 permits (RFC 9110 §5.5): visible ASCII, SP, HTAB, obs-text.
fn permitted_value(rng: &mut Rng) -> Vec<u8> {
    let length = rng.log_size(1, 2048);
    let mut value: Vec<u8> = (0..length)
        .map(|_| match rng.below(4) {
            0 => 0x80 + rng.below(0x80) as u8,
            1 => *rng.pick(b" \t"),
            _ => b'!' + rng.below(94) as u8,
        })
        .collect();
    // Leading and trailing whitespace is not part of a field value.
    while value.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
        value.remove(0);
    }
    while value.last().is_some_and(|b| *b == b' ' || *b == b'\t') {
        value.pop();
    }
    if value.is_empty() {
        value.push(0xff);
    }
    value
}

/// A byte HTTP forbids in a field value: NUL, the other controls but HTAB, DEL.
fn forbidden_byte(rng: &mut Rng) -> u8 {
    match rng.below(4) {
        0 => 0,
        1 => 0x7f,
        _ => loop {
            let b = rng.below(0x20) as u8;
            if b != b'\t' && b != b'\n' && b != b'\r' {
                break b;
            }
        },
    }
}

/// A request of one of the two generations, as a client of it sends it.
fn request(context: &Context, rng: &mut Rng, session: bool) -> HttpCase {
    let method = *rng.pick(&["tools/list", "tasks/get", "ping"]);
    let body = if session {
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"taskId": "t-1"}})
    } else {
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"taskId": "t-1", "_meta": {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
        }}})
    };
    let mut case = HttpCase::post(context, to_bytes(&body));
    if session {
        case.header("mcp-protocol-version", SESSION.as_bytes());
        if let Some(id) = &context.session {
            case.header("mcp-session-id", id.as_bytes());
        }
    } else {
        case.header("mcp-protocol-version", STATELESS.as_bytes());
        case.header("mcp-method", method.as_bytes());
        if method == "tasks/get" {
            case.header("mcp-name", b"t-1");
        }
    }
    case
}

/// Bytes beyond visible ASCII in every forwarded header, on pass-through session
/// traffic (the pinned socket) and on 2026-07-28 requests (the gateway's own calls:
/// the HTTP/1.1 pool, or HTTP/2 with `--upstream-http2`). Permitted bytes go through
/// hyper's client and must get a well-formed answer that is not a 5xx (nothing the
/// client sent is the upstream's failure); forbidden ones go raw and must get the
/// gateway's 400 with -32600 naming the header (hyper's own was a bare 400).
pub(crate) fn header_bytes(context: &Context, rng: &mut Rng) -> Case {
    const CLASS: &str = "header bytes beyond ASCII";
    let session = rng.chance(50);
    let mut case = request(context, rng, session);
    let header = *rng.pick(FORWARDED);
    if rng.chance(75) {
        let value = match header {
            "authorization" => rng.pick(OBS_TEXT_CREDENTIALS).to_vec(),
            _ => permitted_value(rng),
        };
        case.remove(header);
        case.header(header, &value);
        return Case::http(CLASS, case).expecting(Expect::NotTheUpstreamsFault);
    }
    // A forbidden byte somewhere in the value: only raw bytes can carry it.
    let mut value = permitted_value(rng);
    let at = rng.below(value.len() + 1);
    value.insert(at, forbidden_byte(rng));
    case.remove(header);
    let mut wire = case.render();
    let end = wire
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(wire.len(), |p| p + 2);
    let mut line = header.as_bytes().to_vec();
    line.extend_from_slice(b": ");
    line.extend_from_slice(&value);
    line.extend_from_slice(b"\r\n");
    wire.splice(end..end, line);
    let mut case =
        Case::raw(CLASS, RawCase::new(wire, End::Linger)).expecting(Expect::HeadRefused(header));
    case.may_close = false;
    case
}

/// What the rule gives a request with these signals (ARCHITECTURE.md, "The generation").
fn rule(header: Option<&str>, meta: &Option<Value>, session: u8) -> Answering {
    match meta.as_ref().and_then(Value::as_str) {
        Some(STATELESS) => match header.map(str::trim) {
            Some(STATELESS) => Answering::Stateless,
            _ => Answering::Refused(-32020),
        },
        Some(_) => Answering::Refused(-32022),
        None => match header.map(str::trim) {
            Some(STATELESS) => Answering::Refused(-32602),
            Some(v) if !(v.starts_with("2024-") || v.starts_with("2025-")) => {
                Answering::Refused(-32022)
            }
            _ => match session {
                0 => Answering::NoSession,
                1 => Answering::Session,
                _ => Answering::UnknownSession,
            },
        },
    }
}

/// Contradictory revision signals: every combination of header, `_meta` version
/// (also a non-string, and the key written with JSON escapes), session id (none, the
/// campaign's real session, ids no session has) and method. The answer must be of the
/// generation the rule names: 2026-07-28 (`resultType` on a result, never 404), the
/// session's (no `resultType`), 404 for a session no one has, or the rule's refusal.
pub(crate) fn contradictory_revisions(context: &Context, rng: &mut Rng) -> Case {
    const CLASS: &str = "contradictory revision signals";
    let header = *rng.pick(&[
        None,
        Some(STATELESS),
        Some(SESSION),
        Some("2025-06-18"),
        Some("2024-11-05"),
        Some("2099-01-01"),
    ]);
    let meta = rng
        .pick(&[
            None,
            Some(json!(STATELESS)),
            Some(json!(SESSION)),
            Some(json!("2030-01-01")),
            Some(json!(20260728)),
        ])
        .clone();
    let session = match context.session {
        Some(_) => rng.below(3) as u8,
        None => *rng.pick(&[0u8, 2]),
    };
    let method = *rng.pick(&["tasks/get", "tools/list", "tasks/cancel"]);
    let mut params = json!({"taskId": format!("t-{}", rng.next_u64())});
    if let Some(version) = &meta {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
        });
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let key = "io.modelcontextprotocol/protocolVersion";
    let written = match rng.below(4) {
        0 => key.replace('/', "\\/"),
        1 => format!("\\u0069{}", &key[1..]),
        _ => key.to_owned(),
    };
    let text = body.to_string().replace(key, &written);
    let mut case = HttpCase::post(context, text.into_bytes());
    if let Some(version) = header {
        case.header("mcp-protocol-version", version.as_bytes());
    }
    case.header("mcp-method", method.as_bytes());
    if method != "tools/list" {
        let id = params["taskId"].as_str().unwrap_or_default().to_owned();
        case.header("mcp-name", id.as_bytes());
    }
    match session {
        1 => {
            if let Some(id) = &context.session {
                case.header("mcp-session-id", id.as_bytes());
            }
        }
        2 => {
            let bogus = match rng.below(3) {
                0 => "../..".to_owned(),
                1 => "x".repeat(5000),
                _ => format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64()),
            };
            case.header("mcp-session-id", bogus.as_bytes());
        }
        _ => {}
    }
    let expected = rule(header, &meta, session);
    Case::http(CLASS, case).expecting(Expect::Answering(expected))
}
