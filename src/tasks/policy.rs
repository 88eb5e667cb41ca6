//! Which tool calls become tasks.

use std::collections::HashMap;

use mtg_protocol::task_support::TaskSupport;

/// What to do with one `tools/call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPlan {
    Task,
    Inline,
    RejectMissingCapability,
}

#[derive(Debug, Clone, Default)]
pub struct Policies {
    by_tool: HashMap<String, TaskSupport>,
}

impl Policies {
    pub fn new(by_tool: HashMap<String, TaskSupport>) -> Self {
        Self { by_tool }
    }

    /// The tool's policy; `optional` unless configured.
    pub fn policy_of(&self, tool: &str) -> TaskSupport {
        self.by_tool
            .get(tool)
            .copied()
            .unwrap_or(TaskSupport::Optional)
    }

    pub fn plan(&self, tool: &str, client_declared_tasks: bool) -> CallPlan {
        let policy = self.policy_of(tool);
        match (policy, client_declared_tasks) {
            (TaskSupport::Forbidden, _) => CallPlan::Inline,
            (_, true) => CallPlan::Task,
            (TaskSupport::Optional, false) => CallPlan::Inline,
            (TaskSupport::Required, false) => CallPlan::RejectMissingCapability,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_policy_and_capability() {
        let policies = Policies::new(HashMap::from([
            ("r".to_owned(), TaskSupport::Required),
            ("f".to_owned(), TaskSupport::Forbidden),
        ]));
        assert_eq!(policies.plan("any", true), CallPlan::Task);
        assert_eq!(policies.plan("any", false), CallPlan::Inline);
        assert_eq!(policies.plan("r", true), CallPlan::Task);
        assert_eq!(policies.plan("r", false), CallPlan::RejectMissingCapability);
        assert_eq!(policies.plan("f", true), CallPlan::Inline);
    }
}
