//! One request of a gateway-served session, sent upstream through the `Upstream` trait.
//!
//! Requests that may lead the server to ask the client something (`tools/call`,
//! `prompts/get`, `resources/read`) are answered on an SSE stream: the upstream's
//! notifications and requests on the call's stream go to the client as they come (under
//! ids of the session's own, mapped back when the client POSTs its answer), and a
//! 2026-07-28 upstream's MRTR rounds become such requests too, driven by
//! `tasks::upstream_mrtr::driver`. Every other request gets its answer as JSON.

use mtg_protocol::names::method;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use http::{HeaderValue, Response, StatusCode};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::session::{Answer, ServedSession};
use crate::server::reply::{self, Body};
use crate::server::sse::keepalive::ProgressKeepAlive;
use crate::server::sse::{sse_event, sse_response_kept};
use crate::tasks::upstream_mrtr::driver::{
    self, Answers, Reply, Round, RoundAnswers, RoundError, RoundTrip,
};
use crate::upstream::{
    Caller, Exchange, StopReason, Upstream, UpstreamError, UpstreamEvent, forward,
};
use mtg_protocol::jsonrpc::{self, ErrorObject};
use mtg_protocol::mrtr;

/// What one request needs besides the session.
pub(super) struct CallContext {
    pub upstream: Arc<dyn Upstream>,
    /// The credentials of this request, passed to the upstream as they are.
    pub auth: Option<HeaderValue>,
    pub timeout: Option<Duration>,
    /// Each tool's `execution.taskSupport` in `tools/list` comes from these
    /// (`negotiate::show_task_support`).
    pub tool_policies: crate::tasks::policy::Policies,
    /// Whether the session declared `capabilities.tasks`.
    pub declared_tasks: bool,
    /// With `--defer-after-ms`: how long `get_task_result` waits, and the names the
    /// gateway's two tools go by, added to `tools/list`.
    pub deferral: Option<crate::tasks::deferral::Listing>,
    /// `--progress-keepalive-ms`.
    pub progress_keepalive: Option<crate::server::sse::keepalive::Every>,
}

/// One JSON-RPC request of the session's client.
pub(super) struct ClientRequest {
    pub id: Value,
    pub method: String,
    pub params: Option<Value>,
}

pub(super) async fn serve(
    session: Arc<ServedSession>,
    context: CallContext,
    request: ClientRequest,
) -> Response<Body> {
    let ClientRequest { id, method, params } = request;
    if method == method::PING {
        return reply::json(StatusCode::OK, jsonrpc::success_body_of(&id, &json!({})));
    }
    // The 2025-11-25 task dialect's `task` param is not the upstream's to see.
    let params = params.map(without_task_param);
    if method::MAY_ASK_FOR_INPUT.contains(&method.as_str()) {
        return streamed(session, context, ClientRequest { id, method, params });
    }
    let caller = Caller {
        capabilities: &session.capabilities,
        auth: context.auth.as_ref(),
        session: None,
    };
    let answer = forward::request(
        context.upstream.as_ref(),
        &caller,
        &method,
        params,
        context.timeout,
    )
    .await;
    session.touch();
    let body = match answer {
        Ok(Ok(mut result)) => {
            if method == method::TOOLS_LIST {
                crate::server::session::tasks::negotiate::show_task_support(
                    &mut result,
                    &context.tool_policies,
                    context.declared_tasks,
                );
            }
            if method == method::TOOLS_LIST
                && let Some(listing) = &context.deferral
            {
                listing.advertise(&mut result);
            }
            jsonrpc::success_body_of(&id, &result)
        }
        Ok(Err(error)) => jsonrpc::error_body(Some(&id), &error),
        Err(e) => jsonrpc::error_body(Some(&id), &ErrorObject::from(e)),
    };
    reply::json(StatusCode::OK, body)
}

/// Why a streamed call ended without the upstream's answer.
enum Stop {
    /// Answered to the client as this error.
    Error(ErrorObject),
    /// The client cancelled, left, or ended the session: nobody to answer.
    Silent,
}

impl From<RoundError> for Stop {
    fn from(error: RoundError) -> Self {
        Stop::Error(error.into())
    }
}

impl From<UpstreamError> for Stop {
    fn from(error: UpstreamError) -> Self {
        Stop::Error(error.into())
    }
}

fn streamed(
    session: Arc<ServedSession>,
    context: CallContext,
    request: ClientRequest,
) -> Response<Body> {
    let ClientRequest { id, method, params } = request;
    let keepalive =
        ProgressKeepAlive::for_request(params.as_ref(), context.progress_keepalive.as_ref());
    let (events, stream) = mpsc::channel::<Bytes>(16);
    let cancel = session.begin_call(&id);
    tokio::spawn(async move {
        let original = params.unwrap_or_else(|| json!({}));
        let mut client = ClientStream {
            session: &session,
            events: &events,
            cancel: &cancel,
        };
        let outcome = {
            let mut trip = SessionTrip {
                client: client.clone(),
                upstream: context.upstream.as_ref(),
                auth: context.auth.as_ref(),
                method: &method,
            };
            let rounds = driver::drive(&mut trip, &mut client, original);
            match context.timeout {
                Some(limit) => tokio::time::timeout(limit, rounds)
                    .await
                    .unwrap_or_else(|_| {
                        Err(UpstreamError::Timeout(limit.as_millis() as u64).into())
                    }),
                None => rounds.await,
            }
        };
        let last = match outcome {
            Ok(result) => Some(jsonrpc::success_body_of(&id, &result)),
            Err(Stop::Error(error)) => Some(jsonrpc::error_body(Some(&id), &error)),
            Err(Stop::Silent) => None,
        };
        if let Some(last) = last {
            // The client may have gone; then there is nobody to tell.
            let _ = events.send(sse_event(&last)).await;
        }
        session.end_call(&id);
    });
    sse_response_kept(stream, keepalive)
}

/// The client's side of a streamed call: its SSE stream and its way to stop the call.
#[derive(Clone)]
struct ClientStream<'a> {
    session: &'a Arc<ServedSession>,
    events: &'a mpsc::Sender<Bytes>,
    cancel: &'a CancellationToken,
}

impl ClientStream<'_> {
    async fn send(&self, message: &Value) -> Result<(), Stop> {
        let body = serde_json::to_vec(message)
            .map_err(|e| Stop::Error(ErrorObject::internal(e.to_string())))?;
        self.events
            .send(sse_event(&body))
            .await
            .map_err(|_| Stop::Silent)
    }

    /// Resolves when the call must stop: cancelled, session ended, or stream closed.
    async fn stopped(&self) {
        tokio::select! {
            () = self.cancel.cancelled() => {}
            () = self.events.closed() => {}
        }
    }
}

/// A 2026-07-28 upstream's round: each input request goes to the client as a request of
/// the session's, and the round is answered once the client has answered them all.
#[async_trait]
impl RoundAnswers for ClientStream<'_> {
    type Stop = Stop;

    async fn answer(&mut self, round: &Round<'_>) -> Result<Answers, Stop> {
        let mut asked = Vec::with_capacity(round.asked.input_requests.len());
        for (key, request) in &round.asked.input_requests {
            let (id, answer) = self.session.ask();
            let message = jsonrpc::request_value(id, &request.method, request.params.clone());
            self.send(&message).await?;
            asked.push((key.clone(), answer));
        }
        let mut responses = Map::new();
        for (key, answer) in asked {
            let outcome = tokio::select! {
                outcome = answer.receive() => outcome.ok_or(Stop::Silent)?,
                () = self.stopped() => return Err(Stop::Silent),
            };
            match outcome {
                Ok(result) => responses.insert(key, result),
                Err(error) => {
                    return Err(Stop::Error(ErrorObject::internal(format!(
                        "the client refused the upstream's input request: {}",
                        error.message
                    ))));
                }
            };
        }
        Ok(responses)
    }
}

/// An answer the client owes the upstream: the upstream's request id and the answer.
type OwedAnswer = Pin<Box<dyn Future<Output = (Value, Option<Answer>)> + Send>>;

/// Sends the call upstream once per round and relays what comes on its stream.
struct SessionTrip<'a> {
    client: ClientStream<'a>,
    upstream: &'a dyn Upstream,
    auth: Option<&'a HeaderValue>,
    method: &'a str,
}

#[async_trait]
impl RoundTrip for SessionTrip<'_> {
    type Done = Value;
    type Stop = Stop;

    async fn send(&mut self, params: Value) -> Result<Reply<Value>, Stop> {
        let caller = Caller {
            capabilities: &self.client.session.capabilities,
            auth: self.auth,
            session: None,
        };
        let mut exchange = self
            .upstream
            .open_call(&caller, self.method, Some(params))
            .await?;
        // Answers the client owes for requests the upstream sent on this call's stream.
        let mut owed = FuturesUnordered::<OwedAnswer>::new();
        loop {
            tokio::select! {
                event = exchange.next() => {
                    if let Some(reply) = self.on_event(exchange.as_ref(), event, &mut owed).await? {
                        return Ok(reply);
                    }
                }
                Some((upstream_id, answer)) = owed.next(), if !owed.is_empty() => {
                    let answer = answer.unwrap_or_else(|| {
                        Err(ErrorObject::internal("the client session ended before it answered"))
                    });
                    exchange.reply(upstream_id, answer).await?;
                }
                () = self.client.stopped() => {
                    if let Err(e) = exchange.stop(StopReason::ClientCancelled).await {
                        tracing::debug!(error = %e, "could not stop the call upstream");
                    }
                    return Err(Stop::Silent);
                }
            }
        }
    }
}

impl SessionTrip<'_> {
    /// Relays one event of the call's stream; the call's answer when it is the last.
    async fn on_event(
        &self,
        exchange: &dyn Exchange,
        event: Option<Result<UpstreamEvent, UpstreamError>>,
        owed: &mut FuturesUnordered<OwedAnswer>,
    ) -> Result<Option<Reply<Value>>, Stop> {
        let event = event.ok_or_else(|| UpstreamError::Lost("no answer on the stream".into()))?;
        match event? {
            UpstreamEvent::Response { id, outcome } if &id == exchange.request_id() => {
                return match outcome {
                    Ok(result) if mrtr::is_input_required(&result) => {
                        Ok(Some(Reply::InputRequired(result)))
                    }
                    Ok(result) => Ok(Some(Reply::Done(result))),
                    Err(error) => Err(Stop::Error(error)),
                };
            }
            UpstreamEvent::Response { .. } => {}
            UpstreamEvent::Notification { method, params } => {
                self.client
                    .send(&jsonrpc::notification_value(&method, params))
                    .await?;
            }
            UpstreamEvent::Request { id, method, params } => {
                let (client_id, answer) = self.client.session.ask();
                self.client
                    .send(&jsonrpc::request_value(client_id, &method, params))
                    .await?;
                owed.push(Box::pin(async move { (id, answer.receive().await) }));
            }
        }
        Ok(None)
    }
}

fn without_task_param(mut params: Value) -> Value {
    if let Some(obj) = params.as_object_mut() {
        obj.remove("task");
    }
    params
}
