//! The admin API as the tests call it (`--metrics-listen` with `--admin-token-file`).

use serde_json::Value;

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
