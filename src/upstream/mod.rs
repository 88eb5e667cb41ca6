//! The plain MCP server behind the gateway, behind one trait whatever its transport.

pub(crate) mod detect;
pub(crate) mod forward;
pub(crate) mod http;
pub(crate) mod session_http;
pub(crate) mod stateless_http;
pub(crate) mod stdio;
pub(crate) mod stop;
pub(crate) mod stream;
pub(crate) mod tool_headers;

use async_trait::async_trait;
use serde_json::{Map, Value};

use mtg_transport::Party;
pub(crate) use session_http::SessionHttpUpstream;
pub(crate) use stop::StopReason;
pub(crate) use stream::{CallStream, UpstreamEvent};

use mtg_protocol::jsonrpc::ErrorObject;

/// Why talking to the upstream failed. The message is shown to clients in a failed
/// task's `statusMessage`, so it says what happened in plain words.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream unreachable: {0}")]
    Unreachable(String),
    #[error("upstream answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("upstream session expired")]
    SessionExpired,
    #[error("upstream connection lost mid-call: {0}")]
    Lost(String),
    #[error("upstream sent something that is not MCP: {0}")]
    Protocol(String),
    #[error("upstream did not answer within {0} ms")]
    Timeout(u64),
    /// A stdio upstream's process ended, e.g. "status 137 (signal 9)".
    #[error("upstream process exited with {0}")]
    Exited(String),
    /// The client's request cannot go upstream as it is (a header value HTTP forbids):
    /// nothing was sent, and the upstream is not to blame.
    #[error("request refused: {0}")]
    Refused(String),
    /// The gateway could not build or send its own request.
    #[error("gateway error: {0}")]
    Gateway(String),
}

/// What a client sees when its request failed upstream: an internal error that says why,
/// or, when the request itself could not go, an invalid request.
impl From<UpstreamError> for ErrorObject {
    fn from(error: UpstreamError) -> Self {
        match error.party() {
            Party::Client => ErrorObject::new(
                mtg_protocol::jsonrpc::code::INVALID_REQUEST,
                error.to_string(),
            ),
            Party::Upstream | Party::Gateway => ErrorObject::internal(error.to_string()),
        }
    }
}

impl UpstreamError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unreachable(_) => "unreachable",
            Self::Status { .. } => "http_status",
            Self::SessionExpired => "session_expired",
            Self::Lost(_) => "lost",
            Self::Protocol(_) => "protocol",
            Self::Timeout(_) => "timeout",
            Self::Exited(_) => "exited",
            Self::Refused(_) => "header_value",
            Self::Gateway(_) => "request_encoding",
        }
    }

    /// Whose failure this is, for its answer and its metric (`Party::metric`).
    pub fn party(&self) -> Party {
        match self {
            Self::Refused(_) => Party::Client,
            Self::Gateway(_) => Party::Gateway,
            _ => Party::Upstream,
        }
    }

    /// A request of the gateway's own that failed on the way, blamed where it belongs.
    pub fn from_call(error: &mtg_transport::CallError) -> Self {
        let detail = mtg_transport::describe_client_error(error);
        match error.party() {
            Party::Client => Self::Refused(detail),
            Party::Gateway => Self::Gateway(detail),
            Party::Upstream => Self::Unreachable(detail),
        }
    }

    /// A request the gateway could not build: a value from the client that HTTP
    /// forbids in a header is the client's; anything else the gateway's.
    pub fn from_build(error: &::http::Error) -> Self {
        match error.is::<::http::header::InvalidHeaderValue>() {
            true => Self::Refused(format!("a header value HTTP forbids: {error}")),
            false => Self::Gateway(error.to_string()),
        }
    }
}

/// Who a request is sent for. Session (2025-xx) upstreams have per-session
/// capabilities, so the caller's declared capabilities and credentials choose the
/// upstream session.
pub struct Caller<'a> {
    pub capabilities: &'a Map<String, Value>,
    pub auth: Option<&'a ::http::HeaderValue>,
    /// A 2025-xx session client's own upstream session: a task of that client runs
    /// there (the upstream knows the client's capabilities and tools), not in a session
    /// of the gateway's. Only 2025-xx HTTP upstreams have one.
    pub session: Option<&'a PassThroughSession>,
}

/// An upstream session a client opened through the gateway (pass-through).
#[derive(Debug, Clone)]
pub struct PassThroughSession {
    /// Its `Mcp-Session-Id`; `None` when the upstream issued none.
    pub id: Option<::http::HeaderValue>,
    /// The `MCP-Protocol-Version` the client negotiated.
    pub protocol_version: ::http::HeaderValue,
}

/// A request sent upstream, or why it could not be.
pub(crate) type Opened = Result<Box<dyn Exchange>, UpstreamError>;

/// A plain MCP server.
#[async_trait]
pub trait Upstream: Send + Sync + 'static {
    /// Sends a request; the exchange yields what comes back for it. It may return
    /// before the upstream's response head (an HTTP upstream's first `next` waits for
    /// it), so that the call can be stopped from the start (`stop.rs`).
    async fn open_call(&self, caller: &Caller<'_>, method: &str, params: Option<Value>) -> Opened;

    /// The server's `InitializeResult` (capabilities, serverInfo, instructions).
    async fn server_info(&self, caller: &Caller<'_>) -> Result<Value, UpstreamError>;

    /// The `server/discover` result the gateway gives its 2026-07-28 clients. By
    /// default built from `server_info`; a 2026-07-28 upstream gives its own answer.
    async fn discover_result(&self, caller: &Caller<'_>) -> Result<Value, UpstreamError> {
        Ok(mtg_protocol::upgrade::discover_result(
            &self.server_info(caller).await?,
        ))
    }

    /// `tool`'s `x-mcp-header` annotations, from the upstream's `tools/list`, to check a
    /// client's `Mcp-Param-*` headers against. `None`: not known (only 2026-07-28
    /// upstreams are asked; their tools are the ones annotated).
    async fn tool_annotations(
        &self,
        _caller: &Caller<'_>,
        _tool: &str,
    ) -> Option<Vec<mtg_protocol::param_headers::ParamHeader>> {
        None
    }

    /// Where 2025-xx session clients are passed through to, for HTTP upstreams.
    fn passthrough_url(&self) -> Option<&::http::Uri>;

    /// A request a pass-through client sent in its own upstream session (`session`) as
    /// `id`, whose answer the gateway read up to `stream`, as an exchange a task carries
    /// on (`--defer-after-ms`) or stops (`Exchange::stop`).
    /// `None` (the stream dropped): the upstream has no such sessions.
    fn adopt(
        &self,
        _session: &PassThroughSession,
        _auth: Option<&::http::HeaderValue>,
        _id: Value,
        _stream: CallStream,
    ) -> Option<Box<dyn Exchange>> {
        None
    }

    /// Whether the upstream can be reached now, for `/readyz`.
    async fn ready(&self) -> Result<(), UpstreamError>;
    /// Whether 2025-xx session clients go through to the upstream as they are (its URL),
    /// or the gateway serves their sessions itself (`None`: a 2026-07-28 upstream has
    /// no sessions). May ask the upstream first, with the caller's credentials.
    async fn session_passthrough(
        &self,
        _auth: Option<&::http::HeaderValue>,
    ) -> Result<Option<&::http::Uri>, UpstreamError> {
        Ok(self.passthrough_url())
    }

    /// Stops what the upstream runs on this machine (a stdio server's processes) at the
    /// end of a graceful shutdown.
    async fn shutdown(&self) {}
}

/// One request in flight upstream.
#[async_trait]
pub trait Exchange: Send + Sync {
    /// The next message for this request; `None` when the upstream ended the stream.
    async fn next(&mut self) -> Option<Result<UpstreamEvent, UpstreamError>>;

    /// Answers a server-to-client request that arrived on this exchange.
    async fn reply(
        &self,
        id: Value,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<(), UpstreamError>;

    /// Stops the call upstream for `reason`, unless it already ended: the one way every
    /// stop reaches the upstream, whatever its transport (`stop.rs`). The exchange is
    /// dropped after.
    async fn stop(&mut self, reason: StopReason) -> Result<(), UpstreamError>;

    /// The id the gateway gave the request upstream; the final response carries it.
    fn request_id(&self) -> &Value;
}
