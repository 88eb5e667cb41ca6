//! The integration tests, one binary: each module was a test file of its own, and linking
//! each of them with `common` again cost more than running them. Every test starts real
//! processes (the gateway binary, fixture servers, Redis, Node and Python peers); the
//! shared helpers are in `common`.

// Test code: a test may run longer than the 80 lines the library's functions keep to.
#![allow(clippy::too_many_lines)]
// A test binary offers nothing to other crates; `pub` in `common` means "for the tests".
#![allow(unreachable_pub)]

mod common;

mod admin;
mod auth;
mod bad_input;
mod bridged_clients;
mod chart;
mod conformance;
mod console;
mod deferred;
mod fixture_servers;
mod gateway_sessions;
mod generations;
mod header_values;
mod hostile_props;
mod hosts;
mod keepalive;
mod listen;
mod mrtr_upstream;
mod named_clients;
mod named_upstreams;
mod namespaces;
mod operations;
mod orphans;
mod otlp;
mod passthrough;
mod redis_sentinel;
mod redis_store;
mod redis_tls;
mod rmcp_client;
mod rmcp_client_mrtr;
mod session_tasks;
mod spec_letter;
mod stdio_upstream;
mod stops;
mod takeover;
mod task_only_tools;
mod task_rate;
mod tasks_plain_server;
mod tasks_server_everything;
mod tls;
mod upstream_http2;
mod webhooks;
