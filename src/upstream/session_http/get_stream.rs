//! A session's GET stream: the upstream's requests outside any call, answered by the
//! gateway (`--root`, `ping`, else -32601).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use serde_json::{Value, json};

use super::{
    PROTOCOL_HEADER, SESSION_HEADER, SessionHttpUpstream, UpstreamSession, call_stream,
    check_status,
};
use crate::upstream::{CallStream, UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::{self, ErrorObject, code};

const GET_STREAM_RETRY: Duration = Duration::from_secs(1);

impl SessionHttpUpstream {
    /// Answers the requests an upstream sends outside any call (e.g. `roots/list`
    /// right after `initialize`) on the session's GET stream, reopening it when it ends.
    pub(super) async fn serve_get_stream(
        self: Arc<Self>,
        session: std::sync::Weak<UpstreamSession>,
        mut stream: Option<CallStream>,
    ) {
        loop {
            let Some(live) = session.upgrade() else {
                return;
            };
            let outcome = match stream.take() {
                Some(stream) => self.answer_on_get_stream(&live, stream).await,
                None => match self.open_get_stream(&live).await {
                    Ok(stream) => self.answer_on_get_stream(&live, stream).await,
                    Err(e) => Err(e),
                },
            };
            drop(live);
            match outcome {
                Ok(()) => {}
                Err(UpstreamError::Status { status: 405, .. } | UpstreamError::SessionExpired) => {
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "upstream GET stream ended"),
            }
            tokio::time::sleep(GET_STREAM_RETRY).await;
        }
    }

    pub(super) async fn open_get_stream(
        &self,
        session: &UpstreamSession,
    ) -> Result<CallStream, UpstreamError> {
        let mut request = Request::builder()
            .method(Method::GET)
            .uri(self.url.clone())
            .header(header::ACCEPT, "text/event-stream")
            .header(PROTOCOL_HEADER, &session.protocol_version);
        if let Some(id) = &session.id {
            request = request.header(SESSION_HEADER, id);
        }
        if let Some(auth) = &session.auth {
            request = request.header(header::AUTHORIZATION, auth);
        }
        let response = self.send_built(request, Bytes::new()).await?;
        Ok(call_stream(check_status(response, true).await?))
    }

    async fn answer_on_get_stream(
        &self,
        session: &UpstreamSession,
        mut stream: CallStream,
    ) -> Result<(), UpstreamError> {
        while let Some(event) = stream.next().await {
            if let UpstreamEvent::Request { id, method, .. } = event? {
                let outcome = self.answer_unattributed(&method);
                let reply = jsonrpc::response_value(id, outcome);
                if let Err(e) = self.send(session, &reply).await {
                    tracing::warn!(error = %e, %method, "could not answer upstream request");
                }
            }
        }
        Ok(())
    }

    /// What the gateway itself answers to a request that belongs to no call.
    pub(super) fn answer_unattributed(&self, method: &str) -> Result<Value, ErrorObject> {
        match method {
            "roots/list" => Ok(self.roots.clone()),
            "ping" => Ok(json!({})),
            other => Err(ErrorObject::new(
                code::METHOD_NOT_FOUND,
                format!("{other} outside a tool call cannot be answered by the gateway"),
            )),
        }
    }
}
