//! Every MCP name the gateway reads or writes, in one place: HTTP headers, protocol
//! versions, the methods it acts on, and how it introduces itself.
//!
//! Two generations meet here, named for what tells them apart: *session* (2024-11-05 to
//! 2025-11-25: `initialize`, `Mcp-Session-Id`, server-to-client requests on streams) and
//! *stateless* (2026-07-28: `_meta` on every request, MRTR instead of server requests).

use serde_json::{Value, json};

/// HTTP headers, lower-case as `http` stores them.
pub mod header {
    pub const MCP_SESSION_ID: &str = "mcp-session-id";
    pub const MCP_PROTOCOL_VERSION: &str = "mcp-protocol-version";
    pub const MCP_METHOD: &str = "mcp-method";
    pub const MCP_NAME: &str = "mcp-name";
}

/// The stateless revision, spoken by and to 2026-07-28 peers.
pub const STATELESS_VERSION: &str = "2026-07-28";
/// The session revision the gateway speaks to session upstreams and offers by default.
pub const SESSION_VERSION: &str = "2025-11-25";
/// Session revisions a client of a gateway-served session may negotiate, newest first.
pub const SESSION_VERSIONS: [&str; 4] = [SESSION_VERSION, "2025-06-18", "2025-03-26", "2024-11-05"];

/// Which generation a peer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// 2025-xx and earlier: sessions.
    Session,
    /// 2026-07-28: stateless requests.
    Stateless,
}

/// Methods the gateway acts on.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const INITIALIZED: &str = "notifications/initialized";
    pub const PING: &str = "ping";
    pub const SERVER_DISCOVER: &str = "server/discover";
    pub const TOOLS_CALL: &str = "tools/call";
    pub const TOOLS_LIST: &str = "tools/list";
    pub(crate) const PROMPTS_GET: &str = "prompts/get";
    pub(crate) const RESOURCES_READ: &str = "resources/read";
    pub const TASKS_GET: &str = "tasks/get";
    pub const TASKS_UPDATE: &str = "tasks/update";
    pub const TASKS_CANCEL: &str = "tasks/cancel";
    /// 2025-11-25 only: blocks until the task ends, delivering its input requests.
    pub const TASKS_RESULT: &str = "tasks/result";
    /// 2025-11-25 only.
    pub const TASKS_LIST: &str = "tasks/list";
    /// 2025-11-25 push of a task's new state.
    pub const TASK_STATUS: &str = "notifications/tasks/status";
    /// SEP-2663's push of a task's whole state on a `subscriptions/listen` stream.
    pub(crate) const TASKS_NOTIFICATION: &str = "notifications/tasks";
    pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
    pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
    pub(crate) const ELICITATION_CREATE: &str = "elicitation/create";
    pub(crate) const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
    pub(crate) const ROOTS_LIST: &str = "roots/list";
    pub const PROGRESS: &str = "notifications/progress";
    pub const CANCELLED: &str = "notifications/cancelled";

    /// Requests whose answer may come after input from the client (MRTR rounds, or
    /// server-to-client requests on the call's stream).
    pub const MAY_ASK_FOR_INPUT: [&str; 3] = [TOOLS_CALL, PROMPTS_GET, RESOURCES_READ];
    /// Server-to-client requests that ask the client (and its user) for input.
    pub const INPUT_REQUESTS: [&str; 3] = [ELICITATION_CREATE, SAMPLING_CREATE_MESSAGE, ROOTS_LIST];
}

/// How the gateway introduces itself (`clientInfo`, and `serverInfo` when it has no
/// upstream's to show).
pub fn gateway_info() -> Value {
    json!({"name": "mcp-task-gateway", "version": env!("CARGO_PKG_VERSION")})
}
