//! `tasks/result`: answers at once for an ended task; otherwise an SSE stream that
//! carries the task's input requests to the client as server-to-client requests (ids
//! the gateway can route back, related-task `_meta`) and ends with the call's outcome.
//! The client's answers come back as POSTed responses (`answer` in `mod.rs`).

use http::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{SessionCaller, session_error};
use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::server::sse::{sse_event, sse_response};
use crate::tasks::render;
use mtg_protocol::jsonrpc::{self, ErrorObject};
use mtg_protocol::names::method;
use mtg_protocol::wire::dialect_2025::{RELATED_TASK, input_request_id, related_task};
use mtg_protocol::wire::{InputRequest, TaskIdParams};

/// Room for events the client has not read yet; a client this far behind is gone.
const BACKLOG: usize = 64;

pub(crate) async fn tasks_result(
    gateway: &Gateway,
    session: &SessionCaller,
    id: &Value,
    params: Option<&Value>,
) -> Response<Body> {
    let task_id = match serde_json::from_value::<TaskIdParams>(params.cloned().unwrap_or_default())
    {
        Ok(params) => params.task_id,
        Err(e) => {
            let error = ErrorObject::invalid_params(format!(
                "invalid {} params: {e}",
                method::TASKS_RESULT
            ));
            return session_error(Some(id), &error);
        }
    };
    let task = match gateway.tasks.get(&task_id, &session.principal).await {
        Ok(task) => task,
        Err(error) => return session_error(Some(id), &error),
    };
    if task.status.is_terminal() {
        return final_answer(id, render::session_outcome(&task));
    }
    let (tx, rx) = mpsc::channel(BACKLOG);
    let dialect = gateway.dialect.clone();
    let principal = session.principal.clone();
    let id = id.clone();
    tokio::spawn(async move {
        let deliver = |key: &str, request: &InputRequest| {
            let message = input_request(&task_id, key, request);
            tx.try_send(sse_event(&message)).is_ok()
        };
        let ended = tokio::select! {
            ended = dialect.wait_for_end(&task_id, &principal, deliver) => ended,
            // The client went away; a later tasks/result picks up from the record.
            () = tx.closed() => return,
        };
        let outcome = match ended {
            Ok(Some(task)) => render::session_outcome(&task),
            Ok(None) => return,
            Err(error) => Err(error),
        };
        let body = jsonrpc::response_value(id, outcome);
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let _ = tx.send(sse_event(&bytes)).await;
    });
    sse_response(rx)
}

fn final_answer(id: &Value, outcome: Result<Value, ErrorObject>) -> Response<Body> {
    match outcome {
        Ok(result) => reply::json(StatusCode::OK, jsonrpc::success_body_of(id, &result)),
        Err(error) => session_error(Some(id), &error),
    }
}

/// Input request `key` as a server-to-client request tied to its task.
pub(crate) fn input_request(task_id: &str, key: &str, request: &InputRequest) -> Vec<u8> {
    let mut params = request.params.clone().unwrap_or_else(|| json!({}));
    if let Some(object) = params.as_object_mut() {
        let meta = object.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(RELATED_TASK.into(), related_task(task_id));
        }
    }
    let message = jsonrpc::request_value(
        Value::from(input_request_id(task_id, key)),
        &request.method,
        Some(params),
    );
    serde_json::to_vec(&message).unwrap_or_default()
}
