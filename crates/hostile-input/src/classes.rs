//! Generating requests: the classes of hostile input, their weights, and how each
//! mutates a valid request.

use std::time::Duration;

use http::Method;
use mtg_protocol::headers::encode_value;
use serde_json::{Value, json};

use crate::case::Expect;
use crate::case::{Case, Context, End, HttpCase, RawCase, Rng};
use crate::{SESSION, STATELESS, TASKS_EXTENSION};

type Generator = fn(&Context, &mut Rng) -> Case;

/// The classes and their weights per 10,000 requests.
pub(crate) const CLASSES: &[(&str, u32, Generator)] = &[
    ("random bytes", 1200, random_bytes),
    ("mutated 2026-07-28 request", 2400, mutated_stateless),
    ("retyped 2026-07-28 request", 900, retyped_stateless),
    ("header mutations", 1500, header_mutations),
    ("bad Content-Type", 400, bad_content_type),
    ("wrong method or path", 600, wrong_method_or_path),
    ("mutated 2025-11-25 initialize", 600, mutated_initialize),
    ("arbitrary task ids", 600, task_ids),
    ("deep nesting", 200, deep_nesting),
    ("huge strings", 20, huge_strings),
    ("oversized body", 5, oversized),
    ("slow body", 10, slow_body),
    ("slow head (raw)", 5, slow_head),
    ("half-closed or aborted (raw)", 310, half_closed),
    ("garbage on the socket (raw)", 800, raw_garbage),
    ("broken HTTP/1.1 framing (raw)", 450, broken_framing),
    // Issue #43's classes.
    (
        "header bytes beyond ASCII",
        600,
        crate::revisions::header_bytes,
    ),
    (
        "contradictory revision signals",
        600,
        crate::revisions::contradictory_revisions,
    ),
];

/// The classes drawn: those `--class` names, else all.
pub(crate) fn drawn(
    only: Option<&str>,
) -> impl Iterator<Item = &'static (&'static str, u32, Generator)> + Clone {
    CLASSES
        .iter()
        .filter(move |(name, ..)| only.is_none_or(|only| name.contains(only)))
}

pub(crate) fn generate(context: &Context, index: u64) -> Case {
    let mut rng = Rng::for_case(context.seed, index);
    let classes = drawn(context.class.as_deref());
    let total: u32 = classes.clone().map(|c| c.1).sum();
    let mut roll = (rng.next_u64() % u64::from(total.max(1))) as u32;
    for (_, weight, generator) in classes {
        if roll < *weight {
            return generator(context, &mut rng);
        }
        roll -= weight;
    }
    random_bytes(context, &mut rng)
}

/// A valid 2026-07-28 request, its method and the value its `Mcp-Name` mirrors.
pub(crate) struct Stateless {
    pub(crate) body: Value,
    pub(crate) method: &'static str,
    pub(crate) name: Option<String>,
}

pub(crate) fn stateless(rng: &mut Rng) -> Stateless {
    let task_id = uuid_like(rng);
    let (method, params, name): (&'static str, Value, Option<String>) = match rng.below(12) {
        0..=2 => {
            let length = rng.below(40);
            let text = rng.text(length);
            (
                "tools/call",
                json!({"name": "echo", "arguments": {"text": text}}),
                Some("echo".into()),
            )
        }
        3 => (
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
            Some("no_such_tool".into()),
        ),
        4 => ("tools/list", json!({}), None),
        5 => ("tasks/get", json!({"taskId": task_id}), Some(task_id)),
        6 => ("tasks/cancel", json!({"taskId": task_id}), Some(task_id)),
        7 => (
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": {"input-0": {"action": "accept", "content": {}}}}),
            Some(task_id),
        ),
        8 => ("server/discover", json!({}), None),
        9 => ("ping", json!({}), None),
        10 => (
            "resources/read",
            json!({"uri": "file:///etc/hostname"}),
            Some("file:///etc/hostname".into()),
        ),
        _ => (
            "prompts/get",
            json!({"name": "greeting"}),
            Some("greeting".into()),
        ),
    };
    let mut params = params;
    // Only the tasks extension: elicitation, sampling and roots key upstream sessions,
    // which the campaign must not multiply by accident (docs/security.md).
    let capabilities = if rng.chance(60) {
        json!({"extensions": {TASKS_EXTENSION: {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "hostile_input", "version": "0"},
    });
    let id = if rng.chance(50) {
        json!(rng.next_u64() >> 12)
    } else {
        json!(format!("r-{}", rng.next_u64()))
    };
    Stateless {
        body: json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        method,
        name,
    }
}

fn uuid_like(rng: &mut Rng) -> String {
    let bytes = rng.bytes(16);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The standard headers of a stateless request, as a correct client sends them.
pub(crate) fn stateless_case(context: &Context, stateless: &Stateless, body: Vec<u8>) -> HttpCase {
    let mut case = HttpCase::post(context, body);
    case.header("mcp-protocol-version", STATELESS.as_bytes());
    case.header("mcp-method", stateless.method.as_bytes());
    if let Some(name) = &stateless.name {
        case.header("mcp-name", encode_value(name).as_bytes());
    }
    case
}

pub(crate) fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

fn random_bytes(context: &Context, rng: &mut Rng) -> Case {
    let n = rng.log_size(1, 64 * 1024);
    let mut body = match rng.below(4) {
        0 => rng.text(n).into_bytes(),
        _ => rng.bytes(n),
    };
    if rng.chance(30) {
        body.insert(0, b'{');
    }
    if rng.chance(5) {
        body.clear();
    }
    Case::http("random bytes", HttpCase::post(context, body)).expecting(Expect::ParseOrInvalid)
}

/// Byte-level damage: flips, insertions, deletions, duplicated runs, truncation.
fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    const STRUCTURAL: &[u8] = b"{}[]\",:\\ 0-.eEtfnu\x00\xff\xc3\x80";
    for _ in 0..1 + rng.below(4) {
        let len = bytes.len();
        let at = rng.below(len.max(1));
        let byte = if rng.chance(60) {
            *rng.pick(STRUCTURAL)
        } else {
            rng.next_u64() as u8
        };
        match rng.below(5) {
            0 if len > 0 => bytes[at] = byte,
            1 => bytes.insert(at.min(len), byte),
            2 if len > 0 => {
                bytes.remove(at);
            }
            3 => bytes.truncate(at),
            _ if len > 0 => {
                let end = (at + 1 + rng.below(24)).min(len);
                let copy = bytes[at..end].to_vec();
                bytes.splice(end..end, copy);
            }
            _ => {}
        }
    }
}

fn mutated_stateless(context: &Context, rng: &mut Rng) -> Case {
    let stateless = stateless(rng);
    let mut body = to_bytes(&stateless.body);
    mutate(rng, &mut body);
    Case::http(
        "mutated 2026-07-28 request",
        stateless_case(context, &stateless, body),
    )
}

/// Values a member may be replaced with.
fn junk(rng: &mut Rng) -> Value {
    match rng.below(14) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(1.5e308),
        4 => json!(u64::MAX),
        5 => json!(""),
        6 => json!(rng.text(64)),
        7 => json!([]),
        8 => json!({}),
        9 => json!({"nested": {"deeper": [1, {"x": null}]}}),
        10 => json!(format!("mtg1.{}.{}", rng.text(8), rng.text(8))),
        11 => json!("subscriptions/ignored"),
        12 => json!(i64::MIN),
        _ => json!(rng.text(2048)),
    }
}

/// Member-level damage: a member retyped or removed, or a duplicate key appended.
fn retyped_stateless(context: &Context, rng: &mut Rng) -> Case {
    const PATHS: &[&[&str]] = &[
        &["jsonrpc"],
        &["id"],
        &["method"],
        &["params"],
        &["params", "_meta"],
        &["params", "_meta", "io.modelcontextprotocol/protocolVersion"],
        &[
            "params",
            "_meta",
            "io.modelcontextprotocol/clientCapabilities",
        ],
        &[
            "params",
            "_meta",
            "io.modelcontextprotocol/clientCapabilities",
            "extensions",
        ],
        &["params", "_meta", "progressToken"],
        &["params", "_meta", "io.modelcontextprotocol/logLevel"],
        &["params", "_meta", "traceparent"],
        &["params", "name"],
        &["params", "arguments"],
        &["params", "taskId"],
        &["params", "inputResponses"],
        &["params", "requestState"],
        &["params", "task"],
    ];
    let stateless = stateless(rng);
    let mut body = stateless.body.clone();
    let path = *rng.pick(PATHS);
    let remove = rng.chance(25);
    let value = junk(rng);
    set_path(&mut body, path, if remove { None } else { Some(value) });
    let mut bytes = to_bytes(&body);
    if rng.chance(15) {
        // A second "method" or "id": JSON objects with duplicate keys.
        let key = *rng.pick(&["method", "id", "params", "jsonrpc"]);
        let extra = format!(",\"{key}\":{}", junk(rng));
        bytes.pop();
        bytes.extend_from_slice(extra.as_bytes());
        bytes.push(b'}');
    }
    Case::http(
        "retyped 2026-07-28 request",
        stateless_case(context, &stateless, bytes),
    )
}

fn set_path(value: &mut Value, path: &[&str], new: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = value;
    for key in parents {
        if !node.get(*key).is_some_and(Value::is_object) {
            node[*key] = json!({});
        }
        node = &mut node[*key];
    }
    let Some(object) = node.as_object_mut() else {
        return;
    };
    match new {
        Some(new) => {
            object.insert((*last).to_owned(), new);
        }
        None => {
            object.remove(*last);
        }
    }
}

fn header_mutations(context: &Context, rng: &mut Rng) -> Case {
    let stateless = stateless(rng);
    let mut case = stateless_case(context, &stateless, to_bytes(&stateless.body));
    let mut expect = Expect::Anything;
    for _ in 0..1 + rng.below(2) {
        if let Some(e) = mutate_headers(context, rng, &mut case) {
            expect = e;
        }
    }
    // A head over hyper's limits (100 headers, 400 KiB) is refused with 431 while the
    // client may still be writing it: the connection can end before the answer is read.
    let head: usize = case
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    let may_close = case.headers.len() > 100 || head > 64 * 1024;
    let mut case = Case::http("header mutations", case).expecting(expect);
    case.may_close = may_close;
    case
}

/// One header change; what the answer must then be, when that is certain.
fn mutate_headers(context: &Context, rng: &mut Rng, case: &mut HttpCase) -> Option<Expect> {
    const STANDARD: &[&str] = &["mcp-method", "mcp-name", "mcp-protocol-version"];
    let standard = *rng.pick(STANDARD);
    match rng.below(18) {
        0 => case.remove(standard),
        1 => {
            case.remove(standard);
            case.header(standard, rng.text(12).trim().as_bytes());
        }
        2 => {
            // A second copy, different from the first.
            case.header(standard, b"tools/list");
        }
        3 => {
            case.remove("mcp-name");
            case.header("mcp-name", format!("=?base64?{}?=", rng.text(8)).as_bytes());
        }
        4 => {
            let mut invalid = b"\xff\xfe".to_vec();
            invalid.extend(rng.bytes(6).into_iter().map(|b| b | 0x80));
            let name = *rng.pick(&[
                standard,
                "authorization",
                "mcp-session-id",
                "content-type",
                "traceparent",
                "origin",
            ]);
            if name == "authorization" {
                // Fixed, like every credential here: each distinct one is an upstream
                // session (measured by --spray instead).
                invalid = b"Bearer \xff\xfe".to_vec();
            }
            case.remove(name);
            case.header(name, &invalid);
        }
        5 => {
            // Values up to 1 MiB; hyper refuses heads over its buffer with 431.
            let size = rng.log_size(1024, 1024 * 1024);
            let name = *rng.pick(&["mcp-name", "x-junk", "cookie"]);
            case.header(name, &vec![b'a'; size]);
        }
        6 => {
            for i in 0..rng.log_size(20, 2000) {
                case.header(&format!("x-junk-{i}"), b"1");
            }
        }
        7 => {
            case.remove("mcp-protocol-version");
            let version = *rng.pick(&[
                "2030-01-01",
                "",
                " 2026-07-28 ",
                "2025-11-25",
                "2026-07-28, 2025-11-25",
                "1",
            ]);
            case.header("mcp-protocol-version", version.as_bytes());
        }
        8 => {
            case.header("origin", b"http://evil.example");
            return Some(Expect::Refused);
        }
        9 => {
            let origin = rng.text(10);
            case.header("origin", origin.trim().as_bytes());
        }
        10 => case.header("mcp-session-id", format!("{:x}", rng.next_u64()).as_bytes()),
        11 => case.header(
            "mcp-session-id",
            format!("mtg-t.{}", rng.text(6)).trim().as_bytes(),
        ),
        12 => {
            // A small fixed set of credentials: each distinct one is an upstream session.
            let token = *rng.pick(&["Bearer a", "Bearer b", "Basic Zm9vOmJhcg==", ""]);
            case.header("authorization", token.as_bytes());
        }
        13 => case.header(
            &format!("mcp-param-{}", rng.below(4)),
            rng.text(10).trim().as_bytes(),
        ),
        14 => {
            let parent = format!(
                "00-{:032x}-{:016x}-{:02x}",
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64() as u8
            );
            let value = if rng.chance(50) { parent } else { rng.text(40) };
            case.header("traceparent", value.trim().as_bytes());
            case.header("tracestate", rng.text(20).trim().as_bytes());
        }
        15 => {
            case.remove("accept");
            if rng.chance(50) {
                case.header("accept", rng.text(16).trim().as_bytes());
            }
        }
        16 => {
            case.remove("host");
            if rng.chance(50) {
                case.header(
                    "host",
                    format!("{}:{}", rng.text(8).trim(), context.addr.port()).as_bytes(),
                );
            }
        }
        _ => case.header("expect", b"100-continue"),
    }
    None
}

fn bad_content_type(context: &Context, rng: &mut Rng) -> Case {
    const TYPES: &[&[u8]] = &[
        b"text/plain",
        b"application/x-www-form-urlencoded",
        b"multipart/form-data; boundary=x",
        b"application/json; charset=utf-16",
        b"application/json, application/json",
        b"*/*",
        b"",
        b"\xff\xfe\xfd",
        b"application/jsonx",
    ];
    let stateless = stateless(rng);
    let mut case = stateless_case(context, &stateless, to_bytes(&stateless.body));
    case.remove("content-type");
    match rng.below(TYPES.len() + 2) {
        n if n < TYPES.len() => case.header("content-type", TYPES[n]),
        n if n == TYPES.len() => {}
        _ => case.header("content-type", &vec![b'j'; 8192]),
    }
    Case::http("bad Content-Type", case)
}

fn wrong_method_or_path(context: &Context, rng: &mut Rng) -> Case {
    const METHODS: &[&str] = &[
        "GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "BREW", "post", "POST",
    ];
    const PATHS: &[&str] = &[
        "/",
        "/mcp/",
        "/MCP",
        "/mcp?x=1",
        "/healthz",
        "/readyz",
        "/mcp/../mcp",
        "/%2e%2e/mcp",
        "/mcp%00",
        "/admin/tasks",
        "/metrics",
        "/mcp;a=b",
        "/mcp?%ff%00",
    ];
    let stateless = stateless(rng);
    let body = if rng.chance(50) {
        to_bytes(&stateless.body)
    } else {
        Vec::new()
    };
    let mut case = stateless_case(context, &stateless, body);
    let method = *rng.pick(METHODS);
    case.method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
    case.path = if rng.chance(3) {
        format!("/{}", "a".repeat(rng.log_size(100, 60_000)))
    } else {
        (*rng.pick(PATHS)).to_owned()
    };
    if case.method == Method::POST && case.path == "/mcp" {
        case.path = "/mcp/".into();
    }
    if rng.chance(20) {
        case.header("mcp-session-id", format!("{:x}", rng.next_u64()).as_bytes());
    }
    Case::http("wrong method or path", case)
}

fn mutated_initialize(context: &Context, rng: &mut Rng) -> Case {
    let capabilities = match rng.below(3) {
        0 => json!({}),
        1 => json!({"tasks": {"requests": {"tools": {"call": {}}}}}),
        _ => json!({"elicitation": {}, "roots": {"listChanged": true}}),
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": rng.below(1000),
        "method": "initialize",
        "params": {
            "protocolVersion": SESSION,
            "capabilities": capabilities,
            "clientInfo": {"name": "hostile_input", "version": "0"},
        }
    });
    let mut bytes = to_bytes(&body);
    // One in ten stays valid: a session opened upstream, as a real client would.
    if !rng.chance(10) {
        mutate(rng, &mut bytes);
    }
    let mut case = HttpCase::post(context, bytes);
    if rng.chance(50) {
        case.header("mcp-protocol-version", SESSION.as_bytes());
    }
    Case::http("mutated 2025-11-25 initialize", case)
}

/// Arbitrary strings as task ids, with the headers right: no task has them.
fn task_ids(context: &Context, rng: &mut Rng) -> Case {
    let task_id = match rng.below(8) {
        0 => String::new(),
        1 => {
            let length = rng.log_size(1, 64);
            rng.text(length)
        }
        2 => "a".repeat(rng.log_size(1024, 96 * 1024)),
        3 => "../../../etc/passwd".into(),
        4 => format!("=?base64?{}?=", rng.text(6)),
        5 => format!("{}\u{0}{}", uuid_like(rng), rng.text(3)),
        6 => format!("{{{}}}", uuid_like(rng)),
        _ => uuid_like(rng),
    };
    let method = *rng.pick(&["tasks/get", "tasks/cancel", "tasks/update"]);
    let mut params = json!({"taskId": task_id, "_meta": {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
    }});
    if method == "tasks/update" {
        params["inputResponses"] = json!({"input-0": {"action": "decline"}});
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let stateless = Stateless {
        body,
        method,
        name: Some(task_id),
    };
    let case = stateless_case(context, &stateless, to_bytes(&stateless.body));
    Case::http("arbitrary task ids", case).expecting(Expect::NoSuchTask)
}

fn deep_nesting(context: &Context, rng: &mut Rng) -> Case {
    let depth = rng.log_size(100, 400_000);
    let (open, close) = *rng.pick(&[("[", "]"), ("{\"a\":", "}")]);
    let nested = format!(
        "{}1{}",
        open.repeat(depth),
        if rng.chance(80) {
            close.repeat(depth)
        } else {
            String::new()
        }
    );
    let body = match rng.below(2) {
        0 => nested,
        _ => format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":{nested}}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{STATELESS}","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        ),
    };
    let mut case = HttpCase::post(context, body.into_bytes());
    case.header("mcp-protocol-version", STATELESS.as_bytes());
    case.header("mcp-method", b"tools/call");
    // Past serde_json's 128 levels nothing parses.
    let expect = if depth > 130 {
        Expect::ParseOrInvalid
    } else {
        Expect::Anything
    };
    Case::http("deep nesting", case).expecting(expect)
}

/// Strings of 16 KiB to 3.5 MiB, under the body limit, where a name, id or text goes.
fn huge_strings(context: &Context, rng: &mut Rng) -> Case {
    let size = rng
        .log_size(16 * 1024, 3584 * 1024)
        .min(context.max_body_bytes.saturating_sub(4096));
    let huge = if rng.chance(20) {
        "é".repeat(size / 2)
    } else {
        "x".repeat(size)
    };
    let mut stateless = stateless(rng);
    match rng.below(4) {
        0 => stateless.body["method"] = json!(huge),
        1 => stateless.body["id"] = json!(huge),
        2 => stateless.body["params"]["_meta"][huge.as_str()] = json!(1),
        _ => {
            stateless.body["params"]["name"] = json!("echo");
            stateless.body["params"]["arguments"] = json!({"text": huge});
            stateless.method = "tools/call";
            stateless.name = Some("echo".into());
        }
    }
    let case = stateless_case(context, &stateless, to_bytes(&stateless.body));
    Case::http("huge strings", case)
}

pub(crate) fn oversized(context: &Context, rng: &mut Rng) -> Case {
    let size = context.max_body_bytes + 1 + rng.below(64 * 1024);
    let mut case = HttpCase::post(context, Vec::new());
    case.body = context.filler.slice(..size.min(context.filler.len()));
    case.chunked = rng.chance(50);
    let mut case = Case::http("oversized body", case).expecting(Expect::TooLarge);
    // The gateway answers 413 before reading the rest; the client may see the
    // connection end while it still writes.
    case.may_close = true;
    case
}

fn slow_body(context: &Context, rng: &mut Rng) -> Case {
    let stateless = stateless(rng);
    let mut body = to_bytes(&stateless.body);
    if rng.chance(50) {
        mutate(rng, &mut body);
    }
    let mut case = stateless_case(context, &stateless, body);
    let chunk = 1 + rng.below(32);
    let pause = Duration::from_millis(2 + rng.below(20) as u64);
    case.dribble = Some((chunk, pause));
    Case::http("slow body", case)
}

/// A whole request whose head and body arrive a few bytes at a time.
fn slow_head(context: &Context, rng: &mut Rng) -> Case {
    let stateless = stateless(rng);
    let mut http = stateless_case(context, &stateless, to_bytes(&stateless.body));
    http.header("connection", b"close");
    let mut raw = RawCase::new(http.render(), End::Linger);
    raw.dribble = Some((
        8 + rng.below(64),
        Duration::from_millis(2 + rng.below(10) as u64),
    ));
    Case::raw("slow head (raw)", raw)
}

/// A request cut off in its head or body, then the write half shut (or the connection
/// reset).
fn half_closed(context: &Context, rng: &mut Rng) -> Case {
    let stateless = stateless(rng);
    let http = stateless_case(context, &stateless, to_bytes(&stateless.body));
    let mut bytes = http.render();
    if rng.chance(30) {
        // Promise far more than is sent.
        let text =
            String::from_utf8_lossy(&bytes).replacen("content-length: ", "content-length: 9", 1);
        bytes = text.into_bytes();
    }
    let cut = rng.below(bytes.len());
    bytes.truncate(cut);
    let end = if rng.chance(20) {
        End::Abort
    } else {
        End::HalfClose
    };
    Case::raw("half-closed or aborted (raw)", RawCase::new(bytes, end))
}

fn raw_garbage(_context: &Context, rng: &mut Rng) -> Case {
    let n = rng.log_size(1, 16 * 1024);
    let mut bytes = match rng.below(5) {
        0 => b"POST /mcp HTTP/1.1\r\n".to_vec(),
        1 => b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        2 => b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec(),
        _ => Vec::new(),
    };
    if rng.chance(50) {
        bytes.extend(rng.bytes(n));
    } else {
        bytes.extend(rng.text(n).into_bytes());
    }
    Case::raw(
        "garbage on the socket (raw)",
        RawCase::new(bytes, End::HalfClose),
    )
}

/// Requests a strict HTTP/1.1 parser must refuse, or read in exactly one way.
fn broken_framing(context: &Context, rng: &mut Rng) -> Case {
    let stateless = stateless(rng);
    let body = String::from_utf8(to_bytes(&stateless.body)).unwrap_or_default();
    let n = body.len();
    let host = context.host();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nMcp-Method: {}\r\nMCP-Protocol-Version: {STATELESS}\r\n",
        stateless.method
    );
    let text = match rng.below(20) {
        0 => format!(
            "{head}Content-Length: {n}\r\nContent-Length: {}\r\n\r\n{body}",
            n + 5
        ),
        1 => format!(
            "{head}Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n\r\n{n:x}\r\n{body}\r\n0\r\n\r\n"
        ),
        2 => format!("{head}Transfer-Encoding: chunked\r\n\r\nzz\r\n{body}\r\n0\r\n\r\n"),
        3 => format!(
            "{head}Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n{body}\r\n0\r\n\r\n"
        ),
        4 => format!(
            "{head}Transfer-Encoding: chunked\r\n\r\n{n:x};{}\r\n{body}\r\n0\r\n\r\n",
            "e".repeat(rng.log_size(1, 100_000))
        ),
        5 => format!("{head}Content-Length: -1\r\n\r\n{body}"),
        6 => format!("{head}Content-Length: 1e3\r\n\r\n{body}"),
        7 => format!("{head}Content-Length: {n}\r\n\r\n{body}").replace("\r\n", "\n"),
        8 => format!("{head}Broken header line\r\nContent-Length: {n}\r\n\r\n{body}"),
        9 => format!("{head}Content-Length : {n}\r\n\r\n{body}"),
        10 => format!("{head}X-Folded: a\r\n b\r\nContent-Length: {n}\r\n\r\n{body}"),
        11 => format!("{head}X-Nul: a\0b\r\nContent-Length: {n}\r\n\r\n{body}"),
        12 => format!("POST /mcp HTTP/9.9\r\nHost: {host}\r\nContent-Length: {n}\r\n\r\n{body}"),
        13 => format!(
            "POST http://evil.example/mcp HTTP/1.1\r\nHost: evil.example\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n{body}"
        ),
        14 => format!(
            "POST /{} HTTP/1.1\r\nHost: {host}\r\n\r\n",
            "p".repeat(rng.log_size(1000, 200_000))
        ),
        15 => format!("{head}Content-Length: {n}\r\nConnection: close\r\n\r\n{body}")
            .replacen("POST", "post", 1),
        16 => format!(
            "{head}Content-Length: {n}\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings, close\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n{body}"
        ),
        17 => format!(
            "{head}Content-Length: {n}\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n{body}"
        ),
        18 => {
            // Pipelined: two whole requests, then the end.
            let one = format!("{head}Content-Length: {n}\r\n\r\n{body}");
            format!("{one}{one}")
        }
        _ => format!("POST /mcp HTTP/1.0\r\nContent-Length: {n}\r\n\r\n{body}"),
    };
    Case::raw(
        "broken HTTP/1.1 framing (raw)",
        RawCase::new(text.into_bytes(), End::Linger),
    )
}
