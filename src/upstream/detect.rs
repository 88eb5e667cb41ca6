//! Which generation an HTTP upstream speaks, found out at first use and remembered:
//! a `server/discover` probe, read per the 2026-07-28 HTTP backward-compatibility rules.
//! A discover result naming 2026-07-28 means a stateless (2026-07-28) upstream; an
//! answer that is not a recognised 2026-07-28 one means a session (2025-xx) upstream.

use mtg_protocol::names::STATELESS_VERSION;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::{HeaderValue, StatusCode, Uri};
use serde_json::{Map, Value};
use tokio::sync::OnceCell;

use super::stateless_http::{StatelessHttpExchange, StatelessHttpUpstream, post};
use super::{
    CallStream, Caller, Exchange, Opened, PassThroughSession, SessionHttpUpstream, Upstream,
    UpstreamError,
};
use mtg_protocol::jsonrpc::{self, ErrorObject, code};
use mtg_protocol::meta;
use mtg_transport::CallClient;

/// A probe that gets no answer in this time is retried at the next use.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the probe found: the upstream's generation (`names::Generation`), with what a
/// stateless upstream answered.
#[derive(Debug)]
pub(crate) enum Probed {
    /// Speaks 2026-07-28; its `server/discover` result.
    Stateless(Value),
    /// Speaks a 2025-xx version: needs `initialize` and sessions.
    Session,
}

/// Sends `server/discover` and reads the answer. Errors are answers that say nothing
/// about the generation (unreachable, auth, 5xx, time-out); they are not remembered.
pub(crate) async fn probe(
    client: &CallClient,
    url: &Uri,
    auth: Option<&HeaderValue>,
) -> Result<Probed, UpstreamError> {
    let id = Value::from(0);
    let body = jsonrpc::request_value(
        id.clone(),
        mtg_protocol::names::method::SERVER_DISCOVER,
        Some(meta::with_stateless_meta(None, &Map::new())),
    );
    let exchange = async {
        let response = post(
            client,
            url,
            auth,
            mtg_protocol::names::method::SERVER_DISCOVER,
            &body,
            &[],
        )
        .await?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED
            || status == StatusCode::FORBIDDEN
            || status == StatusCode::TOO_MANY_REQUESTS
            || status.is_server_error()
        {
            return Err(UpstreamError::Status {
                status: status.as_u16(),
                body: String::new(),
            });
        }
        match StatelessHttpExchange::open(response, id).await {
            Ok(mut exchange) => exchange.final_answer().await.map(Some),
            // A 4xx with no JSON-RPC error in it: not a 2026-07-28 server.
            Err(UpstreamError::Status { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let answer = tokio::time::timeout(PROBE_TIMEOUT, exchange)
        .await
        .map_err(|_| UpstreamError::Timeout(PROBE_TIMEOUT.as_millis() as u64))??;
    match answer {
        Some(Ok(result)) if names_stateless_version(result.get("supportedVersions")) => {
            Ok(Probed::Stateless(result))
        }
        Some(Err(error)) if is_stateless_rejection(&error) => {
            Err(UpstreamError::Protocol(format!(
                "the upstream speaks 2026-07-28 but rejected server/discover: {} ({})",
                error.message, error.code
            )))
        }
        _ => Ok(Probed::Session),
    }
}

fn names_stateless_version(versions: Option<&Value>) -> bool {
    versions
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v == STATELESS_VERSION))
}

/// A recognised 2026-07-28 error about the probe itself. An unsupported-version error that
/// does not list 2026-07-28 is not one: such a server may still speak a 2025-xx version.
fn is_stateless_rejection(error: &ErrorObject) -> bool {
    match error.code {
        code::HEADER_MISMATCH | code::MISSING_REQUIRED_CLIENT_CAPABILITY => true,
        code::UNSUPPORTED_PROTOCOL_VERSION => {
            names_stateless_version(error.data.as_ref().and_then(|d| d.get("supported")))
        }
        _ => false,
    }
}

/// An HTTP upstream of either generation: detected at first use, then every call goes
/// to the implementation for that generation.
pub(crate) struct AutoUpstream {
    client: CallClient,
    url: Uri,
    roots: Vec<String>,
    chosen: OnceCell<Arc<dyn Upstream>>,
}

impl AutoUpstream {
    pub(crate) fn new(client: CallClient, url: Uri, roots: &[String]) -> Arc<Self> {
        Arc::new(Self {
            client,
            url,
            roots: roots.to_vec(),
            chosen: OnceCell::new(),
        })
    }

    async fn chosen(&self, caller: &Caller<'_>) -> Result<&Arc<dyn Upstream>, UpstreamError> {
        self.chosen
            .get_or_try_init(|| async {
                let upstream: Arc<dyn Upstream> =
                    match probe(&self.client, &self.url, caller.auth).await? {
                        Probed::Stateless(discovered) => {
                            tracing::info!(upstream = %self.url, "upstream speaks 2026-07-28");
                            Arc::new(StatelessHttpUpstream::new(
                                self.client.clone(),
                                self.url.clone(),
                                discovered,
                            ))
                        }
                        Probed::Session => {
                            tracing::info!(upstream = %self.url, "upstream speaks a 2025 (session) version");
                            SessionHttpUpstream::new(self.client.clone(), self.url.clone(), &self.roots)
                        }
                    };
                Ok(upstream)
            })
            .await
    }
}

#[async_trait]
impl Upstream for AutoUpstream {
    async fn open_call(&self, caller: &Caller<'_>, method: &str, params: Option<Value>) -> Opened {
        self.chosen(caller)
            .await?
            .open_call(caller, method, params)
            .await
    }

    async fn server_info(&self, caller: &Caller<'_>) -> Result<Value, UpstreamError> {
        self.chosen(caller).await?.server_info(caller).await
    }

    async fn discover_result(&self, caller: &Caller<'_>) -> Result<Value, UpstreamError> {
        self.chosen(caller).await?.discover_result(caller).await
    }

    async fn tool_annotations(
        &self,
        caller: &Caller<'_>,
        tool: &str,
    ) -> Option<Vec<mtg_protocol::param_headers::ParamHeader>> {
        self.chosen(caller)
            .await
            .ok()?
            .tool_annotations(caller, tool)
            .await
    }

    async fn ready(&self) -> Result<(), UpstreamError> {
        match self.chosen.get() {
            Some(chosen) => chosen.ready().await,
            None => super::http::probe_reachable(&self.client, &self.url).await,
        }
    }

    fn passthrough_url(&self) -> Option<&Uri> {
        match self.chosen.get() {
            Some(chosen) => chosen.passthrough_url(),
            None => Some(&self.url),
        }
    }

    fn adopt(
        &self,
        session: &PassThroughSession,
        auth: Option<&HeaderValue>,
        id: Value,
        stream: CallStream,
    ) -> Option<Box<dyn Exchange>> {
        self.chosen.get()?.adopt(session, auth, id, stream)
    }

    async fn session_passthrough(
        &self,
        auth: Option<&HeaderValue>,
    ) -> Result<Option<&Uri>, UpstreamError> {
        let caller = Caller {
            capabilities: &Map::new(),
            auth,
            session: None,
        };
        Ok(self.chosen(&caller).await?.passthrough_url())
    }

    async fn shutdown(&self) {
        if let Some(chosen) = self.chosen.get() {
            chosen.shutdown().await;
        }
    }
}
