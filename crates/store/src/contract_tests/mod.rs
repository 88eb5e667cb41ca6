//! The store contract as tests, written once and run against every store: the memory
//! store (`memory.rs`) and the Redis store (`redis/tests.rs`) each call [`suite!`] with
//! a [`Subject`] of their own. A rule both stores must keep belongs here; what only
//! one of them has (key TTLs, leases, reconnecting) stays in that store's tests.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

mod input;
mod inspect;
mod lifecycle;
mod listing;
mod outbox;
mod races;
mod takeover;
mod wakeups;

pub(crate) use input::*;
pub(crate) use inspect::*;
pub(crate) use lifecycle::*;
pub(crate) use listing::*;
pub(crate) use outbox::*;
pub(crate) use races::*;
pub(crate) use takeover::*;
pub(crate) use wakeups::*;

use super::{
    CANCELLED_BY_CLIENT, CancelOutcome, NewTask, Outcome, Store, StoreError, TaskChange,
    TaskRecord, UpdateOutcome, WAKE_ALL, WakeReceiver, now_ms,
};
use mtg_protocol::wire::{InputRequest, TaskStatus};

/// A store to hold to the contract.
pub(crate) trait Subject {
    /// Gateway instance `id`'s view of the one shared state (each instance its own
    /// connection on Redis; the same store every time in memory).
    fn instance(&self, id: &str) -> Store;
}

/// Every case of the contract, as one `#[tokio::test]` each, against the subject that
/// `$subject` builds (evaluated inside the test's runtime).
macro_rules! suite {
    ($subject:expr) => {
        $crate::contract_tests::suite!(@cases $subject;
            a_task_is_seen_only_by_its_principal,
            input_required_then_working_again,
            completed_keeps_the_result_byte_for_byte,
            an_end_announced_with_its_finish_is_heard_after_it,
            a_change_receiver_hears_wake_all_first_then_every_change,
            an_ended_task_sheds_what_only_its_call_needed,
            failed_keeps_the_error_and_says_why,
            cancelled_drops_outstanding_input_and_names_the_owner,
            terminal_states_are_final,
            an_expired_task_is_gone,
            a_principal_lists_only_its_own_tasks_newest_first,
            listing_pages_by_cursor_without_gaps_or_repeats,
            deleted_and_expired_tasks_are_not_listed,
            input_keys_are_never_reused,
            an_answer_is_accepted_once_and_taken_once,
            racing_answers_to_one_key_are_accepted_once,
            cancel_racing_finish_has_one_winner,
            a_round_of_input_requests_lands_at_once,
            upstream_state_round_trips,
            wake_ups_reach_their_owner,
            operators_see_every_task_in_each_scope,
            expired_tasks_are_not_inspected,
            a_cursor_from_elsewhere_is_refused,
            a_walk_can_stop_after_any_task,
            newest_first_walks_every_task_once_in_order,
            newest_first_keeps_to_its_window_and_principal,
            instances_show_their_leases_and_running_tasks,
            racing_takeovers_have_one_winner,
            a_takeover_keeps_or_withdraws_the_round,
            a_task_taken_over_too_often_fails,
            gone_owners_orphans_fail_once,
            a_transition_writes_its_events_and_one_that_fails_writes_none,
            a_tasks_events_are_delivered_in_order,
            an_expired_claim_is_claimed_again,
            retries_dead_letters_and_redelivery,
            takeovers_and_failed_orphans_are_events,
        );
    };
    (@cases $subject:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let subject = $subject;
                $crate::contract_tests::$case(&subject).await;
            }
        )+
    };
}
pub(crate) use suite;

const OWNER: &str = "gw-1";
const OTHER: &str = "gw-2";
pub(crate) const ALICE: &str = "alice";
/// How long a case waits for something that takes a round trip or a reconnect.
const PATIENCE: Duration = Duration::from_secs(5);

/// A new working task of `alice`, run by `owner`, with a fresh UUID and a 60 s TTL.
pub(crate) fn record(owner: &str) -> TaskRecord {
    let new = NewTask {
        task_id: uuid::Uuid::new_v4().to_string(),
        principal: ALICE.into(),
        owner: owner.into(),
        request: raw(r#"{"name":"echo"}"#),
        ttl_ms: 60_000,
        poll_interval_ms: 1000,
        keep_arguments: false,
    };
    TaskRecord::working(new, now_ms())
}

pub(crate) fn raw(json: &str) -> Box<RawValue> {
    RawValue::from_string(json.to_owned()).unwrap()
}

fn elicit() -> InputRequest {
    InputRequest {
        method: "elicitation/create".into(),
        params: Some(json!({"message": "?"})),
    }
}

fn answer(key: &str, value: Value) -> Map<String, Value> {
    Map::from_iter([(key.to_owned(), value)])
}

fn accepted(keys: &[&str]) -> UpdateOutcome {
    UpdateOutcome::Accepted {
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        owner: OWNER.into(),
    }
}

/// Creates a new task of `alice` owned by [`OWNER`]; its id.
async fn create(store: &Store) -> String {
    let task = record(OWNER);
    let id = task.task_id.clone();
    store.tasks.create(task).await.unwrap();
    id
}

/// The task as `alice` sees it; it must exist.
async fn fetch(store: &Store, task_id: &str) -> Arc<TaskRecord> {
    store
        .tasks
        .get(task_id, ALICE)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("task {task_id} not found"))
}

async fn add_input(store: &Store, task_id: &str) -> String {
    store
        .tasks
        .add_input_request(task_id, elicit())
        .await
        .unwrap()
        .expect("the task takes input requests")
}

/// `alice` answers; what the store accepted.
async fn accept(store: &Store, task_id: &str, responses: Map<String, Value>) -> UpdateOutcome {
    store
        .tasks
        .accept_input_responses(task_id, ALICE, responses)
        .await
        .unwrap()
}

async fn next_wakeup(wakeups: &mut WakeReceiver) -> String {
    tokio::time::timeout(PATIENCE, wakeups.recv())
        .await
        .expect("a wake-up in time")
        .expect("the wake-up channel is open")
}
