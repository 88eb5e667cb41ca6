//! The 2025-11-25 task dialect for session clients that declared `capabilities.tasks`:
//! task-augmented `tools/call`, `tasks/get|result|list|cancel`, and the client's answers
//! to the input requests a `tasks/result` stream delivered. Everything else such a
//! session sends goes on as before (`Handled::PassOn`).
//!
//! Both kinds of client session come here: those passed through to a 2025-xx HTTP
//! upstream (`passthrough/marked.rs`: the session id is marked, the call runs in the
//! client's own upstream session) and those the gateway serves itself (`served/`).
//! `results.rs` answers `tasks/result`; `deferred.rs` runs a plain call of either kind
//! as a task of the session, answered on the call (`tasks::deferral`).

pub(crate) mod confirm;
pub(crate) mod deferred;
pub(crate) mod negotiate;
pub(crate) mod push;
pub(crate) mod results;

use http::{HeaderValue, Response, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::tasks::dialect_2025::SessionLink;
use crate::tasks::{Started, ToolCall, render};
use crate::upstream::{Caller, PassThroughSession};
use mtg_protocol::jsonrpc::{self, ErrorObject, Message, code};
use mtg_protocol::names::method;
use mtg_protocol::task_support::TaskSupport;
use mtg_protocol::wire::TaskIdParams;
use mtg_protocol::wire::dialect_2025::{
    self as wire, CreateTaskResult, FALLBACK_MODE, ListParams, ListTasksResult, TaskParam,
};

/// Who sends a session client's message, as the handlers need it: the client session it
/// came in (its id as the client knows it), the client's upstream session for a
/// pass-through one, and the caller's capabilities, credentials and principal.
#[derive(Clone)]
pub(crate) struct SessionCaller {
    /// The session id as the client sends it.
    pub id: String,
    /// Pass-through: the client's session upstream, where its task calls run.
    pub upstream: Option<PassThroughSession>,
    /// Gateway-served: what the client declared (elicitation, sampling, roots), which
    /// the upstream is told of with each call.
    pub capabilities: Map<String, Value>,
    pub auth: Option<HeaderValue>,
    pub principal: String,
    /// The client declared SEP-1905 response modes.
    pub modes: bool,
}

impl SessionCaller {
    /// Whom the gateway's own requests for this session (its tool lists) go out as: the
    /// session's capabilities and credentials, in an upstream session of the gateway's.
    pub(crate) fn caller(&self) -> Caller<'_> {
        Caller {
            capabilities: &self.capabilities,
            auth: self.auth.as_ref(),
            session: None,
        }
    }

    /// A call of this session's to run as its task; `params` as the upstream gets them.
    pub(crate) fn tool_call(
        &self,
        params: &impl serde::Serialize,
        immediate: bool,
        ttl_ms: Option<u64>,
        relay: Option<crate::tasks::NotificationRelay>,
    ) -> Result<ToolCall, ErrorObject> {
        Ok(ToolCall {
            params: serde_json::value::to_raw_value(params)
                .map_err(|e| ErrorObject::internal(format!("tool call params: {e}")))?,
            capabilities: self.capabilities.clone(),
            auth: self.auth.clone(),
            principal: self.principal.clone(),
            session: Some(SessionLink {
                client_session: self.id.clone(),
                upstream: self.upstream.clone(),
                immediate,
            }),
            ttl_ms,
            relay,
        })
    }
}

pub(crate) enum Handled {
    Reply(Response<Body>),
    /// Not the gateway's: on to the upstream as it is.
    PassOn,
}

pub(crate) async fn handle(
    gateway: &Gateway,
    session: &SessionCaller,
    message: &Message,
) -> Handled {
    match message {
        Message::Request {
            id,
            method: name,
            params,
        } => {
            if let Some(refusal) =
                gateway
                    .edge
                    .limit_task_request(|| session.principal.clone(), name, id)
            {
                return Handled::Reply(refusal);
            }
            let outcome = match name.as_str() {
                method::TOOLS_CALL => match tools_call(gateway, session, params.as_ref()).await {
                    Some(outcome) => outcome,
                    None => return Handled::PassOn,
                },
                method::TASKS_GET => tasks_get(gateway, session, params.as_ref()).await,
                method::TASKS_LIST => tasks_list(gateway, session, params.as_ref()).await,
                method::TASKS_CANCEL => tasks_cancel(gateway, session, params.as_ref()).await,
                method::TASKS_RESULT => {
                    return Handled::Reply(
                        results::tasks_result(gateway, session, id, params.as_ref()).await,
                    );
                }
                _ => return Handled::PassOn,
            };
            Handled::Reply(match outcome {
                Ok(result) => reply::json(StatusCode::OK, jsonrpc::success_body(id, &result)),
                Err(error) => session_error(Some(id), &error),
            })
        }
        Message::Response { id, outcome } => match wire::parse_input_request_id(id) {
            Some((task_id, key)) => {
                Handled::Reply(answer(gateway, session, task_id, key, outcome.clone()).await)
            }
            None => Handled::PassOn,
        },
        Message::Notification { .. } => Handled::PassOn,
    }
}

/// A session that did not declare `capabilities.tasks` still gets a gateway task when it
/// asks for one (`params.task`): SDK quick starts send it without declaring, since a
/// 2025-11-25 client declares that capability only to be sent task requests itself.
/// Such a session's `tasks/get|result|cancel` are the gateway's when they name one of
/// its tasks (anything else may be the upstream's own), and so are its answers to the
/// gateway's input requests; the rest, `tasks/list` included, goes on as it is.
pub(crate) async fn handle_undeclared(
    gateway: &Gateway,
    session: &SessionCaller,
    message: &Message,
) -> Handled {
    if !may_be_undeclared_tasks(message) {
        return Handled::PassOn;
    }
    if let Message::Request {
        method: name,
        params,
        ..
    } = message
        && name != method::TOOLS_CALL
    {
        let known = match task_id_of(name, params.as_ref()) {
            Ok(task_id) => gateway
                .tasks
                .get(&task_id, &session.principal)
                .await
                .is_ok(),
            Err(_) => false,
        };
        if !known {
            return Handled::PassOn;
        }
    }
    // Only for a session the upstream has: else its 404 (`confirm`).
    if let Some(not_found) = confirm::unknown_session(gateway, session).await {
        return Handled::Reply(not_found);
    }
    handle(gateway, session, message).await
}

/// Whether [`handle`] may answer `message` itself rather than pass it on: a
/// `tools/call` asking for a task, a `tasks/*` request, an answer to one of the
/// gateway's input requests.
pub(crate) fn gateway_may_answer(message: &Message) -> bool {
    may_be_tasks(message, |name| name.starts_with("tasks/"))
}

/// What [`handle_undeclared`] may take, judged without the store: a `tools/call` with
/// `task`, `tasks/get|result|cancel`, an answer to one of the gateway's input requests.
pub(crate) fn may_be_undeclared_tasks(message: &Message) -> bool {
    may_be_tasks(message, |name| {
        [
            method::TASKS_GET,
            method::TASKS_RESULT,
            method::TASKS_CANCEL,
        ]
        .contains(&name)
    })
}

/// A task-augmented `tools/call`, a request `tasks_method` takes, or an answer to one of
/// the gateway's input requests.
fn may_be_tasks(message: &Message, tasks_method: impl Fn(&str) -> bool) -> bool {
    match message {
        Message::Request {
            method: name,
            params,
            ..
        } => match name.as_str() {
            method::TOOLS_CALL => params.as_ref().is_some_and(|p| p.get("task").is_some()),
            other => tasks_method(other),
        },
        Message::Response { id, .. } => wire::parse_input_request_id(id).is_some(),
        Message::Notification { .. } => false,
    }
}

/// Whether a session's message may be one [`handle_undeclared`] takes, judged from its
/// bytes, so that other traffic of an undeclared pass-through session is not parsed.
pub(crate) fn may_concern_tasks(body: &[u8]) -> bool {
    let has = |needle: &[u8]| memchr::memmem::find(body, needle).is_some();
    has(b"\"task") || has(wire::INPUT_REQUEST_ID.as_bytes())
}

/// A JSON-RPC error as a session client gets it: HTTP 200, the error in the body.
pub(crate) fn session_error(id: Option<&Value>, error: &ErrorObject) -> Response<Body> {
    reply::json(StatusCode::OK, jsonrpc::error_body(id, error))
}

/// A result, serialised once (the JSON-RPC envelope copies it as it is).
type Outcome = Result<Box<RawValue>, ErrorObject>;

/// `None` when the call is not the gateway's: no `task`, and the tool may run inline.
async fn tools_call(
    gateway: &Gateway,
    session: &SessionCaller,
    params: Option<&Value>,
) -> Option<Outcome> {
    let tool = params?.get("name")?.as_str()?;
    let policy = gateway.policies.policy_of(tool);
    let Some(task) = params?.get("task") else {
        return (policy == TaskSupport::Required).then(|| {
            Err(ErrorObject::new(
                code::METHOD_NOT_FOUND,
                format!("tool {tool:?} requires task-augmented execution: send params.task"),
            ))
        });
    };
    if policy == TaskSupport::Forbidden {
        return Some(Err(ErrorObject::new(
            code::METHOD_NOT_FOUND,
            format!(
                "tool {tool:?} does not support task-augmented execution (taskSupport: forbidden); call it without params.task"
            ),
        )));
    }
    Some(create(gateway, session, params?, task).await)
}

async fn create(
    gateway: &Gateway,
    session: &SessionCaller,
    params: &Value,
    task: &Value,
) -> Outcome {
    let task = TaskParam::deserialize(task).map_err(|e| {
        ErrorObject::invalid_params(format!(
            "params.task must be an object {{ttl?, responseModes?}}: {e}"
        ))
    })?;
    let ttl_ms = match &task.ttl {
        None => None,
        Some(ttl) => match ttl.as_u64().filter(|ms| *ms > 0) {
            Some(ms) => Some(gateway.tasks.clamp_ttl_ms(ms)),
            None => {
                return Err(ErrorObject::invalid_params(format!(
                    "params.task.ttl must be a positive whole number of milliseconds, not {ttl}"
                )));
            }
        },
    };
    let choice = task.mode_choice(session.modes);
    let call = session.tool_call(&WithoutTask(params), choice.immediate, ttl_ms, None)?;
    match gateway.tasks.start_task(call).await? {
        Started::Task(record) => {
            let meta = choice
                .streaming_fell_back
                .then(|| json!({ FALLBACK_MODE: "task" }));
            let created = CreateTaskResult {
                task: render::session_task(&record),
                meta,
            };
            to_raw(&created)
        }
        // SEP-1905 `immediate`: no task was kept, so no related-task `_meta`.
        Started::Inline(Ok(result)) => Ok(result),
        Started::Inline(Err(error)) => Err(error),
    }
}

/// Params that may be left out entirely.
fn parse_optional<T: DeserializeOwned + Default>(
    name: &str,
    params: Option<&Value>,
) -> Result<T, ErrorObject> {
    match params {
        None => Ok(T::default()),
        Some(params) => serde_json::from_value(params.clone())
            .map_err(|e| ErrorObject::invalid_params(format!("invalid {name} params: {e}"))),
    }
}

fn task_id_of(name: &str, params: Option<&Value>) -> Result<String, ErrorObject> {
    let params: TaskIdParams = serde_json::from_value(params.cloned().unwrap_or(Value::Null))
        .map_err(|e| ErrorObject::invalid_params(format!("invalid {name} params: {e}")))?;
    Ok(params.task_id)
}

async fn tasks_get(gateway: &Gateway, session: &SessionCaller, params: Option<&Value>) -> Outcome {
    let task_id = task_id_of(method::TASKS_GET, params)?;
    let task = gateway.tasks.get(&task_id, &session.principal).await?;
    to_raw(&render::session_task(&task))
}

async fn tasks_list(gateway: &Gateway, session: &SessionCaller, params: Option<&Value>) -> Outcome {
    let params: ListParams = parse_optional(method::TASKS_LIST, params)?;
    let (tasks, next_cursor) = gateway
        .dialect
        .list(&session.principal, params.cursor.as_deref())
        .await?;
    to_raw(&ListTasksResult {
        tasks: tasks.iter().map(|t| render::session_task(t)).collect(),
        next_cursor,
    })
}

async fn tasks_cancel(
    gateway: &Gateway,
    session: &SessionCaller,
    params: Option<&Value>,
) -> Outcome {
    let task_id = task_id_of(method::TASKS_CANCEL, params)?;
    let task = gateway
        .dialect
        .cancel_session_task(&task_id, &session.principal, Some(&session.id))
        .await?;
    to_raw(&render::session_task(&task))
}

/// The client's answer to an input request a `tasks/result` stream delivered.
async fn answer(
    gateway: &Gateway,
    session: &SessionCaller,
    task_id: &str,
    key: &str,
    outcome: Result<Value, ErrorObject>,
) -> Response<Body> {
    match gateway
        .dialect
        .answer(task_id, &session.principal, key, outcome, Some(&session.id))
        .await
    {
        Ok(accepted) => {
            if !accepted {
                tracing::debug!(task_id, key, "an answer came for input no longer wanted");
            }
            reply::accepted()
        }
        Err(error) => reply::error_with_status(StatusCode::BAD_REQUEST, &error),
    }
}

fn to_raw<T: serde::Serialize>(value: &T) -> Outcome {
    serde_json::value::to_raw_value(value).map_err(|e| ErrorObject::internal(e.to_string()))
}

/// A call's params as the upstream gets them: without `task`, serialised straight from
/// the client's (no copy of the tree).
struct WithoutTask<'a>(&'a Value);

impl serde::Serialize for WithoutTask<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(object) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in object.iter().filter(|(key, _)| *key != "task") {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_never_sees_the_task_param() {
        let params = json!({"name": "t", "task": {"ttl": 5}, "arguments": {"a": [1, 2]}, "_meta": {"progressToken": 3}});
        let raw = serde_json::value::to_raw_value(&WithoutTask(&params)).unwrap();
        let sent: Value = serde_json::from_str(raw.get()).unwrap();
        assert_eq!(
            sent,
            json!({"name": "t", "arguments": {"a": [1, 2]}, "_meta": {"progressToken": 3}})
        );
    }
}
