//! The MCP messages and shapes the gateway reads or writes; everything else is forwarded.
//! A crate of its own so that the wire shapes and names stay in one place: nothing here
//! can reach the gateway's state, transport or store.

// Bad input is an error value here, never a panic; unit tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod headers;
pub mod jsonrpc;
pub mod meta;
pub mod mrtr;
pub mod names;
pub mod param_headers;
pub mod task_support;
pub mod upgrade;
pub mod wire;
