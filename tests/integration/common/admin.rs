//! The admin API as the tests call it (`--metrics-listen` with `--admin-token-file`).

use std::path::PathBuf;

use serde_json::Value;

use super::{Proc, free_port, start_gateway};

/// A token file holding `token`, of this test's own.
pub fn token_file(token: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("mtg-admin-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

/// A gateway in front of `upstream_url` with its metrics listener and the admin API on
/// `token`, plus `extra` flags: (process, client URL, admin base URL).
pub fn start_admin_gateway(
    upstream_url: &str,
    token: &str,
    extra: &[&str],
) -> (Proc, String, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let file = token_file(token);
    let mut args = vec![
        "--metrics-listen",
        &listen,
        "--admin-token-file",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (gateway, url) = start_gateway(upstream_url, &args);
    (gateway, url, format!("http://{listen}"))
}

/// `METHOD url` with `token` as the bearer: (status, body; `null` when not JSON).
pub async fn request(method: &str, url: &str, token: &str) -> (u16, Value) {
    let reply = reqwest::Client::new()
        .request(method.parse().unwrap(), url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = reply.status().as_u16();
    (status, reply.json().await.unwrap_or(Value::Null))
}

/// The task ids of a listing page, sorted.
pub fn listed_ids(page: &Value) -> Vec<String> {
    let mut ids: Vec<String> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}
