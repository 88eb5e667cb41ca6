//! Tools the upstream runs only as its own task (`execution.taskSupport: "required"`:
//! server-everything's `simulate-research-query`), called by clients that will not take
//! a task: a 2026-07-28 client without the tasks extension (the Python SDK 2.x) and a
//! 2025-xx session client that sends no `params.task` (the TypeScript SDK 1.x without
//! `capabilities.tasks`). The gateway runs the call as its own task, following the
//! upstream's, and answers it on the call itself; with `--defer-after-ms`, past the
//! budget, with a deferred result first. The upstream's question reaches each client the
//! way it takes questions: an MRTR round, or a request on the call's SSE stream.

use serde_json::{Value, json};

use crate::bridged_clients::python_client;
use crate::common::stdio::{everything_cmd, start_stdio_gateway};
use crate::common::*;
use crate::session_tasks::{line, ts_client_with};

const RESEARCH: &str = "simulate-research-query";

/// The report of an ambiguous query the client clarified as "technical".
fn assert_clarified_report(result: &Value) {
    let report = first_text(result);
    assert!(
        report.contains("Research Report: gateways (technical)"),
        "{result}"
    );
    assert_ne!(result["isError"], true, "{result}");
}

fn python_research(url: &str, flags: &[&str]) -> Value {
    let mut all = vec!["--elicit", r#"{"interpretation": "technical"}"#];
    all.extend_from_slice(flags);
    python_client(
        url,
        RESEARCH,
        json!({"topic": "gateways", "ambiguous": true}),
        &all,
    )
}

#[test]
fn a_2026_client_without_the_extension_gets_the_research_result_on_its_call() {
    let (_upstream, upstream_url) = start_everything();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    let seen = python_research(&url, &[]);
    assert_clarified_report(&seen["result"]);
    // The upstream's question came as an MRTR round the SDK answered.
    assert_eq!(seen["asked"], json!(["elicitation/create"]), "{seen}");
}

#[test]
fn a_2026_client_without_the_extension_gets_a_deferred_result_first_with_deferral_on() {
    let (_upstream, upstream_url) = start_everything();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "1000"]);
    let seen = python_research(&url, &["--fetch-deferred"]);
    let deferred = seen["deferred"].as_array().expect("deferred results");
    assert!(!deferred.is_empty(), "not deferred: {seen}");
    assert!(
        first_text(&deferred[0]).contains(&format!("The tool {RESEARCH} is still running")),
        "{seen}"
    );
    assert_clarified_report(&seen["result"]);
    assert_eq!(seen["asked"], json!(["elicitation/create"]), "{seen}");
}

/// The TypeScript SDK 1.x session client without tasks: it sees the tool as `optional`
/// (left `required`, the SDK refuses to call it) and gets the report on its call, the
/// question as a request on the call's stream.
fn session_client_gets_the_report(url: &str) {
    let lines = ts_client_with(json!({"url": url, "noTasks": true,
        "elicitAnswer": {"interpretation": "technical"}, "steps": [
        {"do": "listTools"},
        {"do": "callTool", "name": RESEARCH, "arguments": {"topic": "gateways", "ambiguous": true}},
    ]}));
    let tools = &line(&lines, "tools")["tools"];
    assert_eq!(tools[RESEARCH], "optional", "{lines:#?}");
    assert!(
        tools.as_object().is_some_and(|t| t.len() > 10),
        "nothing dropped: {lines:#?}"
    );
    line(&lines, "elicited");
    assert_clarified_report(&line(&lines, "result")["result"]);
}

/// The same with `--defer-after-ms`: a deferred result first, then the report through
/// `get_task_result`.
fn session_client_gets_a_deferred_result_then_the_report(url: &str) {
    let lines = ts_client_with(json!({"url": url, "noTasks": true,
        "elicitAnswer": {"interpretation": "technical"}, "steps": [
        {"do": "listTools"},
        {"do": "callToolFetchDeferred", "name": RESEARCH, "arguments": {"topic": "gateways", "ambiguous": true}},
    ]}));
    let first = &line(&lines, "first")["first"];
    assert!(
        first["_meta"]["io.modelcontextprotocol/related-task"]["taskId"].is_string(),
        "not deferred: {lines:#?}"
    );
    line(&lines, "elicited");
    assert_clarified_report(&line(&lines, "result")["result"]);
}

#[test]
fn a_session_client_without_tasks_gets_the_report_through_a_pass_through_session() {
    let (_upstream, upstream_url) = start_everything();
    let (_gateway, url) = start_gateway(&upstream_url, &[]);
    session_client_gets_the_report(&url);
}

#[test]
fn a_session_client_without_tasks_gets_the_report_over_stdio() {
    let gateway = start_stdio_gateway(&everything_cmd(), &[]);
    session_client_gets_the_report(&gateway.url);
}

#[test]
fn a_session_client_without_tasks_gets_a_deferred_result_through_a_pass_through_session() {
    let (_upstream, upstream_url) = start_everything();
    let (_gateway, url) = start_gateway(&upstream_url, &["--defer-after-ms", "1000"]);
    session_client_gets_a_deferred_result_then_the_report(&url);
}

#[test]
fn a_session_client_without_tasks_gets_a_deferred_result_over_stdio() {
    let gateway = start_stdio_gateway(&everything_cmd(), &["--defer-after-ms", "1000"]);
    session_client_gets_a_deferred_result_then_the_report(&gateway.url);
}
