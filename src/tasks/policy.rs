//! Which tool calls become tasks.

use std::collections::HashMap;
use std::str::FromStr;

/// Per-tool task policy, as in the tool's `execution.taskSupport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskPolicy {
    /// Only callable as a task: clients without the extension get -32021.
    Required,
    /// A task when the client declared the extension, inline otherwise.
    Optional,
    /// Always inline, even for clients that declared the extension.
    Forbidden,
}

#[derive(Debug, thiserror::Error)]
#[error("unknown task policy {0:?}: expected required, optional or forbidden")]
pub struct UnknownPolicy(String);

impl FromStr for TaskPolicy {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "required" => Ok(Self::Required),
            "optional" => Ok(Self::Optional),
            "forbidden" => Ok(Self::Forbidden),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

/// What to do with one `tools/call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPlan {
    Task,
    Inline,
    RejectMissingCapability,
}

#[derive(Debug, Clone, Default)]
pub struct Policies {
    by_tool: HashMap<String, TaskPolicy>,
}

impl Policies {
    pub fn new(by_tool: HashMap<String, TaskPolicy>) -> Self {
        Self { by_tool }
    }

    /// The tool's policy; `optional` unless configured.
    pub fn policy_of(&self, tool: &str) -> TaskPolicy {
        self.by_tool
            .get(tool)
            .copied()
            .unwrap_or(TaskPolicy::Optional)
    }

    pub fn plan(&self, tool: &str, client_declared_tasks: bool) -> CallPlan {
        let policy = self.policy_of(tool);
        match (policy, client_declared_tasks) {
            (TaskPolicy::Forbidden, _) => CallPlan::Inline,
            (_, true) => CallPlan::Task,
            (TaskPolicy::Optional, false) => CallPlan::Inline,
            (TaskPolicy::Required, false) => CallPlan::RejectMissingCapability,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_policy_and_capability() {
        let policies = Policies::new(HashMap::from([
            ("r".to_owned(), TaskPolicy::Required),
            ("f".to_owned(), TaskPolicy::Forbidden),
        ]));
        assert_eq!(policies.plan("any", true), CallPlan::Task);
        assert_eq!(policies.plan("any", false), CallPlan::Inline);
        assert_eq!(policies.plan("r", true), CallPlan::Task);
        assert_eq!(policies.plan("r", false), CallPlan::RejectMissingCapability);
        assert_eq!(policies.plan("f", true), CallPlan::Inline);
    }
}
