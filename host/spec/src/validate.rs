//! Spec validation: everything the executor relies on, checked in a fixed
//! order, each problem naming the graph, node, edge or channel at fault.
//!
//! One set of rules serves two readers ([`Audience`]): the host stops at
//! the first problem of a component's spec ([`GraphSpec::validate`]); the
//! Rust SDK's `Graph::check` lists every problem of a builder
//! ([`GraphSpec::problems`]).

use std::collections::HashSet;

use crate::suggest;
use crate::{
    ConditionalEdge, END, Edge, GraphSpec, MAX_CHANNELS, MAX_DESCRIPTION_LEN, MAX_EDGES,
    MAX_IDENT_LEN, MAX_NAME_LEN, MAX_NODES, RESERVED_GRAPH_NAME, Reducer, START,
    STRICT_MARKER_CHANNEL, SpecError, json, text,
};

/// Whom the problems of a spec are worded for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The host loading a component's spec: a name that is a near miss gets
    /// a did-you-mean, and advice is in terms of the spec.
    Host,
    /// A graph's author checking a builder in a native test (the Rust SDK's
    /// `Graph::check`): no did-you-mean, advice in terms of the builder
    /// (`.edge(START, node)`), and also [`RESERVED_GRAPH_NAME`], which the
    /// registry refuses to mount.
    Builder,
}

impl GraphSpec {
    /// Checks everything the executor relies on, in a fixed order, and
    /// reports the first problem, naming the graph, node, edge or channel at
    /// fault.
    pub fn validate(&self) -> Result<(), SpecError> {
        let mut check = Check::new(self, Audience::Host, true);
        check
            .all()
            .map_err(|Stop| SpecError(check.problems.pop().unwrap_or_default()))
    }

    /// Every problem of the spec, worded for `audience`, in the order
    /// [`GraphSpec::validate`] meets them; empty for a valid spec. With
    /// [`Audience::Host`] the first is the one `validate` reports.
    pub fn problems(&self, audience: Audience) -> Vec<String> {
        let mut check = Check::new(self, audience, false);
        let _ = check.all();
        check.problems
    }
}

/// A check that stopped at its first problem.
struct Stop;

/// Whether a check goes on.
type Flow = Result<(), Stop>;

/// One run of the rules over a spec.
struct Check<'s> {
    spec: &'s GraphSpec,
    audience: Audience,
    first_only: bool,
    problems: Vec<String>,
}

impl<'s> Check<'s> {
    fn new(spec: &'s GraphSpec, audience: Audience, first_only: bool) -> Self {
        Check {
            spec,
            audience,
            first_only,
            problems: Vec::new(),
        }
    }

    fn all(&mut self) -> Flow {
        self.header()?;
        self.channels()?;
        let nodes = self.nodes()?;
        self.entry_and_finish(&nodes)?;
        self.edges(&nodes)?;
        self.conditional_edges(&nodes)?;
        self.reachability()
    }

    /// Records `problem`; stops the check when only the first counts.
    fn report(&mut self, problem: String) -> Flow {
        self.problems.push(problem);
        if self.first_only { Err(Stop) } else { Ok(()) }
    }

    fn report_if(&mut self, problem: Option<String>) -> Flow {
        match problem {
            Some(problem) => self.report(problem),
            None => Ok(()),
        }
    }

    fn header(&mut self) -> Flow {
        let spec = self.spec;
        let problem = self.name_problem();
        self.report_if(problem)?;
        self.report_if(description_problem("graph", spec.description.as_deref()))?;
        if let Some(parameters) = &spec.parameters
            && !parameters.is_object()
        {
            self.report(format!(
                "parameters must be a json object, not {}",
                json::kind(parameters)
            ))?;
        }
        if spec.timeout_ms == Some(0) {
            self.report("timeout_ms must be positive".to_owned())?;
        }
        Ok(())
    }

    fn name_problem(&self) -> Option<String> {
        let name = &self.spec.name;
        if name.is_empty() {
            Some("graph name is empty".to_owned())
        } else if name.chars().count() > MAX_NAME_LEN {
            Some(format!(
                "graph name {name:?} is longer than {MAX_NAME_LEN} characters"
            ))
        } else if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            Some(format!(
                "graph name {name:?} may only contain ascii letters, digits, \"_\" and \"-\""
            ))
        } else if self.audience == Audience::Builder && name == RESERVED_GRAPH_NAME {
            Some(format!("graph name {name:?} is reserved"))
        } else {
            None
        }
    }

    fn channels(&mut self) -> Flow {
        let channels = &self.spec.channels;
        if channels.len() > MAX_CHANNELS {
            self.report(format!(
                "{} channels, more than the limit of {MAX_CHANNELS}",
                channels.len()
            ))?;
        }
        let mut seen = HashSet::new();
        for channel in channels {
            let name = &channel.name;
            self.report_if(ident_problem("channel", name))?;
            if name == STRICT_MARKER_CHANNEL {
                self.report(format!(
                    "channel name {name:?} is reserved (it marks a strict graph)"
                ))?;
            }
            if !seen.insert(name.as_str()) {
                self.report(format!("channel {name:?} is declared twice"))?;
            }
            let Some(default) = &channel.default else {
                continue;
            };
            let wanted = match channel.reducer {
                Reducer::Append if !default.is_array() => "an array",
                Reducer::Merge if !default.is_object() => "an object",
                Reducer::Add if !default.is_number() => "a number",
                _ => {
                    if let Err(e) = json::check_lossless(default) {
                        self.report(format!(
                            "channel {name:?}: default is not lossless json: {e}"
                        ))?;
                    }
                    continue;
                }
            };
            self.report(format!(
                "channel {name:?}: default is {}, but its reducer needs {wanted}",
                json::kind(default)
            ))?;
        }
        Ok(())
    }

    /// Checks the nodes; returns the names of those not reserved.
    fn nodes(&mut self) -> Result<HashSet<&'s str>, Stop> {
        let nodes = &self.spec.nodes;
        if nodes.is_empty() {
            self.report("the graph has no nodes".to_owned())?;
        }
        if nodes.len() > MAX_NODES {
            self.report(format!(
                "{} nodes, more than the limit of {MAX_NODES}",
                nodes.len()
            ))?;
        }
        let mut names = HashSet::new();
        for node in nodes {
            let name = &node.name;
            self.report_if(ident_problem("node", name))?;
            if name == START || name == END {
                self.report(format!("node name {name:?} is reserved"))?;
                continue;
            }
            if !names.insert(name.as_str()) {
                self.report(format!("node {name:?} is declared twice"))?;
            }
            let what = format!("node {name:?}");
            self.report_if(description_problem(&what, node.description.as_deref()))?;
        }
        Ok(names)
    }

    fn entry_and_finish(&mut self, nodes: &HashSet<&str>) -> Flow {
        let spec = self.spec;
        let routes_from_start = spec
            .conditional_edges
            .iter()
            .any(|c| c.source == START && !c.is_goto());
        if spec.entry_points.is_empty() && !routes_from_start {
            let advice = match self.audience {
                Audience::Host => "",
                Audience::Builder => " (add .edge(START, node))",
            };
            self.report(format!(
                "the graph has no entry point and no conditional edge from __start__{advice}"
            ))?;
        }
        for (what, names) in [
            ("entry point", &spec.entry_points),
            ("finish point", &spec.finish_points),
        ] {
            for name in names {
                if !nodes.contains(name.as_str()) {
                    let hint = self.node_hint(name);
                    self.report(format!("{what} {name:?} is not a node{hint}"))?;
                }
            }
        }
        Ok(())
    }

    fn edges(&mut self, nodes: &HashSet<&str>) -> Flow {
        let spec = self.spec;
        let count = spec.edges.len() + spec.conditional_edges.len();
        if count > MAX_EDGES {
            self.report(format!("{count} edges, more than the limit of {MAX_EDGES}"))?;
        }
        for edge in &spec.edges {
            let label = edge_label(edge);
            if edge.sources.is_empty() {
                self.report(format!("{label}: no source node"))?;
            }
            let mut seen = HashSet::new();
            for source in &edge.sources {
                if source == START {
                    self.report(format!(
                        "{label}: __start__ cannot be an edge source; use an entry point"
                    ))?;
                } else if source == END {
                    self.report(format!("{label}: __end__ cannot be an edge source"))?;
                } else if !nodes.contains(source.as_str()) {
                    let hint = self.node_hint(source);
                    self.report(format!("{label}: unknown source node {source:?}{hint}"))?;
                }
                if !seen.insert(source.as_str()) {
                    self.report(format!("{label}: source {source:?} is listed twice"))?;
                }
            }
            let target = &edge.target;
            if target != END && !nodes.contains(target.as_str()) {
                let hint = self.target_hint(target);
                self.report(format!("{label}: unknown target node {target:?}{hint}"))?;
            }
        }
        Ok(())
    }

    fn conditional_edges(&mut self, nodes: &HashSet<&str>) -> Flow {
        let mut routers = HashSet::new();
        for cond in &self.spec.conditional_edges {
            let (source, router) = (&cond.source, &cond.router);
            let label = format!("conditional edge from {source:?}");
            // `route` dispatches on the router name alone; goto
            // declarations are never routed, one per source is fine.
            if !router.is_empty() && !cond.is_goto() && !routers.insert(router.as_str()) {
                self.report(match self.audience {
                    Audience::Host => format!(
                        "{label}: router name {router:?} is used by another conditional edge"
                    ),
                    Audience::Builder => format!("router {router:?} is used twice"),
                })?;
            }
            if source == START && cond.is_goto() {
                self.report(format!(
                    "{label}: only a node's command can goto, so __start__ cannot declare goto targets"
                ))?;
            } else if source != START && !nodes.contains(source.as_str()) {
                let hint = self.node_hint(source);
                self.report(format!("{label}: unknown source node {source:?}{hint}"))?;
            }
            if router.is_empty() {
                self.report(format!("{label}: router name is empty"))?;
            } else {
                self.report_if(ident_problem(&label, router))?;
            }
            let label = format!("{label} (router {router:?})");
            if cond.path_map.len() > MAX_EDGES {
                self.report(format!(
                    "{label}: {} path-map entries, more than the limit of {MAX_EDGES}",
                    cond.path_map.len()
                ))?;
            }
            if cond.is_goto() {
                self.goto_declaration(cond, &label)?;
            }
            let mut keys = HashSet::new();
            for entry in &cond.path_map {
                let (key, target) = (&entry.key, &entry.target);
                if key.len() > MAX_IDENT_LEN {
                    self.report(format!(
                        "{label}: path-map key is longer than {MAX_IDENT_LEN} bytes"
                    ))?;
                }
                if !keys.insert(key.as_str()) {
                    self.report(format!("{label}: path-map key {key:?} is listed twice"))?;
                }
                if target != END && !nodes.contains(target.as_str()) {
                    let hint = self.target_hint(target);
                    self.report(format!(
                        "{label}: path-map key {key:?} leads to unknown node {target:?}{hint}"
                    ))?;
                }
            }
        }
        Ok(())
    }

    /// The rules a [`GOTO_ROUTER`](crate::GOTO_ROUTER) edge adds (the path map's targets are
    /// checked like any other's): at least one target, each its own key.
    fn goto_declaration(&mut self, cond: &ConditionalEdge, label: &str) -> Flow {
        if cond.path_map.is_empty() {
            self.report(format!(
                "{label}: declares no goto targets (a __goto__ edge needs a path map)"
            ))?;
        }
        for entry in &cond.path_map {
            let (key, target) = (&entry.key, &entry.target);
            if key != target {
                self.report(format!(
                    "{label}: path-map key {key:?} leads to {target:?}, but a __goto__ edge \
                     maps each goto target to itself"
                ))?;
            }
        }
        Ok(())
    }

    /// Every node must be reachable from `__start__`. A join edge reaches
    /// its target only once all of its sources are reachable; a conditional
    /// edge without a path map may reach any node; a node's declared goto
    /// targets (a [`GOTO_ROUTER`](crate::GOTO_ROUTER) edge) count like a path map. (`goto` and
    /// `send` in a node's `Command` that are not declared do not count.)
    fn reachability(&mut self) -> Flow {
        let reached = self.spec.reachable();
        let mut reported = HashSet::new();
        for node in &self.spec.nodes {
            let name = node.name.as_str();
            let reserved = name == START || name == END;
            if reserved || reached.contains(name) || !reported.insert(name) {
                continue;
            }
            self.report(match self.audience {
                Audience::Host => format!(
                    "node {name:?} is unreachable from __start__: add an edge to it, or a \
                     conditional edge whose path map lists it (nodes reached only by send need \
                     one too; a node's goto targets are declared by a __goto__ edge)"
                ),
                Audience::Builder => format!("node {name:?} is unreachable from __start__"),
            })?;
        }
        Ok(())
    }

    /// A did-you-mean for `name`, which is not a node (host only).
    fn node_hint(&self, name: &str) -> String {
        self.hint(name, &[])
    }

    /// A did-you-mean for `name`, which is neither a node nor `__end__`
    /// (host only).
    fn target_hint(&self, name: &str) -> String {
        self.hint(name, &[END])
    }

    fn hint(&self, name: &str, more: &[&str]) -> String {
        match self.audience {
            Audience::Host => {
                let names = self.spec.nodes.iter().map(|n| n.name.as_str());
                suggest::hint(name, names.chain(more.iter().copied()))
            }
            Audience::Builder => String::new(),
        }
    }
}

impl GraphSpec {
    /// The names reachable from `__start__` (itself included): through
    /// entry points, join edges whose sources are all reachable, and the
    /// path maps of conditional edges whose source is (every node, for one
    /// without a path map; a [`GOTO_ROUTER`](crate::GOTO_ROUTER) edge's path map lists the
    /// node's declared goto targets). `__end__` is in it when a reached static edge or
    /// path map leads there; finish points are not followed.
    pub fn reachable(&self) -> HashSet<&str> {
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
                return reached;
            }
        }
    }
}

/// Why `name` cannot name a node, channel or router (`what`), if it
/// cannot.
fn ident_problem(what: &str, name: &str) -> Option<String> {
    if name.is_empty() {
        return Some(format!("{what} name is empty"));
    }
    if name.len() > MAX_IDENT_LEN {
        return Some(format!(
            "{what} name {} is {} bytes long, more than {MAX_IDENT_LEN}",
            text::guest_name(name),
            name.len()
        ));
    }
    // Names are quoted into host messages, logs and diagrams: no terminal
    // escapes, line breaks or bidi overrides.
    if text::has_unsafe_chars(name) {
        return Some(format!(
            "{what} name {} holds a control or bidi character",
            text::guest_name(name)
        ));
    }
    None
}

fn description_problem(what: &str, description: Option<&str>) -> Option<String> {
    let len = description.map_or(0, |d| d.chars().count());
    (len > MAX_DESCRIPTION_LEN).then(|| {
        format!("{what} description is {len} characters long, more than {MAX_DESCRIPTION_LEN}")
    })
}

/// `edge "a" -> "b"` or `edge ["a", "b"] -> "c"`.
fn edge_label(edge: &Edge) -> String {
    match edge.sources.as_slice() {
        [single] => format!("edge {single:?} -> {:?}", edge.target),
        sources => {
            let list: Vec<String> = sources.iter().map(|s| format!("{s:?}")).collect();
            format!("edge [{}] -> {:?}", list.join(", "), edge.target)
        }
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
