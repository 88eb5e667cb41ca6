//! The rmcp client (3.x), an independent implementation, calls MRTR tools of a
//! 2026-07-28 upstream through the gateway without the tasks extension, answering the
//! elicitations with its own handler: as a 2026-07-28 client (the gateway passes the
//! `InputRequiredResult` through and rmcp retries itself) and as a 2025-11-25 session
//! client (the gateway serves the session and turns the rounds into server requests).

use crate::common::mrtr::{MrtrUpstream, upstream_calls};
use crate::common::*;
use crate::over_both_upstreams;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, FormElicitationCapability, Implementation,
    JsonObject, ProtocolVersion, ServerNotification, SubscriptionFilter,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient, ServiceExt,
};
use serde_json::json;

fn transport(
    url: &str,
) -> StreamableHttpClientTransport<impl rmcp::transport::streamable_http_client::StreamableHttpClient>
{
    StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(
        url.to_owned(),
    ))
}

/// Answers the fixtures' questions like a user would.
#[derive(Clone)]
pub(crate) struct User {
    config: ClientConfig,
}

impl User {
    fn new(version: ProtocolVersion) -> Self {
        let capabilities = ClientCapabilities::builder()
            .enable_elicitation_with(
                ElicitationCapability::new().with_form(FormElicitationCapability::new()),
            )
            .build();
        let config = ClientConfig::new(capabilities, Implementation::new("rmcp-user", "0.1.0"))
            .with_protocol_version(version);
        Self { config }
    }
}

impl ClientHandler for User {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let content = match message.as_str() {
            "Your name?" => json!({"name": "Di"}),
            "Favourite color?" => json!({"color": "teal"}),
            m if m.starts_with("Delete ") => json!({"confirm": true}),
            _ => json!({"ok": true}),
        };
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }
}

async fn call_two_rounds(client: &RunningService<RoleClient, User>) -> String {
    let arguments: JsonObject = serde_json::from_value(json!({})).unwrap();
    let call = CallToolRequestParams::new("two_rounds").with_arguments(arguments);
    let result = tokio::time::timeout(DEADLINE, client.call_tool(call))
        .await
        .expect("answered in time")
        .expect("tools/call");
    let content = serde_json::to_value(&result.content).unwrap();
    content[0]["text"].as_str().unwrap().to_owned()
}

/// rmcp as a 2026-07-28 client of `url` (it starts with `server/discover`).
pub(crate) async fn stateless_client(url: &str) -> RunningService<RoleClient, User> {
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    tokio::time::timeout(
        DEADLINE,
        User::new(ProtocolVersion::V_2026_07_28).serve_with_lifecycle(transport(url), lifecycle),
    )
    .await
    .expect("connect in time")
    .expect("rmcp accepts the gateway's server/discover")
}

async fn stateless_rmcp_client_retries_itself(upstream: MrtrUpstream) {
    let (_upstream, upstream_url) = upstream.start();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = stateless_client(&url).await;
    assert_eq!(call_two_rounds(&client).await, "Di likes teal");
    assert_eq!(upstream_calls(&upstream_url, "two_rounds").await, 3);
}

async fn session_rmcp_client_is_asked_on_its_session(upstream: MrtrUpstream) {
    let (_upstream, upstream_url) = upstream.start();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = tokio::time::timeout(
        DEADLINE,
        User::new(ProtocolVersion::V_2025_11_25).serve(transport(&url)),
    )
    .await
    .expect("connect in time")
    .expect("rmcp initializes a session with the gateway");
    assert_eq!(call_two_rounds(&client).await, "Di likes teal");
    assert_eq!(upstream_calls(&upstream_url, "two_rounds").await, 3);
}

over_both_upstreams!(
    stateless_rmcp_client_retries_itself,
    session_rmcp_client_is_asked_on_its_session,
);

/// rmcp's `Peer::listen` through the gateway: the upstream's part of the subscription
/// (tool-list changes) is acknowledged and relayed under rmcp's own subscription.
#[tokio::test]
async fn rmcp_listens_through_the_gateway_to_the_upstreams_notifications() {
    let (_upstream, upstream_url) = MrtrUpstream::Rmcp.start();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let client = stateless_client(&url).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = tokio::time::timeout(DEADLINE, client.peer().listen(filter))
        .await
        .expect("acknowledged in time")
        .expect("rmcp accepts the acknowledgement");
    assert_eq!(subscription.acknowledged().tools_list_changed, Some(true));
    let notification = tokio::time::timeout(DEADLINE, subscription.next())
        .await
        .expect("a notification in time")
        .expect("the subscription is healthy")
        .expect("the subscription is open");
    assert!(
        matches!(
            notification,
            ServerNotification::ToolListChangedNotification(_)
        ),
        "{notification:?}"
    );
}
