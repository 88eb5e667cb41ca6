//! `mcp-task-gateway admin ...`: the admin API from a shell, as a table or as JSON.
//!
//! Inside a gateway's pod it needs no flags: the token file and the listener's address
//! come from the same environment variables the gateway reads.

mod webhooks;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;

use super::wire::{CancelReply, ErrorReply, Instances, TaskDetail, TaskList, TaskSummary};

/// Inspect and cancel tasks and list instances through a running gateway's admin API.
#[derive(Debug, Parser)]
#[command(name = "mcp-task-gateway admin", version)]
struct AdminCli {
    /// The gateway's metrics listener, e.g. http://10.0.0.7:9090. Default: from
    /// MTG_METRICS_LISTEN (an unspecified address becomes loopback), as in the pod.
    #[arg(long, env = "MTG_ADMIN_URL")]
    url: Option<String>,

    /// File holding the admin token (the gateway's --admin-token-file).
    #[arg(long, env = "MTG_ADMIN_TOKEN_FILE")]
    token_file: PathBuf,

    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,

    /// The named upstream (`/mcp/NAME`) whose tasks and instances to see. Needed when
    /// the gateway serves several and none at `/mcp`.
    #[arg(long, env = "MTG_ADMIN_UPSTREAM", global = true)]
    upstream: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Tasks of every caller, on every instance sharing the store.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Instances holding (or lately holding) a lease, with their running tasks.
    Instances,
    /// Webhook subscriptions: outboxes, dead letters, redelivery.
    #[command(subcommand)]
    Webhooks(webhooks::WebhooksCommand),
}

#[derive(Debug, Subcommand)]
enum TasksCommand {
    /// Tasks matching every filter given, newest first within each page.
    List(ListArgs),
    /// One task: owner and its lease, pending input, timestamps, error.
    Show { task_id: String },
    /// Cancels a task as its client would: the owner stops the upstream call.
    Cancel { task_id: String },
}

#[derive(Debug, Args)]
struct ListArgs {
    /// working, input_required, completed, failed or cancelled.
    #[arg(long)]
    status: Option<String>,
    /// Instance id of the owner.
    #[arg(long)]
    owner: Option<String>,
    /// Principal (the hash `tasks show` prints).
    #[arg(long)]
    principal: Option<String>,
    #[arg(long)]
    tool: Option<String>,
    /// Created at least this long ago: 90s, 30m, 2h.
    #[arg(long)]
    older_than: Option<String>,
    /// Most tasks per page (the gateway caps it at 1000).
    #[arg(long)]
    limit: Option<usize>,
    /// Continue from a page's nextCursor.
    #[arg(long, conflicts_with = "all")]
    cursor: Option<String>,
    /// Follow nextCursor to the end.
    #[arg(long)]
    all: bool,
}

/// Runs the CLI with `args` (program name first, then `admin`, then the rest).
pub fn main(args: Vec<OsString>) -> ExitCode {
    // "mcp-task-gateway admin" is the command's name; clap sees "admin" as the program.
    let cli = match AdminCli::try_parse_from(args.into_iter().skip(1)) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(&message),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("mcp-task-gateway admin: {message}");
    ExitCode::FAILURE
}

async fn run(cli: AdminCli) -> Result<(), String> {
    let api = Api::new(&cli)?;
    match &cli.command {
        Command::Instances => {
            let (raw, instances): (_, Instances) = api.call(Method::GET, "instances").await?;
            print(cli.json, &raw, || instances_table(&instances));
        }
        Command::Tasks(TasksCommand::Show { task_id }) => {
            let path = format!("tasks/{}", self::task_id(task_id)?);
            let (raw, task): (_, TaskDetail) = api.call(Method::GET, &path).await?;
            print(cli.json, &raw, || detail_table(&task));
        }
        Command::Tasks(TasksCommand::Cancel { task_id }) => {
            let path = format!("tasks/{}/cancel", self::task_id(task_id)?);
            let (raw, reply): (_, CancelReply) = api.call(Method::POST, &path).await?;
            print(cli.json, &raw, || {
                let verb = match reply.result {
                    super::wire::CancelResult::Cancelled => "cancelled",
                    super::wire::CancelResult::AlreadyTerminal => "had already ended; unchanged",
                };
                format!("task {} {verb}", reply.task_id)
            });
        }
        Command::Tasks(TasksCommand::List(args)) => list(&api, args, cli.json).await?,
        Command::Webhooks(command) => webhooks::run(&api, command, cli.json).await?,
    }
    Ok(())
}

async fn list(api: &Api, args: &ListArgs, json: bool) -> Result<(), String> {
    let mut cursor = args.cursor.clone();
    let mut shown = Vec::new();
    loop {
        let query = serde_urlencoded::to_string([
            ("status", args.status.as_deref()),
            ("owner", args.owner.as_deref()),
            ("principal", args.principal.as_deref()),
            ("tool", args.tool.as_deref()),
            ("olderThan", args.older_than.as_deref()),
            ("limit", args.limit.map(|l| l.to_string()).as_deref()),
            ("cursor", cursor.as_deref()),
        ])
        .map_err(|e| e.to_string())?;
        let (raw, page): (_, TaskList) = api.call(Method::GET, &format!("tasks?{query}")).await?;
        if !args.all {
            print(json, &raw, || {
                let mut text = tasks_table(&page.tasks);
                if let Some(next) = &page.next_cursor {
                    text.push_str(&format!(
                        "\nmore: --cursor {next} (or --all to follow every page)"
                    ));
                }
                text
            });
            return Ok(());
        }
        shown.extend(page.tasks);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if json {
        let all = TaskList {
            tasks: shown,
            next_cursor: None,
        };
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
    } else {
        println!("{}", tasks_table(&shown));
    }
    Ok(())
}

fn print(json: bool, raw: &serde_json::Value, table: impl FnOnce() -> String) {
    if json {
        println!("{}", serde_json::to_string_pretty(raw).unwrap_or_default());
    } else {
        println!("{}", table());
    }
}

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_BORDERS_ONLY)
        .set_header(header.to_vec());
    table
}

fn tasks_table(tasks: &[TaskSummary]) -> String {
    if tasks.is_empty() {
        return "no tasks".into();
    }
    let mut out = table(&["TASK", "STATUS", "TOOL", "OWNER", "AGE", "INPUT", "MESSAGE"]);
    for task in tasks {
        out.add_row(vec![
            task.task_id.clone(),
            task.status.clone(),
            task.tool.clone().unwrap_or_default(),
            task.owner.clone(),
            age(task.age_ms),
            task.pending_input.to_string(),
            task.status_message.clone().unwrap_or_default(),
        ]);
    }
    out.to_string()
}

fn detail_table(task: &TaskDetail) -> String {
    let summary = &task.summary;
    let mut out = table(&["FIELD", "VALUE"]);
    let rows = [
        ("task", summary.task_id.clone()),
        ("status", summary.status.clone()),
        (
            "status message",
            summary.status_message.clone().unwrap_or_default(),
        ),
        ("tool", summary.tool.clone().unwrap_or_default()),
        ("owner", summary.owner.clone()),
        (
            "owner lease",
            format!("{:?}", task.owner_lease).to_lowercase(),
        ),
        ("principal", summary.principal.clone()),
        (
            "created",
            format!("{} ({} ago)", summary.created_at, age(summary.age_ms)),
        ),
        ("updated", task.updated_at.clone()),
        ("expires", task.expires_at.clone()),
        (
            "pending input",
            task.pending_input_keys
                .iter()
                .zip(&task.pending_input_methods)
                .map(|(key, method)| format!("{key} ({method})"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "answers not yet forwarded",
            task.answers_waiting.to_string(),
        ),
        ("taken over", format!("{} times", task.takeovers)),
        (
            "error",
            task.error
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_default(),
        ),
    ];
    for (field, value) in rows {
        out.add_row(vec![field.to_owned(), value]);
    }
    out.to_string()
}

fn instances_table(instances: &Instances) -> String {
    let namespace = match instances.store_namespace.as_deref() {
        Some("") => "store namespace: none (legacy layout)\n".to_owned(),
        Some(name) => format!("store namespace: {name}\n"),
        None => String::new(),
    };
    if instances.instances.is_empty() {
        return format!("{namespace}no instances");
    }
    let mut out = table(&["INSTANCE", "LEASE", "EXPIRES IN", "RUNNING", "URL", ""]);
    for instance in &instances.instances {
        out.add_row(vec![
            instance.instance.clone(),
            if instance.lease_live {
                "live"
            } else {
                "lapsed"
            }
            .to_owned(),
            instance
                .lease_expires_in_ms
                .map(|ms| format!("{ms} ms"))
                .unwrap_or_default(),
            instance.running_tasks.to_string(),
            instance.advertise_url.clone().unwrap_or_default(),
            if instance.this { "(answered)" } else { "" }.to_owned(),
        ]);
    }
    format!("{namespace}{out}")
}

/// A coarse age for people: `42s`, `17m`, `3h 5m`.
fn age(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        _ => format!("{}h {}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// Task ids are UUIDs: anything else is refused here, and nothing needs escaping.
fn task_id(text: &str) -> Result<&str, String> {
    uuid::Uuid::try_parse(text)
        .map(|_| text)
        .map_err(|_| format!("{text:?} is not a task id (a UUID)"))
}

struct Api {
    base: String,
    token: String,
    /// `upstream=NAME`, added to every call's query.
    upstream: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Api {
    fn new(cli: &AdminCli) -> Result<Self, String> {
        let base = match &cli.url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => default_url()?,
        };
        let token = std::fs::read_to_string(&cli.token_file)
            .map_err(|e| format!("cannot read {}: {e}", cli.token_file.display()))?
            .trim()
            .to_owned();
        let upstream = cli
            .upstream
            .as_deref()
            .map(|name| serde_urlencoded::to_string([("upstream", name)]))
            .transpose()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            base,
            token,
            upstream,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    /// Calls `/admin/<path>`; the reply as JSON and as `T`, or the gateway's refusal.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
    ) -> Result<(serde_json::Value, T), String> {
        let url = match &self.upstream {
            None => format!("{}/admin/{path}", self.base),
            Some(upstream) => {
                let join = if path.contains('?') { '&' } else { '?' };
                format!("{}/admin/{path}{join}{upstream}", self.base)
            }
        };
        let request = Request::builder()
            .method(method)
            .uri(&url)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("bad URL {url}: {e}"))?;
        let response = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            self.client.request(request),
        )
        .await
        .map_err(|_| format!("{url}: no answer within 30 s"))?
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{url}: {e}"))?
            .to_bytes();
        if status != StatusCode::OK {
            let message = serde_json::from_slice::<ErrorReply>(&body)
                .map(|reply| reply.error)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
            return Err(format!("{status}: {message}"));
        }
        let raw: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("{url}: not JSON: {e}"))?;
        let typed = serde_json::from_value(raw.clone())
            .map_err(|e| format!("{url}: unexpected answer: {e}"))?;
        Ok((raw, typed))
    }
}

/// The gateway's own metrics address, as its environment gives it.
fn default_url() -> Result<String, String> {
    let listen = std::env::var("MTG_METRICS_LISTEN").map_err(|_| {
        "give --url (or MTG_ADMIN_URL); MTG_METRICS_LISTEN is not set either".to_owned()
    })?;
    let addr: std::net::SocketAddr = listen
        .parse()
        .map_err(|e| format!("MTG_METRICS_LISTEN={listen:?}: {e}"))?;
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
        ip if ip.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    Ok(format!("http://{host}:{}", addr.port()))
}
