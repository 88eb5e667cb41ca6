//! Learning what a fresh process speaks: a `server/discover` probe (2026-07-28), and
//! the `initialize` handshake for 2025-xx servers when the probe fails.

use mtg_protocol::names::method;
use mtg_protocol::names::{SESSION_VERSION, STATELESS_VERSION};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::link::{Generation, Grants, Link, Outgoing};
use crate::upstream::{UpstreamError, UpstreamEvent};
use mtg_protocol::jsonrpc::{ErrorObject, code};
use mtg_protocol::meta;

/// A 2025-xx server may ignore the probe instead of answering it.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(5);
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(60);

/// The capabilities the process's one session declares. Servers register some tools
/// only for clients that declared these; calls whose own client did not declare one
/// get an error answer upstream if they are asked for it.
pub(super) fn declared_capabilities() -> Map<String, Value> {
    let caps = json!({
        "elicitation": {"form": {}, "url": {}},
        "sampling": {},
        "roots": {},
    });
    caps.as_object().cloned().unwrap_or_default()
}

pub(super) fn client_info() -> Value {
    mtg_protocol::names::gateway_info()
}

/// Runs the handshake; returns the server's description in `InitializeResult` shape
/// (capabilities, serverInfo, instructions), whatever the generation.
pub(super) async fn handshake(link: &Link) -> Result<Value, UpstreamError> {
    match discover(link).await? {
        Some(result) => {
            link.set_generation(Generation::Stateless);
            tracing::info!(
                slot = link.slot,
                pid = link.pid,
                "upstream process speaks {STATELESS_VERSION}"
            );
            Ok(initialize_shape(&result))
        }
        None => {
            let server = initialize(link).await?;
            link.set_generation(Generation::Session);
            let version = server
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or("?");
            tracing::info!(
                slot = link.slot,
                pid = link.pid,
                version,
                "upstream process initialized"
            );
            Ok(server)
        }
    }
}

/// `Some(result)` for a 2026-07-28 server, `None` for a 2025-xx one. As the stdio
/// transport says, any error other than a recognised 2026-07-28 one, or no answer at
/// all, means 2025-xx.
async fn discover(link: &Link) -> Result<Option<Value>, UpstreamError> {
    let params = json!({"_meta": {
        meta::META_PROTOCOL_VERSION: STATELESS_VERSION,
        meta::META_CLIENT_CAPABILITIES: declared_capabilities(),
        meta::META_CLIENT_INFO: client_info(),
    }});
    match request(
        link,
        mtg_protocol::names::method::SERVER_DISCOVER,
        params,
        DISCOVER_TIMEOUT,
    )
    .await
    {
        Ok(Ok(result)) => {
            let supported = result
                .get("supportedVersions")
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|v| v == STATELESS_VERSION));
            if supported {
                Ok(Some(result))
            } else {
                Err(UpstreamError::Protocol(format!(
                    "the upstream answered server/discover without supporting {STATELESS_VERSION}: {}",
                    result.get("supportedVersions").unwrap_or(&Value::Null)
                )))
            }
        }
        Ok(Err(error)) if error.code == code::UNSUPPORTED_PROTOCOL_VERSION => {
            Err(UpstreamError::Protocol(format!(
                "the upstream speaks a 2026 protocol but not {STATELESS_VERSION}: {}",
                error.data.as_ref().unwrap_or(&Value::Null)
            )))
        }
        Ok(Err(_)) | Err(UpstreamError::Timeout(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

async fn initialize(link: &Link) -> Result<Value, UpstreamError> {
    let params = json!({
        "protocolVersion": SESSION_VERSION,
        "capabilities": declared_capabilities(),
        "clientInfo": client_info(),
    });
    let server = request(link, method::INITIALIZE, params, INITIALIZE_TIMEOUT)
        .await?
        .map_err(|e| UpstreamError::Protocol(format!("initialize failed: {}", e.message)))?;
    // Only after the response: server-everything registers its capability-dependent
    // tools wrongly when `initialized` arrives in the same read as `initialize`.
    link.notify(mtg_protocol::names::method::INITIALIZED, None)?;
    Ok(server)
}

/// One request of the gateway's own, answered within `limit`.
async fn request(
    link: &Link,
    method: &str,
    params: Value,
    limit: Duration,
) -> Result<Result<Value, ErrorObject>, UpstreamError> {
    let no_caps = Map::new();
    let (id, mut events) = link.start(Outgoing {
        method,
        params: Some(params),
        may_ask: false,
        grants: Grants::default(),
        capabilities: &no_caps,
    })?;
    let answer = async {
        while let Some(event) = events.recv().await {
            if let UpstreamEvent::Response { outcome, .. } = event? {
                return Ok(outcome);
            }
        }
        Err(UpstreamError::Lost(format!("no answer to {method}")))
    };
    let outcome = tokio::time::timeout(limit, answer)
        .await
        .unwrap_or(Err(UpstreamError::Timeout(limit.as_millis() as u64)));
    if outcome.is_err() {
        link.forget(id);
    }
    outcome
}

/// A `DiscoverResult` in the shape of an `InitializeResult`, which is what the rest
/// of the gateway reads.
fn initialize_shape(discover: &Value) -> Value {
    let mut server = json!({
        "protocolVersion": STATELESS_VERSION,
        "capabilities": discover.get("capabilities").cloned().unwrap_or_else(|| json!({})),
    });
    let info = discover
        .get("_meta")
        .and_then(|m| m.get(meta::META_SERVER_INFO))
        .or_else(|| discover.get("serverInfo"));
    if let Some(info) = info {
        server["serverInfo"] = info.clone();
    }
    if let Some(instructions) = discover.get("instructions") {
        server["instructions"] = instructions.clone();
    }
    server
}
