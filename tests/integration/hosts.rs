//! A real host through the gateway: Gemini CLI (`@google/gemini-cli`, pinned by
//! tests/package-lock.json, run unchanged in headless mode, `gemini -p`), with the
//! gateway as its MCP server over Streamable HTTP and a stand-in for its model API on
//! loopback (tests/fixtures/stand_in_model.py) that plays the model's turns: it calls
//! the upstream's 90 s tool, reads each tool result the host feeds it, makes the call
//! the words ask for, and ends with a text turn quoting the last result.
//!
//! The host gives an MCP tool call 60 s (`timeout` of its server entry), so the 90 s call
//! reaches it only through the gateway's deferred results (`--defer-after-ms 20000`).
//! Every host feature that reaches beyond the machine is switched off, and the host runs
//! under `strace`: the test fails if it connected anywhere but loopback or looked up a
//! name.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::mrtr::python;
use crate::common::*;

/// How long the host may take in all: the 90 s tool and the turns around it.
const HOST_DEADLINE: Duration = Duration::from_secs(170);

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory of the test's own, removed when the test passed.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mtg-{name}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The stand-in model: its process, base URL, port, and the file it logs requests to.
fn start_stand_in_model(
    dir: &Path,
    first_tool: &str,
    first_args: &Value,
) -> (Proc, String, PathBuf) {
    let log = dir.join("model-requests.jsonl");
    let mut command = Command::new(python());
    command
        .arg(repo_root().join("tests/fixtures/stand_in_model.py"))
        .arg("--log")
        .arg(&log)
        .args(["--first-tool", first_tool])
        .args(["--first-args", &first_args.to_string()]);
    let (proc, url) = spawn_announcing("stand-in model", command);
    (proc, url, log)
}

/// The addresses of the sockets in one line of `strace` output (`connect`, `sendto`,
/// `sendmsg`): each `inet_addr("…")` and `inet_pton(AF_INET6, "…", …)`.
fn inet_addresses(line: &str) -> Vec<&str> {
    let mut addresses = Vec::new();
    for marker in ["inet_addr(\"", "inet_pton(AF_INET6, \""] {
        let mut rest = line;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let end = rest.find('"').unwrap_or(rest.len());
            addresses.push(&rest[..end]);
            rest = &rest[end..];
        }
    }
    addresses
}

fn is_loopback(address: &str) -> bool {
    address.starts_with("127.") || address == "::1" || address.starts_with("::ffff:127.")
}

/// The lines of an `strace -e trace=connect,sendto,sendmsg,sendmmsg` log that show a
/// contact beyond loopback: an IPv4/IPv6 socket address that is not loopback (or that
/// could not be read), anything to port 53, or a name lookup through nscd or
/// systemd-resolved. Unix sockets and netlink are local.
fn outside_contacts(trace: &str) -> Vec<&str> {
    trace
        .lines()
        .filter(|line| {
            let lookup = line.contains("sun_path=\"")
                && (line.contains("nscd") || line.contains("/resolve/"));
            if !line.contains("sa_family=AF_INET") {
                return lookup;
            }
            let addresses = inet_addresses(line);
            lookup
                || addresses.is_empty()
                || addresses.iter().any(|a| !is_loopback(a))
                || line.contains("port=htons(53)")
        })
        .collect()
}

/// What the stand-in model logged: one JSON value a request.
fn model_requests(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The text of every tool result (`functionResponse`) in the conversation the host sent.
fn fed_tool_results(request: &Value) -> Vec<String> {
    let mut texts = Vec::new();
    for content in request["body"]["contents"].as_array().into_iter().flatten() {
        for part in content["parts"].as_array().into_iter().flatten() {
            if let Some(response) = part.get("functionResponse") {
                texts.push(response["response"].to_string());
            }
        }
    }
    texts
}

fn wait_with_deadline(host: &mut Proc, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = host.child.try_wait().expect("the host's status") {
            return status;
        }
        assert!(
            started.elapsed() < limit,
            "the host did not finish within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The issue's case with a real host: Gemini CLI waits 60 s for an MCP tool call; the
/// upstream's `sleep` works 90 s; the gateway defers after 20 s; the model (the
/// stand-in) follows the deferred result's words through `get_task_result` until the
/// upstream's own result comes, and the host talked to nothing but loopback.
#[test]
fn gemini_cli_gets_a_90_s_tools_result_through_deferred_results_on_loopback_only() {
    let gemini = repo_root().join("tests/node_modules/@google/gemini-cli/bundle/gemini.js");
    assert!(
        gemini.exists(),
        "run `npm ci --prefix tests` first ({} is missing)",
        gemini.display()
    );
    let scratch = Scratch::new("gemini-cli");
    let dir = &scratch.0;

    let (_upstream, upstream_url) = start_plain_server();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "20000"]);
    let first_args = json!({"ms": 90000, "steps": 0});
    let (_model, model_url, model_log) = start_stand_in_model(dir, "sleep", &first_args);

    // The host's own home: its settings, and nothing of the machine's user.
    let home = dir.join("home");
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    let settings = json!({
        "security": {
            "auth": {"selectedType": "gemini-api-key"},
            "folderTrust": {"enabled": false},
        },
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "ide": {"enabled": false},
        "tools": {"useRipgrep": false},
        "model": {"name": "gemini-2.5-flash"},
        "mcpServers": {
            "gw": {"httpUrl": url, "timeout": 60000, "trust": true},
        },
    });
    std::fs::write(
        home.join(".gemini/settings.json"),
        serde_json::to_vec_pretty(&settings).unwrap(),
    )
    .unwrap();

    let trace = dir.join("connect.strace");
    let stdout = dir.join("host.stdout");
    let stderr = dir.join("host.stderr");
    let mut command = Command::new("strace");
    command
        .args(["-f", "-qq", "--seccomp-bpf", "-s", "64"])
        .args(["-e", "trace=connect,sendto,sendmsg,sendmmsg"])
        .arg("-o")
        .arg(&trace)
        .arg("node")
        .arg(&gemini)
        .args(["-p", "Run the tool sleep and tell me its result."])
        .current_dir(&workspace)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GEMINI_API_KEY", "stand-in")
        .env("GOOGLE_GEMINI_BASE_URL", &model_url)
        .env("GEMINI_TELEMETRY_ENABLED", "false")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap());
    let started = Instant::now();
    let mut host = Proc::spawn(command, "gemini-cli").expect("strace and node run");
    let status = wait_with_deadline(&mut host, HOST_DEADLINE);
    let elapsed = started.elapsed();
    let out = std::fs::read_to_string(&stdout).unwrap_or_default();
    let err = std::fs::read_to_string(&stderr).unwrap_or_default();
    let requests = model_requests(&model_log);
    let context = format!(
        "host exit {status:?} after {elapsed:?}\nstdout:\n{out}\nstderr:\n{err}\nmodel log: {}",
        model_log.display()
    );
    assert!(status.success(), "{context}");

    // The model's turns as the stand-in played them.
    let turns: Vec<&Value> = requests
        .iter()
        .filter(|r| r["turn"].is_object() && r["turn"]["side"] != true)
        .map(|r| &r["turn"])
        .collect();
    let calls: Vec<(&str, &Value)> = turns
        .iter()
        .filter_map(|t| Some((t["call"][0].as_str()?, &t["call"][1])))
        .collect();
    assert!(
        calls
            .first()
            .is_some_and(|(name, args)| name.ends_with("sleep") && **args == first_args),
        "turn 1 is not the 90 s call: {turns:#?}\n{context}"
    );
    assert!(
        calls.len() >= 2
            && calls[1..]
                .iter()
                .all(|(name, _)| name.ends_with("get_task_result")),
        "the model did not follow the deferred result's words: {turns:#?}\n{context}"
    );
    let last = *turns.last().expect("a model turn");
    assert_eq!(last["final"], true, "no final turn: {turns:#?}\n{context}");
    let read = last["read"].as_str().unwrap_or_default();
    assert!(
        read.contains("slept 90000 ms"),
        "the last tool result fed to the model: {read:?}\n{context}"
    );
    assert!(out.contains("slept 90000 ms"), "{context}");

    // The host passed the deferred result's content text to the model, not only its
    // structuredContent: the words are in the tool results it fed the model.
    let fed: Vec<String> = requests.iter().flat_map(fed_tool_results).collect();
    assert!(
        fed.iter()
            .any(|t| t.contains("is still running") && t.contains("get_task_result")),
        "no deferred result's words among the tool results fed to the model: {fed:#?}"
    );
    // The upstream ran the tool once; the gateway answered get_task_result itself.
    let stats = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(upstream_stats(&upstream_url));
    assert_eq!(stats["callsStarted"], 1, "{stats}");
    assert!(elapsed >= Duration::from_secs(90), "{context}");

    // Loopback only: the trace saw the host reach the gateway and the stand-in model,
    // and nothing else.
    let trace = std::fs::read_to_string(&trace).expect("the strace log");
    let gateway_port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    let model_port = model_url.rsplit(':').next().unwrap();
    for port in [gateway_port, model_port] {
        assert!(
            trace.contains(&format!("port=htons({port})")),
            "the trace shows no connect to port {port}: is strace tracing the host?\n{trace}"
        );
    }
    let outside = outside_contacts(&trace);
    assert!(
        outside.is_empty(),
        "the host reached beyond loopback:\n{}",
        outside.join("\n")
    );
}

#[test]
fn outside_contacts_reads_strace_lines() {
    let trace = r#"301 connect(21, {sa_family=AF_INET, sin_port=htons(44801), sin_addr=inet_addr("127.0.0.1")}, 16) = -1 EINPROGRESS (Operation now in progress)
301 connect(22, {sa_family=AF_INET6, sin6_port=htons(8080), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0
301 connect(23, {sa_family=AF_UNIX, sun_path="/tmp/x.sock"}, 110) = 0
301 sendto(20, [{nlmsg_len=20, nlmsg_type=RTM_GETADDR}], 20, 0, {sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}, 12) = 20
302 connect(20, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT (No such file or directory)
302 connect(20, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0
302 connect(24, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("127.0.0.53")}, 16) = 0
303 connect(25, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), sin6_scope_id=0}, 28) = -1 ENETUNREACH
303 connect(26, {sa_family=AF_INET, sin_port=htons(443), sin_addr=inet_addr("142.250.1.1")}, 16 <unfinished ...>
"#;
    let outside = outside_contacts(trace);
    assert_eq!(outside.len(), 5, "{outside:#?}");
    assert!(
        outside
            .iter()
            .all(|l| !l.contains("44801") && !l.contains("\"::1\""))
    );
}
