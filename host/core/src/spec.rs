//! The graph spec a component describes itself with, mirrored from the WIT
//! `graph-spec` record so the executor and tooling need no wasm engine.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// The virtual node a run starts from.
pub const START: &str = "__start__";
/// The virtual node a run ends at.
pub const END: &str = "__end__";

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
    /// The router name passed to `route`.
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

fn err(message: String) -> SpecError {
    SpecError(message)
}

fn check_ident(what: &str, name: &str) -> Result<(), SpecError> {
    if name.is_empty() {
        return Err(err(format!("{what} name is empty")));
    }
    if name.len() > MAX_IDENT_LEN {
        return Err(err(format!(
            "{what} name {} is {} bytes long, more than {MAX_IDENT_LEN}",
            crate::text::guest_name(name),
            name.len()
        )));
    }
    // Names are quoted into host messages, logs and diagrams: no terminal
    // escapes, line breaks or bidi overrides.
    if crate::text::has_unsafe_chars(name) {
        return Err(err(format!(
            "{what} name {} holds a control or bidi character",
            crate::text::guest_name(name)
        )));
    }
    Ok(())
}

fn check_description(what: &str, description: Option<&str>) -> Result<(), SpecError> {
    let len = description.map_or(0, |d| d.chars().count());
    if len > MAX_DESCRIPTION_LEN {
        return Err(err(format!(
            "{what} description is {len} characters long, more than {MAX_DESCRIPTION_LEN}"
        )));
    }
    Ok(())
}

impl GraphSpec {
    /// Checks everything the executor relies on, in a fixed order, and
    /// reports the first problem, naming the graph, node, edge or channel at
    /// fault.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_header()?;
        self.validate_channels()?;
        let nodes = self.validate_nodes()?;
        self.validate_entry_and_finish(&nodes)?;
        self.validate_edges(&nodes)?;
        self.validate_conditional_edges(&nodes)?;
        self.validate_reachability()
    }

    fn validate_header(&self) -> Result<(), SpecError> {
        let name = &self.name;
        if name.is_empty() {
            return Err(err("graph name is empty".to_owned()));
        }
        if name.chars().count() > MAX_NAME_LEN {
            return Err(err(format!(
                "graph name {name:?} is longer than {MAX_NAME_LEN} characters"
            )));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(err(format!(
                "graph name {name:?} may only contain ascii letters, digits, \"_\" and \"-\""
            )));
        }
        check_description("graph", self.description.as_deref())?;
        if let Some(parameters) = &self.parameters
            && !parameters.is_object()
        {
            return Err(err(format!(
                "parameters must be a json object, not {}",
                crate::reducers::kind(parameters)
            )));
        }
        if self.timeout_ms == Some(0) {
            return Err(err("timeout_ms must be positive".to_owned()));
        }
        Ok(())
    }

    fn validate_channels(&self) -> Result<(), SpecError> {
        if self.channels.len() > MAX_CHANNELS {
            return Err(err(format!(
                "{} channels, more than the limit of {MAX_CHANNELS}",
                self.channels.len()
            )));
        }
        let mut seen = HashSet::new();
        for channel in &self.channels {
            check_ident("channel", &channel.name)?;
            let name = &channel.name;
            if name == STRICT_MARKER_CHANNEL {
                return Err(err(format!(
                    "channel name {name:?} is reserved (it marks a strict graph)"
                )));
            }
            if !seen.insert(name.as_str()) {
                return Err(err(format!("channel {name:?} is declared twice")));
            }
            let Some(default) = &channel.default else {
                continue;
            };
            let fits = match channel.reducer {
                Reducer::Append => default.is_array(),
                Reducer::Merge => default.is_object(),
                Reducer::Add => default.is_number(),
                Reducer::LastValue | Reducer::Custom => true,
            };
            if !fits {
                let wanted = match channel.reducer {
                    Reducer::Append => "an array",
                    Reducer::Merge => "an object",
                    _ => "a number",
                };
                return Err(err(format!(
                    "channel {name:?}: default is {}, but its reducer needs {wanted}",
                    crate::reducers::kind(default)
                )));
            }
            crate::json::check_lossless(default).map_err(|e| {
                err(format!(
                    "channel {name:?}: default is not lossless json: {e}"
                ))
            })?;
        }
        Ok(())
    }

    fn validate_nodes(&self) -> Result<HashSet<&str>, SpecError> {
        if self.nodes.is_empty() {
            return Err(err("the graph has no nodes".to_owned()));
        }
        if self.nodes.len() > MAX_NODES {
            return Err(err(format!(
                "{} nodes, more than the limit of {MAX_NODES}",
                self.nodes.len()
            )));
        }
        let mut names = HashSet::new();
        for node in &self.nodes {
            check_ident("node", &node.name)?;
            let name = &node.name;
            if name == START || name == END {
                return Err(err(format!("node name {name:?} is reserved")));
            }
            if !names.insert(name.as_str()) {
                return Err(err(format!("node {name:?} is declared twice")));
            }
            check_description(&format!("node {name:?}"), node.description.as_deref())?;
        }
        Ok(names)
    }

    fn validate_entry_and_finish(&self, nodes: &HashSet<&str>) -> Result<(), SpecError> {
        let routes_from_start = self.conditional_edges.iter().any(|c| c.source == START);
        if self.entry_points.is_empty() && !routes_from_start {
            return Err(err(
                "the graph has no entry point and no conditional edge from __start__".to_owned(),
            ));
        }
        for entry in &self.entry_points {
            if !nodes.contains(entry.as_str()) {
                return Err(err(format!(
                    "entry point {entry:?} is not a node{}",
                    self.node_hint(entry)
                )));
            }
        }
        for finish in &self.finish_points {
            if !nodes.contains(finish.as_str()) {
                return Err(err(format!(
                    "finish point {finish:?} is not a node{}",
                    self.node_hint(finish)
                )));
            }
        }
        Ok(())
    }

    fn validate_edges(&self, nodes: &HashSet<&str>) -> Result<(), SpecError> {
        let count = self.edges.len() + self.conditional_edges.len();
        if count > MAX_EDGES {
            return Err(err(format!(
                "{count} edges, more than the limit of {MAX_EDGES}"
            )));
        }
        for edge in &self.edges {
            let label = edge_label(edge);
            if edge.sources.is_empty() {
                return Err(err(format!("{label}: no source node")));
            }
            let mut seen = HashSet::new();
            for source in &edge.sources {
                if source == START {
                    return Err(err(format!(
                        "{label}: __start__ cannot be an edge source; use an entry point"
                    )));
                }
                if source == END {
                    return Err(err(format!("{label}: __end__ cannot be an edge source")));
                }
                if !nodes.contains(source.as_str()) {
                    return Err(err(format!(
                        "{label}: unknown source node {source:?}{}",
                        self.node_hint(source)
                    )));
                }
                if !seen.insert(source.as_str()) {
                    return Err(err(format!("{label}: source {source:?} is listed twice")));
                }
            }
            if edge.target != END && !nodes.contains(edge.target.as_str()) {
                return Err(err(format!(
                    "{label}: unknown target node {:?}{}",
                    edge.target,
                    self.target_hint(&edge.target)
                )));
            }
        }
        Ok(())
    }

    fn validate_conditional_edges(&self, nodes: &HashSet<&str>) -> Result<(), SpecError> {
        let mut routers = HashSet::new();
        for cond in &self.conditional_edges {
            let source = &cond.source;
            // `route` dispatches on the router name alone.
            if !routers.insert(cond.router.as_str()) {
                return Err(err(format!(
                    "conditional edge from {source:?}: router name {:?} is used by another conditional edge",
                    cond.router
                )));
            }
            let label = format!("conditional edge from {source:?}");
            if source != START && !nodes.contains(source.as_str()) {
                return Err(err(format!(
                    "{label}: unknown source node {source:?}{}",
                    self.node_hint(source)
                )));
            }
            if cond.router.is_empty() {
                return Err(err(format!("{label}: router name is empty")));
            }
            check_ident(&label, &cond.router)?;
            let label = format!("{label} (router {:?})", cond.router);
            if cond.path_map.len() > MAX_EDGES {
                return Err(err(format!(
                    "{label}: {} path-map entries, more than the limit of {MAX_EDGES}",
                    cond.path_map.len()
                )));
            }
            let mut keys = HashSet::new();
            for entry in &cond.path_map {
                if entry.key.len() > MAX_IDENT_LEN {
                    return Err(err(format!(
                        "{label}: path-map key is longer than {MAX_IDENT_LEN} bytes"
                    )));
                }
                if !keys.insert(entry.key.as_str()) {
                    return Err(err(format!(
                        "{label}: path-map key {:?} is listed twice",
                        entry.key
                    )));
                }
                let target = &entry.target;
                if target != END && !nodes.contains(target.as_str()) {
                    return Err(err(format!(
                        "{label}: path-map key {:?} leads to unknown node {target:?}{}",
                        entry.key,
                        self.target_hint(target)
                    )));
                }
            }
        }
        Ok(())
    }

    /// Every node must be reachable from `__start__`. A join edge reaches
    /// its target only once all of its sources are reachable; a conditional
    /// edge without a path map may reach any node.
    fn validate_reachability(&self) -> Result<(), SpecError> {
        let mut reached: HashSet<&str> = HashSet::from([START]);
        loop {
            let before = reached.len();
            reached.extend(self.entry_points.iter().map(String::as_str));
            for edge in &self.edges {
                if edge.sources.iter().all(|s| reached.contains(s.as_str())) {
                    reached.insert(edge.target.as_str());
                }
            }
            for cond in &self.conditional_edges {
                if !reached.contains(cond.source.as_str()) {
                    continue;
                }
                if cond.path_map.is_empty() {
                    reached.extend(self.nodes.iter().map(|n| n.name.as_str()));
                } else {
                    reached.extend(cond.path_map.iter().map(|e| e.target.as_str()));
                }
            }
            if reached.len() == before {
                break;
            }
        }
        match self
            .nodes
            .iter()
            .find(|n| !reached.contains(n.name.as_str()))
        {
            Some(node) => Err(err(format!(
                "node {:?} is unreachable from __start__: add an edge to it, or a conditional \
                 edge whose path map lists it (nodes reached only by goto or send need one too)",
                node.name
            ))),
            None => Ok(()),
        }
    }
}

impl GraphSpec {
    /// A did-you-mean for `name`, which is not a node.
    fn node_hint(&self, name: &str) -> String {
        crate::suggest::hint(name, self.nodes.iter().map(|n| n.name.as_str()))
    }

    /// A did-you-mean for `name`, which is neither a node nor `__end__`.
    fn target_hint(&self, name: &str) -> String {
        let names = self.nodes.iter().map(|n| n.name.as_str());
        crate::suggest::hint(name, names.chain([END]))
    }

    /// A did-you-mean for `name`, which is not a channel.
    pub fn channel_hint(&self, name: &str) -> String {
        crate::suggest::hint(name, self.channels.iter().map(|c| c.name.as_str()))
    }
}

fn edge_label(edge: &Edge) -> String {
    match edge.sources.as_slice() {
        [single] => format!("edge {single:?} -> {:?}", edge.target),
        sources => {
            let list: Vec<String> = sources.iter().map(|s| format!("{s:?}")).collect();
            format!("edge [{}] -> {:?}", list.join(", "), edge.target)
        }
    }
}

impl GraphSpec {
    /// Draws the graph as a Mermaid `flowchart TD`, deterministically: nodes
    /// in spec order, then entry edges, static edges (a join edge as one
    /// arrow per source), conditional edges (dashed, labelled with their
    /// path-map key; without a path map, as for a `Send` fan-out, an
    /// unlabelled dashed arrow to every other node, never to the source
    /// itself or to `__end__`) and finish edges.
    ///
    /// Node names that are not plain identifiers get a sanitized id and keep
    /// their name as a quoted label.
    pub fn to_mermaid(&self) -> String {
        let ids = MermaidIds::new(self);
        let mut out = String::from("flowchart TD\n");
        // `write!` into a String cannot fail.
        let _ = writeln!(out, "    {START}([{START}]):::first");
        for node in &self.nodes {
            let id = ids.get(&node.name);
            if id == node.name {
                let _ = writeln!(out, "    {id}({id})");
            } else {
                let _ = writeln!(out, "    {id}(\"{}\")", mermaid_escape(&node.name));
            }
        }
        let _ = writeln!(out, "    {END}([{END}]):::last");

        let mut lines: Vec<String> = Vec::new();
        for entry in &self.entry_points {
            lines.push(format!("{START} --> {}", ids.get(entry)));
        }
        for edge in &self.edges {
            for source in &edge.sources {
                lines.push(format!("{} --> {}", ids.get(source), ids.get(&edge.target)));
            }
        }
        for cond in &self.conditional_edges {
            let source = ids.get(&cond.source);
            if cond.path_map.is_empty() {
                // A router without a path map (typically a `Send` fan-out)
                // may name any node: draw one dashed arrow to each other
                // node, none back to itself or to `__end__`, which would
                // turn every such router into a loop and an exit.
                for target in self.nodes.iter().map(|n| n.name.as_str()) {
                    if target != cond.source {
                        lines.push(format!("{source} -.-> {}", ids.get(target)));
                    }
                }
            }
            for entry in &cond.path_map {
                let target = ids.get(&entry.target);
                let simple = !entry.key.is_empty()
                    && !entry.key.starts_with(' ')
                    && !entry.key.ends_with(' ')
                    && entry
                        .key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ');
                if simple {
                    lines.push(format!("{source} -. {} .-> {target}", entry.key));
                } else {
                    lines.push(format!(
                        "{source} -.->|\"{}\"| {target}",
                        mermaid_escape(&entry.key)
                    ));
                }
            }
        }
        for finish in &self.finish_points {
            lines.push(format!("{} --> {END}", ids.get(finish)));
        }
        let mut seen = HashSet::new();
        for line in lines {
            if seen.insert(line.clone()) {
                let _ = writeln!(out, "    {line}");
            }
        }
        out.push_str("    classDef first fill-opacity:0\n");
        out.push_str("    classDef last fill:#bfb6fc\n");
        out
    }
}

/// Mermaid ids for the graph's nodes: the name itself when it is a plain
/// identifier that Mermaid does not treat as a keyword, otherwise a
/// sanitized, de-duplicated variant.
struct MermaidIds {
    ids: HashMap<String, String>,
}

impl MermaidIds {
    fn new(spec: &GraphSpec) -> Self {
        const KEYWORDS: [&str; 12] = [
            "end",
            "graph",
            "subgraph",
            "flowchart",
            "style",
            "class",
            "classdef",
            "click",
            "linkstyle",
            "direction",
            "default",
            "call",
        ];
        let plain = |name: &str| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !KEYWORDS.contains(&name.to_ascii_lowercase().as_str())
        };
        let mut ids = HashMap::new();
        let mut taken: HashSet<String> = HashSet::from([START.to_owned(), END.to_owned()]);
        // Plain names keep their id; claim them first so sanitized ids avoid them.
        for node in &spec.nodes {
            if plain(&node.name) && taken.insert(node.name.clone()) {
                ids.insert(node.name.clone(), node.name.clone());
            }
        }
        for node in &spec.nodes {
            if ids.contains_key(&node.name) {
                continue;
            }
            let base: String = node
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let base = format!("n_{base}");
            let mut id = base.clone();
            let mut n = 1;
            while !taken.insert(id.clone()) {
                n += 1;
                id = format!("{base}_{n}");
            }
            ids.insert(node.name.clone(), id);
        }
        MermaidIds { ids }
    }

    fn get<'a>(&'a self, name: &'a str) -> &'a str {
        self.ids.get(name).map_or(name, String::as_str)
    }
}

/// Escapes text for a quoted Mermaid label.
fn mermaid_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '#' => out.push_str("#35;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str) -> NodeSpec {
        NodeSpec {
            name: name.to_owned(),
            description: None,
        }
    }

    fn channel(name: &str, reducer: Reducer, default: Option<serde_json::Value>) -> ChannelSpec {
        ChannelSpec {
            name: name.to_owned(),
            reducer,
            default,
        }
    }

    fn edge(sources: &[&str], target: &str) -> Edge {
        Edge {
            sources: sources.iter().map(|s| (*s).to_owned()).collect(),
            target: target.to_owned(),
        }
    }

    fn cond(source: &str, router: &str, map: &[(&str, &str)]) -> ConditionalEdge {
        ConditionalEdge {
            source: source.to_owned(),
            router: router.to_owned(),
            path_map: map
                .iter()
                .map(|(k, t)| PathEntry {
                    key: (*k).to_owned(),
                    target: (*t).to_owned(),
                })
                .collect(),
        }
    }

    /// a -> b, a -> c, [b, c] -> d, d routes to a or __end__.
    fn valid() -> GraphSpec {
        GraphSpec {
            name: "my_graph-1".to_owned(),
            description: Some("does things".to_owned()),
            registration: Registration::default(),
            parameters: Some(json!({"q": "string"})),
            timeout_ms: Some(1000),
            channels: vec![
                channel("x", Reducer::LastValue, None),
                channel("items", Reducer::Append, Some(json!([]))),
                channel("meta", Reducer::Merge, Some(json!({}))),
                channel("n", Reducer::Add, Some(json!(0))),
                channel("c", Reducer::Custom, Some(json!("anything"))),
            ],
            nodes: vec![node("a"), node("b"), node("c"), node("d")],
            edges: vec![edge(&["a"], "b"), edge(&["a"], "c"), edge(&["b", "c"], "d")],
            conditional_edges: vec![cond("d", "again", &[("again", "a"), ("done", END)])],
            entry_points: vec!["a".to_owned()],
            finish_points: vec!["d".to_owned()],
            strict: false,
        }
    }

    #[test]
    fn valid_spec_passes() {
        assert_eq!(valid().validate(), Ok(()));
    }

    #[test]
    fn invalid_specs_name_the_fault() {
        type Mutation = Box<dyn Fn(&mut GraphSpec)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|s| s.name = String::new()), "graph name is empty"),
            (
                Box::new(|s| s.name = "a".repeat(65)),
                "is longer than 64 characters",
            ),
            (Box::new(|s| s.name = "a".repeat(64)), ""),
            (
                Box::new(|s| s.name = "has space".to_owned()),
                r#"graph name "has space" may only contain"#,
            ),
            (
                Box::new(|s| s.name = "dot.ted".to_owned()),
                r#"graph name "dot.ted" may only contain"#,
            ),
            (
                Box::new(|s| s.description = Some("x".repeat(MAX_DESCRIPTION_LEN + 1))),
                "graph description is 4097 characters long",
            ),
            (
                Box::new(|s| s.parameters = Some(json!([1]))),
                "parameters must be a json object, not an array",
            ),
            (
                Box::new(|s| s.timeout_ms = Some(0)),
                "timeout_ms must be positive",
            ),
            (
                Box::new(|s| s.channels[1].name = "x".to_owned()),
                r#"channel "x" is declared twice"#,
            ),
            (
                Box::new(|s| s.channels[0].name = String::new()),
                "channel name is empty",
            ),
            (
                Box::new(|s| s.channels[1].default = Some(json!({}))),
                r#"channel "items": default is an object, but its reducer needs an array"#,
            ),
            (
                Box::new(|s| s.channels[2].default = Some(json!([]))),
                r#"channel "meta": default is an array, but its reducer needs an object"#,
            ),
            (
                Box::new(|s| s.channels[3].default = Some(json!("0"))),
                r#"channel "n": default is a string, but its reducer needs a number"#,
            ),
            (
                Box::new(|s| s.channels[0].default = Some(json!({"big": 9007199254740992_i64}))),
                r#"channel "x": default is not lossless json: $.big: integer 9007199254740992"#,
            ),
            (
                Box::new(|s| {
                    s.channels = (0..=MAX_CHANNELS)
                        .map(|i| channel(&format!("c{i}"), Reducer::Add, None))
                        .collect()
                }),
                "257 channels, more than the limit of 256",
            ),
            (Box::new(|s| s.nodes.clear()), "the graph has no nodes"),
            (
                Box::new(|s| {
                    s.nodes
                        .extend((0..MAX_NODES).map(|i| node(&format!("n{i}"))))
                }),
                "260 nodes, more than the limit of 256",
            ),
            (
                Box::new(|s| s.nodes.push(node("a"))),
                r#"node "a" is declared twice"#,
            ),
            (
                Box::new(|s| s.nodes.push(node(START))),
                r#"node name "__start__" is reserved"#,
            ),
            (
                Box::new(|s| s.nodes.push(node(END))),
                r#"node name "__end__" is reserved"#,
            ),
            (Box::new(|s| s.nodes.push(node(""))), "node name is empty"),
            (
                Box::new(|s| s.nodes.push(node(&"n".repeat(MAX_IDENT_LEN + 1)))),
                "bytes long, more than 256",
            ),
            (
                Box::new(|s| s.nodes[1].description = Some("é".repeat(MAX_DESCRIPTION_LEN + 1))),
                r#"node "b" description is 4097 characters long"#,
            ),
            (
                Box::new(|s| s.nodes[1].description = Some("é".repeat(MAX_DESCRIPTION_LEN))),
                "",
            ),
            (
                Box::new(|s| s.entry_points.clear()),
                "no entry point and no conditional edge from __start__",
            ),
            (
                Box::new(|s| {
                    s.entry_points.clear();
                    s.conditional_edges
                        .push(cond(START, "pick", &[("go", "a")]));
                }),
                "",
            ),
            (
                Box::new(|s| s.entry_points.push("zz".to_owned())),
                r#"entry point "zz" is not a node"#,
            ),
            (
                Box::new(|s| s.finish_points.push(END.to_owned())),
                r#"finish point "__end__" is not a node"#,
            ),
            (
                Box::new(|s| s.edges.push(edge(&["a"], "zz"))),
                r#"edge "a" -> "zz": unknown target node "zz""#,
            ),
            (
                Box::new(|s| s.edges.push(edge(&["a"], "__end"))),
                r#"edge "a" -> "__end": unknown target node "__end"; did you mean "__end__"?"#,
            ),
            (
                Box::new(|s| s.entry_points.push("aa".to_owned())),
                r#"entry point "aa" is not a node; did you mean "a"?"#,
            ),
            (
                Box::new(|s| {
                    s.nodes.push(node("summarize"));
                    s.edges.push(edge(&["d"], "summarize"));
                    s.finish_points.push("sumarize".to_owned());
                }),
                r#"finish point "sumarize" is not a node; did you mean "summarize"?"#,
            ),
            (
                Box::new(|s| {
                    s.nodes.push(node("fetch"));
                    s.edges.push(edge(&["fecth"], "a"));
                }),
                r#"edge "fecth" -> "a": unknown source node "fecth"; did you mean "fetch"?"#,
            ),
            (
                Box::new(|s| {
                    s.nodes.push(node("review"));
                    s.conditional_edges
                        .push(cond("a", "r", &[("ok", "reveiw"), ("no", "review")]));
                }),
                r#"path-map key "ok" leads to unknown node "reveiw"; did you mean "review"?"#,
            ),
            (
                Box::new(|s| {
                    s.nodes.push(node("review"));
                    s.edges.push(edge(&["a"], "review"));
                    s.conditional_edges.push(cond("reviews", "r", &[]));
                }),
                r#"conditional edge from "reviews": unknown source node "reviews"; did you mean "review"?"#,
            ),
            (
                Box::new(|s| {
                    s.channels
                        .push(channel(STRICT_MARKER_CHANNEL, Reducer::LastValue, None))
                }),
                r#"channel name "__strict__" is reserved (it marks a strict graph)"#,
            ),
            (
                Box::new(|s| s.edges.push(edge(&["zz"], "a"))),
                r#"edge "zz" -> "a": unknown source node "zz""#,
            ),
            (
                Box::new(|s| s.edges.push(edge(&[], "a"))),
                r#"edge [] -> "a": no source node"#,
            ),
            (
                Box::new(|s| s.edges.push(edge(&[START], "a"))),
                r#"edge "__start__" -> "a": __start__ cannot be an edge source; use an entry point"#,
            ),
            (
                Box::new(|s| s.edges.push(edge(&[END], "a"))),
                r#"edge "__end__" -> "a": __end__ cannot be an edge source"#,
            ),
            (
                Box::new(|s| s.edges.push(edge(&["a"], START))),
                r#"edge "a" -> "__start__": unknown target node"#,
            ),
            (Box::new(|s| s.edges.push(edge(&["a"], END))), ""),
            (
                Box::new(|s| s.edges.push(edge(&["b", "b"], "d"))),
                r#"edge ["b", "b"] -> "d": source "b" is listed twice"#,
            ),
            (
                Box::new(|s| s.edges.push(edge(&["b", "q"], "d"))),
                r#"edge ["b", "q"] -> "d": unknown source node "q""#,
            ),
            (
                Box::new(|s| s.edges.extend((0..MAX_EDGES).map(|_| edge(&["a"], "b")))),
                "1028 edges, more than the limit of 1024",
            ),
            (
                Box::new(|s| s.conditional_edges.push(cond("zz", "r", &[]))),
                r#"conditional edge from "zz": unknown source node "zz""#,
            ),
            (
                Box::new(|s| s.conditional_edges.push(cond(END, "r", &[]))),
                r#"conditional edge from "__end__": unknown source node"#,
            ),
            (
                Box::new(|s| s.conditional_edges.push(cond("a", "", &[]))),
                r#"conditional edge from "a": router name is empty"#,
            ),
            (
                Box::new(|s| {
                    s.conditional_edges
                        .push(cond("a", "r", &[("k", "b"), ("k", "c")]))
                }),
                r#"conditional edge from "a" (router "r"): path-map key "k" is listed twice"#,
            ),
            (
                Box::new(|s| s.conditional_edges.push(cond("a", "r", &[("k", "zz")]))),
                r#"conditional edge from "a" (router "r"): path-map key "k" leads to unknown node "zz""#,
            ),
            (
                Box::new(|s| s.conditional_edges.push(cond("a", "r", &[("k", START)]))),
                "unknown node \"__start__\"",
            ),
            (
                Box::new(|s| {
                    s.conditional_edges.push(cond("a", "r", &[("k", END)]));
                    s.conditional_edges.push(cond("b", "r", &[("k", END)]));
                }),
                r#"conditional edge from "b": router name "r" is used by another conditional edge"#,
            ),
            (
                Box::new(|s| s.nodes.push(node("island"))),
                r#"node "island" is unreachable from __start__"#,
            ),
            (
                Box::new(|s| {
                    s.nodes.push(node("island"));
                    s.edges.push(edge(&["island"], "a"));
                }),
                r#"node "island" is unreachable from __start__"#,
            ),
            (
                // A join reaches its target only when every source is reachable.
                Box::new(|s| {
                    s.nodes.push(node("island"));
                    s.nodes.push(node("after"));
                    s.edges.push(edge(&["a", "island"], "after"));
                }),
                r#"node "island" is unreachable from __start__"#,
            ),
            (
                // A conditional edge without a path map may reach any node.
                Box::new(|s| {
                    s.nodes.push(node("island"));
                    s.conditional_edges.push(cond("b", "anywhere", &[]));
                }),
                "",
            ),
            (
                Box::new(|s| {
                    s.nodes.push(node("island"));
                    s.conditional_edges
                        .push(cond("b", "r", &[("go", "island")]));
                }),
                "",
            ),
        ];
        for (i, (mutate, expected)) in cases.iter().enumerate() {
            let mut spec = valid();
            mutate(&mut spec);
            match (spec.validate(), *expected) {
                (Ok(()), "") => {}
                (Ok(()), expected) => panic!("case {i}: accepted, expected {expected:?}"),
                (Err(e), "") => panic!("case {i}: rejected with {e}"),
                (Err(SpecError(message)), expected) => {
                    assert!(
                        message.contains(expected),
                        "case {i}: {message:?} lacks {expected:?}"
                    );
                    assert_eq!(message, message.to_lowercase(), "case {i}: not lowercase");
                    assert!(!message.ends_with('.'), "case {i}: trailing period");
                }
            }
        }
    }

    #[test]
    fn names_with_control_characters_are_refused() {
        let mut spec = valid();
        spec.channels[0].name = "log\u{1b}]0;x\u{7}".into();
        let e = spec.validate().unwrap_err().to_string();
        assert!(e.contains("holds a control or bidi character"), "{e}");
        assert!(!e.chars().any(char::is_control), "{e:?}");
    }

    #[test]
    fn spec_error_display() {
        let mut spec = valid();
        spec.edges.push(edge(&["a"], "b2"));
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            r#"invalid graph spec: edge "a" -> "b2": unknown target node "b2"; did you mean "b"?"#
        );
    }

    #[test]
    fn mermaid_draws_every_kind_of_edge() {
        let mut spec = valid();
        spec.conditional_edges.push(cond("b", "free", &[]));
        let expected = "\
flowchart TD
    __start__([__start__]):::first
    a(a)
    b(b)
    c(c)
    d(d)
    __end__([__end__]):::last
    __start__ --> a
    a --> b
    a --> c
    b --> d
    c --> d
    d -. again .-> a
    d -. done .-> __end__
    b -.-> a
    b -.-> c
    b -.-> d
    d --> __end__
    classDef first fill-opacity:0
    classDef last fill:#bfb6fc
";
        assert_eq!(spec.to_mermaid(), expected);
        assert_eq!(spec.to_mermaid(), expected, "deterministic");
    }

    #[test]
    fn mermaid_draws_a_send_fan_out_to_the_other_nodes_only() {
        let mut spec = valid();
        spec.nodes = vec![node("plan"), node("work"), node("merge")];
        spec.entry_points = vec!["plan".to_owned()];
        spec.edges = vec![edge(&["work"], "merge")];
        spec.conditional_edges = vec![cond("plan", "fan_out", &[])];
        spec.finish_points = vec!["merge".to_owned()];
        assert_eq!(spec.validate(), Ok(()));
        let mermaid = spec.to_mermaid();
        let dashed: Vec<&str> = mermaid.lines().filter(|l| l.contains("-.->")).collect();
        assert_eq!(
            dashed,
            ["    plan -.-> work", "    plan -.-> merge"],
            "{mermaid}"
        );
        assert!(!mermaid.contains("plan -.-> plan"), "{mermaid}");
        assert!(!mermaid.contains("-.-> __end__"), "{mermaid}");

        // From __start__, every node is a target.
        spec.entry_points.clear();
        spec.conditional_edges = vec![cond(START, "pick", &[])];
        let mermaid = spec.to_mermaid();
        let dashed: Vec<&str> = mermaid.lines().filter(|l| l.contains("-.->")).collect();
        assert_eq!(
            dashed,
            [
                "    __start__ -.-> plan",
                "    __start__ -.-> work",
                "    __start__ -.-> merge"
            ],
            "{mermaid}"
        );
    }

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

    #[test]
    fn mermaid_sanitizes_ids_and_escapes_labels() {
        let mut spec = valid();
        spec.nodes = vec![
            node("end"),
            node("my node"),
            node("n_my_node"),
            node("a\"b"),
        ];
        spec.entry_points = vec!["end".to_owned(), "my node".to_owned()];
        spec.edges = vec![edge(&["my node"], "a\"b")];
        spec.conditional_edges = vec![
            cond(START, "r", &[("to x", "n_my_node")]),
            cond("end", "r", &[("a|b", END)]),
        ];
        spec.finish_points.clear();
        let expected = "\
flowchart TD
    __start__([__start__]):::first
    n_end(\"end\")
    n_my_node_2(\"my node\")
    n_my_node(n_my_node)
    n_a_b(\"a#quot;b\")
    __end__([__end__]):::last
    __start__ --> n_end
    __start__ --> n_my_node_2
    n_my_node_2 --> n_a_b
    __start__ -. to x .-> n_my_node
    n_end -.->|\"a|b\"| __end__
    classDef first fill-opacity:0
    classDef last fill:#bfb6fc
";
        assert_eq!(spec.to_mermaid(), expected);
    }
}
