//! `mrtr_server`: a 2026-07-28 MCP server on rmcp 3.x whose tools ask for input with
//! MRTR (`InputRequiredResult`), for the gateway's integration tests. Stateless: no
//! sessions, no tasks of its own.
//!
//! ```text
//! cargo run --release -p fixture-servers --bin mrtr_server -- [--listen 127.0.0.1:0]
//! ```
//!
//! Prints `listening on http://127.0.0.1:PORT/mcp` once it accepts connections.
//!
//! Tools (the same flows as `tests/fixtures/mrtr_server.py`):
//! * `confirm_delete {path, delay_ms?}`: one round, an elicitation asking to confirm; the
//!   answered retry takes `delay_ms` before it answers.
//! * `two_rounds {}`: round 1 asks two questions at once (name, color); round 2 asks to
//!   confirm; then answers with all three.
//! * `echo {text}`: no input needed.
//! * `regional_echo {region, text}`: `region` is annotated `x-mcp-header: Region`, so a
//!   call must carry a matching `Mcp-Param-Region` header (rmcp checks it).
//! * `widgets {}`: needs the client extension `io.example/widgets`; answers with the
//!   extensions the request declared (an `isError` result without it).
//!
//! `subscriptions/listen` with `toolsListChanged` is acknowledged and gets one
//! `notifications/tools/list_changed`, then stays open until the listener goes.
//!
//! A `requestState` the server did not mint is rejected with -32602. `GET /stats`
//! counts the tool calls that reached a tool, by tool name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitationSchema, InputRequest, InputRequests, InputRequiredResult,
    InputResponses, JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, ServerNotification, SubscriptionFilter, Tool,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};

/// Round-2 states carry round 1's answers, so the server keeps nothing between rounds.
const ROUND_1: &str = "two-rounds/1";
const ROUND_2_PREFIX: &str = "two-rounds/2|";
const CONFIRM_DELETE: &str = "confirm-delete/1";

#[derive(Clone, Default)]
struct MrtrServer {
    calls: Arc<Mutex<BTreeMap<String, u64>>>,
}

fn elicit(message: &str, schema: ElicitationSchema) -> InputRequest {
    InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema: schema,
        },
    ))
}

fn string_field(name: &str) -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_string(name)
        .build()
        .expect("a one-field schema is valid")
}

fn bool_field(name: &str) -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_bool(name)
        .build()
        .expect("a one-field schema is valid")
}

fn text(value: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(value.into())]).into()
}

fn ask(requests: Vec<(&str, InputRequest)>, state: String) -> CallToolResponse {
    let requests: InputRequests = requests
        .into_iter()
        .map(|(key, request)| (key.to_owned(), request))
        .collect();
    InputRequiredResult::new(Some(requests), Some(state)).into()
}

/// The accepted answer's field, or `None` when missing or declined.
fn accepted<'a>(
    responses: Option<&'a InputResponses>,
    key: &str,
    field: &str,
) -> Option<&'a Value> {
    let answer = responses?.get(key)?;
    if answer.get("action")?.as_str()? != "accept" {
        return None;
    }
    answer.get("content")?.get(field)
}

fn forged() -> McpError {
    McpError::invalid_params("Invalid or expired requestState", None)
}

impl MrtrServer {
    fn count(&self, tool: &str) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        *calls.entry(tool.to_owned()).or_default() += 1;
    }

    async fn confirm_delete(
        &self,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, McpError> {
        let path = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("path"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        match request.request_state.as_deref() {
            None => Ok(ask(
                vec![(
                    "confirm",
                    elicit(&format!("Delete {path}?"), bool_field("confirm")),
                )],
                CONFIRM_DELETE.to_owned(),
            )),
            Some(CONFIRM_DELETE) => {
                let confirmed = accepted(request.input_responses.as_ref(), "confirm", "confirm")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                // A slow final round, to outlast the gateway's promotion budget.
                let delay = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("delay_ms"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                Ok(text(if confirmed {
                    format!("deleted {path}")
                } else {
                    format!("kept {path}")
                }))
            }
            Some(_) => Err(forged()),
        }
    }

    fn two_rounds(&self, request: &CallToolRequestParams) -> Result<CallToolResponse, McpError> {
        let responses = request.input_responses.as_ref();
        let first_round = || {
            ask(
                vec![
                    ("name", elicit("Your name?", string_field("name"))),
                    ("color", elicit("Favourite color?", string_field("color"))),
                ],
                ROUND_1.to_owned(),
            )
        };
        match request.request_state.as_deref() {
            None => Ok(first_round()),
            Some(ROUND_1) => {
                let name = accepted(responses, "name", "name").and_then(Value::as_str);
                let color = accepted(responses, "color", "color").and_then(Value::as_str);
                let (Some(name), Some(color)) = (name, color) else {
                    // Missing answers: ask again rather than fail, as the spec advises.
                    return Ok(first_round());
                };
                if name.contains('|') || color.contains('|') {
                    return Ok(text("answers must not contain '|'"));
                }
                Ok(ask(
                    vec![(
                        "confirm",
                        elicit(&format!("{name} likes {color}, right?"), bool_field("ok")),
                    )],
                    format!("{ROUND_2_PREFIX}{name}|{color}"),
                ))
            }
            Some(state) => {
                let (name, color) = state
                    .strip_prefix(ROUND_2_PREFIX)
                    .and_then(|rest| rest.split_once('|'))
                    .ok_or_else(forged)?;
                let ok = accepted(responses, "confirm", "ok")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let suffix = if ok { "" } else { " (not confirmed)" };
                Ok(text(format!("{name} likes {color}{suffix}")))
            }
        }
    }
}

impl ServerHandler for MrtrServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    /// Listeners for tool-list changes are served (the others are not offered).
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    /// Tells each listener once that the tool list changed, then stays open until the
    /// listener goes: enough to see a notification travel the stream.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let changed = ServerNotification::ToolListChangedNotification(Default::default());
        if let Err(e) = context.sink().send(changed).await {
            eprintln!("mrtr_server: could not notify a listener: {e}");
        }
        context.cancelled().await;
        Ok(())
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    /// rmcp checks `Mcp-Param-*` headers against the schema found here.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tool = request.name.to_string();
        match tool.as_str() {
            "widgets" => {
                self.count(&tool);
                let extensions: Vec<String> = context
                    .client_capabilities()
                    .and_then(|capabilities| capabilities.extensions)
                    .map(|extensions| extensions.into_keys().collect())
                    .unwrap_or_default();
                Ok(if extensions.iter().any(|e| e == WIDGETS) {
                    text(format!("extensions: {}", extensions.join(",")))
                } else {
                    let refusal = format!("this tool needs the {WIDGETS} extension");
                    CallToolResult::error(vec![ContentBlock::text(refusal)]).into()
                })
            }
            "confirm_delete" => {
                self.count(&tool);
                self.confirm_delete(&request).await
            }
            "two_rounds" => {
                self.count(&tool);
                self.two_rounds(&request)
            }
            "regional_echo" => {
                self.count(&tool);
                let argument = |name: &str| {
                    request
                        .arguments
                        .as_ref()
                        .and_then(|a| a.get(name))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                Ok(text(format!(
                    "{}: {}",
                    argument("region"),
                    argument("text")
                )))
            }
            "echo" => {
                self.count(&tool);
                let text_arg = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Ok(text(text_arg))
            }
            other => Err(McpError::invalid_params(
                format!("unknown tool {other}"),
                None,
            )),
        }
    }
}

/// A client extension the `widgets` tool needs.
const WIDGETS: &str = "io.example/widgets";

fn tools() -> Vec<Tool> {
    let schema = |value: Value| -> Arc<JsonObject> {
        Arc::new(serde_json::from_value(value).expect("a JSON object"))
    };
    vec![
        Tool::new(
            "confirm_delete",
            "asks to confirm, then deletes (pretends to)",
            schema(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "delay_ms": {"type": "integer"}},
                "required": ["path"]
            })),
        ),
        Tool::new(
            "two_rounds",
            "two MRTR rounds: name and color, then a confirmation",
            schema(json!({"type": "object"})),
        ),
        Tool::new(
            "echo",
            "returns its text",
            schema(json!({"type": "object", "properties": {"text": {"type": "string"}}})),
        ),
        Tool::new(
            "widgets",
            "needs the client extension io.example/widgets; lists the extensions declared",
            schema(json!({"type": "object"})),
        ),
        Tool::new(
            "regional_echo",
            "returns region and text; region must be mirrored in Mcp-Param-Region",
            schema(json!({
                "type": "object",
                "properties": {
                    "region": {"type": "string", "x-mcp-header": "Region"},
                    "text": {"type": "string"}
                },
                "required": ["region", "text"]
            })),
        ),
    ]
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listen = std::env::args()
        .skip_while(|a| a != "--listen")
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_owned());
    // One handler for all requests: a stateless server builds one per request.
    let handler = MrtrServer::default();
    let calls = handler.calls.clone();
    let service: StreamableHttpService<MrtrServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(handler.clone()),
            Default::default(),
            StreamableHttpServerConfig::default()
                .with_legacy_session_mode(false)
                .with_json_response(true),
        );
    let stats = axum::routing::get(move || {
        let calls = calls.clone();
        async move {
            let calls = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
            axum::Json(json!({ "calls": calls }))
        }
    });
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .route("/stats", stats);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{}/mcp", listener.local_addr()?)?;
        out.flush()?;
    }
    axum::serve(listener, router).await
}
