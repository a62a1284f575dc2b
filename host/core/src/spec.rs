//! The graph spec a component describes itself with, mirrored from the WIT
//! `graph-spec` record so the executor and tooling need no wasm engine.

use serde::{Deserialize, Serialize};

/// The virtual node a run starts from.
pub const START: &str = "__start__";
/// The virtual node a run ends at.
pub const END: &str = "__end__";

/// How writes to a channel combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reducer {
    LastValue,
    Append,
    Merge,
    Add,
    Custom,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelSpec {
    pub name: String,
    pub reducer: Reducer,
    /// Initial value; `None` leaves the key absent until written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A static edge; several sources make a join barrier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub sources: Vec<String>,
    pub target: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathEntry {
    pub key: String,
    pub target: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionalEdge {
    pub source: String,
    pub router: String,
    /// Empty: router answers are node names (or `__end__`).
    #[serde(default)]
    pub path_map: Vec<PathEntry>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub as_tool: bool,
    pub as_graph_tool: bool,
}

impl Default for Registration {
    fn default() -> Self {
        Registration { as_tool: false, as_graph_tool: true }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub registration: Registration,
    /// Parameter spec in the seed's value-schema DSL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    pub channels: Vec<ChannelSpec>,
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub edges: Vec<Edge>,
    #[serde(default)]
    pub conditional_edges: Vec<ConditionalEdge>,
    pub entry_points: Vec<String>,
    #[serde(default)]
    pub finish_points: Vec<String>,
}

/// A spec the host refuses, naming the node, edge or channel at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid graph spec: {0}")]
pub struct SpecError(pub String);
