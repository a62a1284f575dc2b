//! [`CompiledGraph`]: a validated spec with the lookups the executor needs,
//! and the rules for what a writer may write and where a node may go.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use super::invalid_update;
use crate::text::guest_name;
use crate::{
    ConditionalEdge, END, ErrorCode, GraphSpec, Reducer, RouteTarget, RunError, START, SendPacket,
    SpecError,
};

/// Most unknown keys a strict graph's error names one by one; the rest
/// are counted. A guest can write thousands of keys; the message is for a
/// person.
const MAX_UNKNOWN_KEYS_LISTED: usize = 8;

/// Most channel names a strict graph's error lists as the ones allowed.
const MAX_CHANNELS_LISTED: usize = 16;

/// Who writes to the channels, for [`CompiledGraph::filter_writes`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Writer<'a> {
    /// The run's input, as `__start__`'s writes.
    Input,
    /// A node's update.
    Node(&'a str),
    /// An operator's state update, applied as the node's.
    StateUpdate(&'a str),
}

impl Writer<'_> {
    fn node(&self) -> &str {
        match self {
            Writer::Input => START,
            Writer::Node(node) | Writer::StateUpdate(node) => node,
        }
    }
}

/// A validated graph spec plus the indexes the executor plans with.
///
/// Immutable once built; share it between runs as `Arc<CompiledGraph>`.
#[derive(Debug)]
pub struct CompiledGraph {
    spec: GraphSpec,
    /// Channel name -> reducer.
    pub(super) reducers: HashMap<String, Reducer>,
    /// Channels that start with a value, and that value.
    pub(super) defaults: Map<String, Value>,
    pub(super) nodes: HashSet<String>,
    /// Entry points, deduplicated.
    pub(super) entry: BTreeSet<String>,
    /// Source node -> targets of its single-source static edges (no `__end__`).
    pub(super) edges_from: HashMap<String, Vec<String>>,
    /// Join edges (several sources), deduplicated by key.
    pub(super) joins: Vec<Join>,
    /// Source node -> indexes into `joins`.
    pub(super) joins_of: HashMap<String, Vec<usize>>,
    /// Source node (or `__start__`) -> indexes into the spec's conditional
    /// edges that have a router to call (not `__goto__` declarations), in
    /// spec order.
    conditionals_of: HashMap<String, Vec<usize>>,
}

/// A join edge: its target runs once every source has run since it last did.
#[derive(Debug)]
pub(super) struct Join {
    /// Stable name of the barrier (`join:a+b:c`, as LangGraph names it).
    pub(super) key: String,
    pub(super) sources: BTreeSet<String>,
    pub(super) target: String,
}

impl CompiledGraph {
    /// Validates `spec` and builds the executor's indexes.
    pub fn new(spec: GraphSpec) -> Result<Self, SpecError> {
        spec.validate()?;
        let reducers = spec
            .channels
            .iter()
            .map(|c| (c.name.clone(), c.reducer))
            .collect();
        let defaults = spec
            .channels
            .iter()
            .filter_map(|c| Some((c.name.clone(), c.default.clone()?)))
            .collect();
        let nodes = spec.nodes.iter().map(|n| n.name.clone()).collect();
        let entry = spec.entry_points.iter().cloned().collect();

        let mut edges_from: HashMap<String, Vec<String>> = HashMap::new();
        let mut joins: Vec<Join> = Vec::new();
        let mut joins_of: HashMap<String, Vec<usize>> = HashMap::new();
        for edge in &spec.edges {
            if edge.target == END {
                continue;
            }
            if let [source] = edge.sources.as_slice() {
                let targets = edges_from.entry(source.clone()).or_default();
                if !targets.contains(&edge.target) {
                    targets.push(edge.target.clone());
                }
                continue;
            }
            let key = format!("join:{}:{}", edge.sources.join("+"), edge.target);
            if joins.iter().any(|j| j.key == key) {
                continue;
            }
            for source in &edge.sources {
                joins_of
                    .entry(source.clone())
                    .or_default()
                    .push(joins.len());
            }
            joins.push(Join {
                key,
                sources: edge.sources.iter().cloned().collect(),
                target: edge.target.clone(),
            });
        }
        let mut conditionals_of: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, cond) in spec.conditional_edges.iter().enumerate() {
            // A `__goto__` edge only declares where the source's `Command`
            // may go (validation and reachability): there is no router to
            // call.
            if cond.is_goto() {
                continue;
            }
            conditionals_of
                .entry(cond.source.clone())
                .or_default()
                .push(i);
        }
        Ok(CompiledGraph {
            spec,
            reducers,
            defaults,
            nodes,
            entry,
            edges_from,
            joins,
            joins_of,
            conditionals_of,
        })
    }

    /// The spec this graph was compiled from.
    pub fn spec(&self) -> &GraphSpec {
        &self.spec
    }

    /// `state` with its keys in channel declaration order, so results read
    /// the way the graph declares its state.
    pub(super) fn in_channel_order(&self, mut state: Map<String, Value>) -> Map<String, Value> {
        let mut ordered = Map::with_capacity(state.len());
        for c in &self.spec.channels {
            if let Some(v) = state.remove(&c.name) {
                ordered.insert(c.name.clone(), v);
            }
        }
        ordered.extend(state);
        ordered
    }

    pub(super) fn conditionals(&self, source: &str) -> impl Iterator<Item = &ConditionalEdge> {
        self.conditionals_of
            .get(source)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.spec.conditional_edges.get(i))
    }

    pub(super) fn has_conditionals(&self, source: &str) -> bool {
        self.conditionals_of.contains_key(source)
    }

    /// Keeps the writes to known channels. A strict graph refuses writes
    /// to unknown ones, naming them (with a did-you-mean); any other graph
    /// drops them with a warning, as LangGraph does.
    pub(super) fn filter_writes(
        &self,
        writer: Writer<'_>,
        update: Map<String, Value>,
    ) -> Result<Map<String, Value>, RunError> {
        let (known, unknown): (Map<String, Value>, Map<String, Value>) = update
            .into_iter()
            .partition(|(channel, _)| self.reducers.contains_key(channel));
        if unknown.is_empty() {
            return Ok(known);
        }
        if self.spec.strict {
            return Err(self.unknown_keys_error(writer, unknown.keys()));
        }
        for channel in unknown.keys() {
            let hint = self.spec.channel_hint(channel);
            let channel = guest_name(channel);
            let node = writer.node();
            tracing::warn!(node, %channel, hint, "write to an unknown channel dropped");
        }
        Ok(known)
    }

    /// The error of a strict graph for keys that name no channel.
    fn unknown_keys_error<'k>(
        &self,
        writer: Writer<'_>,
        keys: impl ExactSizeIterator<Item = &'k String>,
    ) -> RunError {
        let count = keys.len();
        let mut listed: Vec<String> = keys
            .take(MAX_UNKNOWN_KEYS_LISTED)
            .map(|key| {
                // Declaration order, so a tie always suggests the same name.
                let channels = self.spec.channels.iter().map(|c| c.name.as_str());
                format!(
                    "{}{}",
                    guest_name(key),
                    crate::suggest::aside(key, channels)
                )
            })
            .collect();
        if count > listed.len() {
            listed.push(format!("and {} more", count - listed.len()));
        }
        let (keys, are_not) = if count == 1 {
            ("key", "is not a channel")
        } else {
            ("keys", "are not channels")
        };
        let listed = listed.join(", ");
        let graph = &self.spec.name;
        let channels = self.channel_list();
        match writer {
            Writer::Input => RunError::new(
                ErrorCode::InvalidInput,
                format!(
                    "the input of strict graph {graph:?} has {keys} {listed}, which {are_not}: \
                     pass only the graph's channels ({channels})"
                ),
            ),
            Writer::Node(node) => invalid_update(format!(
                "node {node:?} of strict graph {graph:?} wrote {keys} {listed}, which {are_not}: \
                 write only declared channels ({channels}) or declare the channel"
            )),
            Writer::StateUpdate(node) => RunError::new(
                ErrorCode::InvalidInput,
                format!(
                    "the state update (as node {node:?}) of strict graph {graph:?} has {keys} \
                     {listed}, which {are_not}: update only the graph's channels ({channels})"
                ),
            ),
        }
    }

    /// The channel names for a message, in declaration order, at most
    /// [`MAX_CHANNELS_LISTED`] of them.
    fn channel_list(&self) -> String {
        let channels = &self.spec.channels;
        let mut names: Vec<&str> = channels
            .iter()
            .take(MAX_CHANNELS_LISTED)
            .map(|c| c.name.as_str())
            .collect();
        let more = channels.len().saturating_sub(MAX_CHANNELS_LISTED);
        let more = (more > 0).then(|| format!("and {more} more"));
        names.extend(more.as_deref());
        if names.is_empty() {
            "it has none".to_owned()
        } else {
            names.join(", ")
        }
    }

    pub(super) fn check_send(&self, source: &str, send: &SendPacket) -> Result<(), RunError> {
        if send.node == END {
            return Err(invalid_update(format!(
                "node {source:?} sent a task to __end__: a send must target a node"
            )));
        }
        if !self.nodes.contains(&send.node) {
            return Err(invalid_update(format!(
                "node {source:?} sent a task to unknown node {}",
                guest_name(&send.node)
            )));
        }
        Ok(())
    }

    /// Resolves a goto target: `Some(node)`, or `None` for `__end__`.
    pub(super) fn resolve_goto<'t>(
        &self,
        source: &str,
        target: &'t str,
    ) -> Result<Option<&'t str>, RunError> {
        if target == END {
            Ok(None)
        } else if self.nodes.contains(target) {
            Ok(Some(target))
        } else {
            Err(invalid_update(format!(
                "node {source:?} returned goto {}, which is not a node",
                guest_name(target)
            )))
        }
    }

    /// Turns a router's answers into triggered nodes and sends.
    pub(super) fn resolve_routes(
        &self,
        source: &str,
        cond: &ConditionalEdge,
        answers: Vec<RouteTarget>,
        next: &mut Vec<String>,
        sends: &mut Vec<SendPacket>,
    ) -> Result<(), RunError> {
        let router = &cond.router;
        for answer in answers {
            let name = match answer {
                RouteTarget::Send(send) => {
                    self.check_send(source, &send)?;
                    sends.push(send);
                    continue;
                }
                RouteTarget::Node(name) => name,
            };
            let target = if cond.path_map.is_empty() {
                if name != END && !self.nodes.contains(&name) {
                    return Err(invalid_update(format!(
                        "router {router:?} of node {source:?} returned {}, which is neither a node nor __end__",
                        guest_name(&name)
                    )));
                }
                name
            } else {
                match cond.path_map.iter().find(|e| e.key == name) {
                    Some(entry) => entry.target.clone(),
                    None => {
                        let allowed: Vec<String> = cond
                            .path_map
                            .iter()
                            .map(|e| format!("{:?}", e.key))
                            .collect();
                        return Err(invalid_update(format!(
                            "router {router:?} of node {source:?} returned {}, which is not a key of its path map (allowed: {})",
                            guest_name(&name),
                            allowed.join(", ")
                        )));
                    }
                }
            };
            if target != END {
                next.push(target);
            }
        }
        Ok(())
    }
}
