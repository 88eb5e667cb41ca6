//! The upstreams the gateway fronts and how it calls them: the one at `/mcp` (a URL or
//! a stdio command), the named ones as given (`upstreams.rs` reads them), time limits,
//! read buffers and HTTP/2.

use std::time::Duration;

use crate::config::upstreams::{self, NamedUpstream, UpstreamArg};
use crate::config::{CommandLine, ConfigError};

#[derive(Debug, Clone, clap::Args)]
pub struct UpstreamConfig {
    /// URL of the plain Streamable HTTP MCP server to put tasks in front of, served at
    /// `/mcp`; or `NAME=URL`, served at `/mcp/NAME` (repeatable; NAME is
    /// `[a-z0-9][a-z0-9-]*`). At least one upstream is required: this, `--upstream-cmd`
    /// or the config file's `[upstreams.NAME]`.
    #[arg(id = "upstream", long = "upstream", env = "MTG_UPSTREAM", value_name = "[NAME=]URL", value_parser = upstreams::parse_upstream_arg)]
    pub upstream_args: Vec<UpstreamArg>,

    /// The upstream served at `/mcp` (`--upstream URL`), once resolved.
    #[arg(skip)]
    pub url: Option<http::Uri>,

    /// The upstreams served at `/mcp/NAME`, from `--upstream NAME=URL` and the config
    /// file, once resolved.
    #[arg(skip)]
    pub named: Vec<NamedUpstream>,

    /// In a named upstream's settings (`Config::for_upstream`), its name.
    #[arg(skip)]
    pub name: Option<String>,

    /// Command line of a local stdio MCP server to start and put tasks in front of,
    /// e.g. "npx -y @modelcontextprotocol/server-everything". Split like a POSIX shell
    /// does (quotes, backslashes) but not run through one. The gateway restarts it
    /// when it exits.
    #[arg(long, env = "MTG_UPSTREAM_CMD", value_parser = super::parse_upstream_cmd)]
    pub upstream_cmd: Option<CommandLine>,

    /// Environment variable for the `--upstream-cmd` process, `KEY=VALUE`
    /// (repeatable; comma-separated in the environment). The process inherits the
    /// gateway's environment otherwise.
    #[arg(long = "upstream-env", env = "MTG_UPSTREAM_ENV", value_delimiter = ',', value_parser = super::parse_env_pair)]
    pub upstream_env: Vec<(String, String)>,

    /// Working directory of the `--upstream-cmd` process (default: the gateway's).
    #[arg(long, env = "MTG_UPSTREAM_CWD")]
    pub upstream_cwd: Option<std::path::PathBuf>,

    /// Most `--upstream-cmd` processes to run. A call that may ask the client for
    /// input gets a process to itself while it runs (a stdio server's requests carry
    /// no link to the call they belong to), so more processes let other calls go on
    /// meanwhile. Processes after the first start only when needed.
    #[arg(long, env = "MTG_UPSTREAM_POOL", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub upstream_pool: u16,

    /// Time limit for one upstream call, from sending it to its final answer
    /// (time spent waiting for a client's `tasks/update` included). 0 means no limit.
    #[arg(long, env = "MTG_UPSTREAM_TIMEOUT_MS", default_value_t = 0)]
    pub upstream_timeout_ms: u64,

    /// How much each upstream connection the gateway's own calls use (tasks, bridged
    /// requests) reads at a time, in bytes. A running task holds one connection, mostly
    /// idle, for its whole call: on `http://` upstreams the buffer exists only while
    /// bytes are read; on `https://` ones it is hyper's, kept for the connection's life.
    /// Larger answers still arrive whole, in more reads. Pass-through is not affected.
    #[arg(long, env = "MTG_UPSTREAM_READ_BUFFER_BYTES", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(512..=1_048_576))]
    pub upstream_read_buffer_bytes: u32,

    /// The gateway's own calls to an HTTP upstream (tasks, bridged requests) go as
    /// HTTP/2 streams on a pool of connections instead of one HTTP/1.1 connection per
    /// call in flight: prior-knowledge h2c for `http://`, and for `https://` whenever
    /// TLS's ALPN chooses h2. Much less memory per held call; the upstream must speak
    /// HTTP/2 (an HTTP/1.1-only `http://` upstream fails its calls). Pass-through
    /// traffic is not affected.
    #[arg(long, env = "MTG_UPSTREAM_HTTP2", default_value_t = false)]
    pub upstream_http2: bool,

    /// With `--upstream-http2`, the most calls (streams) put on one HTTP/2 connection;
    /// past it another connection is opened. At most the upstream's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (often 100 to 250; hyper servers: 200): calls
    /// over the server's cap would wait for others to end.
    #[arg(long, env = "MTG_UPSTREAM_HTTP2_MAX_STREAMS", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub upstream_http2_max_streams: u32,

    /// Roots the gateway reports when an upstream asks `roots/list` outside any call
    /// (repeatable, `file://` URIs).
    #[arg(long = "root", env = "MTG_ROOTS", value_delimiter = ',')]
    pub roots: Vec<String>,
}

impl UpstreamConfig {
    pub fn upstream_timeout(&self) -> Option<Duration> {
        (self.upstream_timeout_ms > 0).then(|| Duration::from_millis(self.upstream_timeout_ms))
    }

    /// Sorts `--upstream` into the one at `/mcp` and the named ones, adds the config
    /// file's, and refuses what cannot be served.
    pub(super) fn resolve(&mut self, from_file: Vec<NamedUpstream>) -> Result<(), ConfigError> {
        self.sort_args()?;
        self.named.extend(from_file);
        let mut seen = std::collections::HashSet::new();
        for named in &self.named {
            if !seen.insert(named.name.as_str()) {
                return inconsistent(format!(
                    "upstream {:?} is named twice (on the command line or in the config file)",
                    named.name
                ));
            }
        }
        match (&self.url, &self.upstream_cmd) {
            (Some(_), Some(_)) => {
                return inconsistent(
                    "--upstream URL and --upstream-cmd both name the upstream at /mcp; give one"
                        .into(),
                );
            }
            (None, None) if self.named.is_empty() => {
                return inconsistent(
                    "no upstream: give --upstream URL, --upstream-cmd CMD, --upstream NAME=URL \
                     or the config file's [upstreams.NAME]"
                        .into(),
                );
            }
            _ => {}
        }
        if self.upstream_cmd.is_none()
            && (!self.upstream_env.is_empty() || self.upstream_cwd.is_some())
        {
            return inconsistent(
                "--upstream-env and --upstream-cwd are for --upstream-cmd's process".into(),
            );
        }
        Ok(())
    }

    /// `--upstream URL` becomes the one at `/mcp` (only one may), `--upstream NAME=URL`
    /// a named one.
    fn sort_args(&mut self) -> Result<(), ConfigError> {
        for arg in std::mem::take(&mut self.upstream_args) {
            match arg {
                UpstreamArg::Plain(url) => {
                    if self.url.is_some() {
                        return inconsistent(format!(
                            "--upstream {url}: a second upstream for /mcp; name it (--upstream NAME=URL) to serve it at /mcp/NAME"
                        ));
                    }
                    self.url = Some(url);
                }
                UpstreamArg::Named(name, url) => {
                    self.named.push(upstreams::from_arg(name, url));
                }
            }
        }
        Ok(())
    }
}

fn inconsistent(text: String) -> Result<(), ConfigError> {
    Err(ConfigError::Inconsistent(text))
}
