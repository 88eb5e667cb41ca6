//! The MCP messages and shapes the gateway reads or writes; everything else is forwarded.

pub mod headers;
pub mod jsonrpc;
pub mod meta;
pub mod mrtr;
pub mod names;
pub mod param_headers;
pub mod task_support;
pub mod upgrade;
pub mod wire;
