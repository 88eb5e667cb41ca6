//! Which `Mcp-Param-*` headers a 2026-07-28 upstream's tools need, learnt from its
//! `tools/list` and kept for a while: the gateway calls tools for clients that may
//! never have listed them.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Mutex;

use super::UpstreamError;
use mtg_protocol::param_headers::{self, ParamHeader};

/// A listing is used this long, then fetched again at the next call.
const FRESH_FOR: Duration = Duration::from_secs(60);
/// A tool missing from the listing refetches it, but not more often than this.
const REFETCH_AFTER: Duration = Duration::from_secs(5);
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(crate) struct ToolHeaderCache {
    /// An async lock: concurrent calls wait for one fetch instead of each fetching.
    listing: Mutex<Option<Listing>>,
}

struct Listing {
    at: Instant,
    /// Annotations by tool name; tools with invalid annotations are left out.
    tools: HashMap<String, Vec<ParamHeader>>,
}

impl ToolHeaderCache {
    /// The headers (name, unencoded value) a call of `tool` with `arguments` carries.
    /// If the listing fails, the call goes without headers and the upstream decides.
    pub(crate) async fn headers_for<F, Fut>(
        &self,
        tool: &str,
        arguments: Option<&Value>,
        list: F,
    ) -> Vec<(String, String)>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Value>, UpstreamError>>,
    {
        self.annotations_for(tool, list)
            .await
            .map(|annotations| param_headers::values(&annotations, arguments))
            .unwrap_or_default()
    }

    /// `tool`'s `x-mcp-header` annotations; `None` when the upstream lists no such tool
    /// (or could not be asked). `list` fetches the upstream's tools when the listing is
    /// stale or lacks the tool.
    pub(crate) async fn annotations_for<F, Fut>(
        &self,
        tool: &str,
        list: F,
    ) -> Option<Vec<ParamHeader>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Value>, UpstreamError>>,
    {
        let mut listing = self.listing.lock().await;
        let refetch = match listing.as_ref() {
            None => true,
            Some(l) if l.at.elapsed() > FRESH_FOR => true,
            Some(l) => !l.tools.contains_key(tool) && l.at.elapsed() > REFETCH_AFTER,
        };
        if refetch {
            // Every tool call waits for this listing: it must not hang them all.
            let listed = tokio::time::timeout(LIST_TIMEOUT, list())
                .await
                .unwrap_or_else(|_| Err(UpstreamError::Timeout(LIST_TIMEOUT.as_millis() as u64)));
            match listed {
                Ok(tools) => {
                    *listing = Some(Listing {
                        at: Instant::now(),
                        tools: annotations_by_tool(&tools),
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not list the upstream's tools");
                    // Try again later, not at every call: keep what is known, if anything.
                    let known = listing.take().map(|l| l.tools).unwrap_or_default();
                    *listing = Some(Listing {
                        at: Instant::now(),
                        tools: known,
                    });
                }
            }
        }
        listing.as_ref().and_then(|l| l.tools.get(tool)).cloned()
    }
}

fn annotations_by_tool(tools: &[Value]) -> HashMap<String, Vec<ParamHeader>> {
    tools
        .iter()
        .filter_map(|tool| {
            let name = tool.get("name")?.as_str()?;
            let schema = tool.get("inputSchema").unwrap_or(&Value::Null);
            match param_headers::annotations(schema) {
                Ok(annotations) => Some((name.to_owned(), annotations)),
                Err(reason) => {
                    tracing::warn!(tool = name, %reason, "invalid x-mcp-header annotations");
                    None
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn lists_once_and_mirrors_annotated_arguments() {
        let cache = ToolHeaderCache::default();
        let tools = vec![json!({
            "name": "t",
            "inputSchema": {"properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
        })];
        let arguments = json!({"region": "eu"});
        let first = cache
            .headers_for("t", Some(&arguments), || async { Ok(tools.clone()) })
            .await;
        assert_eq!(first, [("mcp-param-Region".to_owned(), "eu".to_owned())]);
        let second = cache
            .headers_for("t", Some(&arguments), || async {
                panic!("a fresh listing is not fetched again")
            })
            .await;
        assert_eq!(first, second);
        // Unknown right after a fetch: no refetch yet, no headers.
        let unknown = cache
            .headers_for("other", None, || async { panic!("rate-limited") })
            .await;
        assert!(unknown.is_empty());
    }
}
