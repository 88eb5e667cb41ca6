//! Which call a server-to-client request belongs to.
//!
//! On stdio every message shares one stream, and `elicitation/create` or
//! `sampling/createMessage` carry nothing that names the `tools/call` they serve. The
//! gateway attributes a request only when it is certain:
//! - the request's `_meta.progressToken` is the token of a call in flight (the
//!   gateway gives every call its own token), or
//! - exactly one call that may ask for input is in flight on the process when the
//!   request arrives. Output is ordered, so a request written while handling a call
//!   arrives before that call's response, and every call sent before the request was
//!   read counts.
//!
//! Otherwise the request is ambiguous and refused; it is never guessed.
//! `roots/list` is attributed only by an explicit link: servers also send it for the
//! session as a whole (server-everything does, right after `initialize`), and on stdio
//! that session is the gateway's.

use serde_json::Value;

/// A call in flight, as far as attribution is concerned.
pub(super) struct Candidate<'a> {
    pub id: u64,
    /// The progress token the gateway sent upstream for this call.
    pub progress_token: Option<&'a Value>,
    /// False for requests that cannot ask for input (`tools/list`, `ping`, ...).
    pub may_ask: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Owner {
    Call(u64),
    /// Belongs to no call: the gateway answers it itself.
    NoCall,
    /// Several calls could have sent it: refused, never guessed.
    Ambiguous(Vec<u64>),
}

pub(super) fn owner_of<'a>(
    method: &str,
    params: Option<&Value>,
    calls: impl IntoIterator<Item = Candidate<'a>>,
) -> Owner {
    let calls: Vec<Candidate<'a>> = calls.into_iter().collect();
    let linked = params
        .and_then(|p| p.get("_meta"))
        .and_then(|meta| meta.get("progressToken"));
    if let Some(token) = linked
        && let Some(call) = calls.iter().find(|c| c.progress_token == Some(token))
    {
        return Owner::Call(call.id);
    }
    if method == "roots/list" {
        return Owner::NoCall;
    }
    let mut askers = calls.iter().filter(|c| c.may_ask).map(|c| c.id);
    match (askers.next(), askers.next()) {
        (None, _) => Owner::NoCall,
        (Some(only), None) => Owner::Call(only),
        (Some(first), Some(second)) => {
            let mut all = vec![first, second];
            all.extend(askers);
            all.sort_unstable();
            Owner::Ambiguous(all)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: u64, token: Option<&Value>, may_ask: bool) -> Candidate<'_> {
        Candidate {
            id,
            progress_token: token,
            may_ask,
        }
    }

    #[test]
    fn the_only_call_that_may_ask_owns_the_request() {
        let owner = owner_of(
            "elicitation/create",
            None,
            [call(1, None, false), call(2, None, true)],
        );
        assert_eq!(owner, Owner::Call(2));
    }

    #[test]
    fn two_calls_that_may_ask_are_never_guessed_between() {
        let owner = owner_of(
            "sampling/createMessage",
            Some(&json!({})),
            [call(3, None, true), call(1, None, true)],
        );
        assert_eq!(owner, Owner::Ambiguous(vec![1, 3]));
    }

    #[test]
    fn a_progress_token_links_the_request_to_its_call() {
        let token = json!("mtg-7");
        let other = json!("mtg-8");
        let params = json!({"_meta": {"progressToken": "mtg-7"}});
        let owner = owner_of(
            "elicitation/create",
            Some(&params),
            [call(8, Some(&other), true), call(7, Some(&token), true)],
        );
        assert_eq!(owner, Owner::Call(7));
    }

    #[test]
    fn roots_list_needs_an_explicit_link() {
        assert_eq!(
            owner_of("roots/list", None, [call(1, None, true)]),
            Owner::NoCall
        );
        let token = json!("mtg-1");
        let params = json!({"_meta": {"progressToken": "mtg-1"}});
        assert_eq!(
            owner_of("roots/list", Some(&params), [call(1, Some(&token), true)]),
            Owner::Call(1)
        );
    }

    #[test]
    fn nothing_in_flight_means_no_call() {
        assert_eq!(owner_of("elicitation/create", None, []), Owner::NoCall);
    }
}
