//! Webhooks: where task events go (`--webhook`, the config file's `[[webhooks]]` tables
//! and each named upstream's own), how they are signed, retried and kept safe.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use mtg_store::EventType;

#[derive(Debug, Clone, clap::Args)]
pub struct WebhookConfig {
    /// URL that receives task events as signed POSTs (Standard Webhooks), for every
    /// upstream; repeatable (`MTG_WEBHOOKS`: comma-separated). It hears the four events
    /// that end or block a task; `[[webhooks]]` tables in `--config` choose more.
    #[arg(long = "webhook", env = "MTG_WEBHOOKS", value_delimiter = ',', value_parser = parse_webhook_url)]
    pub webhooks: Vec<http::Uri>,

    /// File holding the signing secret (`whsec_<base64>`) of the `--webhook` URLs. Give
    /// it twice during a rotation: requests then carry both signatures.
    #[arg(long, env = "MTG_WEBHOOK_SECRET_FILE", value_delimiter = ',')]
    pub webhook_secret_file: Vec<PathBuf>,

    /// Largest result sent with `include-result = true`; a larger one is left out and
    /// the event says `resultTruncated: true`.
    #[arg(long, env = "MTG_WEBHOOK_MAX_BODY_BYTES", default_value_t = 262_144)]
    pub webhook_max_body_bytes: u64,

    /// How long an event is retried before it becomes a dead letter.
    #[arg(long, env = "MTG_WEBHOOK_RETRY_HOURS", default_value_t = 24.0)]
    pub webhook_retry_hours: f64,

    /// The first retry's delay; each next one doubles, up to `--webhook-retry-max-ms`.
    #[arg(long, env = "MTG_WEBHOOK_RETRY_FIRST_MS", default_value_t = 5_000)]
    pub webhook_retry_first_ms: u64,

    /// The longest delay between two retries.
    #[arg(long, env = "MTG_WEBHOOK_RETRY_MAX_MS", default_value_t = 3_600_000)]
    pub webhook_retry_max_ms: u64,

    /// Allow webhook URLs that resolve to loopback, private, link-local or metadata
    /// addresses (in-cluster receivers, tests). Off: such a URL is refused at start and
    /// at each delivery.
    #[arg(long, env = "MTG_WEBHOOK_ALLOW_PRIVATE", default_value_t = false)]
    pub webhook_allow_private: bool,

    /// PEM CA certificate(s) that sign `https://` receivers' certificates, instead of
    /// the system roots.
    #[arg(long, env = "MTG_WEBHOOK_CA_FILE")]
    pub webhook_ca_file: Option<PathBuf>,

    /// The config file's `[[webhooks]]` tables (not flags).
    #[arg(skip)]
    pub tables: Vec<WebhookTable>,
}

/// One `[[webhooks]]` table (or one of `[upstreams.NAME]`'s `webhooks`), checked.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookTable {
    pub url: http::Uri,
    pub events: Vec<EventType>,
    /// The named upstreams whose events it hears (`""`: the one at `/mcp`); all if empty.
    pub upstreams: Vec<String>,
    pub secret_files: Vec<PathBuf>,
    pub timeout_ms: u64,
    pub include_result: bool,
}

/// The events a subscription hears unless it says: those that end or block a task.
pub const DEFAULT_EVENTS: [EventType; 4] = [
    EventType::InputRequired,
    EventType::Completed,
    EventType::Failed,
    EventType::Cancelled,
];

/// A delivery's time limit unless the table says.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    url: String,
    events: Option<Vec<String>>,
    upstreams: Option<Vec<String>>,
    #[serde(alias = "secret_file")]
    secret_file: Option<OneOrMany>,
    #[serde(alias = "timeout_ms")]
    timeout_ms: Option<u64>,
    #[serde(alias = "include_result", default)]
    include_result: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(PathBuf),
    Many(Vec<PathBuf>),
}

/// A list of `[[webhooks]]` tables from the config file; an error names the table.
pub fn tables_from_file(value: &Value) -> Result<Vec<WebhookTable>, String> {
    let Value::Array(tables) = value else {
        return Err("webhooks: expected a list of [[webhooks]] tables".into());
    };
    tables
        .iter()
        .enumerate()
        .map(|(i, table)| table_of(table).map_err(|e| format!("webhooks[{i}]: {e}")))
        .collect()
}

fn table_of(value: &Value) -> Result<WebhookTable, String> {
    let table: Table = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let url = parse_webhook_url(&table.url).map_err(|e| format!("url: {e}"))?;
    let events = match table.events {
        None => DEFAULT_EVENTS.to_vec(),
        Some(names) => names
            .iter()
            .map(|name| {
                EventType::parse(name).ok_or_else(|| {
                    let known: Vec<&str> = EventType::ALL.iter().map(|e| e.as_str()).collect();
                    format!(
                        "unknown event {name:?} (expected one of {})",
                        known.join(", ")
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if events.is_empty() {
        return Err("events is empty".into());
    }
    let secret_files = match table.secret_file {
        None => Vec::new(),
        Some(OneOrMany::One(path)) => vec![path],
        Some(OneOrMany::Many(paths)) => paths,
    };
    if secret_files.len() > 2 {
        return Err("secret-file: at most two (the new and the old during a rotation)".into());
    }
    Ok(WebhookTable {
        url,
        events,
        upstreams: table.upstreams.unwrap_or_default(),
        secret_files,
        timeout_ms: table.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
        include_result: table.include_result,
    })
}

/// An `http://` or `https://` URL with a host.
fn parse_webhook_url(raw: &str) -> Result<http::Uri, super::InvalidValue> {
    super::parse_upstream_url(raw)
}

impl WebhookConfig {
    /// Whether any subscription is configured.
    pub fn any(&self) -> bool {
        !self.webhooks.is_empty() || !self.tables.is_empty()
    }

    /// The tables that hear the upstream `name` (`None`: the one at `/mcp`).
    pub fn tables_for(&self, name: Option<&str>) -> Vec<WebhookTable> {
        let name = name.unwrap_or("");
        self.tables
            .iter()
            .filter(|t| t.upstreams.is_empty() || t.upstreams.iter().any(|u| u == name))
            .map(|t| WebhookTable {
                upstreams: Vec::new(),
                ..t.clone()
            })
            .collect()
    }

    /// Rules across the webhook flags.
    pub fn check(&self) -> Result<(), super::ConfigError> {
        let bad = |detail: String| Err(super::ConfigError::Inconsistent(detail));
        if self.webhook_secret_file.len() > 2 {
            return bad("--webhook-secret-file: at most two (the new and the old)".into());
        }
        if self.webhook_retry_hours.is_nan() || self.webhook_retry_hours <= 0.0 {
            return bad("--webhook-retry-hours must be above 0".into());
        }
        if self.webhook_retry_first_ms == 0
            || self.webhook_retry_max_ms < self.webhook_retry_first_ms
        {
            return bad(
                "--webhook-retry-first-ms must be above 0 and at most --webhook-retry-max-ms"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_reads_its_settings_and_refuses_unknown_events() {
        let value = serde_json::json!([{
            "url": "https://hooks.example/in",
            "events": ["task.created", "task.completed"],
            "upstreams": ["files"],
            "secret-file": ["/s/new", "/s/old"],
            "timeout-ms": 2000,
            "include-result": true,
        }]);
        let tables = tables_from_file(&value).unwrap();
        assert_eq!(tables[0].events, [EventType::Created, EventType::Completed]);
        assert_eq!(tables[0].secret_files.len(), 2);
        assert_eq!(
            (tables[0].timeout_ms, tables[0].include_result),
            (2000, true)
        );
        let bad = serde_json::json!([{"url": "https://x/", "events": ["task.done"]}]);
        let err = tables_from_file(&bad).unwrap_err();
        assert!(err.contains("task.done"), "{err}");
        let defaults = tables_from_file(&serde_json::json!([{"url": "http://x/"}])).unwrap();
        assert_eq!(defaults[0].events, DEFAULT_EVENTS);
    }
}
