//! `subscriptions/listen` for 2026-07-28 clients. The gateway serves the tasks
//! extension's `taskIds` itself: `notifications/tasks` for the caller's tasks, fed by
//! task changes on any instance. The other kinds (list changes, resource updates) go to
//! the upstream's own `subscriptions/listen` and its notifications are relayed; an
//! upstream without one acknowledges none of them, and neither does the gateway.
//! The stream ends gracefully (the request's response) once every task it follows has
//! ended and the upstream's part, if any, has ended too, or when the gateway stops.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::server::reply::Body;
use crate::server::sse::{sse_event, sse_response};
use crate::tasks::follow::Followers;
use crate::tasks::{TaskService, render};
use crate::upstream::{Caller, Exchange, StopReason, Upstream};
use mtg_protocol::jsonrpc::{ErrorObject, Message, code};
use mtg_protocol::meta;
use mtg_protocol::names::method;
use mtg_protocol::wire::listen::{self, ListenParams, MAX_TASK_IDS};
use mtg_protocol::wire::{self, ResultType};
use mtg_store::TaskRecord;

/// Room for notifications the client has not read yet; a slower client holds the
/// follower back, which then sends the latest state when it catches up.
const BACKLOG: usize = 16;
/// How long the upstream may take to acknowledge its part.
const UPSTREAM_ACK_WITHIN: Duration = Duration::from_secs(10);

/// One `subscriptions/listen` request.
pub(crate) struct Listen<'a> {
    pub tasks: &'a Arc<TaskService>,
    pub followers: &'a Followers,
    pub upstream: &'a Arc<dyn Upstream>,
    pub id: &'a Value,
    pub params: Option<&'a Value>,
    pub principal: &'a str,
    pub auth: Option<HeaderValue>,
    /// The gateway is stopping: the stream ends gracefully.
    pub closing: tokio_util::sync::CancellationToken,
}

pub(crate) async fn listen(request: Listen<'_>) -> Result<Response<Body>, ErrorObject> {
    let parsed: ListenParams =
        serde_json::from_value(request.params.cloned().unwrap_or(Value::Null)).map_err(|e| {
            ErrorObject::invalid_params(format!(
                "subscriptions/listen needs params.notifications, an object (taskIds: an array of task ids): {e}"
            ))
        })?;
    let filter = parsed.notifications;
    let task_ids = match filter.task_ids {
        Some(ids) => Some(followed_tasks(&request, ids).await?),
        None => None,
    };
    let upstream = if filter.others.is_empty() {
        None
    } else {
        upstream_part(&request, filter.others).await
    };
    let (acknowledged, upstream) = upstream.unwrap_or_default();

    let (tx, rx) = mpsc::channel::<Bytes>(BACKLOG);
    let id = request.id.clone();
    let first = listen::acknowledged(&id, acknowledged, task_ids.as_deref());
    // The channel is new: the acknowledgement always fits, before any notification.
    let _ = tx.try_send(event(&first));
    let followers = request.followers.clone();
    let principal = request.principal.to_owned();
    let closing = request.closing.clone();
    tokio::spawn(async move {
        let followed = task_ids.unwrap_or_default();
        let both = async {
            let (own, relayed) = tokio::join!(
                follow_tasks(&followers, &followed, &principal, &id, &tx),
                relay_upstream(upstream, &id, &tx, &closing),
            );
            own && relayed
        };
        let open = tokio::select! {
            // The upstream's part stops itself at the close (`relay_upstream`).
            biased;
            open = both => open,
            () = closing.cancelled() => !tx.is_closed(),
        };
        if open {
            let _ = tx.send(event(&listen::ended(&id))).await;
        }
    });
    Ok(sse_response(rx))
}

/// The task ids of the caller's live tasks among `requested`, deduplicated. Another
/// caller's task reads like an unknown id: left out, as is an expired one.
async fn followed_tasks(
    request: &Listen<'_>,
    requested: Vec<String>,
) -> Result<Vec<String>, ErrorObject> {
    if !requested.is_empty() && !meta::declares_tasks(request.params) {
        return Err(ErrorObject::new(
            code::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "notifications for taskIds need the io.modelcontextprotocol/tasks extension in the request's clientCapabilities",
        )
        .with_data(wire::missing_tasks_capability_data()));
    }
    if requested.len() > MAX_TASK_IDS {
        return Err(ErrorObject::invalid_params(format!(
            "subscriptions/listen names {} taskIds; at most {MAX_TASK_IDS}",
            requested.len()
        )));
    }
    let mut followed: Vec<String> = Vec::new();
    for task_id in requested {
        if !followed.contains(&task_id)
            && request
                .tasks
                .store()
                .get(&task_id, request.principal)
                .await?
                .is_some()
        {
            followed.push(task_id);
        }
    }
    Ok(followed)
}

/// The upstream's `subscriptions/listen` for the kinds the gateway does not serve: what
/// it acknowledged, and the open exchange its notifications come on. `None` when the
/// upstream has no such method, refused, or did not acknowledge in time.
async fn upstream_part(
    request: &Listen<'_>,
    others: Map<String, Value>,
) -> Option<(Map<String, Value>, Option<Box<dyn Exchange>>)> {
    let capabilities = meta::forwarded_capabilities(request.params);
    let caller = Caller {
        capabilities: &capabilities,
        auth: request.auth.as_ref(),
        session: None,
    };
    let params = json!({ "notifications": others });
    let deadline = tokio::time::Instant::now() + UPSTREAM_ACK_WITHIN;
    let opening = request
        .upstream
        .open_call(&caller, method::SUBSCRIPTIONS_LISTEN, Some(params));
    // `true`: the upstream answered in time, without an acknowledgement.
    let answered = match tokio::time::timeout_at(deadline, opening).await {
        Ok(Ok(mut exchange)) => {
            let acknowledging = acknowledgement(exchange.as_mut());
            match tokio::time::timeout_at(deadline, acknowledging).await {
                Ok(Some(filter)) => return Some((filter, Some(exchange))),
                Ok(None) => true,
                Err(_) => {
                    let _ = exchange.stop(StopReason::TimedOut).await;
                    false
                }
            }
        }
        Ok(Err(_)) => true,
        Err(_) => false,
    };
    match answered {
        true => {
            tracing::debug!("the upstream serves no subscriptions/listen; its kinds are left out")
        }
        false => tracing::warn!("the upstream did not acknowledge subscriptions/listen in time"),
    }
    None
}

/// The upstream's acknowledgement of its `subscriptions/listen`: the kinds it serves.
/// `None` when it answered instead (nothing may come before the acknowledgement) or
/// failed.
async fn acknowledgement(exchange: &mut dyn Exchange) -> Option<Map<String, Value>> {
    loop {
        match exchange.next().await? {
            Ok(Message::Notification { method: m, params })
                if m == method::SUBSCRIPTIONS_ACKNOWLEDGED =>
            {
                return Some(listen::acknowledged_filter(params.as_ref()));
            }
            Ok(Message::Response { .. }) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Sends each change of the followed tasks; `true` once all ended (the client is there).
async fn follow_tasks(
    followers: &Followers,
    followed: &[String],
    principal: &str,
    id: &Value,
    tx: &mpsc::Sender<Bytes>,
) -> bool {
    if followed.is_empty() {
        return true;
    }
    let (records, mut changed) = mpsc::channel::<Arc<TaskRecord>>(1);
    let relay = async {
        while let Some(task) = changed.recv().await {
            let shown = render::task_result(&task, ResultType::Complete);
            if tx
                .send(event(&listen::task_notification(id, &shown)))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    };
    let (_, open) = tokio::join!(
        async {
            followers.follow(followed, principal, &records).await;
            drop(records);
        },
        relay
    );
    open
}

/// Relays the upstream's notifications under the client's subscription id until the
/// upstream ends its part; `true` then (the client is there). A client that hangs up,
/// or the gateway's close, stops the upstream's part (`upstream::stop`).
async fn relay_upstream(
    upstream: Option<Box<dyn Exchange>>,
    id: &Value,
    tx: &mpsc::Sender<Bytes>,
    closing: &tokio_util::sync::CancellationToken,
) -> bool {
    let Some(mut exchange) = upstream else {
        return true;
    };
    loop {
        tokio::select! {
            next = exchange.next() => match next {
                Some(Ok(Message::Notification { method, params })) => {
                    let message = listen::relabelled(id, &method, params);
                    if tx.send(event(&message)).await.is_err() {
                        return false;
                    }
                }
                Some(Ok(Message::Request { .. })) => {}
                Some(Ok(Message::Response { .. })) | Some(Err(_)) | None => return true,
            },
            () = tx.closed() => {
                let _ = exchange.stop(StopReason::ClientLeft).await;
                return false;
            }
            () = closing.cancelled() => {
                let _ = exchange.stop(StopReason::ShuttingDown).await;
                return !tx.is_closed();
            }
        }
    }
}

fn event(message: &Value) -> Bytes {
    sse_event(&serde_json::to_vec(message).unwrap_or_default())
}
