//! The session's GET stream with `notifications/tasks/status` pushed into it: each time
//! one of the session's tasks changes status, on whichever instance, this instance (the
//! one holding the stream) reads the task and sends its new state. A pass-through
//! upstream's own GET stream is relayed event by event around them; without one, the
//! stream carries the pushes alone.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http::Response;
use http_body_util::BodyExt;
use serde_json::Value;
use sse_stream::SseStream;
use tokio::sync::mpsc;

use crate::server::reply::Body;
use crate::server::sse::{sse_event, sse_response};
use crate::tasks::{TaskService, render};
use mtg_protocol::jsonrpc;
use mtg_protocol::names::method;
use mtg_protocol::wire::TaskStatus;

/// Room for events the client has not read yet.
const BACKLOG: usize = 64;

/// The GET stream of session `session` (as the client knows it) for `principal`;
/// `upstream` is the upstream's own GET stream, when it has one. It opens once this
/// instance hears the changes, so none announced after the client sees it is missed.
pub(crate) async fn stream(
    tasks: Arc<TaskService>,
    session: String,
    principal: String,
    upstream: Option<Response<Body>>,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(BACKLOG);
    let mut feed = tasks.feed_session(&session).await;
    // (The parser wants a body error that is a std error.)
    let mut upstream = upstream
        .map(|response| SseStream::new(response.into_body().map_err(std::io::Error::other)));
    tokio::spawn(async move {
        let mut last_sent: HashMap<String, TaskStatus> = HashMap::new();
        loop {
            let event = async {
                match upstream.as_mut() {
                    Some(events) => events.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = event => match event {
                    Some(Ok(event)) => {
                        if tx.send(Bytes::from(event)).await.is_err() {
                            return;
                        }
                    }
                    // The upstream's stream ended; the pushes go on alone.
                    _ => upstream = None,
                },
                change = feed.changes.recv() => {
                    let Some((task_id, progress)) = change else { return };
                    let push = match progress {
                        Some(progress) => progress_push(&tasks, &task_id, &principal, progress).await,
                        None => status_push(&tasks, &task_id, &principal, &mut last_sent).await,
                    };
                    let Some(push) = push else { continue };
                    if tx.send(sse_event(&push)).await.is_err() {
                        return;
                    }
                }
                () = tx.closed() => return,
            }
        }
    });
    sse_response(rx)
}

/// `notifications/tasks/status` for the task, if its status is not the one last sent.
async fn status_push(
    tasks: &TaskService,
    task_id: &str,
    principal: &str,
    last_sent: &mut HashMap<String, TaskStatus>,
) -> Option<Vec<u8>> {
    let task = tasks.get(task_id, principal).await.ok()?;
    let shown = render::session_task(&task);
    if last_sent.get(task_id) == Some(&shown.status) {
        return None;
    }
    last_sent.insert(task_id.to_owned(), shown.status);
    let params = serde_json::to_value(&shown).ok()?;
    let message = jsonrpc::notification_value(method::TASK_STATUS, Some(params));
    serde_json::to_vec(&message).ok()
}

/// The upstream's progress on the task under the progress token the client gave the
/// call (the runner sends its own token upstream), if it gave one.
async fn progress_push(
    tasks: &TaskService,
    task_id: &str,
    principal: &str,
    mut progress: Value,
) -> Option<Vec<u8>> {
    let task = tasks.get(task_id, principal).await.ok()?;
    let request: Value = serde_json::from_str(task.request.get()).ok()?;
    let token = request.pointer("/_meta/progressToken")?.clone();
    progress
        .as_object_mut()?
        .insert("progressToken".into(), token);
    let message = jsonrpc::notification_value(method::PROGRESS, Some(progress));
    serde_json::to_vec(&message).ok()
}

/// Whether an upstream's answer to GET is an event stream to relay.
pub(crate) fn is_event_stream(response: &Response<Body>) -> bool {
    response.status().is_success()
        && response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"))
}

/// Drains a response not relayed, so its connection can be reused.
pub(crate) async fn discard(response: Response<Body>) {
    let _ = response.into_body().collect().await;
}
