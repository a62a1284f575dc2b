//! Calling other graph tools from a node, through the host.
//!
//! ```no_run
//! use sandgraph_sdk::serde_json::{Value, json};
//! use sandgraph_sdk::{Context, NodeError, Update};
//!
//! fn lookup(state: Value, ctx: &Context) -> Result<Update, NodeError> {
//!     // Runs the mounted tool `search_graph` as a sub-run of this run:
//!     // arguments are validated as `sandgraph call` validates them, and
//!     // the sub-run shares this run's deadline, fuel and memory budget.
//!     let found = ctx.tools().call("search_graph", json!({"query": state["topic"]}))?;
//!     Ok(Update::new().set("found", found))
//! }
//! ```
//!
//! The operator grants the tools a graph may call
//! (`[graphs.<name>.grants] tools = { allow = ["search_graph"] }`); any
//! other call fails with [`ToolError::Denied`] and runs nothing. Every
//! error converts into a node error, so `?` ends the node with it; match on
//! it to handle a case instead.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::component::bindings::sandgraph::graph::tools as wit;

/// The host's graph tools, as granted to this graph ([`crate::Context::tools`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tools {
    _private: (),
}

/// A tool this graph may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The graph is not granted this tool; nothing ran.
    Denied(String),
    /// No tool of that name is mounted.
    NotFound(String),
    /// The arguments do not match the tool's parameters (the text says
    /// where), or are not a JSON object.
    InvalidArgs(String),
    /// The call would re-enter a graph already running in this chain, or
    /// nest too deep.
    Recursion(String),
    /// The run used up its granted tool calls.
    Quota(String),
    /// The tool's run failed, timed out or was cancelled.
    Failed(String),
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Denied(m) => write!(f, "tool call denied: {m}"),
            ToolError::NotFound(m) => write!(f, "tool not found: {m}"),
            ToolError::InvalidArgs(m) => write!(f, "invalid tool arguments: {m}"),
            ToolError::Recursion(m) => write!(f, "tool call refused: {m}"),
            ToolError::Quota(m) => write!(f, "tool call quota: {m}"),
            ToolError::Failed(m) => write!(f, "tool failed: {m}"),
        }
    }
}

impl std::error::Error for ToolError {}

impl ToolError {
    /// The case as a short name: `denied`, `not_found`, `invalid_args`,
    /// `recursion`, `quota`, `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Denied(_) => "denied",
            ToolError::NotFound(_) => "not_found",
            ToolError::InvalidArgs(_) => "invalid_args",
            ToolError::Recursion(_) => "recursion",
            ToolError::Quota(_) => "quota",
            ToolError::Failed(_) => "failed",
        }
    }
}

impl From<wit::ToolError> for ToolError {
    fn from(e: wit::ToolError) -> Self {
        match e {
            wit::ToolError::Denied(m) => ToolError::Denied(m),
            wit::ToolError::NotFound(m) => ToolError::NotFound(m),
            wit::ToolError::InvalidArgs(m) => ToolError::InvalidArgs(m),
            wit::ToolError::Recursion(m) => ToolError::Recursion(m),
            wit::ToolError::Quota(m) => ToolError::Quota(m),
            wit::ToolError::Failed(m) => ToolError::Failed(m),
        }
    }
}

impl Tools {
    pub(crate) fn new() -> Self {
        Tools { _private: () }
    }

    /// The tools this graph is granted, with their schemas.
    pub fn list(&self) -> Vec<ToolInfo> {
        wit::list()
            .into_iter()
            .map(|t| ToolInfo {
                parameters: serde_json::from_str(&t.parameters).unwrap_or(Value::Null),
                name: t.name,
                description: t.description,
            })
            .collect()
    }

    /// Runs tool `name` with `args` (serialized to a JSON object) and
    /// returns its final state.
    ///
    /// # Errors
    ///
    /// See [`ToolError`]; arguments that do not serialize are
    /// [`ToolError::InvalidArgs`].
    pub fn call(&self, name: &str, args: impl Serialize) -> Result<Value, ToolError> {
        let args = serde_json::to_string(&args)
            .map_err(|e| ToolError::InvalidArgs(format!("cannot serialize the arguments: {e}")))?;
        let out = wit::call(name, &args)?;
        serde_json::from_str(&out)
            .map_err(|e| ToolError::Failed(format!("the host returned invalid JSON: {e}")))
    }
}
