//! Real hosts through the gateway: Gemini CLI (`@google/gemini-cli`, `gemini -p`) and
//! Claude Code (`@anthropic-ai/claude-code`, `claude -p`), each pinned by
//! tests/package-lock.json and run unchanged in headless mode, with the gateway as its
//! MCP server over Streamable HTTP and a stand-in for its model API on loopback
//! (tests/fixtures/stand_in_model.py: the Gemini API or the Anthropic Messages API)
//! that plays the model's turns: it calls an upstream tool, reads each tool result the
//! host feeds it, makes the call the words ask for, and ends with a text turn quoting
//! the last result.
//!
//! Gemini CLI gives an MCP tool call 60 s (`timeout` of its server entry), so a 90 s call
//! reaches it only through the gateway's deferred results (`--defer-after-ms 20000`).
//! The host also stops a turn in which the model makes the same tool call with the same
//! arguments five times in a row (its loop guard); the gateway's words name each next
//! fetch with a rising `attempt`, so a model that follows them gets past it (a 24 s call
//! fetched every 2 s), and one that drops `attempt` is stopped (the control). Every host
//! feature that reaches beyond the machine is switched off, and the host runs under
//! `strace`: each test fails if the host connected anywhere but loopback or looked up a
//! name.
//!
//! Claude Code shows its model a result's `structuredContent` (as JSON) in place of its
//! text when there is one: the tests call a tool with an `outputSchema` (`slow_echo`,
//! whose deferred result carries the words in `structuredContent`) and one without
//! (`sleep`, words only), and read which form reached the model.

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

/// The host under test, and the model API its stand-in speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Host {
    GeminiCli,
    ClaudeCode,
}

impl Host {
    /// The stand-in model's `--api`.
    fn api(self) -> &'static str {
        match self {
            Self::GeminiCli => "gemini",
            Self::ClaudeCode => "anthropic",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::GeminiCli => "gemini-cli",
            Self::ClaudeCode => "claude-code",
        }
    }
}

/// Where a test's host runs: `plain_server`, the gateway in front of it, and the
/// stand-in model, each on loopback, and a scratch directory for the host's home.
struct Stage {
    _processes: [Proc; 3],
    host: Host,
    upstream_url: String,
    /// The gateway's MCP endpoint.
    url: String,
    model_url: String,
    model_log: PathBuf,
    /// The model's first call: the upstream's tool and its arguments.
    first_tool: String,
    first_args: Value,
    scratch: Scratch,
}

impl Stage {
    /// The gateway gets `gateway_flags`; the stand-in model speaks `host`'s API, makes
    /// its first call `first_tool` with `first_args`, and takes `model_flags`.
    fn start(
        host: Host,
        name: &str,
        gateway_flags: &[&str],
        (first_tool, first_args): (&str, &Value),
        model_flags: &[&str],
    ) -> Self {
        let scratch = Scratch::new(name);
        let (upstream, upstream_url) = start_plain_server();
        let (gateway, url) = start_gateway(&upstream_url, gateway_flags);
        let model_log = scratch.0.join("model-requests.jsonl");
        let mut command = Command::new(python());
        command
            .arg(repo_root().join("tests/fixtures/stand_in_model.py"))
            .args(["--api", host.api()])
            .arg("--log")
            .arg(&model_log)
            .args(["--first-tool", first_tool])
            .args(["--first-args", &first_args.to_string()])
            .args(model_flags);
        let (model, model_url) = spawn_announcing("stand-in model", command);
        Self {
            _processes: [upstream, gateway, model],
            host,
            upstream_url,
            url,
            model_url,
            model_log,
            first_tool: first_tool.to_owned(),
            first_args: first_args.clone(),
            scratch,
        }
    }

    /// Runs the host headless (`-p`, and `host_flags`) under `strace`, with a home of
    /// its own, the gateway as its only MCP server `gw`, all that reaches beyond the
    /// machine switched off, and the stand-in model as its model API.
    fn run_host(&self, host_flags: &[&str], deadline: Duration) -> HostRun {
        self.run_host_with_env(host_flags, &[], deadline)
    }

    /// `run_host`, with `env` set for the host on top of the stage's own.
    fn run_host_with_env(
        &self,
        host_flags: &[&str],
        env: &[(&str, &str)],
        deadline: Duration,
    ) -> HostRun {
        let dir = &self.scratch.0;
        let home = dir.join("home");
        let workspace = dir.join("workspace");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&workspace).unwrap();
        let prompt = format!("Run the tool {} and tell me its result.", self.first_tool);

        let trace = dir.join("connect.strace");
        let stdout = dir.join("host.stdout");
        let stderr = dir.join("host.stderr");
        let mut command = Command::new("strace");
        // 1024 bytes of each message sent: enough for the MCP requests' headers.
        command
            .args(["-f", "-qq", "--seccomp-bpf", "-s", "1024"])
            .args(["-e", "trace=connect,sendto,sendmsg,sendmmsg"])
            .arg("-o")
            .arg(&trace)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("NO_COLOR", "1");
        match self.host {
            Host::GeminiCli => self.gemini_cli(&mut command, &home, &prompt),
            Host::ClaudeCode => self.claude_code(&mut command, &prompt),
        }
        command
            .args(host_flags)
            .envs(env.iter().copied())
            .current_dir(&workspace)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let started = Instant::now();
        let mut host = Proc::spawn(command, self.host.name()).expect("strace and the host run");
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
            first_tool: self.first_tool.clone(),
            first_args: self.first_args.clone(),
            trace,
            context,
        }
    }

    /// Gemini CLI (`node gemini.js -p PROMPT`): its settings in `home` name the gateway
    /// (`httpUrl`, a 60 s `timeout`) and switch off updates, telemetry, usage
    /// statistics, the IDE link, folder trust and ripgrep.
    fn gemini_cli(&self, command: &mut Command, home: &Path, prompt: &str) {
        let gemini = repo_root().join("tests/node_modules/@google/gemini-cli/bundle/gemini.js");
        assert!(
            gemini.exists(),
            "run `npm ci --prefix tests` first ({} is missing)",
            gemini.display()
        );
        std::fs::create_dir_all(home.join(".gemini")).unwrap();
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
        command
            .arg("node")
            .arg(&gemini)
            .args(["-p", prompt])
            .env("GEMINI_API_KEY", "stand-in")
            .env("GOOGLE_GEMINI_BASE_URL", &self.model_url)
            .env("GEMINI_TELEMETRY_ENABLED", "false");
    }

    /// Claude Code (its native binary, `claude -p PROMPT`): the gateway is its only MCP
    /// server (`--mcp-config` with `type: http`, `--strict-mcp-config`), whose tools it
    /// may call without asking (`--allowedTools mcp__gw`), with a 60 s tool-call limit
    /// (`MCP_TOOL_TIMEOUT`). Its model API is the stand-in (`ANTHROPIC_BASE_URL`, an API
    /// key of its own); nonessential traffic (telemetry, error reports, updates, the bug
    /// command) is off, and so is tool search, which would hold the MCP tools back from
    /// the model until it searched for them (`ENABLE_TOOL_SEARCH=false`).
    fn claude_code(&self, command: &mut Command, prompt: &str) {
        let claude =
            repo_root().join("tests/node_modules/@anthropic-ai/claude-code/bin/claude.exe");
        assert!(
            claude.exists(),
            "run `npm ci --prefix tests` first ({} is missing)",
            claude.display()
        );
        let config = self.scratch.0.join("mcp.json");
        let servers = json!({"mcpServers": {"gw": {"type": "http", "url": self.url}}});
        std::fs::write(&config, serde_json::to_vec_pretty(&servers).unwrap()).unwrap();
        command
            .arg(&claude)
            .args(["-p", prompt])
            .arg("--mcp-config")
            .arg(&config)
            .args(["--strict-mcp-config", "--allowedTools", "mcp__gw"])
            .env("ANTHROPIC_BASE_URL", &self.model_url)
            .env("ANTHROPIC_API_KEY", "sk-ant-stand-in")
            .env("MCP_TOOL_TIMEOUT", "60000")
            .env("ENABLE_TOOL_SEARCH", "false")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_BUG_COMMAND", "1");
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
    /// The model's first call, as the stage scripted it.
    first_tool: String,
    first_args: Value,
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

    /// The arguments of the model's calls: the first, the stage's first tool with its
    /// arguments, then only `get_task_result`s, as the deferred results' words ask.
    fn fetches(&self) -> Vec<&Value> {
        let turns = self.turns();
        let calls: Vec<(&str, &Value)> = turns
            .iter()
            .filter_map(|t| Some((t["call"][0].as_str()?, &t["call"][1])))
            .collect();
        let (tool, first_args) = (&self.first_tool, &self.first_args);
        assert!(
            calls.first().is_some_and(|(name, args)| {
                name.ends_with(&format!("_{tool}")) && *args == first_args
            }),
            "turn 1 is not the call of {tool} {first_args}: {turns:#?}\n{}",
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
        Host::GeminiCli,
        "gemini-cli",
        &["--defer-after-ms", "20000"],
        ("sleep", &first_args),
        &[],
    );
    let run = stage.run_host(&[], HOST_DEADLINE);
    let context = &run.context;
    assert!(run.status.success(), "{context}");

    run.fetches();
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
    let stage = Stage::start(
        Host::GeminiCli,
        "gemini-cli-attempt",
        &LOOP_GATEWAY_FLAGS,
        ("sleep", &first_args),
        &[],
    );
    let run = stage.run_host(&["-o", "stream-json"], LOOP_HOST_DEADLINE);
    let context = &run.context;
    assert!(run.status.success(), "{context}");

    // The model fetched at least six times (past the guard's five), each fetch the
    // call the last answer named: the same taskId, attempt 1, 2, 3, …
    let fetches = run.fetches();
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
        Host::GeminiCli,
        "gemini-cli-no-attempt",
        &LOOP_GATEWAY_FLAGS,
        ("sleep", &first_args),
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
    let fetches = run.fetches();
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

/// How long Claude Code may take with an 8 s tool fetched every 2 s.
const CLAUDE_HOST_DEADLINE: Duration = Duration::from_secs(45);

/// The gateway of the Claude Code tests: deferred results after 2 s.
const CLAUDE_GATEWAY_FLAGS: [&str; 2] = ["--defer-after-ms", "2000"];

/// The tool results (the `content` of each `tool_result` block) in the conversation
/// Claude Code sent the model, in order.
fn claude_tool_results(request: &Value) -> Vec<&Value> {
    claude_tool_results_blocks(request)
        .into_iter()
        .map(|block| &block["content"])
        .collect()
}

/// The `tool_result` blocks in the conversation Claude Code sent the model, in order.
fn claude_tool_results_blocks(request: &Value) -> Vec<&Value> {
    request["body"]["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|block| block["type"] == "tool_result")
        .collect()
}

/// One tool result as Claude Code fed it to the model: a `tool_result` block whose
/// `content` is a string, or one text block.
#[derive(Debug)]
enum Fed {
    String(String),
    TextBlock(String),
}

/// The tool results Claude Code fed the model in the whole run: those of the last
/// request it sent, which carries the conversation.
fn claude_fed(run: &HostRun) -> Vec<Fed> {
    let last = run
        .requests
        .iter()
        .rfind(|r| r["turn"].is_object() && r["turn"]["side"] != true)
        .unwrap_or_else(|| panic!("no model turn\n{}", run.context));
    claude_tool_results(last)
        .into_iter()
        .map(
            |content| match (content, content.as_array().map(Vec::as_slice)) {
                (Value::String(text), _) => Fed::String(text.clone()),
                (_, Some([block])) if block["type"] == "text" && block["text"].is_string() => {
                    Fed::TextBlock(block["text"].as_str().unwrap().to_owned())
                }
                _ => panic!("a tool result neither a string nor one text block: {content}"),
            },
        )
        .collect()
}

/// The words of a deferred result that name the next fetch.
fn named_fetch(task_id: &str, attempt: usize) -> String {
    format!(
        "call the tool get_task_result with {{\"taskId\": \"{task_id}\", \"attempt\": {attempt}}}"
    )
}

/// What Claude Code sent the gateway, as `strace` saw its requests (the first 1024
/// bytes of each): at connect a `server/discover` probe, then `prompts/list`,
/// `resources/list` and `tools/list` in any order, after that only `calls` tool calls;
/// every request on 2026-07-28 (`mcp-protocol-version` and `_meta`), with no
/// `initialize` and no tasks extension among its capabilities.
fn assert_claude_code_speaks_2026_07_28(run: &HostRun, calls: usize) {
    let trace = std::fs::read_to_string(&run.trace).expect("the strace log");
    let requests: Vec<&str> = trace
        .lines()
        .filter(|line| line.contains("\"POST /mcp HTTP/1.1\\r\\n"))
        .collect();
    let mut methods: Vec<&str> = requests
        .iter()
        .filter_map(|line| {
            let method = &line[line.find("mcp-method: ")? + "mcp-method: ".len()..];
            Some(&method[..method.find("\\r\\n")?])
        })
        .collect();
    assert_eq!(methods.len(), requests.len(), "{requests:#?}");
    if methods.len() >= 4 {
        methods[1..4].sort_unstable();
    }
    let expected: Vec<&str> = [
        "server/discover",
        "prompts/list",
        "resources/list",
        "tools/list",
    ]
    .into_iter()
    .chain(std::iter::repeat_n("tools/call", calls))
    .collect();
    assert_eq!(methods, expected, "{requests:#?}");
    assert!(
        requests.iter().all(|r| {
            r.contains("mcp-protocol-version: 2026-07-28\\r\\n")
                && r.contains("io.modelcontextprotocol/protocolVersion\\\":\\\"2026-07-28\\\"")
                && !r.contains("initialize")
                && !r.contains("io.modelcontextprotocol/tasks")
        }),
        "{requests:#?}"
    );
}

/// Claude Code in front of the gateway (`CLAUDE_GATEWAY_FLAGS`), its model's first call
/// `tool` with `first_args`: the stage, the run (which ended well), and the tool results
/// fed to the model, one for the first call and one for each fetch.
fn run_claude_code(name: &str, tool: &str, first_args: &Value) -> (Stage, HostRun, Vec<Fed>) {
    let stage = Stage::start(
        Host::ClaudeCode,
        name,
        &CLAUDE_GATEWAY_FLAGS,
        (tool, first_args),
        &[],
    );
    let run = stage.run_host(&[], CLAUDE_HOST_DEADLINE);
    assert!(run.status.success(), "{}", run.context);
    let fed = claude_fed(&run);
    assert_eq!(
        fed.len(),
        run.fetches().len() + 1,
        "{fed:#?}\n{}",
        run.context
    );
    (stage, run, fed)
}

/// The end of a Claude Code run: the model's final turn read `result`, and the host
/// printed it; the upstream ran the tool once; Claude Code spoke 2026-07-28 and made
/// the first call and the fetches; loopback only.
fn assert_claude_code_reached(stage: &Stage, run: &HostRun, result: &str) {
    let context = &run.context;
    let turns = run.turns();
    let last = *turns.last().expect("a model turn");
    assert_eq!(last["final"], true, "no final turn: {turns:#?}\n{context}");
    assert!(
        last["read"].as_str().unwrap_or_default().contains(result),
        "{context}"
    );
    assert!(run.out.contains(result), "{context}");
    let stats = stage.upstream_stats();
    assert_eq!(stats["callsStarted"], 1, "{stats}");
    assert!(run.elapsed >= Duration::from_secs(8), "{context}");
    assert_claude_code_speaks_2026_07_28(run, run.fetches().len() + 1);
    stage.assert_loopback_only(run);
}

/// A tool with an `outputSchema`, past N: Claude Code shows its model the deferred
/// result's `structuredContent` as JSON (`{"message", "nextCall", "status", "taskId"}`)
/// in place of the content text; the words in `message` name the next call, which the
/// model (the stand-in) makes, and the real result reaches its final turn within the
/// host's run. The gateway's `get_task_result` lists no `outputSchema`, so its "still
/// running" answers reach the model as text; the tool's own result again as the JSON of
/// its `structuredContent`. Claude Code probes with `server/discover` and speaks
/// 2026-07-28. Loopback only.
#[test]
fn claude_code_follows_a_deferred_structured_content_to_the_result_on_loopback_only() {
    let first_args = json!({"text": "structured", "ms": 8000});
    let (stage, run, fed) = run_claude_code("claude-code-structured", "slow_echo", &first_args);
    let task_id = run.fetches()[0]["taskId"]
        .as_str()
        .expect("a taskId")
        .to_owned();
    // The first call's result reached the model as the JSON of structuredContent (the
    // block's `content` a string), not as the content text: its words are inside
    // `message`, the call in `nextCall`.
    let Fed::String(first) = &fed[0] else {
        panic!("the first result was not fed as a string: {fed:#?}")
    };
    let first: Value = serde_json::from_str(first)
        .unwrap_or_else(|e| panic!("the first result fed is not JSON ({e}): {first:?}"));
    let mut keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["message", "nextCall", "status", "taskId"],
        "{first:#}"
    );
    let message = first["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("The tool slow_echo is still running")
            && message.contains(&named_fetch(&task_id, 1)),
        "{first:#}"
    );
    assert_eq!(
        first["nextCall"],
        json!({"name": "get_task_result", "arguments": {"taskId": task_id, "attempt": 1}})
    );
    assert_eq!(first["taskId"], task_id.as_str());
    assert_eq!(first["status"], "working");
    // The fetches' "still running" answers (get_task_result lists no outputSchema)
    // came as their text, each naming the next attempt; the last, the tool's own
    // result, as the JSON of its structuredContent.
    for (at, fed) in fed[1..fed.len() - 1].iter().enumerate() {
        assert!(
            matches!(fed, Fed::TextBlock(text)
                if text.starts_with("The tool slow_echo is still running")
                    && text.contains(&named_fetch(&task_id, at + 2))),
            "fetch {}: {fed:?}",
            at + 1
        );
    }
    let Some(Fed::String(last)) = fed.last() else {
        panic!("the result was not fed as a string: {fed:#?}")
    };
    let last: Value = serde_json::from_str(last).expect("JSON");
    assert_eq!(last, json!({"echo": first_args}), "{}", run.context);
    assert_claude_code_reached(&stage, &run, "\"text\":\"structured\"");
}

/// A tool without an `outputSchema`, past N: the deferred result is words only, and
/// Claude Code feeds the model that text; the model follows it through
/// `get_task_result` to the tool's own result in its final turn. Loopback only.
#[test]
fn claude_code_follows_a_deferred_results_words_to_the_result_on_loopback_only() {
    let first_args = json!({"ms": 8000, "steps": 0});
    let (stage, run, fed) = run_claude_code("claude-code-words", "sleep", &first_args);
    let fetches = run.fetches();
    let task_id = fetches[0]["taskId"].as_str().expect("a taskId");
    for (at, (fed, fetch)) in fed.iter().zip(&fetches).enumerate() {
        assert!(
            matches!(fed, Fed::TextBlock(text)
                if text.starts_with("The tool sleep is still running")
                    && text.contains(&named_fetch(task_id, at + 1))),
            "result {at}: {fed:?}"
        );
        assert_eq!(**fetch, json!({"taskId": task_id, "attempt": at + 1}));
    }
    assert!(
        matches!(fed.last(), Some(Fed::TextBlock(text)) if text == "slept 8000 ms"),
        "{fed:#?}\n{}",
        run.context
    );
    assert_claude_code_reached(&stage, &run, "slept 8000 ms");
}

/// Claude Code's idle limit for a remote MCP call, in ms
/// (`CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT`; 5 min by default for HTTP servers). Its
/// watchdog looks every 30 s, so a call silent past the limit is stopped at the first
/// look after it: 30 s into the call.
const CLAUDE_IDLE_LIMIT_MS: &str = "10000";

/// A silent call (no progress of its own) that outlasts the watchdog's first look.
const CLAUDE_SILENT_MS: u64 = 35000;

/// How long Claude Code may take with the silent call.
const CLAUDE_IDLE_HOST_DEADLINE: Duration = Duration::from_secs(55);

/// Claude Code with its idle limit at `CLAUDE_IDLE_LIMIT_MS`, in front of the gateway
/// with `--progress-keepalive-ms keepalive_ms` and no deferral, its model's first call
/// `sleep` for `CLAUDE_SILENT_MS` with no steps: the stage (kept for its scratch
/// directory), the run (which ended well), and the one tool result fed to the model: its
/// text, and whether the host marked it `is_error`.
fn run_claude_code_silent_call(name: &str, keepalive_ms: &str) -> (Stage, HostRun, String, bool) {
    let first_args = json!({"ms": CLAUDE_SILENT_MS, "steps": 0});
    let stage = Stage::start(
        Host::ClaudeCode,
        name,
        &["--progress-keepalive-ms", keepalive_ms],
        ("sleep", &first_args),
        &[],
    );
    let run = stage.run_host_with_env(
        &[],
        &[("CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT", CLAUDE_IDLE_LIMIT_MS)],
        CLAUDE_IDLE_HOST_DEADLINE,
    );
    let context = &run.context;
    assert!(run.status.success(), "{context}");
    let fed = claude_fed(&run);
    let [Fed::TextBlock(text) | Fed::String(text)] = fed.as_slice() else {
        panic!("not one tool result: {fed:#?}\n{context}")
    };
    let text = text.clone();
    let turns = run.turns();
    assert_eq!(turns.len(), 2, "{turns:#?}\n{context}");
    assert_eq!(turns[0]["call"][1], first_args, "{context}");
    assert_eq!(turns[1]["final"], true, "{turns:#?}\n{context}");
    assert_eq!(turns[1]["read"], text.as_str(), "{context}");
    let last = run.requests.iter().rfind(|r| r["turn"]["final"] == true);
    let is_error = claude_tool_results_blocks(last.unwrap())[0]["is_error"] == true;
    let stats = stage.upstream_stats();
    assert_eq!(stats["callsStarted"], 1, "{stats}");
    stage.assert_loopback_only(&run);
    (stage, run, text, is_error)
}

/// Claude Code stops a remote MCP call that sent no response or progress for its idle
/// limit (10 s here); the gateway's keep-alive (`--progress-keepalive-ms 3000`) sends
/// the call's `progressToken` a `notifications/progress` every 3 s, each of which
/// restarts that clock, so a 35 s call with no progress of its own completes: the
/// model's final turn reads `slept 35000 ms`, with no deferral. Loopback only.
#[test]
fn claude_code_keeps_a_silent_call_past_its_idle_limit_by_the_keepalive_on_loopback_only() {
    let (_stage, run, text, is_error) =
        run_claude_code_silent_call("claude-code-keepalive", "3000");
    let context = &run.context;
    assert!(!is_error, "{context}");
    assert_eq!(text, format!("slept {CLAUDE_SILENT_MS} ms"), "{context}");
    assert!(run.out.contains(&text), "{context}");
    assert!(
        run.elapsed >= Duration::from_millis(CLAUDE_SILENT_MS),
        "{context}"
    );
    assert_claude_code_speaks_2026_07_28(&run, 1);
}

/// The control: the same run with `--progress-keepalive-ms 0`. Nothing reaches the host
/// while the tool sleeps, and Claude Code gives up on the call at its watchdog's first
/// look (30 s in, idle past 10 s), before the result: it feeds the model its idle-limit
/// error instead, and the model's final turn reads that. Loopback only.
#[test]
fn claude_code_gives_up_a_silent_call_at_its_idle_limit_without_keepalive_on_loopback_only() {
    let (_stage, run, text, is_error) = run_claude_code_silent_call("claude-code-idle", "0");
    let context = &run.context;
    assert!(is_error, "{context}");
    // "MCP server "gw" tool "sleep" sent no response or progress for 30s; aborting. If
    // this server is configured in your MCP settings, set a per-server "timeout" (ms) to
    // allow longer silent runs for just this server; otherwise set
    // CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT (ms) globally (0 disables)."
    let idle_for = text
        .strip_prefix("MCP server \"gw\" tool \"sleep\" sent no response or progress for ")
        .and_then(|rest| rest.split_once("s; aborting. "))
        .and_then(|(seconds, _)| seconds.parse::<u64>().ok());
    assert!(
        idle_for.is_some_and(|s| (30..CLAUDE_SILENT_MS / 1000).contains(&s))
            && text.contains("set CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT (ms) globally (0 disables)"),
        "what the model was fed: {text:?}\n{context}"
    );
    assert!(!run.out.contains("slept"), "{context}");
    assert!(
        run.requests
            .iter()
            .all(|r| !r.to_string().contains("slept")),
        "{context}"
    );
    assert!(
        run.elapsed < Duration::from_millis(CLAUDE_SILENT_MS),
        "{context}"
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
