//! The console's JSON endpoints under `/admin/ui/api/`, for a signed-in session: the
//! overview, the upstreams, a page of the task table, a task, and its cancel.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use serde::Serialize;

use super::csrf::CsrfError;
use super::listing::{self, DEFAULT_LIMIT, TaskFilter};
use super::views::{CancelView, ErrorReply};
use super::world::{self, WorldView};
use super::{Console, Reply, detail, overview as overview_of};
use crate::admin::service::AdminError;
use mtg_protocol::wire::TaskStatus;
use mtg_store::{InspectError, StoreError};

/// Why a console request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ApiError {
    #[error("sign in first: open /admin/ui")]
    SignedOut,
    #[error(transparent)]
    Csrf(#[from] CsrfError),
    #[error("{0}")]
    BadRequest(String),
    #[error("no upstream named {0:?}")]
    UnknownUpstream(String),
    #[error("no task {0:?} (unknown, or expired)")]
    NoTask(String),
    #[error("not found")]
    NotFound,
    #[error("method not allowed here")]
    Method,
    #[error(transparent)]
    Inspect(#[from] InspectError),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        Self::Inspect(error.into())
    }
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            Self::SignedOut => StatusCode::UNAUTHORIZED,
            Self::Csrf(_) => StatusCode::FORBIDDEN,
            Self::BadRequest(_)
            | Self::Inspect(InspectError::BadCursor(_) | InspectError::Unsupported(_)) => {
                StatusCode::BAD_REQUEST
            }
            Self::UnknownUpstream(_) | Self::NoTask(_) | Self::NotFound => StatusCode::NOT_FOUND,
            Self::Method => StatusCode::METHOD_NOT_ALLOWED,
            Self::Inspect(InspectError::Store(StoreError::Unavailable(_))) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Inspect(_) | Self::Admin(_) | Self::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    pub(super) fn reply(self) -> Reply {
        let status = self.status();
        let mut reply = json(&ErrorReply {
            error: self.to_string(),
        });
        *reply.status_mut() = status;
        reply
    }
}

pub(super) async fn overview(console: &Console) -> Result<Reply, ApiError> {
    let settings = &console.settings;
    let view =
        overview_of::overview(&console.worlds, &settings.instance_id, settings.lease_ttl).await?;
    Ok(json(&view))
}

pub(super) fn upstreams(console: &Console) -> Result<Reply, ApiError> {
    #[derive(Serialize)]
    struct Upstream {
        name: String,
        path: String,
    }
    let list: Vec<Upstream> = console
        .worlds
        .iter()
        .map(|world| Upstream {
            name: world.name.clone(),
            path: world.path(),
        })
        .collect();
    Ok(json(&list))
}

/// The query of `GET /admin/ui/api/tasks`; empty fields are unset.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TasksQuery {
    upstream: Option<String>,
    status: Option<String>,
    tool: Option<String>,
    principal: Option<String>,
    older_than: Option<String>,
    newer_than: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn tasks(console: &Console, query: &str) -> Result<Reply, ApiError> {
    let query: TasksQuery = parse_query(query)?;
    let world = pick(&console.worlds, query.upstream)?;
    let filter = TaskFilter {
        status: given(query.status).map(|s| status(&s)).transpose()?,
        tool: given(query.tool),
        principal: given(query.principal),
        older_than: given(query.older_than)
            .map(|age| duration("olderThan", &age))
            .transpose()?,
        newer_than: given(query.newer_than)
            .map(|age| duration("newerThan", &age))
            .transpose()?,
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let table = listing::page(
        world.inspection.as_ref(),
        &world.name,
        &filter,
        given(query.cursor),
        limit,
    )
    .await?;
    Ok(json(&table))
}

/// The query of a task's endpoints: which upstream it is of.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskQuery {
    upstream: Option<String>,
}

pub(super) async fn task(console: &Console, task_id: &str, query: &str) -> Result<Reply, ApiError> {
    let query: TaskQuery = parse_query(query)?;
    let world = pick(&console.worlds, query.upstream)?;
    let (task, instances) = tokio::join!(
        world.inspection.inspect(task_id),
        world.inspection.instances()
    );
    let task = task?.ok_or_else(|| ApiError::NoTask(task_id.to_owned()))?;
    let view = detail::task_view(world, &task, &instances?, console.settings.show_results);
    Ok(json(&view))
}

/// Cancels as the admin API does: the owner, wherever it runs, stops the upstream call.
pub(super) async fn cancel(
    console: &Console,
    task_id: &str,
    query: &str,
) -> Result<Reply, ApiError> {
    let query: TaskQuery = parse_query(query)?;
    let world = pick(&console.worlds, query.upstream)?;
    let reply = world
        .admin
        .cancel(task_id)
        .await?
        .ok_or_else(|| ApiError::NoTask(task_id.to_owned()))?;
    tracing::info!(task_id, upstream = %world.path(), "console: a task was cancelled");
    Ok(json(&CancelView {
        task_id: reply.task_id,
        result: reply.result,
    }))
}

fn pick(worlds: &[WorldView], name: Option<String>) -> Result<&WorldView, ApiError> {
    world::select(worlds, name.as_deref())
        .ok_or_else(|| ApiError::UnknownUpstream(name.unwrap_or_default()))
}

fn given(field: Option<String>) -> Option<String> {
    field.filter(|text| !text.trim().is_empty())
}

fn status(text: &str) -> Result<TaskStatus, ApiError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|_| {
        ApiError::BadRequest(format!(
            "bad status {text:?}: one of working, input_required, completed, failed, cancelled"
        ))
    })
}

fn duration(name: &str, text: &str) -> Result<Duration, ApiError> {
    humantime::parse_duration(text)
        .map_err(|e| ApiError::BadRequest(format!("bad {name} {text:?}: {e} (e.g. 90s, 30m, 2h)")))
}

fn parse_query<T: serde::de::DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    serde_urlencoded::from_str(query).map_err(|e| ApiError::BadRequest(format!("bad query: {e}")))
}

fn json<T: Serialize>(value: &T) -> Reply {
    match serde_json::to_vec(value) {
        Ok(body) => Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_default(),
        Err(e) => {
            tracing::warn!(error = %e, "console: cannot write a reply as JSON");
            let mut reply = Response::new(Full::new(Bytes::from_static(
                br#"{"error":"cannot write the reply as JSON"}"#,
            )));
            *reply.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            reply
        }
    }
}
