//! The failure of a supervisor tool call, as the model sees it.

use std::fmt;

use crate::state::ControlError;

/// The code of a failed tool call: the seed's `AgentGraphToolError` codes
/// and `agent-graph-unavailable`, spelled on the wire by [`ToolCode::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCode {
    /// The input breaks a rule or bound, or contradicts the live graph.
    InvalidInput,
    /// Defined by the seed for a future graph registry; never raised (an
    /// unknown graph views as empty).
    UnknownGraph,
    /// `yield_agent_graph` with no requested work.
    NothingToYield,
    /// The graph is finished.
    GraphClosed,
    /// The caller is not the graph's root session.
    NotRootSession,
    /// Defined by the seed for incomplete host wiring; never raised (a host
    /// without a controller answers `AgentGraphUnavailable`).
    Configuration,
    /// No controller is configured (not one of the seed's tool error codes,
    /// but shown with the same `[code]` prefix).
    AgentGraphUnavailable,
}

impl ToolCode {
    /// The code as the model reads it: the seed's snake_case, and
    /// `agent-graph-unavailable` as the original host spelled it.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCode::InvalidInput => "invalid_input",
            ToolCode::UnknownGraph => "unknown_graph",
            ToolCode::NothingToYield => "nothing_to_yield",
            ToolCode::GraphClosed => "graph_closed",
            ToolCode::NotRootSession => "not_root_session",
            ToolCode::Configuration => "configuration",
            ToolCode::AgentGraphUnavailable => "agent-graph-unavailable",
        }
    }
}

impl fmt::Display for ToolCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed tool call. Displays as `[code] message` when it has a code (the
/// seed's `AgentGraphToolError` codes and `agent-graph-unavailable`), and as
/// the bare message otherwise: argument errors (`invalid arguments: …`),
/// store errors and projection errors reach the model unprefixed, as in the
/// original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    /// The code, or `None` for a passed-through error.
    pub code: Option<ToolCode>,
    /// Lowercase, no trailing period.
    pub message: String,
}

impl ToolFailure {
    /// A failure with a code.
    pub fn coded(code: ToolCode, message: impl Into<String>) -> Self {
        ToolFailure {
            code: Some(code),
            message: message.into(),
        }
    }

    /// A passed-through failure, shown without a prefix.
    pub fn plain(message: impl Into<String>) -> Self {
        ToolFailure {
            code: None,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ToolFailure::coded(ToolCode::InvalidInput, message)
    }
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "[{code}] {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ToolFailure {}

impl From<ControlError> for ToolFailure {
    fn from(e: ControlError) -> Self {
        ToolFailure::plain(e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_snake_case_but_the_unavailable_one() {
        const ALL: [ToolCode; 7] = [
            ToolCode::InvalidInput,
            ToolCode::UnknownGraph,
            ToolCode::NothingToYield,
            ToolCode::GraphClosed,
            ToolCode::NotRootSession,
            ToolCode::Configuration,
            ToolCode::AgentGraphUnavailable,
        ];
        let spelled: Vec<&str> = ALL.iter().map(|c| c.as_str()).collect();
        for (i, code) in spelled.iter().enumerate() {
            assert!(!spelled[..i].contains(code), "{code} twice");
            let snake = code.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            let seed_spelling = ALL[i] == ToolCode::AgentGraphUnavailable;
            assert_eq!(snake, !seed_spelling, "{code}");
        }
        assert_eq!(
            ToolFailure::coded(ToolCode::NothingToYield, "no work").to_string(),
            "[nothing_to_yield] no work"
        );
    }
}
