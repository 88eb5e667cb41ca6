//! The one MRTR round driver: carries a call to a 2026-07-28 upstream through its
//! `InputRequiredResult` rounds until it ends. What sends the call and where the answers
//! come from differ by caller (a task's runner answers from the store; a session the
//! gateway serves asks its client on the call's stream), so both are traits here, and
//! the rules of the rounds live in one place: the retry carries the original params with
//! only this round's answers and the exact `requestState`, and an upstream that keeps
//! asking for nothing is stopped.

use async_trait::async_trait;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use mtg_protocol::jsonrpc::ErrorObject;
use mtg_protocol::mrtr::{self, InputRequired, InputRequiredError, MAX_ROUNDS_WITHOUT_INPUT};

/// What one upstream request of the call came back with.
pub enum Reply<T> {
    /// The call is over, with what the caller makes of its answer.
    Done(T),
    /// An `InputRequiredResult`: its round is answered, then the call is sent again.
    InputRequired(Value),
}

/// Why the rounds could not go on.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    #[error("upstream sent a {0}")]
    Malformed(#[from] InputRequiredError),
    #[error("{MAX_ROUNDS_WITHOUT_INPUT} InputRequiredResults in a row asked for no input")]
    NoInputAsked,
}

impl From<RoundError> for ErrorObject {
    fn from(error: RoundError) -> Self {
        ErrorObject::internal(error.to_string())
    }
}

/// Sends the call upstream once, with the params of this round.
#[async_trait]
pub trait RoundTrip: Send {
    type Done: Send;
    /// How the caller stops: its own failure type, which round errors become too.
    type Stop: Send + From<RoundError>;

    async fn send(&mut self, params: Value) -> Result<Reply<Self::Done>, Self::Stop>;
}

/// One round: what the upstream asked for, and its whole `InputRequiredResult`, for
/// callers that pass it on as it is.
pub struct Round<'a> {
    pub asked: InputRequired,
    pub result: &'a Value,
}

/// Answers by the upstream's keys.
pub type Answers = Map<String, Value>;

/// Gets the answers to one round's input requests.
#[async_trait]
pub trait RoundAnswers: Send {
    type Stop: Send;

    async fn answer(&mut self, round: &Round<'_>) -> Result<Answers, Self::Stop>;
}

/// Runs the call from `original` params until it is done or stopped.
pub async fn drive<T, A>(trip: &mut T, answers: &mut A, original: Value) -> Result<T::Done, T::Stop>
where
    T: RoundTrip,
    A: RoundAnswers<Stop = T::Stop>,
{
    // Serialisation of a `Value` cannot fail; were it to, no retry could be built.
    let raw = serde_json::value::to_raw_value(&original).unwrap_or_default();
    drive_from(trip, answers, &raw, original).await
}

/// The same, with `first` as the first request's params: a call resumed in a later
/// round (`original` plus that round's answers and `requestState`). `original` is raw
/// JSON, parsed only for a retry: a task's call may wait for hours, and as a tree even
/// small params take ~2 KB (a B-tree node per object) for nothing while it does.
pub async fn drive_from<T, A>(
    trip: &mut T,
    answers: &mut A,
    original: &RawValue,
    first: Value,
) -> Result<T::Done, T::Stop>
where
    T: RoundTrip,
    A: RoundAnswers<Stop = T::Stop>,
{
    let mut params = first;
    let mut asked_nothing = 0;
    loop {
        let result = match trip.send(params).await? {
            Reply::Done(done) => return Ok(done),
            Reply::InputRequired(result) => result,
        };
        let asked = InputRequired::parse(&result).map_err(RoundError::from)?;
        let round = Round {
            asked,
            result: &result,
        };
        // A round with only a requestState needs nobody's answer: retry at once.
        let responses = if round.asked.input_requests.is_empty() {
            asked_nothing += 1;
            if asked_nothing > MAX_ROUNDS_WITHOUT_INPUT {
                return Err(RoundError::NoInputAsked.into());
            }
            Map::new()
        } else {
            asked_nothing = 0;
            answers.answer(&round).await?
        };
        let state = round.asked.request_state.as_deref();
        // The gateway serialised `original` from a `Value`, so it parses.
        let original: Value = serde_json::from_str(original.get()).unwrap_or_default();
        params = mrtr::retry_params(&original, responses, state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Replies from a script, recording the params of each request.
    struct Script {
        replies: Vec<Value>,
        sent: Vec<Value>,
    }

    #[async_trait]
    impl RoundTrip for Script {
        type Done = Value;
        type Stop = String;
        async fn send(&mut self, params: Value) -> Result<Reply<Value>, String> {
            self.sent.push(params);
            let next = self.replies.remove(0);
            Ok(if mrtr::is_input_required(&next) {
                Reply::InputRequired(next)
            } else {
                Reply::Done(next)
            })
        }
    }

    impl From<RoundError> for String {
        fn from(e: RoundError) -> Self {
            e.to_string()
        }
    }

    struct Counter(u32);

    #[async_trait]
    impl RoundAnswers for Counter {
        type Stop = String;
        async fn answer(&mut self, round: &Round<'_>) -> Result<Answers, String> {
            self.0 += 1;
            Ok(round
                .asked
                .input_requests
                .keys()
                .map(|k| (k.clone(), json!({"answer": self.0})))
                .collect())
        }
    }

    fn input_required(keys: &[&str], state: &str) -> Value {
        let requests: Map<String, Value> = keys
            .iter()
            .map(|k| ((*k).to_owned(), json!({"method": "elicitation/create"})))
            .collect();
        json!({"resultType": "input_required", "inputRequests": requests, "requestState": state})
    }

    #[tokio::test]
    async fn each_retry_carries_only_its_rounds_answers_and_state() {
        let mut script = Script {
            replies: vec![
                input_required(&["a"], "s1"),
                input_required(&["b"], "s2"),
                json!({"content": []}),
            ],
            sent: Vec::new(),
        };
        let original = json!({"name": "t"});
        let done = drive(&mut script, &mut Counter(0), original).await.unwrap();
        assert_eq!(done, json!({"content": []}));
        assert_eq!(
            script.sent,
            [
                json!({"name": "t"}),
                json!({"name": "t", "inputResponses": {"a": {"answer": 1}}, "requestState": "s1"}),
                json!({"name": "t", "inputResponses": {"b": {"answer": 2}}, "requestState": "s2"}),
            ]
        );
    }

    #[tokio::test]
    async fn an_upstream_that_keeps_asking_for_nothing_is_stopped() {
        let mut script = Script {
            replies: vec![input_required(&[], "again"); 20],
            sent: Vec::new(),
        };
        let stop = drive(&mut script, &mut Counter(0), json!({}))
            .await
            .unwrap_err();
        assert_eq!(stop, RoundError::NoInputAsked.to_string());
        assert_eq!(script.sent.len() as u32, MAX_ROUNDS_WITHOUT_INPUT + 1);
    }

    #[tokio::test]
    async fn a_malformed_round_stops_the_call() {
        let mut script = Script {
            replies: vec![json!({"resultType": "input_required"})],
            sent: Vec::new(),
        };
        let stop = drive(&mut script, &mut Counter(0), json!({}))
            .await
            .unwrap_err();
        assert!(
            stop.contains("neither inputRequests nor requestState"),
            "{stop}"
        );
    }
}
