//! `subscriptions/listen` (2026-07-28) as the gateway serves it: the task ids of the
//! tasks extension's filter, the acknowledgement, each `notifications/tasks`, and the
//! graceful end. Every message carries the subscription's id (the request's JSON-RPC id).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::TaskResult;
use crate::jsonrpc;
use crate::names::method;

pub(crate) const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Most task ids one listen may name: each is read on every change of any of them.
pub const MAX_TASK_IDS: usize = 1000;

/// `params` of `subscriptions/listen`.
#[derive(Debug, Deserialize)]
pub struct ListenParams {
    pub notifications: Filter,
}

/// The filter. The gateway serves `taskIds` itself; the other kinds (list changes,
/// resource updates) are the upstream's to serve, if it can.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Filter {
    pub task_ids: Option<Vec<String>>,
    #[serde(flatten)]
    pub others: Map<String, Value>,
}

fn subscription_meta(id: &Value) -> Value {
    json!({ META_SUBSCRIPTION_ID: id })
}

/// `notifications/subscriptions/acknowledged`: what the gateway agreed to send, the
/// upstream's part (`upstream`) and the task ids, if any were asked for.
pub fn acknowledged(
    id: &Value,
    upstream: Map<String, Value>,
    task_ids: Option<&[String]>,
) -> Value {
    let mut notifications = upstream;
    if let Some(task_ids) = task_ids {
        notifications.insert("taskIds".into(), json!(task_ids));
    }
    jsonrpc::notification_value(
        method::SUBSCRIPTIONS_ACKNOWLEDGED,
        Some(json!({
            "_meta": subscription_meta(id),
            "notifications": notifications,
        })),
    )
}

/// The acknowledged filter of an upstream's `notifications/subscriptions/acknowledged`.
pub fn acknowledged_filter(params: Option<&Value>) -> Map<String, Value> {
    params
        .and_then(|p| p.get("notifications"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// An upstream's notification as the client's subscription `id` carries it.
pub fn relabelled(id: &Value, method: &str, params: Option<Value>) -> Value {
    let mut params = params.unwrap_or_else(|| json!({}));
    if let Some(fields) = params.as_object_mut() {
        let meta = fields.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(META_SUBSCRIPTION_ID.into(), id.clone());
        }
    }
    jsonrpc::notification_value(method, Some(params))
}

/// `notifications/tasks`: the task as `tasks/get` shows it (a `DetailedTask`, without
/// the result's `resultType`).
pub fn task_notification(id: &Value, task: &TaskResult<'_>) -> Value {
    let mut params = serde_json::to_value(task).unwrap_or_else(|_| json!({}));
    if let Some(params) = params.as_object_mut() {
        params.remove("resultType");
        // The notification's `_meta` is the subscription's.
        params.insert("_meta".into(), subscription_meta(id));
    }
    jsonrpc::notification_value(method::TASKS_NOTIFICATION, Some(params))
}

/// The response that ends the subscription gracefully.
pub fn ended(id: &Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {"resultType": "complete", "_meta": subscription_meta(id)},
    })
}
