//! The failure of a supervisor tool call, as the model sees it.

use std::fmt;

use crate::state::ControlError;

/// The input breaks a rule or bound, or contradicts the live graph.
pub const INVALID_INPUT: &str = "invalid_input";
/// Defined by the seed for a future graph registry; never raised (an unknown
/// graph views as empty).
pub const UNKNOWN_GRAPH: &str = "unknown_graph";
/// `yield_agent_graph` with no requested work.
pub const NOTHING_TO_YIELD: &str = "nothing_to_yield";
/// The graph is finished.
pub const GRAPH_CLOSED: &str = "graph_closed";
/// The caller is not the graph's root session.
pub const NOT_ROOT_SESSION: &str = "not_root_session";
/// The host wiring is incomplete.
pub const CONFIGURATION: &str = "configuration";
/// No controller is configured (not one of the seed's tool error codes, but
/// shown with the same `[code]` prefix).
pub const AGENT_GRAPH_UNAVAILABLE: &str = "agent-graph-unavailable";

/// A failed tool call. Displays as `[code] message` when it has a code (the
/// seed's `AgentGraphToolError` codes and `agent-graph-unavailable`), and as
/// the bare message otherwise: argument errors (`invalid arguments: …`),
/// store errors and projection errors reach the model unprefixed, as in the
/// original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    /// One of the code constants of this crate, or `None` for a passed-through
    /// error.
    pub code: Option<String>,
    /// Lowercase, no trailing period.
    pub message: String,
}

impl ToolFailure {
    /// A failure with a code.
    pub fn coded(code: &str, message: impl Into<String>) -> Self {
        ToolFailure {
            code: Some(code.to_owned()),
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
        ToolFailure::coded(INVALID_INPUT, message)
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
