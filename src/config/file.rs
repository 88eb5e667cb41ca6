//! `--config FILE`: a TOML or YAML file that mirrors the flags. Keys are the long flag
//! names (`upstream`, `tool-policy`, `poll_interval_ms` also accepted); flags and
//! environment variables override the file.

use std::ffi::OsString;
use std::path::Path;

use clap::CommandFactory;
use serde_json::Value;

use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid {}: {source}", source.format())]
    Parse { path: String, source: SyntaxError },
    #[error("config file {path}: {detail}")]
    Content { path: String, detail: String },
}

/// The file's own parser's complaint.
#[derive(Debug, thiserror::Error)]
pub enum SyntaxError {
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
}

impl SyntaxError {
    fn format(&self) -> &'static str {
        match self {
            Self::Yaml(_) => "YAML",
            Self::Toml(_) => "TOML",
        }
    }
}

/// The command line with the file's settings added for every flag that neither the
/// command line nor the environment sets.
pub fn merge_into_args(args: Vec<OsString>) -> Result<Merged, ConfigFileError> {
    let Some(path) = config_path(&args) else {
        return Ok(Merged {
            args,
            upstreams: Vec::new(),
            webhooks: Vec::new(),
        });
    };
    let settings = read(&path)?;
    let command = Config::command();
    let mut merged = args;
    let mut upstreams = Vec::new();
    let mut webhooks = Vec::new();
    for (key, value) in settings {
        let flag = key.replace('_', "-");
        let content_error = |detail: String| ConfigFileError::Content {
            path: path.clone(),
            detail,
        };
        // Not a flag: a table of named upstreams, each with settings of its own.
        if flag == "upstreams" {
            upstreams = crate::config::upstreams::from_file(&value).map_err(content_error)?;
            continue;
        }
        // Not a flag either: `[[webhooks]]` tables.
        if flag == "webhooks" {
            webhooks = crate::config::webhooks::tables_from_file(&value).map_err(content_error)?;
            continue;
        }
        if flag == "config" {
            return Err(content_error(
                "a config file cannot name another config file".into(),
            ));
        }
        let Some(arg) = command
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
        else {
            return Err(content_error(format!(
                "unknown setting {key:?} (expected a flag name, e.g. \"upstream\")"
            )));
        };
        let on_command_line = merged.iter().any(|a| {
            let a = a.to_string_lossy();
            a == format!("--{flag}") || a.starts_with(&format!("--{flag}="))
        });
        let in_environment = arg
            .get_env()
            .is_some_and(|env| std::env::var_os(env).is_some());
        if on_command_line || in_environment {
            continue;
        }
        for item in values_of(&value).map_err(|d| content_error(format!("{key}: {d}")))? {
            match item {
                FlagValue::Switch(true) => merged.push(format!("--{flag}").into()),
                FlagValue::Switch(false) => {}
                FlagValue::Text(text) => merged.push(format!("--{flag}={text}").into()),
            }
        }
    }
    Ok(Merged {
        args: merged,
        upstreams,
        webhooks,
    })
}

/// The command line with the file's flags merged in, and the file's named upstreams.
pub struct Merged {
    pub args: Vec<OsString>,
    pub upstreams: Vec<crate::config::upstreams::NamedUpstream>,
    pub webhooks: Vec<crate::config::webhooks::WebhookTable>,
}

fn config_path(args: &[OsString]) -> Option<String> {
    let mut iter = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = iter.next() {
        if arg == "--config" {
            return iter.next();
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(path.to_owned());
        }
    }
    std::env::var("MTG_CONFIG").ok().filter(|p| !p.is_empty())
}

fn read(path: &str) -> Result<serde_json::Map<String, Value>, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let yaml = matches!(
        Path::new(path).extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let parsed: Result<Value, SyntaxError> = if yaml {
        serde_yaml_ng::from_str(&text).map_err(SyntaxError::from)
    } else {
        toml::from_str(&text).map_err(SyntaxError::from)
    };
    match parsed {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Default::default()),
        Ok(_) => Err(ConfigFileError::Content {
            path: path.to_owned(),
            detail: "expected a table of settings at the top level".into(),
        }),
        Err(source) => Err(ConfigFileError::Parse {
            path: path.to_owned(),
            source,
        }),
    }
}

enum FlagValue {
    Switch(bool),
    Text(String),
}

fn values_of(value: &Value) -> Result<Vec<FlagValue>, String> {
    match value {
        Value::Bool(b) => Ok(vec![FlagValue::Switch(*b)]),
        Value::String(s) => Ok(vec![FlagValue::Text(s.clone())]),
        Value::Number(n) => Ok(vec![FlagValue::Text(n.to_string())]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(FlagValue::Text(s.clone())),
                Value::Number(n) => Ok(FlagValue::Text(n.to_string())),
                other => Err(format!(
                    "list items must be strings or numbers, got {other}"
                )),
            })
            .collect(),
        // A table of tool policies reads naturally: [tool-policy] slow = "required".
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok(FlagValue::Text(format!("{k}={s}"))),
                other => Err(format!("table values must be strings, got {other}")),
            })
            .collect(),
        Value::Null => Ok(vec![]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(file: &str, ext: &str, cli: &[&str]) -> Result<Config, String> {
        let dir = std::env::temp_dir().join(format!("mtg-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("gateway.{ext}"));
        std::fs::write(&path, file).unwrap();
        let mut args: Vec<OsString> = vec![
            "mcp-task-gateway".into(),
            "--config".into(),
            path.clone().into(),
        ];
        args.extend(cli.iter().map(OsString::from));
        let config = Config::from_args(args).map_err(|e| e.to_string());
        std::fs::remove_dir_all(&dir).unwrap();
        config
    }

    #[test]
    fn toml_settings_apply_and_flags_override() {
        let file = r#"
            upstream = "http://127.0.0.1:9/mcp"
            poll_interval_ms = 250
            lenient-headers = true
            [tool-policy]
            slow = "required"
        "#;
        let config = parse_with(file, "toml", &["--poll-interval-ms", "500"]).unwrap();
        assert_eq!(config.tasks.poll_interval_ms, 500);
        assert!(config.edge.lenient_headers);
        assert_eq!(
            config.upstream.url.as_ref().unwrap().to_string(),
            "http://127.0.0.1:9/mcp"
        );
        assert_eq!(
            config.tasks.tool_policies,
            [(
                "slow".to_owned(),
                mtg_protocol::task_support::TaskSupport::Required
            )]
        );
    }

    #[test]
    fn yaml_settings_apply() {
        let file = "upstream: http://127.0.0.1:9/mcp\ntool-policy:\n  - fast=forbidden\nmax-ttl-ms: 1000\n";
        let config = parse_with(file, "yaml", &[]).unwrap();
        assert_eq!(config.tasks.max_ttl_ms, 1000);
        assert_eq!(
            config.tasks.tool_policies,
            [(
                "fast".to_owned(),
                mtg_protocol::task_support::TaskSupport::Forbidden
            )]
        );
    }

    #[test]
    fn webhook_tables_go_to_their_upstreams() {
        let file = r#"
            upstream = "http://127.0.0.1:9/mcp"
            [[webhooks]]
            url = "https://all.example/in"
            secret-file = "/s"
            [[webhooks]]
            url = "https://files-only.example/in"
            upstreams = ["files"]
            events = ["task.created"]
            [upstreams.files]
            url = "http://127.0.0.1:9/files"
            webhooks = [{ url = "https://own.example/in", include-result = true }]
        "#;
        let config = parse_with(file, "toml", &[]).unwrap();
        let urls = |tables: Vec<crate::config::webhooks::WebhookTable>| -> Vec<String> {
            tables.iter().map(|t| t.url.to_string()).collect()
        };
        assert_eq!(
            urls(config.webhooks.tables_for(None)),
            ["https://all.example/in"]
        );
        let files = config.for_upstream(&config.upstream.named[0]);
        assert_eq!(
            urls(files.webhooks.tables_for(Some("files"))),
            [
                "https://all.example/in",
                "https://files-only.example/in",
                "https://own.example/in"
            ]
        );
        let bad = "upstream = \"http://x/mcp\"\n[[webhooks]]\nurl = \"ftp://x\"\n";
        let err = parse_with(bad, "toml", &[]).unwrap_err();
        assert!(err.contains("webhooks[0]: url"), "{err}");
    }

    #[test]
    fn webhooks_are_refused_on_a_redis_cluster() {
        let err = Config::from_args([
            "mcp-task-gateway",
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--redis-cluster",
            "redis://127.0.0.1:7000",
            "--webhook",
            "https://hooks.example/in",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--redis-cluster"), "{err}");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = parse_with(
            "upstream = \"http://x/mcp\"\npoll-intervall-ms = 5\n",
            "toml",
            &[],
        )
        .unwrap_err();
        assert!(err.contains("poll-intervall-ms"), "{err}");
    }
}
