//! Named upstreams: `--upstream NAME=URL` and the config file's `[upstreams.NAME]`
//! tables. Each is served at `/mcp/NAME` with its own settings; what an entry leaves out
//! is the gateway's (`Config::for_upstream`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use crate::config::{CommandLine, InvalidValue};
use mtg_protocol::task_support::TaskSupport;

/// One `/mcp/NAME` upstream and the settings it sets for itself.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedUpstream {
    pub name: String,
    pub source: Source,
    pub tool_policies: Option<Vec<(String, TaskSupport)>>,
    pub promote_after_ms: Option<u64>,
    pub upstream_timeout_ms: Option<u64>,
    pub upstream_http2: Option<bool>,
    pub upstream_http2_max_streams: Option<u32>,
    pub defer_after_ms: Option<u64>,
    pub deferred_max_wait_ms: Option<u64>,
    pub retry_on_owner_loss: Option<Vec<String>>,
    pub upstream_credential: Option<String>,
    pub upstream_credential_file: Option<PathBuf>,
    pub auth_jwt_audience: Option<String>,
    /// Its own `webhooks` tables (they hear only this upstream's tasks).
    pub webhooks: Vec<super::webhooks::WebhookTable>,
}

/// Where a named upstream is: a URL, or a command run over stdio.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Url(http::Uri),
    Cmd {
        command: CommandLine,
        env: Vec<(String, String)>,
        cwd: Option<PathBuf>,
        pool: Option<u16>,
    },
}

/// A name is one path segment of `/mcp/NAME` and a Prometheus label value: lower-case
/// letters, digits and '-', starting with a letter or digit, at most 63 characters (a
/// DNS label, so it can also name a Kubernetes object).
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase() | bytes[0].is_ascii_digit()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// What `--upstream` was given: a URL (served at `/mcp`), or `NAME=URL`.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamArg {
    Plain(http::Uri),
    Named(String, http::Uri),
}

/// A plain URL keeps its old meaning: a URL has "://" before any '=', a name never does.
pub fn parse_upstream_arg(raw: &str) -> Result<UpstreamArg, InvalidValue> {
    match raw.split_once('=') {
        Some((name, url)) if !name.contains("://") => {
            if !valid_name(name) {
                return Err(InvalidValue::BadUpstreamName(name.to_owned()));
            }
            Ok(UpstreamArg::Named(
                name.to_owned(),
                super::parse_upstream_url(url)?,
            ))
        }
        _ => Ok(UpstreamArg::Plain(super::parse_upstream_url(raw)?)),
    }
}

/// One `[upstreams.NAME]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Entry {
    url: Option<String>,
    cmd: Option<String>,
    env: Option<EnvSetting>,
    cwd: Option<PathBuf>,
    pool: Option<u16>,
    tool_policy: Option<BTreeMap<String, String>>,
    promote_after_ms: Option<u64>,
    upstream_timeout_ms: Option<u64>,
    upstream_http2: Option<bool>,
    upstream_http2_max_streams: Option<u32>,
    defer_after_ms: Option<u64>,
    deferred_max_wait_ms: Option<u64>,
    retry_on_owner_loss: Option<Vec<String>>,
    upstream_credential: Option<String>,
    upstream_credential_file: Option<PathBuf>,
    auth_jwt_audience: Option<String>,
    webhooks: Option<Value>,
}

/// `env` as a table (`{ KEY = "value" }`) or as `--upstream-env` takes it (`["KEY=value"]`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum EnvSetting {
    Table(BTreeMap<String, String>),
    Pairs(Vec<String>),
}

/// The config file's `upstreams` table, each entry checked; an error names the entry.
pub fn from_file(upstreams: &Value) -> Result<Vec<NamedUpstream>, String> {
    let Value::Object(entries) = upstreams else {
        return Err("upstreams: expected a table of NAME = { url = ... } entries".into());
    };
    entries
        .iter()
        .map(|(name, entry)| from_entry(name, entry).map_err(|e| format!("upstreams.{name}: {e}")))
        .collect()
}

fn from_entry(name: &str, entry: &Value) -> Result<NamedUpstream, String> {
    if !valid_name(name) {
        return Err(InvalidValue::BadUpstreamName(name.to_owned()).to_string());
    }
    let mut entry: Entry = serde_json::from_value(entry.clone()).map_err(|e| e.to_string())?;
    let source = source_of(&mut entry)?;
    let tool_policies = entry.tool_policy.take().map(policies_of).transpose()?;
    check_credential(&entry)?;
    Ok(NamedUpstream {
        name: name.to_owned(),
        source,
        tool_policies,
        promote_after_ms: entry.promote_after_ms,
        upstream_timeout_ms: entry.upstream_timeout_ms,
        upstream_http2: entry.upstream_http2,
        upstream_http2_max_streams: entry.upstream_http2_max_streams,
        defer_after_ms: entry.defer_after_ms,
        deferred_max_wait_ms: entry.deferred_max_wait_ms,
        retry_on_owner_loss: entry.retry_on_owner_loss,
        upstream_credential: entry.upstream_credential,
        upstream_credential_file: entry.upstream_credential_file,
        auth_jwt_audience: entry.auth_jwt_audience,
        webhooks: match &entry.webhooks {
            None => Vec::new(),
            Some(tables) => super::webhooks::tables_from_file(tables)?
                .into_iter()
                .map(|table| super::webhooks::WebhookTable {
                    upstreams: Vec::new(),
                    ..table
                })
                .collect(),
        },
    })
}

/// The entry's `url` or `cmd` (exactly one), with the settings that go with it.
fn source_of(entry: &mut Entry) -> Result<Source, String> {
    match (entry.url.take(), entry.cmd.take()) {
        (Some(_), Some(_)) => Err("has both url and cmd; give one".into()),
        (None, None) => Err("needs url or cmd".into()),
        (Some(url), None) => url_source(entry, &url),
        (None, Some(cmd)) => cmd_source(entry, &cmd),
    }
}

fn url_source(entry: &Entry, url: &str) -> Result<Source, String> {
    if entry.env.is_some() || entry.cwd.is_some() || entry.pool.is_some() {
        return Err("env, cwd and pool are for a cmd upstream, not a url".into());
    }
    if let Some(streams) = entry.upstream_http2_max_streams
        && !(1..=10_000).contains(&streams)
    {
        return Err(format!(
            "upstream-http2-max-streams: expected 1 to 10000, got {streams}"
        ));
    }
    let url = super::parse_upstream_url(url).map_err(|e| format!("url: {e}"))?;
    Ok(Source::Url(url))
}

fn cmd_source(entry: &mut Entry, cmd: &str) -> Result<Source, String> {
    if entry.upstream_http2.is_some() || entry.upstream_http2_max_streams.is_some() {
        return Err(
            "upstream-http2 and upstream-http2-max-streams are for a url upstream, not a cmd"
                .into(),
        );
    }
    Ok(Source::Cmd {
        command: super::parse_upstream_cmd(cmd).map_err(|e| format!("cmd: {e}"))?,
        env: match entry.env.take() {
            None => Vec::new(),
            Some(EnvSetting::Table(table)) => table.into_iter().collect(),
            Some(EnvSetting::Pairs(pairs)) => pairs
                .iter()
                .map(|pair| super::parse_env_pair(pair).map_err(|e| format!("env: {e}")))
                .collect::<Result<_, _>>()?,
        },
        cwd: entry.cwd.take(),
        pool: match entry.pool {
            Some(pool) if !(1..=64).contains(&pool) => {
                return Err(format!("pool: expected 1 to 64, got {pool}"));
            }
            pool => pool,
        },
    })
}

/// `[upstreams.NAME.tool-policy]`: each tool's policy, checked.
fn policies_of(table: BTreeMap<String, String>) -> Result<Vec<(String, TaskSupport)>, String> {
    table
        .into_iter()
        .map(|(tool, policy)| {
            let policy = policy
                .parse()
                .map_err(|e| format!("tool-policy.{tool}: {e}"))?;
            Ok((tool, policy))
        })
        .collect()
}

/// `upstream-credential-file` goes with `upstream-credential static`, and only with it.
fn check_credential(entry: &Entry) -> Result<(), String> {
    match (
        entry.upstream_credential.as_deref(),
        &entry.upstream_credential_file,
    ) {
        (Some("static"), None) => {
            Err("upstream-credential static needs upstream-credential-file".into())
        }
        (Some("static"), Some(_)) | (Some("client" | "none") | None, None) => Ok(()),
        (Some("client" | "none") | None, Some(_)) => {
            Err("upstream-credential-file is only read with upstream-credential static".into())
        }
        (Some(other), _) => Err(format!(
            "upstream-credential: expected client, none or static, got {other:?}"
        )),
    }
}

/// A named upstream from the command line: only its URL.
pub fn from_arg(name: String, url: http::Uri) -> NamedUpstream {
    NamedUpstream {
        name,
        source: Source::Url(url),
        tool_policies: None,
        promote_after_ms: None,
        upstream_timeout_ms: None,
        upstream_http2: None,
        upstream_http2_max_streams: None,
        defer_after_ms: None,
        deferred_max_wait_ms: None,
        retry_on_owner_loss: None,
        upstream_credential: None,
        upstream_credential_file: None,
        auth_jwt_audience: None,
        webhooks: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_are_path_segments() {
        for good in ["a", "files", "everything-2", "0x", &"n".repeat(63)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "-a", "A", "a_b", "a/b", "a.b", "é", &"n".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_plain_url_keeps_its_meaning() {
        let plain = parse_upstream_arg("http://h:1/mcp?x=1").unwrap();
        assert!(matches!(plain, UpstreamArg::Plain(_)));
        let named = parse_upstream_arg("files=http://h:1/mcp").unwrap();
        assert!(matches!(named, UpstreamArg::Named(n, _) if n == "files"));
        assert!(parse_upstream_arg("Files=http://h:1/mcp").is_err());
        assert!(parse_upstream_arg("files=ftp://h/mcp").is_err());
    }

    #[test]
    fn entries_are_checked_and_errors_name_them() {
        let upstreams = json!({
            "everything": {"url": "http://e:3001/mcp"},
            "files": {"cmd": "npx -y server-filesystem /data", "env": {"A": "1"},
                      "tool-policy": {"slow_tool": "required"}, "pool": 3}
        });
        let parsed = from_file(&upstreams).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(
            parsed[1].tool_policies,
            Some(vec![("slow_tool".into(), TaskSupport::Required)])
        );
        assert!(
            matches!(&parsed[1].source, Source::Cmd { env, pool: Some(3), .. }
            if env == &[("A".to_owned(), "1".to_owned())])
        );

        for (bad, says) in [
            (
                json!({"a": {"url": "http://x/mcp", "cmd": "s"}}),
                "both url and cmd",
            ),
            (json!({"a": {}}), "needs url or cmd"),
            (
                json!({"a": {"url": "http://x/mcp", "pool": 2}}),
                "not a url",
            ),
            (
                json!({"a": {"url": "http://x/mcp", "colour": 2}}),
                "unknown field `colour`",
            ),
            (json!({"A": {"url": "http://x/mcp"}}), "not a path segment"),
            (json!({"a": {"cmd": "s", "pool": 0}}), "pool"),
            (
                json!({"a": {"cmd": "s", "upstream-http2": true}}),
                "for a url upstream",
            ),
            (
                json!({"a": {"url": "http://x/mcp", "upstream-http2-max-streams": 0}}),
                "upstream-http2-max-streams",
            ),
            (
                json!({"a": {"url": "http://x/mcp", "tool-policy": {"t": "maybe"}}}),
                "tool-policy.t",
            ),
            (
                json!({"a": {"url": "http://x/mcp", "upstream-credential": "static"}}),
                "needs upstream-credential-file",
            ),
        ] {
            let error = from_file(&bad).unwrap_err();
            assert!(error.starts_with("upstreams."), "{error}");
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
