//! What the gateway has learned about which tools ask the client for input.
//!
//! Nothing in a tool's description says whether it elicits or samples, so calls share
//! a process until a tool is seen asking. A tool seen asking while alone on its process
//! is `Asks` for good; the tools in flight when an ambiguous request was refused are
//! `Suspect` until one of their calls runs to its end without asking. Calls of both run
//! on a process of their own, so their next request is attributed with certainty.

use mtg_protocol::names::method;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Habit {
    Asks,
    Suspect,
}

#[derive(Default)]
pub(super) struct Habits {
    known: Mutex<HashMap<String, Habit>>,
}

impl Habits {
    /// Whether calls of `key` need a process to themselves.
    pub(super) fn needs_own_process(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    pub(super) fn asked(&self, key: &str) {
        if self.lock().insert(key.to_owned(), Habit::Asks) != Some(Habit::Asks) {
            tracing::info!(
                tool = key,
                "this tool asks for input: its calls now get a process of their own"
            );
        }
    }

    pub(super) fn suspect(&self, key: &str) {
        self.lock().entry(key.to_owned()).or_insert(Habit::Suspect);
    }

    /// A call of `key` ended without asking for anything.
    pub(super) fn ran_quietly(&self, key: &str) {
        let mut known = self.lock();
        if known.get(key) == Some(&Habit::Suspect) {
            known.remove(key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Habit>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The key habits are kept under: the tool for `tools/call`, else the method.
pub(super) fn key_of(method: &str, params: Option<&serde_json::Value>) -> String {
    match params.and_then(|p| p.get("name")).and_then(|n| n.as_str()) {
        Some(name) if method == method::TOOLS_CALL => format!("tools/call {name}"),
        _ => method.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspects_are_cleared_by_a_quiet_run_but_askers_are_not() {
        let habits = Habits::default();
        assert!(!habits.needs_own_process("a"));
        habits.suspect("a");
        habits.suspect("b");
        habits.asked("b");
        assert!(habits.needs_own_process("a") && habits.needs_own_process("b"));
        habits.ran_quietly("a");
        habits.ran_quietly("b");
        assert!(!habits.needs_own_process("a"));
        assert!(habits.needs_own_process("b"));
    }
}
