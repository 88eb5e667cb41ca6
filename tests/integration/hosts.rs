//! A real host through the gateway: Gemini CLI (`@google/gemini-cli`, pinned by
//! tests/package-lock.json, run unchanged in headless mode, `gemini -p`), with the
//! gateway as its MCP server over Streamable HTTP and a stand-in for its model API on
//! loopback (tests/fixtures/stand_in_model.py) that plays the model's turns: it calls
//! the upstream's `sleep`, reads each tool result the host feeds it, makes the call
//! the words ask for, and ends with a text turn quoting the last result.
//!
//! The host gives an MCP tool call 60 s (`timeout` of its server entry), so a 90 s call
//! reaches it only through the gateway's deferred results (`--defer-after-ms 20000`).
//! The host also stops a turn in which the model makes the same tool call with the same
//! arguments five times in a row (its loop guard); the gateway's words name each next
//! fetch with a rising `attempt`, so a model that follows them gets past it (a 24 s call
//! fetched every 2 s), and one that drops `attempt` is stopped (the control). Every host
//! feature that reaches beyond the machine is switched off, and the host runs under
//! `strace`: each test fails if the host connected anywhere but loopback or looked up a
//! name.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::mrtr::python;
use crate::common::*;

/// How long the host may take in all: the 90 s tool and the turns around it.
const HOST_DEADLINE: Duration = Duration::from_secs(170);

/// How long the host may take with the 24 s tool, fetched every 2 s.
const LOOP_HOST_DEADLINE: Duration = Duration::from_secs(55);

/// Gemini CLI's loop guard (`TOOL_CALL_LOOP_THRESHOLD` of its `loopDetectionService`):
/// the same tool call with the same arguments this many times in a row is a loop. The
/// first detection drops that call and tells the model so ("System: Potential loop
/// detected. …"); the second stops the turn ("Loop detected, stopping execution").
const LOOP_THRESHOLD: usize = 5;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory of the test's own, removed when the test passed (kept when
/// `MTG_KEEP_SCRATCH` is set, to read what the host and the stand-in left).
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
        if !std::thread::panicking() && std::env::var_os("MTG_KEEP_SCRATCH").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Where a test's host runs: `plain_server`, the gateway in front of it, and the
/// stand-in model, each on loopback, and a scratch directory for the host's home.
struct Stage {
    _processes: [Proc; 3],
    upstream_url: String,
    /// The gateway's MCP endpoint.
    url: String,
    model_url: String,
    model_log: PathBuf,
    scratch: Scratch,
}

impl Stage {
    /// The gateway gets `gateway_flags`; the stand-in model makes its first call `sleep`
    /// with `first_args`, and takes `model_flags`.
    fn start(name: &str, gateway_flags: &[&str], first_args: &Value, model_flags: &[&str]) -> Self {
        let scratch = Scratch::new(name);
        let (upstream, upstream_url) = start_plain_server();
        let (gateway, url) = start_gateway(&upstream_url, gateway_flags);
        let model_log = scratch.0.join("model-requests.jsonl");
        let mut command = Command::new(python());
        command
            .arg(repo_root().join("tests/fixtures/stand_in_model.py"))
            .arg("--log")
            .arg(&model_log)
            .args(["--first-tool", "sleep"])
            .args(["--first-args", &first_args.to_string()])
            .args(model_flags);
        let (model, model_url) = spawn_announcing("stand-in model", command);
        Self {
            _processes: [upstream, gateway, model],
            upstream_url,
            url,
            model_url,
            model_log,
            scratch,
        }
    }

    /// Runs Gemini CLI headless (`gemini -p`, and `host_flags`) under `strace`, with a
    /// home of its own whose settings name the gateway as MCP server `gw` and switch off
    /// all that reaches beyond the machine; the stand-in model is its model API.
    fn run_host(&self, host_flags: &[&str], deadline: Duration) -> HostRun {
        let gemini = repo_root().join("tests/node_modules/@google/gemini-cli/bundle/gemini.js");
        assert!(
            gemini.exists(),
            "run `npm ci --prefix tests` first ({} is missing)",
            gemini.display()
        );
        let dir = &self.scratch.0;
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
                "gw": {"httpUrl": self.url, "timeout": 60000, "trust": true},
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
            .args(host_flags)
            .current_dir(&workspace)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("GEMINI_API_KEY", "stand-in")
            .env("GOOGLE_GEMINI_BASE_URL", &self.model_url)
            .env("GEMINI_TELEMETRY_ENABLED", "false")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let started = Instant::now();
        let mut host = Proc::spawn(command, "gemini-cli").expect("strace and node run");
        let status = wait_with_deadline(&mut host, deadline);
        let elapsed = started.elapsed();
        let out = std::fs::read_to_string(&stdout).unwrap_or_default();
        let err = std::fs::read_to_string(&stderr).unwrap_or_default();
        let context = format!(
            "host exit {status:?} after {elapsed:?}\nstdout:\n{out}\nstderr:\n{err}\nmodel log: {}",
            self.model_log.display()
        );
        HostRun {
            status,
            elapsed,
            out,
            requests: model_requests(&self.model_log),
            trace,
            context,
        }
    }

    /// The upstream's `/stats` (`callsStarted`: how many calls reached its tool code).
    fn upstream_stats(&self) -> Value {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(upstream_stats(&self.upstream_url))
    }

    /// Loopback only: the trace saw the host reach the gateway and the stand-in model,
    /// and nothing else.
    fn assert_loopback_only(&self, run: &HostRun) {
        let trace = std::fs::read_to_string(&run.trace).expect("the strace log");
        let gateway_port = self
            .url
            .rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches("/mcp");
        let model_port = self.model_url.rsplit(':').next().unwrap();
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
}

/// What one run of the host left: its exit, time, standard output, the requests the
/// stand-in model logged, and the `strace` log.
struct HostRun {
    status: ExitStatus,
    elapsed: Duration,
    out: String,
    requests: Vec<Value>,
    trace: PathBuf,
    /// All of it, for failure messages.
    context: String,
}

impl HostRun {
    /// The model's turns as the stand-in played them (not the host's side calls).
    fn turns(&self) -> Vec<&Value> {
        self.requests
            .iter()
            .filter(|r| r["turn"].is_object() && r["turn"]["side"] != true)
            .map(|r| &r["turn"])
            .collect()
    }

    /// The arguments of the model's calls: the first, `sleep` with `first_args`, then
    /// only `get_task_result`s, as the deferred results' words ask.
    fn fetches(&self, first_args: &Value) -> Vec<&Value> {
        let turns = self.turns();
        let calls: Vec<(&str, &Value)> = turns
            .iter()
            .filter_map(|t| Some((t["call"][0].as_str()?, &t["call"][1])))
            .collect();
        assert!(
            calls
                .first()
                .is_some_and(|(name, args)| name.ends_with("sleep") && *args == first_args),
            "turn 1 is not the call of sleep {first_args}: {turns:#?}\n{}",
            self.context
        );
        assert!(
            calls.len() >= 2
                && calls[1..]
                    .iter()
                    .all(|(name, _)| name.ends_with("get_task_result")),
            "the model did not follow the deferred result's words: {turns:#?}\n{}",
            self.context
        );
        calls[1..].iter().map(|(_, args)| *args).collect()
    }

    /// The host's own account of the run, with `-o stream-json`: one event a line.
    fn host_events(&self) -> Vec<Value> {
        self.out
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The host's `tool_use` events: the calls it made, as (tool, parameters).
    fn host_calls(&self) -> Vec<(String, Value)> {
        self.host_events()
            .iter()
            .filter(|e| e["type"] == "tool_use")
            .map(|e| {
                let name = e["tool_name"].as_str().unwrap_or_default().to_owned();
                (name, e["parameters"].clone())
            })
            .collect()
    }

    /// The text the host printed as the model's answer, with `-o stream-json`.
    fn host_answer(&self) -> String {
        self.host_events()
            .iter()
            .filter(|e| e["type"] == "message" && e["role"] == "assistant")
            .filter_map(|e| e["content"].as_str())
            .collect()
    }
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

fn wait_with_deadline(host: &mut Proc, limit: Duration) -> ExitStatus {
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
    let first_args = json!({"ms": 90000, "steps": 0});
    let stage = Stage::start(
        "gemini-cli",
        &["--defer-after-ms", "20000"],
        &first_args,
        &[],
    );
    let run = stage.run_host(&[], HOST_DEADLINE);
    let context = &run.context;
    assert!(run.status.success(), "{context}");

    run.fetches(&first_args);
    let turns = run.turns();
    let last = *turns.last().expect("a model turn");
    assert_eq!(last["final"], true, "no final turn: {turns:#?}\n{context}");
    let read = last["read"].as_str().unwrap_or_default();
    assert!(
        read.contains("slept 90000 ms"),
        "the last tool result fed to the model: {read:?}\n{context}"
    );
    assert!(run.out.contains("slept 90000 ms"), "{context}");

    // The host passed the deferred result's content text to the model, not only its
    // structuredContent: the words are in the tool results it fed the model.
    let fed: Vec<String> = run.requests.iter().flat_map(fed_tool_results).collect();
    assert!(
        fed.iter()
            .any(|t| t.contains("is still running") && t.contains("get_task_result")),
        "no deferred result's words among the tool results fed to the model: {fed:#?}"
    );
    // The upstream ran the tool once; the gateway answered get_task_result itself.
    let stats = stage.upstream_stats();
    assert_eq!(stats["callsStarted"], 1, "{stats}");
    assert!(run.elapsed >= Duration::from_secs(90), "{context}");
    stage.assert_loopback_only(&run);
}

/// The 24 s `sleep` of the loop-guard tests, deferred after 2 s: the gateway answers
/// 2 s after the call, then each `get_task_result` waits up to 2 s, so its result needs
/// about eleven fetches, past the host's loop guard.
const LOOP_FIRST_ARGS: &str = r#"{"ms": 24000, "steps": 0}"#;
const LOOP_GATEWAY_FLAGS: [&str; 2] = ["--defer-after-ms", "2000"];
/// What the host prints with `-o stream-json` when its loop guard stops the turn.
const LOOP_STOPPED: &str = "Loop detected, stopping execution";

/// Gemini CLI stops a turn when the model repeats a tool call with the same arguments
/// five times; the gateway's words name each next fetch with a rising `attempt`, so the
/// model (the stand-in, copying the call the words name) fetches a 24 s result eleven
/// times or so, no two fetches alike, and the host carries the turn to the tool's
/// result. Loopback only, as above.
#[test]
fn gemini_cli_gets_past_its_loop_guard_by_the_rising_attempt_on_loopback_only() {
    let first_args: Value = serde_json::from_str(LOOP_FIRST_ARGS).unwrap();
    let stage = Stage::start("gemini-cli-attempt", &LOOP_GATEWAY_FLAGS, &first_args, &[]);
    let run = stage.run_host(&["-o", "stream-json"], LOOP_HOST_DEADLINE);
    let context = &run.context;
    assert!(run.status.success(), "{context}");

    // The model fetched at least six times (past the guard's five), each fetch the
    // call the last answer named: the same taskId, attempt 1, 2, 3, …
    let fetches = run.fetches(&first_args);
    assert!(fetches.len() > LOOP_THRESHOLD, "{fetches:#?}\n{context}");
    let task_id = &fetches[0]["taskId"];
    for (at, args) in fetches.iter().enumerate() {
        assert!(
            args["taskId"] == *task_id && args["attempt"] == at + 1,
            "fetch {at}: {fetches:#?}\n{context}"
        );
    }
    assert!(
        fetches.windows(2).all(|pair| pair[0] != pair[1]),
        "two consecutive fetches alike: {fetches:#?}"
    );
    // The host made each of those calls, as the model asked, and never said "loop".
    let asked: Vec<Value> = std::iter::once(&first_args)
        .chain(fetches.iter().copied())
        .cloned()
        .collect();
    let made: Vec<Value> = run.host_calls().into_iter().map(|(_, p)| p).collect();
    assert_eq!(made, asked, "{context}");
    let turns = run.turns();
    assert!(
        turns.iter().all(|t| t.get("after").is_none()),
        "the host added words after a tool result: {turns:#?}\n{context}"
    );
    assert!(!run.out.contains(LOOP_STOPPED), "{context}");

    // The final turn read the tool's own result, and the host printed it.
    let last = *turns.last().expect("a model turn");
    assert_eq!(last["final"], true, "no final turn: {turns:#?}\n{context}");
    assert!(
        last["read"]
            .as_str()
            .unwrap_or_default()
            .contains("slept 24000 ms"),
        "{context}"
    );
    assert!(run.host_answer().contains("slept 24000 ms"), "{context}");
    let stats = stage.upstream_stats();
    assert_eq!(stats["callsStarted"], 1, "{stats}");
    stage.assert_loopback_only(&run);
}

/// The control: the same run with a model that drops `attempt` from the call the words
/// name (always `{"taskId": X}`). The host's loop guard fires: the fifth identical fetch
/// is not made, the host tells the model "System: Potential loop detected. …"; the model
/// fetches the same again, and the host stops the turn ("Loop detected, stopping
/// execution") after four fetches, long before the tool's result. So the rising
/// `attempt` is what carries the test above past the guard. Loopback only, as above.
#[test]
fn gemini_cli_loop_guard_stops_a_model_that_repeats_the_same_fetch_on_loopback_only() {
    let first_args: Value = serde_json::from_str(LOOP_FIRST_ARGS).unwrap();
    let stage = Stage::start(
        "gemini-cli-no-attempt",
        &LOOP_GATEWAY_FLAGS,
        &first_args,
        &["--drop-argument", "attempt"],
    );
    let run = stage.run_host(&["-o", "stream-json"], LOOP_HOST_DEADLINE);
    let context = &run.context;
    // The host ends the run as a success, with the loop guard's warning as its account.
    assert!(run.status.success(), "{context}");
    let events = run.host_events();
    let stopped = events
        .iter()
        .position(|e| e["type"] == "error" && e["message"] == LOOP_STOPPED)
        .unwrap_or_else(|| panic!("the host did not stop for a loop\n{context}"));
    assert_eq!(events[stopped]["severity"], "warning", "{context}");
    assert!(
        events[stopped + 1..]
            .iter()
            .all(|e| e["type"] == "result" && e["status"] == "success"),
        "after the loop: {:#?}\n{context}",
        &events[stopped + 1..]
    );

    // The model asked for the same fetch six times: four the host made, the fifth it
    // dropped with its warning to the model, the sixth stopped the turn.
    let fetches = run.fetches(&first_args);
    let task_id = &fetches[0]["taskId"];
    let same = json!({"taskId": task_id});
    assert_eq!(fetches.len(), LOOP_THRESHOLD + 1, "{fetches:#?}\n{context}");
    assert!(fetches.iter().all(|args| **args == same), "{fetches:#?}");
    // The host made `sleep` and four fetches, where the tool's result needs about eleven.
    let made: Vec<(String, Value)> = run.host_calls();
    let made_fetches = &made[1.min(made.len())..];
    assert!(
        made_fetches.len() == LOOP_THRESHOLD - 1
            && made_fetches
                .iter()
                .all(|(name, args)| name.ends_with("get_task_result") && *args == same),
        "{made:#?}\n{context}"
    );
    let turns = run.turns();
    let warned = turns
        .last()
        .and_then(|t| t["after"].as_str())
        .unwrap_or_default();
    assert!(
        warned.starts_with("System: Potential loop detected.")
            && warned.contains(&format!(
                "Repeated tool call: mcp_gw_get_task_result with arguments {same}"
            )),
        "the host's words to the model: {warned:?}\n{context}"
    );
    // No final answer: the last result the model read still said "still running".
    assert!(
        turns.iter().all(|t| t.get("final").is_none()),
        "{turns:#?}\n{context}"
    );
    let read = turns
        .last()
        .and_then(|t| t["read"].as_str())
        .unwrap_or_default();
    assert!(read.contains("is still running"), "{read:?}\n{context}");
    assert!(!run.out.contains("slept 24000 ms"), "{context}");
    stage.assert_loopback_only(&run);
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
