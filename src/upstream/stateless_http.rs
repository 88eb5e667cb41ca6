//! 2026-07-28 (stateless) Streamable HTTP upstreams. Every request carries its own
//! `_meta` (protocol version, the capabilities declared for the caller) and the standard
//! headers; there are no sessions, and the upstream asks for input by returning an
//! `InputRequiredResult` instead of sending requests (the task runner handles rounds).

use mtg_protocol::names::STATELESS_VERSION;
use mtg_protocol::names::method;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::Value;

use super::http::truncate_on_char;
use super::tool_headers::ToolHeaderCache;
use super::{
    CallStream, Caller, Exchange, Opened, StopReason, Upstream, UpstreamError, UpstreamEvent,
};
use mtg_protocol::headers::{self, MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION};
use mtg_protocol::jsonrpc::{self, ErrorObject, Message};
use mtg_protocol::meta;
use mtg_protocol::upgrade;
use mtg_transport::{CallBody, CallClient};

/// Error bodies are short; a longer one is not read whole.
const MAX_ERROR_BODY: usize = 64 * 1024;

pub(crate) struct StatelessHttpUpstream {
    client: CallClient,
    url: Uri,
    /// The upstream's `server/discover` answer when it was detected.
    discovered: Value,
    next_id: AtomicU64,
    tool_headers: ToolHeaderCache,
}

/// Pages of `tools/list` read at most, so a looping cursor cannot hold a call forever.
const MAX_TOOL_PAGES: usize = 100;

impl StatelessHttpUpstream {
    pub(crate) fn new(client: CallClient, url: Uri, discovered: Value) -> Self {
        Self {
            client,
            url,
            discovered,
            next_id: AtomicU64::new(1),
            tool_headers: ToolHeaderCache::default(),
        }
    }

    async fn call(
        &self,
        caller: &Caller<'_>,
        method: &str,
        params: Option<Value>,
    ) -> StatelessHttpExchange {
        let mut extra_headers = Vec::new();
        if method == method::TOOLS_CALL
            && let Some(tool) = params.as_ref().and_then(|p| p.get("name")?.as_str())
        {
            let arguments = params.as_ref().and_then(|p| p.get("arguments"));
            extra_headers = self
                .tool_headers
                .headers_for(tool, arguments, || self.list_tools(caller))
                .await;
        }
        self.send(caller, method, params, extra_headers)
    }

    /// The request on its way: its exchange, whose first `next` waits for the response
    /// head (the request can be stopped before it: `upstream::stop`).
    fn send(
        &self,
        caller: &Caller<'_>,
        method: &str,
        params: Option<Value>,
        extra_headers: Vec<(String, String)>,
    ) -> StatelessHttpExchange {
        let id = Value::from(self.next_id.fetch_add(1, Ordering::Relaxed));
        let params = meta::with_stateless_meta(params, caller.capabilities);
        let body = jsonrpc::request_value(id.clone(), method, Some(params));
        let (client, url) = (self.client.clone(), self.url.clone());
        let (auth, method) = (caller.auth.cloned(), method.to_owned());
        let answered = id.clone();
        let head = Box::pin(async move {
            let response =
                post(&client, &url, auth.as_ref(), &method, &body, &extra_headers).await?;
            StatelessHttpExchange::open(response, answered).await
        });
        StatelessHttpExchange {
            head: Some(std::sync::Mutex::new(head)),
            stream: None,
            rejected: None,
            id,
        }
    }

    /// Every tool of the upstream, all pages.
    async fn list_tools(&self, caller: &Caller<'_>) -> Result<Vec<Value>, UpstreamError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = cursor.take().map(|c| serde_json::json!({ "cursor": c }));
            let mut exchange = self.send(caller, "tools/list", params, Vec::new());
            let page = exchange.final_answer().await?.map_err(|e| {
                UpstreamError::Protocol(format!("tools/list failed: {}", e.message))
            })?;
            if let Some(page_tools) = page.get("tools").and_then(Value::as_array) {
                tools.extend(page_tools.iter().cloned());
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        Ok(tools)
    }
}

#[async_trait]
impl Upstream for StatelessHttpUpstream {
    async fn tool_annotations(
        &self,
        caller: &Caller<'_>,
        tool: &str,
    ) -> Option<Vec<mtg_protocol::param_headers::ParamHeader>> {
        self.tool_headers
            .annotations_for(tool, || self.list_tools(caller))
            .await
    }

    async fn open_call(&self, caller: &Caller<'_>, method: &str, params: Option<Value>) -> Opened {
        Ok(Box::new(self.call(caller, method, params).await))
    }

    async fn server_info(&self, _caller: &Caller<'_>) -> Result<Value, UpstreamError> {
        Ok(upgrade::server_info_of_discover(&self.discovered))
    }

    /// Asked again for every client: the answer may depend on who asks.
    async fn discover_result(&self, caller: &Caller<'_>) -> Result<Value, UpstreamError> {
        let mut exchange = self
            .call(caller, mtg_protocol::names::method::SERVER_DISCOVER, None)
            .await;
        let upstream = exchange.final_answer().await?.map_err(|e| {
            UpstreamError::Protocol(format!("server/discover failed: {}", e.message))
        })?;
        Ok(upgrade::discover_result_of_stateless(&upstream))
    }

    /// No sessions to pass through to: the gateway serves 2025-xx session clients itself.
    async fn ready(&self) -> Result<(), UpstreamError> {
        super::http::probe_reachable(&self.client, &self.url).await
    }

    fn passthrough_url(&self) -> Option<&Uri> {
        None
    }
}

/// POSTs one JSON-RPC message to a 2026-07-28 endpoint with the standard headers, and
/// `extra_headers` (name, unencoded value) such as `Mcp-Param-*`.
pub(super) async fn post(
    client: &CallClient,
    url: &Uri,
    auth: Option<&HeaderValue>,
    method: &str,
    body: &Value,
    extra_headers: &[(String, String)],
) -> Result<hyper::Response<CallBody>, UpstreamError> {
    // The method comes from the client's body; one HTTP forbids in a header is its
    // request's fault, not the upstream's.
    let method_header = HeaderValue::from_str(method).map_err(|_| {
        UpstreamError::Refused(format!(
            "the method {method:?} cannot be sent upstream as the {MCP_METHOD} header: \
             it holds a byte HTTP forbids in a header"
        ))
    })?;
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header(MCP_PROTOCOL_VERSION, STATELESS_VERSION)
        .header(MCP_METHOD, method_header);
    let name =
        headers::name_field(method).and_then(|field| body.get("params")?.get(field)?.as_str());
    if let Some(name) = name {
        request = request.header(MCP_NAME, headers::encode_value(name));
    }
    for (name, value) in extra_headers {
        request = request.header(name.as_str(), headers::encode_value(value));
    }
    if let Some(auth) = auth {
        request = request.header(header::AUTHORIZATION, auth);
    }
    let bytes = Bytes::from(serde_json::to_vec(body).expect("JSON values serialize"));
    let request = request
        .body(Full::new(bytes))
        .map_err(|e| UpstreamError::from_build(&e))?;
    client
        .request(request)
        .await
        .map_err(|e| UpstreamError::from_call(&e))
}

/// One request on a 2026-07-28 upstream: the response's JSON body or SSE stream.
pub(super) struct StatelessHttpExchange {
    /// The POST on its way, until its response head came and was read: a JSON-response
    /// upstream sends it only when the call ends. Behind a lock only to be `Sync`: it is
    /// reached through `&mut self`, never locked.
    head: Option<std::sync::Mutex<Opening>>,
    stream: Option<CallStream>,
    /// A JSON-RPC error the upstream sent with an HTTP error status.
    rejected: Option<UpstreamEvent>,
    id: Value,
}

/// A request's response head on its way, read as an exchange.
type Opening = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<StatelessHttpExchange, UpstreamError>> + Send>,
>;

impl StatelessHttpExchange {
    /// Reads an error status's body: 2026-07-28 servers answer many errors (an invalid
    /// `requestState`, a header mismatch) with HTTP 400 and a JSON-RPC error, which is
    /// the request's answer, not a transport failure.
    pub(super) async fn open(
        response: hyper::Response<CallBody>,
        id: Value,
    ) -> Result<Self, UpstreamError> {
        let status = response.status();
        if status.is_success() && status != http::StatusCode::ACCEPTED {
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let stream = CallStream::new(response.into_body(), content_type.as_deref());
            return Ok(Self {
                head: None,
                stream: Some(stream),
                rejected: None,
                id,
            });
        }
        let body = error_body(response).await;
        if let Ok(Message::Response {
            id: answered,
            outcome: Err(error),
        }) = Message::parse(&body)
        {
            return Ok(Self {
                head: None,
                stream: None,
                rejected: Some(UpstreamEvent::Response {
                    // A server that could not read the id answers with null.
                    id: if answered.is_null() {
                        id.clone()
                    } else {
                        answered
                    },
                    outcome: Err(error),
                }),
                id,
            });
        }
        let mut text = String::from_utf8_lossy(&body).into_owned();
        truncate_on_char(&mut text, 300);
        Err(UpstreamError::Status {
            status: status.as_u16(),
            body: text,
        })
    }

    /// Reads until the answer to this request.
    pub(super) async fn final_answer(
        &mut self,
    ) -> Result<Result<Value, ErrorObject>, UpstreamError> {
        loop {
            match self.next().await {
                Some(Ok(UpstreamEvent::Response { id, outcome })) if id == self.id => {
                    return Ok(outcome);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Err(UpstreamError::Lost("no answer on the stream".into())),
            }
        }
    }
}

async fn error_body(response: hyper::Response<CallBody>) -> Bytes {
    Limited::new(response.into_body(), MAX_ERROR_BODY)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default()
}

#[async_trait]
impl Exchange for StatelessHttpExchange {
    async fn next(&mut self) -> Option<Result<UpstreamEvent, UpstreamError>> {
        if let Some(head) = self.head.as_mut() {
            // Cancel-safe: the opening stays here until it resolves.
            let head = head.get_mut().unwrap_or_else(|p| p.into_inner());
            let opened = head.await;
            self.head = None;
            match opened {
                Ok(opened) => (self.stream, self.rejected) = (opened.stream, opened.rejected),
                Err(e) => return Some(Err(e)),
            }
        }
        if let Some(event) = self.rejected.take() {
            return Some(Ok(event));
        }
        loop {
            match self.stream.as_mut()?.next().await? {
                // 2026-07-28 forbids requests on a response stream: input comes as MRTR.
                Ok(UpstreamEvent::Request { method, .. }) => {
                    tracing::warn!(%method, "2026-07-28 upstream sent a request on a response stream; ignored");
                }
                other => return Some(other),
            }
        }
    }

    async fn reply(
        &self,
        _id: Value,
        _outcome: Result<Value, ErrorObject>,
    ) -> Result<(), UpstreamError> {
        Err(UpstreamError::Protocol(
            "a 2026-07-28 upstream takes input in retries, not as responses".into(),
        ))
    }

    /// On 2026-07-28 HTTP, closing the request's stream is the cancellation
    /// (`upstream::stop`): the response, or the request still waiting for its head, is
    /// closed here.
    async fn stop(&mut self, _reason: StopReason) -> Result<(), UpstreamError> {
        self.head = None;
        self.stream = None;
        self.rejected = None;
        Ok(())
    }

    fn request_id(&self) -> &Value {
        &self.id
    }
}
