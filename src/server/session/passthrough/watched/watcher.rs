//! One watched pass-through call, from its request to its end, its deferral, or its
//! client leaving (which cancels it upstream). It runs as a tokio task of its own, so
//! that the upstream's answer can outlive the client's request.

use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper_util::client::legacy::ResponseFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Watch;
use super::answer::{Answer, Step};
use super::client::{BACKLOG, Client, channel_body};
use super::events::{Events, message_of};
use crate::server::Gateway;
use crate::server::reply::{self, Body};
use crate::server::session::tasks::SessionCaller;
use crate::server::sse::keepalive::ProgressKeepAlive;
use crate::server::sse::{sse_event, sse_response};
use crate::tasks::TaskService;
use crate::tasks::deferral::Deferrals;
use crate::upstream::http::remove_hop_by_hop;
use crate::upstream::stream::PendingHead;
use crate::upstream::{StopReason, Upstream, UpstreamError};
use mtg_protocol::jsonrpc::{self, ErrorObject};
use mtg_protocol::names::method;

pub(super) struct Watcher {
    tasks: Arc<TaskService>,
    upstream: Arc<dyn Upstream>,
    deferrals: Deferrals,
    session: SessionCaller,
    id: Value,
    params: Value,
    tool: String,
    /// When the call is deferred, while it may be.
    defer_at: Option<Instant>,
    keepalive: Option<ProgressKeepAlive>,
    /// The client takes SSE: a kept-alive call's JSON answer may become a stream.
    accepts_sse: bool,
    /// The upstream's answer to the call has passed: nothing to defer or cancel.
    finished: bool,
}

/// Whether to go on watching.
enum Flow {
    Continue,
    Done,
}

impl Watcher {
    pub(super) fn new(
        gateway: &Gateway,
        session: SessionCaller,
        watch: Watch,
        accepts_sse: bool,
    ) -> Self {
        Self {
            tasks: gateway.tasks.clone(),
            upstream: gateway.upstream.clone(),
            deferrals: gateway.deferrals.clone(),
            session,
            id: watch.id,
            params: watch.params,
            tool: watch.tool,
            defer_at: watch.defer.map(|after| Instant::now() + after),
            keepalive: watch.keepalive,
            accepts_sse,
            finished: false,
        }
    }

    /// Starts watching the request being sent; the client's answer once there is one.
    pub(super) async fn start(self, sending: ResponseFuture) -> Response<Body> {
        let head: PendingHead = Box::pin(async move {
            sending
                .await
                .map_err(|e| UpstreamError::from_call(&e.into()))
        });
        let (answer, answered) = oneshot::channel();
        tokio::spawn(self.run(head, answer));
        answered
            .await
            .unwrap_or_else(|_| bad_gateway(&ErrorObject::internal("the call's watcher stopped")))
    }

    async fn run(mut self, head: PendingHead, answer: oneshot::Sender<Response<Body>>) {
        let mut upstream = Answer::Waiting(head);
        let mut client = Client::Unanswered(answer);
        loop {
            let keepalive_at = self.keepalive_due(&client);
            let defer_at = self.defer_at.filter(|_| !self.finished);
            tokio::select! {
                biased;
                () = client.gone() => {
                    self.stop(upstream, StopReason::ClientLeft).await;
                    return;
                }
                step = upstream.step() => {
                    if let Flow::Done = self.on_step(step, &mut upstream, &mut client).await {
                        return;
                    }
                }
                () = at(defer_at) => {
                    let taken = std::mem::replace(&mut upstream, Answer::Ended);
                    match self.defer(taken).await {
                        Ok(message) => {
                            client.finish(message).await;
                            return;
                        }
                        // Not deferred (the principal's running limit): watched on.
                        Err(back) => {
                            upstream = back;
                            self.defer_at = None;
                        }
                    }
                }
                () = at(keepalive_at) => self.keep_alive(&mut client).await,
            }
        }
    }

    /// When the next keep-alive is due: for a stream, or for a client that takes one.
    fn keepalive_due(&self, client: &Client) -> Option<Instant> {
        let keepalive = self.keepalive.as_ref().filter(|_| !self.finished)?;
        match client {
            Client::Streaming(_) => Some(keepalive.due()),
            Client::Unanswered(_) if self.accepts_sse => Some(keepalive.due()),
            Client::Unanswered(_) | Client::Done => None,
        }
    }

    async fn keep_alive(&mut self, client: &mut Client) {
        let Some(keepalive) = self.keepalive.as_mut() else {
            return;
        };
        if let Client::Unanswered(_) = client {
            // The answer has not begun: from now on it is the gateway's SSE stream.
            let (events, stream) = mpsc::channel(BACKLOG);
            if let Client::Unanswered(answer) = std::mem::replace(client, Client::Streaming(events))
            {
                let _ = answer.send(sse_response(stream));
            }
        }
        if let Client::Streaming(events) = client {
            let _ = events.send(keepalive.tick()).await;
        }
    }

    async fn on_step(&mut self, step: Step, upstream: &mut Answer, client: &mut Client) -> Flow {
        match step {
            Step::Head(Err(e)) => {
                self.finished = true;
                self.fail(client, &ErrorObject::from(e)).await;
                Flow::Done
            }
            Step::Head(Ok(response)) => {
                on_head(response, upstream, client);
                Flow::Continue
            }
            Step::Frame(Some(Ok(frame))) => {
                self.on_frame(frame, upstream, client).await;
                Flow::Continue
            }
            Step::Frame(ended) => {
                if let Some(Err(e)) = &ended {
                    tracing::debug!(error = %e, "a watched pass-through answer broke off");
                }
                if let Answer::Sse { events, .. } = std::mem::replace(upstream, Answer::Ended) {
                    let rest = events.rest();
                    if let (Client::Streaming(out), false) = (&*client, rest.is_empty()) {
                        let _ = out.send(rest).await;
                    }
                }
                self.finished = true;
                Flow::Done
            }
            Step::Whole(read) => {
                self.finished = true;
                let Answer::Whole { head, .. } = std::mem::replace(upstream, Answer::Ended) else {
                    return Flow::Done;
                };
                match read {
                    Ok(bytes) => self.on_whole(head, bytes, client).await,
                    Err(e) => {
                        let lost = UpstreamError::Lost(e.to_string());
                        self.fail(client, &ErrorObject::from(lost)).await;
                    }
                }
                Flow::Done
            }
        }
    }

    /// A chunk of the upstream's SSE answer: its whole events, looked at, go on to the
    /// client as they came.
    async fn on_frame(&mut self, frame: Frame<Bytes>, upstream: &mut Answer, client: &Client) {
        let Answer::Sse { events, .. } = upstream else {
            return;
        };
        if let Ok(data) = frame.into_data() {
            events.push(&data);
        }
        let mut whole = Vec::new();
        while let Some(event) = events.next_event() {
            whole.push(event);
        }
        for event in whole {
            let event = self.look_at(event);
            if let Client::Streaming(out) = client {
                let _ = out.send(event).await;
            }
        }
    }

    /// The upstream's answer read whole (not SSE): to the client as it came, or as the
    /// last event of the gateway's stream once keep-alive began one.
    async fn on_whole(&self, head: http::response::Parts, bytes: Bytes, client: &mut Client) {
        match std::mem::replace(client, Client::Done) {
            // As it came, to the byte.
            Client::Unanswered(answer) => {
                let _ = answer.send(Response::from_parts(head, reply::full(bytes)));
            }
            // The gateway's stream began (keep-alive): the answer is its last event.
            Client::Streaming(out) => {
                let message = if head.status.is_success() {
                    bytes.trim_ascii().to_vec()
                } else {
                    let error = UpstreamError::Status {
                        status: head.status.as_u16(),
                        body: String::from_utf8_lossy(&bytes).into_owned(),
                    };
                    jsonrpc::error_body(Some(&self.id), &ErrorObject::from(error))
                };
                let _ = out.send(sse_event(&message)).await;
            }
            Client::Done => {}
        }
    }

    /// An event on its way to the client: the end of the call is noted, and a progress
    /// value at or below the last one sent is raised (keep-alive's rule).
    fn look_at(&mut self, event: Bytes) -> Bytes {
        if self.finished && self.keepalive.is_none() {
            return event;
        }
        let Some(mut message) = message_of(&event) else {
            return event;
        };
        if message.get("method").is_none()
            && message.get("id") == Some(&self.id)
            && (message.get("result").is_some() || message.get("error").is_some())
        {
            self.finished = true;
            return event;
        }
        let Some(keepalive) = self.keepalive.as_mut() else {
            return event;
        };
        if message.get("method").and_then(Value::as_str) != Some(method::PROGRESS) {
            return event;
        }
        let raised = match message.get_mut("params") {
            Some(params) if keepalive.is_for_token(params) => keepalive.raise(params),
            _ => false,
        };
        if !raised {
            return event;
        }
        sse_event(&serde_json::to_vec(&message).unwrap_or_default())
    }

    /// The client's answer before the upstream's end: an error.
    async fn fail(&self, client: &mut Client, error: &ErrorObject) {
        match std::mem::replace(client, Client::Done) {
            Client::Unanswered(answer) => {
                let _ = answer.send(bad_gateway(error));
            }
            Client::Streaming(out) => {
                let body = jsonrpc::error_body(Some(&self.id), error);
                let _ = out.send(sse_event(&body)).await;
            }
            Client::Done => {}
        }
    }

    /// Makes the rest of the call a task of the caller; the client's last message (the
    /// deferred result, or why the task could not be made). The answer comes back when
    /// the principal may run no more tasks here: the call then goes on as it was.
    async fn defer(&mut self, upstream: Answer) -> Result<Vec<u8>, Answer> {
        let reservation = match self.tasks.reserve(&self.session.principal) {
            Ok(reservation) => reservation,
            Err(refused) => {
                tracing::info!(reason = %refused.message, "a pass-through call is not deferred");
                return Err(upstream);
            }
        };
        let outcome = self.adopt(upstream, reservation).await;
        Ok(match outcome {
            Ok(result) => jsonrpc::success_body_of(&self.id, &result),
            Err(error) => jsonrpc::error_body(Some(&self.id), &error),
        })
    }

    async fn adopt(
        &self,
        upstream: Answer,
        reservation: crate::tasks::Reservation,
    ) -> Result<Value, ErrorObject> {
        let stream = upstream
            .into_stream()
            .ok_or_else(|| ErrorObject::internal("the call ended before it could be deferred"))?;
        let session = self
            .session
            .upstream
            .as_ref()
            .ok_or_else(|| ErrorObject::internal("a pass-through session without its own"))?;
        let exchange = self
            .upstream
            .adopt(session, self.session.auth.as_ref(), self.id.clone(), stream)
            .ok_or_else(|| ErrorObject::internal("this upstream cannot carry on the call"))?;
        let call = self.session.tool_call(&self.params, false, None, None)?;
        let task = self
            .tasks
            .start_adopted(reservation, call, exchange)
            .await?;
        let caller = self.session.caller();
        Ok(self.deferrals.defer(&caller, &task, &self.tool).await)
    }

    /// Stops the call upstream (`upstream::stop`), unless it ended.
    async fn stop(&self, upstream: Answer, reason: StopReason) {
        if self.finished {
            return;
        }
        let (Some(stream), Some(session)) = (upstream.into_stream(), &self.session.upstream) else {
            return;
        };
        let adopted =
            self.upstream
                .adopt(session, self.session.auth.as_ref(), self.id.clone(), stream);
        if let Some(mut exchange) = adopted
            && let Err(e) = exchange.stop(reason).await
        {
            tracing::debug!(error = %e, "could not stop a watched call upstream");
        }
    }
}

/// The upstream's response head: an SSE answer is read event by event (and its head,
/// if the client has none yet, goes on at once), any other body is read whole.
fn on_head(
    response: hyper::Response<hyper::body::Incoming>,
    upstream: &mut Answer,
    client: &mut Client,
) {
    let (mut head, body) = response.into_parts();
    remove_hop_by_hop(&mut head.headers);
    let sse = head.status.is_success()
        && head
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if !sse {
        *upstream = Answer::Whole {
            head,
            body: mtg_transport::CallBody::from(body).collect(),
        };
        return;
    }
    if let Client::Unanswered(_) = client {
        // Events may be raised or added: the length would not hold.
        head.headers.remove(header::CONTENT_LENGTH);
        let (events, stream) = mpsc::channel(BACKLOG);
        if let Client::Unanswered(answer) = std::mem::replace(client, Client::Streaming(events)) {
            let _ = answer.send(Response::from_parts(head, channel_body(stream)));
        }
    }
    *upstream = Answer::Sse {
        body,
        events: Events::default(),
    };
}

/// Sleeps until `when`; forever without one.
async fn at(when: Option<Instant>) {
    match when {
        Some(when) => tokio::time::sleep_until(when).await,
        None => std::future::pending().await,
    }
}

/// 502, or 400 for a request refused as the client's (-32600).
fn bad_gateway(error: &ErrorObject) -> Response<Body> {
    tracing::warn!(detail = %error.message, "a watched pass-through call failed");
    let status = match error.code {
        mtg_protocol::jsonrpc::code::INVALID_REQUEST => StatusCode::BAD_REQUEST,
        _ => StatusCode::BAD_GATEWAY,
    };
    reply::error_with_status(status, error)
}
