//! The graph spec a component describes itself with, mirrored from the WIT
//! `graph-spec` record so the executor and tooling need no wasm engine.

use serde::{Deserialize, Serialize};

/// The virtual node a run starts from.
pub const START: &str = "__start__";
/// The virtual node a run ends at.
pub const END: &str = "__end__";
/// The router name of a conditional edge that only declares where a
/// node's `Command` may `goto` (LangGraph's `destinations=` and
/// `Command[Literal[...]]`): its path map lists each target as
/// key = target. The host never calls `route` for it; it counts for
/// validation and reachability, and diagrams draw it dashed. No graph may
/// export a router of this name.
pub const GOTO_ROUTER: &str = "__goto__";

/// How writes to a channel combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reducer {
    /// Keeps the one value written; two writes in one superstep are an error.
    LastValue,
    /// Appends: an array update is concatenated, any other value is pushed.
    Append,
    /// Shallow-merges an object update into the current object.
    Merge,
    /// Adds a number update to the current number.
    Add,
    /// Calls the graph's `reduce` export with the current value and the update.
    Custom,
}

/// One state key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelSpec {
    /// Key in the state object.
    pub name: String,
    /// How writes combine.
    pub reducer: Reducer,
    /// Initial value; `None` leaves the key absent until written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
}

/// One node of the graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Unique node name; `__start__` and `__end__` are reserved.
    pub name: String,
    /// Shown in generated tool descriptions and diagrams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A static edge; several sources make a join barrier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    /// Nodes that must all have run (since the target last ran, for a join).
    pub sources: Vec<String>,
    /// The node to run next, or `__end__`.
    pub target: String,
}

/// One entry of a conditional edge's path map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathEntry {
    /// What the router returns.
    pub key: String,
    /// The node (or `__end__`) that key leads to.
    pub target: String,
}

/// An edge whose destinations a router chooses at run time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionalEdge {
    /// The node whose task runs the router after its body; `__start__`
    /// routes the input.
    pub source: String,
    /// The router name passed to `route`, or [`GOTO_ROUTER`] for an edge
    /// that declares the source's goto targets (never routed).
    pub router: String,
    /// Empty: router answers are node names (or `__end__`).
    #[serde(default)]
    pub path_map: Vec<PathEntry>,
}

/// How the host registers the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// Also expose the graph as a model-visible tool.
    pub as_tool: bool,
    /// List the graph for discovery and routing.
    pub as_graph_tool: bool,
}

impl Default for Registration {
    fn default() -> Self {
        Registration {
            as_tool: false,
            as_graph_tool: true,
        }
    }
}

/// Everything the host needs to know about a graph, read once at load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphSpec {
    /// Tool name and registry key.
    pub name: String,
    /// Tool description shown to models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How the host registers the graph.
    #[serde(default)]
    pub registration: Registration,
    /// Parameter spec in the seed's value-schema DSL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<serde_json::Value>,
    /// The graph's own time budget in milliseconds, capped by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The state keys.
    pub channels: Vec<ChannelSpec>,
    /// The nodes, in declaration order.
    pub nodes: Vec<NodeSpec>,
    /// Static edges and join barriers.
    #[serde(default)]
    pub edges: Vec<Edge>,
    /// Router-chosen edges, in the order their routers run.
    #[serde(default)]
    pub conditional_edges: Vec<ConditionalEdge>,
    /// Nodes that run first (edges from `__start__`).
    pub entry_points: Vec<String>,
    /// Nodes after which the run may end (edges to `__end__`).
    #[serde(default)]
    pub finish_points: Vec<String>,
    /// A strict graph refuses input keys that are not channels
    /// (`invalid_input`) and node writes to undeclared channels
    /// (`invalid_update`) instead of dropping them with a warning. False
    /// for specs from before strict graphs existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

/// The channel name a component's spec uses to say "this graph is strict"
/// on the wire: the WIT `graph-spec` record has no field for it, and adding
/// one would change the record type every built component was checked
/// against. The SDK adds a channel of this name (last-value, no default, so
/// a host that does not know the marker keeps it absent from the state);
/// the host removes it from the channels and sets [`GraphSpec::strict`].
/// No graph may declare a channel of this name.
pub const STRICT_MARKER_CHANNEL: &str = "__strict__";

impl ConditionalEdge {
    /// Whether this edge only declares the source's goto targets
    /// ([`GOTO_ROUTER`]) instead of naming a router to call.
    pub fn is_goto(&self) -> bool {
        self.router == GOTO_ROUTER
    }
}

/// The graph name no graph may take: it belongs to the registry's
/// code-running tool. The registry refuses to mount a graph of this name,
/// and [`Audience::Builder`](crate::Audience::Builder) reports it.
pub const RESERVED_GRAPH_NAME: &str = "run_code";

/// A spec the host refuses, naming the node, edge or channel at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid graph spec: {0}")]
pub struct SpecError(pub String);

/// Most nodes a graph may have: keeps planning, validation and diagrams
/// cheap, and is far beyond what a hand-written agent graph needs.
pub const MAX_NODES: usize = 256;
/// Most channels (state keys) a graph may have, for the same reason.
pub const MAX_CHANNELS: usize = 256;
/// Most edges (static plus conditional) and most path-map entries per
/// conditional edge.
pub const MAX_EDGES: usize = 1024;
/// Longest graph name: the graph is registered as a tool, and LLM clients
/// limit tool names to 64 characters of `[A-Za-z0-9_-]`.
pub const MAX_NAME_LEN: usize = 64;
/// Longest graph or node description, in characters: descriptions are sent
/// to models with every tool listing, so they must stay short.
pub const MAX_DESCRIPTION_LEN: usize = 4096;
/// Longest node, channel or router name and path-map key, in bytes: these
/// appear in messages, diagrams and state keys and need a bound too.
pub const MAX_IDENT_LEN: usize = 256;

impl GraphSpec {
    /// A did-you-mean for `name`, which is not a channel.
    pub fn channel_hint(&self, name: &str) -> String {
        crate::suggest::hint(name, self.channels.iter().map(|c| c.name.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::GraphSpec;
    use crate::fixtures::valid;

    #[test]
    fn strict_is_optional_in_json_and_kept_when_set() {
        let mut value = serde_json::to_value(valid()).unwrap();
        assert!(value.get("strict").is_none(), "false is not written");
        let spec: GraphSpec = serde_json::from_value(value.clone()).unwrap();
        assert!(!spec.strict);
        value["strict"] = json!(true);
        let spec: GraphSpec = serde_json::from_value(value).unwrap();
        assert!(spec.strict);
        assert_eq!(serde_json::to_value(&spec).unwrap()["strict"], json!(true));
    }
}
