//! A task's page: what the store holds of it, with the arguments and the result only
//! when the operator asked for them (`--admin-show-results`), and then cut at a cap.

use serde_json::Value;

use super::listing::{message_of, row};
use super::views::{ErrorView, InputView, Shown, TaskView};
use super::world::WorldView;
use crate::admin::task_facts::owner_lease;
use mtg_protocol::wire::rfc3339_millis;
use mtg_store::{InstanceInfo, TaskRecord, now_ms};

/// Most bytes of arguments or of a result a page shows.
pub const SHOWN_CAP: usize = 64 * 1024;

pub(super) fn task_view(
    world: &WorldView,
    task: &TaskRecord,
    instances: &[InstanceInfo],
    show_results: bool,
) -> TaskView {
    let owner_lease = owner_lease(task, instances);
    let inputs = task
        .input_requests
        .iter()
        .map(|(key, request)| InputView {
            key: key.clone(),
            method: request.method.clone(),
            message: message_of(request),
        })
        .collect();
    let result_text = task.result.as_ref().map(|result| result.get());
    TaskView {
        row: row(task, &world.name, now_ms()),
        path: world.path(),
        owner_lease,
        takeovers: task.takeovers,
        updated_at: rfc3339_millis(task.last_updated_at_ms),
        expires_at: rfc3339_millis(task.expires_at_ms()),
        inputs,
        answers_waiting: task.answers.len(),
        ended: task.status.is_terminal(),
        // Code and message only: `data` is the upstream's and may hold anything.
        error: task.error.as_ref().map(|error| ErrorView {
            code: error.code,
            message: error.message.clone(),
        }),
        result_bytes: result_text.map(str::len),
        show_results,
        arguments: show_results.then(|| arguments_of(task)).flatten(),
        result: result_text.filter(|_| show_results).map(shown),
    }
}

/// The call's `arguments`, as pretty JSON.
fn arguments_of(task: &TaskRecord) -> Option<Shown> {
    let request: Value = serde_json::from_str(task.request.get()).ok()?;
    let arguments = request.get("arguments")?;
    serde_json::to_string_pretty(arguments)
        .ok()
        .map(|text| shown(&text))
}

/// At most [`SHOWN_CAP`] bytes of `text`, cut at a character's start.
fn shown(text: &str) -> Shown {
    let mut end = text.len().min(SHOWN_CAP);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Shown {
        text: text[..end].to_owned(),
        bytes: text.len(),
        truncated: end < text.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_value_is_cut_at_the_cap_on_a_character() {
        let small = shown("{\"a\":1}");
        assert_eq!((small.text.as_str(), small.truncated), ("{\"a\":1}", false));
        let big = "é".repeat(SHOWN_CAP);
        let cut = shown(&big);
        assert!(cut.truncated);
        assert_eq!(cut.bytes, big.len());
        assert_eq!(cut.text.len(), SHOWN_CAP);
    }
}
