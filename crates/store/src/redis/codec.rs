//! A task as a Redis hash: scalar fields the scripts read and write, JSON blobs the
//! scripts never parse (so the upstream's result is stored byte for byte), and one field
//! per outstanding input request (`ir:<key>`) and per unforwarded answer (`an:<key>`).

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::{Outcome, TaskRecord};
use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::wire::{InputRequest, TaskStatus};

pub(super) const INPUT_PREFIX: &str = "ir:";
pub(super) const ANSWER_PREFIX: &str = "an:";

/// Field/value pairs of a new task.
pub(super) fn encode(task: &TaskRecord) -> Result<Vec<(String, String)>, serde_json::Error> {
    let mut fields = vec![
        ("principal".into(), task.principal.clone()),
        ("owner".into(), task.owner.clone()),
        ("status".into(), task.status.as_str().into()),
        ("created".into(), task.created_at_ms.to_string()),
        ("updated".into(), task.last_updated_at_ms.to_string()),
        ("ttl".into(), task.ttl_ms.to_string()),
        ("poll".into(), task.poll_interval_ms.to_string()),
        ("next".into(), task.next_input_key.to_string()),
        ("out".into(), task.input_requests.len().to_string()),
        ("request".into(), task.request.get().to_owned()),
    ];
    if let Some(message) = &task.status_message {
        fields.push(("msg".into(), message.clone()));
    }
    if let Some(result) = &task.result {
        fields.push(("result".into(), result.get().to_owned()));
    }
    if let Some(error) = &task.error {
        fields.push(("error".into(), serde_json::to_string(error)?));
    }
    if let Some(state) = &task.upstream_state {
        fields.push(("ustate".into(), serde_json::to_string(state)?));
    }
    if let Some(resume) = &task.resume {
        fields.push(("resume".into(), serde_json::to_string(resume)?));
    }
    if task.takeovers > 0 {
        fields.push(("takeovers".into(), task.takeovers.to_string()));
    }
    // What `request` becomes when the task ends (`shed` in `lua/prelude.lua`), made here
    // so that the progress token is kept byte for byte (Lua's cjson would round it).
    if !task.keep_arguments && !task.status.is_terminal() {
        let kept = crate::record::call_after_end(&task.request);
        fields.push(("request_kept".into(), kept.get().to_owned()));
    }
    for (key, request) in &task.input_requests {
        fields.push((
            format!("{INPUT_PREFIX}{key}"),
            serde_json::to_string(request)?,
        ));
    }
    for (key, answer) in &task.answers {
        fields.push((
            format!("{ANSWER_PREFIX}{key}"),
            serde_json::to_string(answer)?,
        ));
    }
    Ok(fields)
}

/// The terminal status and the fields `finish.lua` sets for an outcome.
pub(super) fn outcome_fields(
    outcome: &Outcome,
) -> Result<(TaskStatus, Vec<String>), serde_json::Error> {
    Ok(match outcome {
        Outcome::Completed(result) => (
            TaskStatus::Completed,
            vec!["result".into(), result.get().to_owned()],
        ),
        Outcome::Failed { error, message } => (
            TaskStatus::Failed,
            vec![
                "msg".into(),
                message.clone(),
                "error".into(),
                serde_json::to_string(error)?,
            ],
        ),
        Outcome::Cancelled { message } => {
            (TaskStatus::Cancelled, vec!["msg".into(), message.clone()])
        }
    })
}

/// Why a stored task could not be read back.
#[derive(Debug, thiserror::Error)]
pub(super) enum DecodeError {
    #[error("task {task_id} has no field {field:?}")]
    Missing {
        task_id: String,
        field: &'static str,
    },
    #[error("task {task_id}: field {field:?} is not a number: {source}")]
    NotANumber {
        task_id: String,
        field: &'static str,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("task {task_id} has an unknown status {status:?}")]
    UnknownStatus { task_id: String, status: String },
    #[error("task {task_id}: field {field:?}: {source}")]
    Json {
        task_id: String,
        field: String,
        #[source]
        source: serde_json::Error,
    },
}

/// The task stored in `fields` (an HGETALL reply).
pub(super) fn decode(
    task_id: &str,
    fields: HashMap<String, String>,
) -> Result<TaskRecord, DecodeError> {
    let mut hash = Hash { task_id, fields };
    let principal = hash.take("principal")?;
    let owner = hash.take("owner")?;
    let status = hash.status()?;
    let created_at_ms = hash.number("created")?;
    let last_updated_at_ms = hash.number("updated")?;
    let ttl_ms = hash.number("ttl")?;
    let poll_interval_ms = hash.number("poll")?;
    let next_input_key = hash.number("next")?;
    let request =
        RawValue::from_string(hash.take("request")?).map_err(hash.json_error("request"))?;
    let status_message = hash.fields.remove("msg");
    let result = hash
        .fields
        .remove("result")
        .map(RawValue::from_string)
        .transpose()
        .map_err(hash.json_error("result"))?;
    let error: Option<ErrorObject> = hash.json_if_any("error")?;
    let upstream_state: Option<Value> = hash.json_if_any("ustate")?;
    let resume: Option<Value> = hash.json_if_any("resume")?;
    let takeovers = match hash.fields.remove("takeovers") {
        Some(text) => hash.parse_number("takeovers", text)? as u32,
        None => 0,
    };
    let keep_arguments = hash.fields.remove("request_kept").is_none();
    let mut task = TaskRecord {
        task_id: task_id.to_owned(),
        principal,
        owner,
        status,
        status_message,
        created_at_ms,
        last_updated_at_ms,
        ttl_ms,
        poll_interval_ms,
        input_requests: Default::default(),
        answers: Default::default(),
        next_input_key,
        result,
        error,
        request,
        upstream_state,
        resume,
        takeovers,
        keep_arguments,
    };
    hash.add_round(&mut task)?;
    Ok(task)
}

/// One task's hash, read field by field; each error names the task and the field.
struct Hash<'a> {
    task_id: &'a str,
    fields: HashMap<String, String>,
}

impl Hash<'_> {
    fn take(&mut self, field: &'static str) -> Result<String, DecodeError> {
        self.fields
            .remove(field)
            .ok_or_else(|| DecodeError::Missing {
                task_id: self.task_id.to_owned(),
                field,
            })
    }

    fn status(&mut self) -> Result<TaskStatus, DecodeError> {
        let text = self.take("status")?;
        parse_status(&text).ok_or_else(|| DecodeError::UnknownStatus {
            task_id: self.task_id.to_owned(),
            status: text,
        })
    }

    fn number(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let text = self.take(field)?;
        self.parse_number(field, text)
    }

    fn parse_number(&self, field: &'static str, text: String) -> Result<u64, DecodeError> {
        text.parse::<u64>()
            .map_err(|source| DecodeError::NotANumber {
                task_id: self.task_id.to_owned(),
                field,
                source,
            })
    }

    /// A JSON field the task may lack.
    fn json_if_any<T: serde::de::DeserializeOwned>(
        &mut self,
        field: &str,
    ) -> Result<Option<T>, DecodeError> {
        self.fields
            .remove(field)
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(self.json_error(field))
    }

    fn json_error(&self, field: &str) -> impl FnOnce(serde_json::Error) -> DecodeError + use<> {
        let (task_id, field) = (self.task_id.to_owned(), field.to_owned());
        move |source| DecodeError::Json {
            task_id,
            field,
            source,
        }
    }

    /// The round left in the hash: the outstanding input requests and the answers not
    /// yet forwarded, one field each.
    fn add_round(self, task: &mut TaskRecord) -> Result<(), DecodeError> {
        for (name, value) in &self.fields {
            if let Some(key) = name.strip_prefix(INPUT_PREFIX) {
                let request: InputRequest =
                    serde_json::from_str(value).map_err(self.json_error(name))?;
                task.input_requests.insert(key.to_owned(), request);
            } else if let Some(key) = name.strip_prefix(ANSWER_PREFIX) {
                let answer: Value = serde_json::from_str(value).map_err(self.json_error(name))?;
                task.answers.insert(key.to_owned(), answer);
            }
        }
        Ok(())
    }
}

pub(super) fn parse_status(text: &str) -> Option<TaskStatus> {
    Some(match text {
        "working" => TaskStatus::Working,
        "input_required" => TaskStatus::InputRequired,
        "completed" => TaskStatus::Completed,
        "failed" => TaskStatus::Failed,
        "cancelled" => TaskStatus::Cancelled,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_survives_the_round_trip_byte_for_byte() {
        let mut task = TaskRecord {
            task_id: "00000000-0000-4000-8000-000000000000".into(),
            principal: "p".into(),
            owner: "gw-1".into(),
            status: TaskStatus::InputRequired,
            status_message: Some("step 1 of 2".into()),
            created_at_ms: 1_764_066_600_123,
            last_updated_at_ms: 1_764_066_600_456,
            ttl_ms: 60_000,
            poll_interval_ms: 1000,
            input_requests: Default::default(),
            answers: Default::default(),
            next_input_key: 2,
            // Big integers and odd spacing must come back unchanged.
            result: Some(
                RawValue::from_string(r#"{"n": 12345678901234567890,"x":1.0}"#.into()).unwrap(),
            ),
            error: None,
            request: RawValue::from_string(r#"{"name":"echo","arguments":{"text":"hi"}}"#.into())
                .unwrap(),
            upstream_state: Some(json!({"round": 1})),
            resume: Some(json!({"capabilities": {}})),
            takeovers: 1,
            keep_arguments: false,
        };
        task.input_requests.insert(
            "input-1".into(),
            InputRequest {
                method: "elicitation/create".into(),
                params: Some(json!({"message": "?"})),
            },
        );
        task.answers
            .insert("input-0".into(), json!({"action": "accept"}));
        let fields: HashMap<String, String> = encode(&task).unwrap().into_iter().collect();
        let back = decode(&task.task_id, fields).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&task).unwrap()
        );
        assert_eq!(back.result.unwrap().get(), task.result.unwrap().get());
    }
}
