//! The task shapes of SEP-2663 as they go on the wire, and (in `session`) those of the
//! 2025-11-25 task dialect. All task JSON the gateway writes is built here.

pub mod deferred;
pub mod dialect_2025;
pub mod listen;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::jsonrpc::ErrorObject;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// `resultType` values. `task` is reserved for `CreateTaskResult`.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultType {
    Complete,
    Task,
}

/// One entry of `inputRequests`: a server-to-client request, as `{method, params}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

/// `CreateTaskResult` (resultType `task`) and the `tasks/get` result (resultType
/// `complete`, a `DetailedTask`) share this shape; status-specific fields are present
/// only for their status.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult<'a> {
    pub result_type: ResultType,
    /// The gateway made this result: it says so (`io.modelcontextprotocol/serverInfo`).
    #[serde(rename = "_meta")]
    pub meta: GatewayMeta,
    pub task_id: &'a str,
    pub status: TaskStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<&'a str>,
    pub created_at: String,
    pub last_updated_at: String,
    /// Always a number: some clients (C#) cannot read `null`.
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<&'a std::collections::BTreeMap<String, InputRequest>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a ErrorObject>,
}

/// The empty acknowledgement of `tasks/update` and `tasks/cancel`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    pub result_type: ResultType,
    #[serde(rename = "_meta")]
    pub meta: GatewayMeta,
}

pub const ACK: Ack = Ack {
    result_type: ResultType::Complete,
    meta: GatewayMeta,
};

/// `_meta` of a result the gateway makes itself, naming the gateway as the server that
/// made it, as 2026-07-28 asks of every result.
#[derive(Debug, Clone, Copy, Default)]
pub struct GatewayMeta;

impl Serialize for GatewayMeta {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(super::meta::META_SERVER_INFO, &super::names::gateway_info())?;
        map.end()
    }
}

/// `tasks/get` and `tasks/cancel` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdParams {
    pub task_id: String,
}

/// `tasks/update` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateTaskParams {
    pub task_id: String,
    /// Required: an update that answers nothing is a client bug worth telling.
    pub input_responses: Map<String, Value>,
}

/// `data` of -32021 when the tasks extension is missing.
pub fn missing_tasks_capability_data() -> Value {
    serde_json::json!({
        "requiredCapabilities": {"extensions": {super::meta::TASKS_EXTENSION: {}}}
    })
}

/// Formats unix milliseconds as RFC 3339 (UTC, millisecond precision), e.g.
/// `2025-11-25T10:30:00.123Z`. `time` does the calendar; the fixed-width digits are
/// written here, since `time`'s format descriptions were 4 % of a poll's CPU (two
/// timestamps per answer, docs/benchmarks.md run 23).
pub fn rfc3339_millis(unix_ms: u64) -> String {
    let nanos = i128::from(unix_ms) * 1_000_000;
    // `time` stops at year 9999, so every year here has four digits.
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let (year, month, day) = at.to_calendar_date();
    let (hour, minute, second, milli) = at.to_hms_milli();
    let mut text = String::with_capacity(24);
    let fields = [
        (u32::try_from(year).unwrap_or(0), 4, '-'),
        (u32::from(u8::from(month)), 2, '-'),
        (u32::from(day), 2, 'T'),
        (u32::from(hour), 2, ':'),
        (u32::from(minute), 2, ':'),
        (u32::from(second), 2, '.'),
        (u32::from(milli), 3, 'Z'),
    ];
    for (value, width, then) in fields {
        for place in (0..width).rev() {
            let digit = value / 10u32.pow(place) % 10;
            text.push(char::from(b'0' + digit as u8));
        }
        text.push(then);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_time_s_own_format_description() {
        let format = time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        );
        let mut unix_ms = 0u64;
        // From 1970 to past 9999 (where `time` stops and the epoch stands in), in steps of
        // about 114 days and an odd number of milliseconds, so every field takes many values.
        while unix_ms < 260_000_000_000_000 {
            let at =
                time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
                    .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            assert_eq!(
                rfc3339_millis(unix_ms),
                at.format(&format).unwrap(),
                "{unix_ms}"
            );
            unix_ms += 9_876_543_211;
        }
    }

    #[test]
    fn formats_timestamps_as_rfc3339() {
        let text = rfc3339_millis(1_764_066_600_123);
        assert_eq!(text, "2025-11-25T10:30:00.123Z");
        let parsed =
            time::OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339)
                .unwrap();
        assert_eq!(parsed.unix_timestamp(), 1_764_066_600);
    }

    #[test]
    fn status_serializes_snake_case() {
        assert_eq!(
            serde_json::to_string(&TaskStatus::InputRequired).unwrap(),
            "\"input_required\""
        );
    }
}
