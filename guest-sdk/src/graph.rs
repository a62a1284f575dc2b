//! The graph builder, its spec, and dispatch of the host's calls.

use std::fmt;
use std::rc::Rc;

use sandgraph_spec::{
    Audience, ChannelSpec, GOTO_ROUTER, GraphSpec, NodeSpec, PathEntry, Registration,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Context, ValidateContext};
use crate::decode::{TypeMismatch, from_json, type_mismatch};
pub(crate) use crate::node::Outcome;
use crate::node::{IntoNodeResult, encode};
use crate::route::{IntoPathMap, IntoRoutes, Route};
use crate::{END, START};

/// A static edge or join, as the spec has it.
pub(crate) use sandgraph_spec::Edge;
/// The reducer as the spec names it.
pub(crate) use sandgraph_spec::Reducer as ReducerKind;

/// How writes to a channel combine, within a superstep and across them.
///
/// The built-in reducers run in the host. `Append`, `Merge` and `Add`
/// channels start at `[]`, `{}` and `0`; a `LastValue` or custom channel is
/// absent until written (use
/// [`Graph::channel_with_default`] to change either).
#[derive(Clone, Debug)]
pub enum Reducer {
    /// Keeps the one value written; two writes in one superstep are an error.
    LastValue,
    /// Appends: a list update is concatenated, any other value is pushed.
    Append,
    /// Shallow-merges an object update into the current object.
    Merge,
    /// Adds a number update to the current number.
    Add,
    /// Your own function; see [`Reducer::custom`].
    Custom(CustomReducer),
}

impl Reducer {
    /// A reducer that calls `f(current, update)` (in the guest) for every
    /// write; `current` is `null` while the channel has no value. An `Err`
    /// fails the run with its message.
    ///
    /// ```
    /// use sandgraph_sdk::{Graph, Reducer};
    /// use serde_json::Value;
    ///
    /// let max = Reducer::custom(|current: Value, update: Value| {
    ///     let update = update.as_i64().ok_or("max: the update must be an integer")?;
    ///     Ok::<_, String>(Value::from(current.as_i64().map_or(update, |c| c.max(update))))
    /// });
    /// let graph = Graph::new("g").channel("best", max);
    /// ```
    pub fn custom<F, E>(f: F) -> Self
    where
        F: Fn(Value, Value) -> Result<Value, E> + 'static,
        E: fmt::Display,
    {
        Reducer::Custom(CustomReducer(Rc::new(move |current, update| {
            f(current, update).map_err(|err| err.to_string())
        })))
    }

    fn kind(&self) -> ReducerKind {
        match self {
            Reducer::LastValue => ReducerKind::LastValue,
            Reducer::Append => ReducerKind::Append,
            Reducer::Merge => ReducerKind::Merge,
            Reducer::Add => ReducerKind::Add,
            Reducer::Custom(_) => ReducerKind::Custom,
        }
    }

    /// The automatic initial value, as JSON text.
    fn default_json(&self) -> Option<&'static str> {
        match self {
            Reducer::Append => Some("[]"),
            Reducer::Merge => Some("{}"),
            Reducer::Add => Some("0"),
            Reducer::LastValue | Reducer::Custom(_) => None,
        }
    }
}

type ReduceFn = dyn Fn(Value, Value) -> Result<Value, String>;

/// The function behind [`Reducer::Custom`]; made with [`Reducer::custom`].
#[derive(Clone)]
pub struct CustomReducer(Rc<ReduceFn>);

impl fmt::Debug for CustomReducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CustomReducer(..)")
    }
}

/// A channel of reducer `kind`, for messages.
fn describe(kind: ReducerKind) -> &'static str {
    match kind {
        ReducerKind::LastValue => "a last-value channel",
        ReducerKind::Append => "an append (list) channel",
        ReducerKind::Merge => "a merge (object) channel",
        ReducerKind::Add => "an add (number) channel",
        ReducerKind::Custom => "a custom-reducer channel",
    }
}

/// A failed host call, mapped one-to-one onto the WIT `graph-error`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallError {
    InvalidState(String),
    Unknown(String),
    Failed(String),
}

type NodeFn = dyn Fn(&str, &Context) -> Result<Outcome, CallError>;
type RouterFn = dyn Fn(&str) -> Result<Vec<Route>, CallError>;
/// Decodes a state (JSON text) into a node's or router's state type and
/// reports a field whose type does not fit, without running the body.
type ProbeFn = dyn Fn(&str) -> Option<TypeMismatch>;
type ValidateFn = dyn Fn(&str, &ValidateContext) -> Result<(), String>;

pub(crate) struct Channel {
    pub(crate) name: String,
    pub(crate) reducer: ReducerKind,
    /// JSON text.
    pub(crate) default: Option<String>,
    custom: Option<CustomReducer>,
}

pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    run: Box<NodeFn>,
    probe: Box<ProbeFn>,
}

pub(crate) struct ConditionalEdge {
    pub(crate) source: String,
    pub(crate) router: String,
    pub(crate) path_map: Vec<(String, String)>,
    route: Box<RouterFn>,
    probe: Box<ProbeFn>,
    /// Made by [`Graph::destinations`]: a `__goto__` edge with no router.
    is_declaration: bool,
}

/// A state graph: channels (the state's keys and their reducers), nodes,
/// and the edges between them. Build one with the chained methods, then
/// hand the function that builds it to [`export_graph!`](crate::export_graph).
///
/// Mistakes the builder can see (a node defined twice, an edge to a node
/// that does not exist, ...) do not panic: the spec the host receives is
/// exactly what was written, the host refuses it with a message naming the
/// culprit, and [`Graph::check`] reports the same problems in a native test.
#[must_use = "the builder methods return the updated graph"]
pub struct Graph {
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub(crate) as_tool: bool,
    pub(crate) as_graph_tool: bool,
    /// JSON text.
    pub(crate) parameters: Option<String>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) channels: Vec<Channel>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) conditional_edges: Vec<ConditionalEdge>,
    pub(crate) entry_points: Vec<String>,
    pub(crate) finish_points: Vec<String>,
    pub(crate) strict: bool,
    validator: Option<Box<ValidateFn>>,
    /// Mistakes seen while building that the spec itself cannot show.
    build_problems: Vec<String>,
}

impl Graph {
    /// An empty graph named `name` (the tool name and registry key).
    ///
    /// It is listed for discovery (`as_graph_tool`) but not exposed as a
    /// model-visible tool (`as_tool`) until you say so.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
            as_tool: false,
            as_graph_tool: true,
            parameters: None,
            timeout_ms: None,
            channels: Vec::new(),
            nodes: Vec::new(),
            edges: Vec::new(),
            conditional_edges: Vec::new(),
            entry_points: Vec::new(),
            finish_points: Vec::new(),
            strict: false,
            validator: None,
            build_problems: Vec::new(),
        }
    }

    /// Renames the graph (the tool name and registry key), as for a graph
    /// made by [`create_react_agent`](crate::prebuilt::create_react_agent).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The tool description shown to models.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Also expose the graph as a model-visible tool (default: false).
    pub fn as_tool(mut self, yes: bool) -> Self {
        self.as_tool = yes;
        self
    }

    /// List the graph for discovery and routing (default: true).
    pub fn as_graph_tool(mut self, yes: bool) -> Self {
        self.as_graph_tool = yes;
        self
    }

    /// The tool's parameters in the value-schema DSL, a JSON object from
    /// parameter name to its schema:
    ///
    /// ```
    /// # use sandgraph_sdk::Graph;
    /// Graph::new("greet").parameters(serde_json::json!({
    ///     "name": {"type": "string", "required": true, "description": "Who to greet."},
    ///     "times": {"type": "integer", "default": 1},
    /// }));
    /// ```
    ///
    /// `serde_json` sorts object keys; use [`Graph::parameters_json`] to keep
    /// your order.
    pub fn parameters(mut self, parameters: Value) -> Self {
        self.parameters = Some(parameters.to_string());
        self
    }

    /// Like [`Graph::parameters`], from JSON text passed through verbatim.
    pub fn parameters_json(mut self, parameters: impl Into<String>) -> Self {
        self.parameters = Some(parameters.into());
        self
    }

    /// Makes the graph strict: the host refuses a run whose input has a key
    /// that is not a channel (`invalid_input`), and a node's update that
    /// writes a channel the graph does not declare (`invalid_update`),
    /// naming the key and the channel it probably meant. Without it, such
    /// keys are dropped with a warning in the host's log.
    ///
    /// ```
    /// # use sandgraph_sdk::{Graph, Reducer};
    /// let graph = Graph::new("triage").strict().channel("ticket", Reducer::LastValue);
    /// ```
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    /// The graph's own time budget (the operator's cap still applies).
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// Declares the state key `name`, combined with `reducer`, starting at
    /// the reducer's default (see [`Reducer`]).
    pub fn channel(self, name: impl Into<String>, reducer: Reducer) -> Self {
        let default = reducer.default_json().map(str::to_owned);
        self.push_channel(name.into(), reducer, default)
    }

    /// Declares the state key `name` with an explicit initial value.
    pub fn channel_with_default(
        mut self,
        name: impl Into<String>,
        reducer: Reducer,
        default: impl Serialize,
    ) -> Self {
        let name = name.into();
        let default = match serde_json::to_string(&default) {
            Ok(text) => Some(text),
            Err(err) => {
                self.build_problems
                    .push(format!("channel \"{name}\": default: {err}"));
                None
            }
        };
        self.push_channel(name, reducer, default)
    }

    /// Declares the state key `name` with a custom reducer; shorthand for
    /// `.channel(name, Reducer::custom(f))`.
    pub fn custom_channel<F, E>(self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(Value, Value) -> Result<Value, E> + 'static,
        E: fmt::Display,
    {
        self.channel(name, Reducer::custom(f))
    }

    fn push_channel(mut self, name: String, reducer: Reducer, default: Option<String>) -> Self {
        let kind = reducer.kind();
        let custom = match reducer {
            Reducer::Custom(f) => Some(f),
            _ => None,
        };
        self.channels.push(Channel {
            name,
            reducer: kind,
            default,
            custom,
        });
        self
    }

    /// Adds the node `name`, whose body `f` gets the state (or a
    /// [`Send`](crate::Send) payload) decoded into `S` and returns an
    /// [`IntoNodeResult`]: an [`Update`](crate::Update), a
    /// [`Command`](crate::Command), or a `Result` of either.
    ///
    /// `S` is any [`DeserializeOwned`] type: your state struct (keys it does
    /// not name are ignored), `serde_json::Value`, or
    /// `serde::de::IgnoredAny` for a body that ignores its input. If the
    /// host's state does not decode, the node fails with `invalid-state`
    /// naming the field.
    pub fn node<S, R, F>(self, name: impl Into<String>, f: F) -> Self
    where
        S: DeserializeOwned,
        R: IntoNodeResult,
        F: Fn(S) -> R + 'static,
    {
        self.node_with_context(name, move |state: S, _: &Context| f(state))
    }

    /// Like [`Graph::node`], for a body that also needs its [`Context`]:
    /// call facts, cancellation, and [`Context::interrupt`].
    pub fn node_with_context<S, R, F>(mut self, name: impl Into<String>, f: F) -> Self
    where
        S: DeserializeOwned,
        R: IntoNodeResult,
        F: Fn(S, &Context) -> R + 'static,
    {
        let run = move |state: &str, ctx: &Context| {
            let state: S = from_json(state).map_err(CallError::InvalidState)?;
            encode(f(state, ctx).into_node_result()).map_err(CallError::Failed)
        };
        self.nodes.push(Node {
            name: name.into(),
            description: None,
            run: Box::new(run),
            probe: Box::new(|state: &str| type_mismatch::<S>(state)),
        });
        self
    }

    /// Sets the description of the node `name` (defined earlier), shown in
    /// tool descriptions and diagrams.
    pub fn describe_node(mut self, name: &str, description: impl Into<String>) -> Self {
        match self.nodes.iter_mut().find(|node| node.name == name) {
            Some(node) => node.description = Some(description.into()),
            None => self.build_problems.push(format!(
                "describe_node(\"{name}\"): unknown node \"{name}\" (define it first)"
            )),
        }
        self
    }

    /// A static edge: `target` runs in the superstep after `source` ran.
    ///
    /// `.edge(START, node)` makes `node` an entry point and
    /// `.edge(node, END)` a finish point.
    pub fn edge(mut self, source: impl Into<String>, target: impl Into<String>) -> Self {
        let (source, target) = (source.into(), target.into());
        if source == START {
            push_unique(&mut self.entry_points, target);
        } else if target == END {
            push_unique(&mut self.finish_points, source);
        } else {
            let edge = Edge {
                sources: vec![source],
                target,
            };
            push_unique(&mut self.edges, edge);
        }
        self
    }

    /// A join barrier: `target` runs once every node of `sources` has run.
    ///
    /// ```
    /// # use sandgraph_sdk::Graph;
    /// # let graph = Graph::new("g");
    /// graph.join(["fetch_a", "fetch_b"], "merge");
    /// ```
    pub fn join<I>(mut self, sources: I, target: impl Into<String>) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let sources: Vec<String> = sources.into_iter().map(Into::into).collect();
        let target = target.into();
        if target == END {
            // The run ends when nothing is left to run, so a barrier before
            // END is the same as every source being a finish point.
            for source in sources {
                push_unique(&mut self.finish_points, source);
            }
        } else if let [source] = sources.as_slice() {
            let source = source.clone();
            self = self.edge(source, target);
        } else {
            push_unique(&mut self.edges, Edge { sources, target });
        }
        self
    }

    /// A conditional edge: after `source` runs (or, for [`START`], before
    /// anything runs), the router `f` reads the state and picks where to go.
    ///
    /// `router` names the router (unique in the graph). `f` gets the state
    /// decoded into `S` and returns an [`IntoRoutes`]: a node name or
    /// path-map key, [`END`], a [`Send`](crate::Send), a list of those, ...
    /// `path_map` maps the router's answers to nodes
    /// (`[("continue", "count"), ("done", END)]`); pass `None` (or `[]`) to
    /// have the router answer with node names.
    pub fn conditional_edges<S, R, F, M>(
        mut self,
        source: impl Into<String>,
        router: impl Into<String>,
        f: F,
        path_map: M,
    ) -> Self
    where
        S: DeserializeOwned,
        R: IntoRoutes,
        F: Fn(S) -> R + 'static,
        M: IntoPathMap,
    {
        let router = router.into();
        if router == GOTO_ROUTER {
            self.build_problems.push(format!(
                "router name \"{GOTO_ROUTER}\" is reserved: declare a node's goto targets \
                 with .destinations(node, [targets])"
            ));
        }
        let route = move |state: &str| {
            let state: S = from_json(state).map_err(CallError::InvalidState)?;
            f(state).into_routes().map_err(CallError::Failed)
        };
        self.conditional_edges.push(ConditionalEdge {
            source: source.into(),
            router,
            path_map: path_map.into_path_map(),
            route: Box::new(route),
            probe: Box::new(|state: &str| type_mismatch::<S>(state)),
            is_declaration: false,
        });
        self
    }

    /// Declares where `node`'s [`Command`](crate::Command) may `goto`
    /// (LangGraph's `destinations=`): the targets count as reachable, so a
    /// node reached only by a `goto` needs no static edge, and diagrams
    /// draw them as dashed edges. Nothing is routed: the command's `goto`
    /// still picks. Targets are nodes or [`END`]; calling it again for the
    /// same node adds targets.
    ///
    /// ```
    /// use sandgraph_sdk::{Command, Graph, Update, END, START};
    ///
    /// let graph = Graph::new("triage")
    ///     .node("triage", |_: serde_json::Value| Command::new().goto("escalate"))
    ///     .node("escalate", |_: serde_json::Value| Update::new())
    ///     .edge(START, "triage")
    ///     .destinations("triage", ["escalate", END]);
    /// assert_eq!(graph.check(), Ok(()));
    /// ```
    ///
    /// It is sent to the host as a conditional edge whose router is the
    /// reserved name `__goto__` (which no router may take) and whose path
    /// map lists each target as key = target.
    pub fn destinations<I>(mut self, node: impl Into<String>, targets: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let node = node.into();
        let index = match self
            .conditional_edges
            .iter()
            .position(|c| c.source == node && c.router == GOTO_ROUTER && c.is_declaration)
        {
            Some(index) => index,
            None => {
                self.conditional_edges.push(ConditionalEdge {
                    source: node,
                    router: GOTO_ROUTER.to_owned(),
                    path_map: Vec::new(),
                    route: Box::new(|_: &str| {
                        Err(CallError::Unknown(format!(
                            "\"{GOTO_ROUTER}\" declares goto targets and is never routed"
                        )))
                    }),
                    probe: Box::new(|_: &str| None),
                    is_declaration: true,
                });
                self.conditional_edges.len() - 1
            }
        };
        let path_map = &mut self.conditional_edges[index].path_map;
        for target in targets {
            let target = target.into();
            push_unique(path_map, (target.clone(), target));
        }
        self
    }

    /// Checks a tool call's input before the run starts. `f` gets the input
    /// decoded into `I` (use `serde_json::Value` for the raw object) and
    /// returns `Err(reason)` to refuse the call; the reason is shown to the
    /// caller. Input that does not decode into `I` is refused too.
    pub fn validate<I, E, F>(mut self, f: F) -> Self
    where
        I: DeserializeOwned,
        E: fmt::Display,
        F: Fn(I, &ValidateContext) -> Result<(), E> + 'static,
    {
        self.validator = Some(Box::new(move |input: &str, ctx: &ValidateContext| {
            let input: I = from_json(input).map_err(|err| format!("invalid input: {err}"))?;
            f(input, ctx).map_err(|err| err.to_string())
        }));
        self
    }

    /// Checks the graph the way the host will when it loads it; `Err` lists
    /// every problem, one per line. Call it from a native test in the
    /// graph's crate (`graph().check().unwrap()`).
    ///
    /// It also decodes, for each node and router, the state the channels
    /// start with (every channel that has a default: `[]` for `Append`,
    /// `{}` for `Merge`, `0` for `Add`, or the one you gave) into the
    /// body's state type, and reports a field whose type does not fit, such
    /// as `tags: String` for an `Append` channel. Fields the state does not
    /// hold yet (channels without a default, filled from the input) are
    /// not checked, and a body whose input does not decode from a state
    /// object at all (a [`Send`](crate::Send) payload such as `i64`) is
    /// skipped.
    ///
    /// ```
    /// use sandgraph_sdk::{Graph, Update, END, START};
    ///
    /// let graph = Graph::new("g")
    ///     .node("a", |_: serde_json::Value| Update::new())
    ///     .edge(START, "a")
    ///     .edge("a", "b");
    /// assert_eq!(graph.check(), Err(r#"edge "a" -> "b": unknown target node "b""#.into()));
    /// ```
    pub fn check(&self) -> Result<(), String> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// Every problem [`Graph::check`] reports: what only the builder can
    /// see, then the host's spec validation (which stops at the first)
    /// worded for the builder, then the state types.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = self.build_problems.clone();
        let spec = self.spec(&mut problems);
        problems.extend(spec.problems(Audience::Builder));
        self.check_state_types(&mut problems);
        problems
    }

    /// The spec the host will validate, with JSON texts decoded; a
    /// parameters text that is not JSON is a problem (the spec then has no
    /// parameters).
    fn spec(&self, problems: &mut Vec<String>) -> GraphSpec {
        let parameters = self.parameters.as_deref().and_then(|text| {
            from_json::<Value>(text)
                .map_err(|err| problems.push(format!("parameters are not json: {err}")))
                .ok()
        });
        let channels = self.channels.iter().map(|c| ChannelSpec {
            name: c.name.clone(),
            reducer: c.reducer,
            default: c.default.as_deref().and_then(|d| from_json(d).ok()),
        });
        let nodes = self.nodes.iter().map(|n| NodeSpec {
            name: n.name.clone(),
            description: n.description.clone(),
        });
        let conditional_edges = self.conditional_edges.iter().map(|c| {
            let path_map = c.path_map.iter().map(|(key, target)| PathEntry {
                key: key.clone(),
                target: target.clone(),
            });
            sandgraph_spec::ConditionalEdge {
                source: c.source.clone(),
                router: c.router.clone(),
                path_map: path_map.collect(),
            }
        });
        GraphSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            registration: Registration {
                as_tool: self.as_tool,
                as_graph_tool: self.as_graph_tool,
            },
            parameters,
            timeout_ms: self.timeout_ms,
            channels: channels.collect(),
            nodes: nodes.collect(),
            edges: self.edges.clone(),
            conditional_edges: conditional_edges.collect(),
            entry_points: self.entry_points.clone(),
            finish_points: self.finish_points.clone(),
            strict: self.strict,
        }
    }

    /// Decodes the state the channels start with into every node's and
    /// router's state type (see [`Graph::check`]).
    fn check_state_types(&self, problems: &mut Vec<String>) {
        let mut start = serde_json::Map::new();
        for channel in &self.channels {
            let default = channel.default.as_deref().map(from_json::<Value>);
            if let Some(Ok(default)) = default {
                start.insert(channel.name.clone(), default);
            }
        }
        let start = Value::Object(start).to_string();
        let bodies = self
            .nodes
            .iter()
            .map(|n| (format!("node {:?}", n.name), &n.probe))
            .chain(self.conditional_edges.iter().map(|c| {
                let what = format!("router {:?} (from {:?})", c.router, c.source);
                (what, &c.probe)
            }));
        for (what, probe) in bodies {
            let Some(TypeMismatch { path, message }) = probe(&start) else {
                continue;
            };
            let channel = self.channels.iter().find(|c| {
                path.strip_prefix(c.name.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            });
            let start_of = match channel {
                Some(c) => format!(
                    " (channel {:?} is {} and starts at {})",
                    c.name,
                    describe(c.reducer),
                    c.default.as_deref().unwrap_or("nothing")
                ),
                None => String::new(),
            };
            problems.push(format!(
                "{what}: its state type does not decode the channels' defaults: field `{path}`: \
                 {message}{start_of}; change the field's type to match the channel"
            ));
        }
    }

    /// Runs the node `name` on `state` (JSON text).
    pub(crate) fn run_node(
        &self,
        name: &str,
        state: &str,
        ctx: &Context,
    ) -> Result<Outcome, CallError> {
        let node = self
            .nodes
            .iter()
            .find(|node| node.name == name)
            .ok_or_else(|| CallError::Unknown(format!("unknown node \"{name}\"")))?;
        (node.run)(state, ctx)
    }

    /// Runs the router `name` on `state` (JSON text).
    /// `__goto__` is never a router, not even one the author named so.
    pub(crate) fn route(&self, name: &str, state: &str) -> Result<Vec<Route>, CallError> {
        let edge = self
            .conditional_edges
            .iter()
            .find(|edge| edge.router == name && name != GOTO_ROUTER)
            .ok_or_else(|| CallError::Unknown(format!("unknown router \"{name}\"")))?;
        (edge.route)(state)
    }

    /// Combines a custom channel's `current` value with `update` (JSON text).
    pub(crate) fn reduce(
        &self,
        channel: &str,
        current: &str,
        update: &str,
    ) -> Result<String, CallError> {
        let CustomReducer(f) = self
            .channels
            .iter()
            .find(|c| c.name == channel)
            .and_then(|c| c.custom.as_ref())
            .ok_or_else(|| {
                CallError::Unknown(format!("no custom reducer for channel \"{channel}\""))
            })?;
        let current = from_json(current)
            .map_err(|err| CallError::InvalidState(format!("current value: {err}")))?;
        let update =
            from_json(update).map_err(|err| CallError::InvalidState(format!("update: {err}")))?;
        let reduced = f(current, update)
            .map_err(|err| CallError::Failed(format!("channel \"{channel}\": {err}")))?;
        Ok(reduced.to_string())
    }

    /// Runs the validator, if any, on `input` (JSON text).
    pub(crate) fn validate_input(&self, input: &str, ctx: &ValidateContext) -> Result<(), String> {
        match &self.validator {
            Some(validate) => validate(input, ctx),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("name", &self.name)
            .field(
                "channels",
                &self.channels.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .field(
                "nodes",
                &self.nodes.iter().map(|n| &n.name).collect::<Vec<_>>(),
            )
            .field("edges", &self.edges)
            .field(
                "conditional_edges",
                &self
                    .conditional_edges
                    .iter()
                    .map(|e| (&e.source, &e.router))
                    .collect::<Vec<_>>(),
            )
            .field("entry_points", &self.entry_points)
            .field("finish_points", &self.finish_points)
            .finish_non_exhaustive()
    }
}

fn push_unique<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, Send, Update};
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Topic {
        topic: String,
    }

    fn echo() -> Graph {
        Graph::new("echo_graph")
            .description("Echo the given topic.")
            .as_tool(true)
            .channel("topic", Reducer::LastValue)
            .channel("log", Reducer::Append)
            .node("echo", |s: Topic| {
                Update::new().push("log", format!("seen:{}", s.topic))
            })
            .edge(START, "echo")
            .edge("echo", END)
    }

    fn ctx() -> Context {
        Context::default()
    }

    #[test]
    fn builds_the_spec_as_written() {
        let g = echo();
        assert_eq!(g.name, "echo_graph");
        assert!(g.as_tool && g.as_graph_tool);
        let channels: Vec<_> = g
            .channels
            .iter()
            .map(|c| (c.name.as_str(), c.reducer, c.default.as_deref()))
            .collect();
        assert_eq!(
            channels,
            [
                ("topic", ReducerKind::LastValue, None),
                ("log", ReducerKind::Append, Some("[]"))
            ]
        );
        assert_eq!(g.entry_points, ["echo"]);
        assert_eq!(g.finish_points, ["echo"]);
        assert!(g.edges.is_empty());
        assert_eq!(g.check(), Ok(()));
    }

    #[test]
    fn channel_defaults() {
        let g = Graph::new("g")
            .channel("m", Reducer::Merge)
            .channel("a", Reducer::Add)
            .channel_with_default("n", Reducer::LastValue, 0)
            .channel_with_default("l", Reducer::Append, ["x"])
            .custom_channel("c", |_: Value, u: Value| Ok::<_, String>(u));
        let defaults: Vec<_> = g.channels.iter().map(|c| c.default.as_deref()).collect();
        assert_eq!(
            defaults,
            [Some("{}"), Some("0"), Some("0"), Some(r#"["x"]"#), None]
        );
        assert_eq!(g.channels[4].reducer, ReducerKind::Custom);
    }

    #[test]
    fn edges_joins_and_conditional_edges() {
        let g = Graph::new("g")
            .node("a", |_: Value| Update::new())
            .node("b", |_: Value| Update::new())
            .node("c", |_: Value| Update::new())
            .edge(START, "a")
            .edge(START, "a")
            .edge("a", "b")
            .edge("a", "b")
            .join(["a", "b"], "c")
            .join(["c"], "a")
            .join(["b", "c"], END)
            .conditional_edges("a", "pick", |_: Value| "x", [("x", "b"), ("y", END)])
            .conditional_edges(START, "first", |_: Value| vec!["a"], None);
        assert_eq!(g.entry_points, ["a"]);
        assert_eq!(g.finish_points, ["b", "c"]);
        let edges: Vec<_> = g
            .edges
            .iter()
            .map(|e| (e.sources.join("+"), e.target.as_str()))
            .collect();
        assert_eq!(
            edges,
            [
                ("a".to_owned(), "b"),
                ("a+b".to_owned(), "c"),
                ("c".to_owned(), "a")
            ]
        );
        assert_eq!(
            g.conditional_edges[0].path_map,
            [
                ("x".to_owned(), "b".to_owned()),
                ("y".to_owned(), END.to_owned())
            ]
        );
        assert!(g.conditional_edges[1].path_map.is_empty());
        assert_eq!(g.check(), Ok(()));
    }

    #[test]
    fn destinations_declare_goto_targets_and_are_never_routed() {
        let g = Graph::new("g")
            .node("a", |_: Value| Command::new().goto("c"))
            .node("b", |_: Value| Update::new())
            .node("c", |_: Value| Update::new())
            .edge(START, "a")
            .edge("a", "b")
            .destinations("a", ["c"])
            .destinations("a", ["c", END]);
        assert_eq!(g.check(), Ok(()));
        let spec = g.spec(&mut Vec::new());
        assert_eq!(spec.conditional_edges.len(), 1);
        let goto = &spec.conditional_edges[0];
        assert_eq!(
            (goto.source.as_str(), goto.router.as_str()),
            ("a", "__goto__")
        );
        let map: Vec<_> = goto
            .path_map
            .iter()
            .map(|e| (e.key.as_str(), e.target.as_str()))
            .collect();
        assert_eq!(map, [("c", "c"), (END, END)]);
        assert_eq!(spec.validate(), Ok(()));
        assert_eq!(
            g.route("__goto__", "{}"),
            Err(CallError::Unknown("unknown router \"__goto__\"".into()))
        );

        // Without the declaration "c" is unreachable; an unknown target is
        // refused.
        let g = Graph::new("g")
            .node("a", |_: Value| Command::new().goto("c"))
            .node("c", |_: Value| Update::new())
            .edge(START, "a");
        assert_eq!(
            g.check(),
            Err(r#"node "c" is unreachable from __start__"#.into())
        );
        let g = g.destinations("a", ["c", "ghost"]);
        assert_eq!(
            g.check(),
            Err(r#"conditional edge from "a" (router "__goto__"): path-map key "ghost" leads to unknown node "ghost""#.into())
        );
    }

    #[test]
    fn a_router_may_not_be_named_goto() {
        let g = Graph::new("g")
            .node("a", |_: Value| Update::new())
            .edge(START, "a")
            .conditional_edges("a", "__goto__", |_: Value| "a", [("a", "a")]);
        assert_eq!(
            g.check(),
            Err(
                "router name \"__goto__\" is reserved: declare a node's goto targets with \
                 .destinations(node, [targets])"
                    .into()
            )
        );
        assert_eq!(
            g.route("__goto__", "{}"),
            Err(CallError::Unknown("unknown router \"__goto__\"".into()))
        );
    }

    #[test]
    fn check_names_every_problem() {
        let g = Graph::new("run_code")
            .parameters(json!(["not", "an", "object"]))
            .channel("x", Reducer::LastValue)
            .channel("x", Reducer::Append)
            .channel_with_default("m", Reducer::Merge, 1)
            .node("a", |_: Value| Update::new())
            .node("a", |_: Value| Update::new())
            .node(END, |_: Value| Update::new())
            .describe_node("ghost", "boo")
            .edge("a", "b")
            .edge("a", START)
            .join(["a", "a"], "a")
            .edge("zz", END)
            .conditional_edges("q", "r", |_: Value| "k", [("k", "nowhere"), ("k", END)])
            .conditional_edges("a", "r", |_: Value| "k", None);
        let problems = g.check().unwrap_err();
        let expected = [
            "describe_node(\"ghost\"): unknown node \"ghost\" (define it first)",
            "graph name \"run_code\" is reserved",
            "parameters must be a json object, not an array",
            "channel \"x\" is declared twice",
            "channel \"m\": default is a number, but its reducer needs an object",
            "node \"a\" is declared twice",
            "node name \"__end__\" is reserved",
            "the graph has no entry point and no conditional edge from __start__ (add .edge(START, node))",
            "finish point \"zz\" is not a node",
            "edge \"a\" -> \"b\": unknown target node \"b\"",
            "edge \"a\" -> \"__start__\": unknown target node \"__start__\"",
            "edge [\"a\", \"a\"] -> \"a\": source \"a\" is listed twice",
            "conditional edge from \"q\": unknown source node \"q\"",
            "conditional edge from \"q\" (router \"r\"): path-map key \"k\" leads to unknown node \"nowhere\"",
            "conditional edge from \"q\" (router \"r\"): path-map key \"k\" is listed twice",
            "router \"r\" is used twice",
            "node \"a\" is unreachable from __start__",
        ];
        assert_eq!(problems.lines().collect::<Vec<_>>(), expected, "{problems}");
    }

    #[test]
    fn check_header_and_reachability() {
        let node = |_: Value| Update::new();
        let g = Graph::new("bad name!")
            .node("a", node)
            .node("b", node)
            .node("c", node)
            .node("d", node)
            .edge(START, "a")
            .join(["a", "b"], "c")
            .edge("d", END);
        assert_eq!(
            g.check().unwrap_err().lines().collect::<Vec<_>>(),
            [
                "graph name \"bad name!\" may only contain ascii letters, digits, \"_\" and \"-\"",
                "node \"b\" is unreachable from __start__",
                "node \"c\" is unreachable from __start__",
                "node \"d\" is unreachable from __start__",
            ]
        );
        assert_eq!(
            Graph::new("")
                .timeout_ms(0)
                .parameters_json("{")
                .check()
                .unwrap_err(),
            // Text the builder cannot read comes first, with the other
            // builder problems; then the spec's, in the host's order.
            "parameters are not json: EOF while parsing an object at line 1 column 1\n\
             graph name is empty\n\
             timeout_ms must be positive\n\
             the graph has no nodes\n\
             the graph has no entry point and no conditional edge from __start__ (add .edge(START, node))"
        );
        // A router without a path map may reach any node.
        let g = Graph::new("g")
            .node("a", node)
            .node("b", node)
            .edge(START, "a")
            .conditional_edges("a", "r", |_: Value| "b", None);
        assert_eq!(g.check(), Ok(()));
    }

    #[test]
    fn check_reports_what_the_host_refuses_at_load() {
        let g = echo()
            .channel_with_default("big", Reducer::LastValue, 1_u64 << 53)
            .describe_node("echo", "x".repeat(4097))
            .channel("bell\u{7}", Reducer::LastValue);
        assert_eq!(
            g.check().unwrap_err().lines().collect::<Vec<_>>(),
            [
                "channel \"big\": default is not lossless json: $: integer 9007199254740992 \
                 is outside the safe range ±(2^53-1)",
                "channel name \"bell\\u{7}\" holds a control or bidi character",
                "node \"echo\" description is 4097 characters long, more than 4096",
            ]
        );
    }

    #[test]
    fn check_decodes_the_channel_defaults_into_each_state_type() {
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Wrong {
            topic: String,
            tags: String,
        }
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Counted {
            count: String,
        }
        let g = Graph::new("g")
            .channel("topic", Reducer::LastValue)
            .channel("tags", Reducer::Append)
            .channel("count", Reducer::Add)
            .node("tag", |_: Wrong| Update::new())
            .edge(START, "tag")
            .conditional_edges("tag", "more", |_: Counted| END, None);
        assert_eq!(
            g.check().unwrap_err().lines().collect::<Vec<_>>(),
            [
                "node \"tag\": its state type does not decode the channels' defaults: field `tags`: \
                 invalid type: sequence, expected a string (channel \"tags\" is an append (list) \
                 channel and starts at []); change the field's type to match the channel",
                "router \"more\" (from \"tag\"): its state type does not decode the channels' \
                 defaults: field `count`: invalid type: integer `0`, expected a string (channel \
                 \"count\" is an add (number) channel and starts at 0); change the field's type to \
                 match the channel",
            ]
        );
    }

    #[test]
    fn check_accepts_honest_state_types() {
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Meta {
            score: i64,
        }
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct State {
            topic: String,
            tags: Vec<String>,
            meta: Meta,
            count: f64,
            mode: Option<String>,
        }
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Payload {
            x: i64,
        }
        let g = Graph::new("g")
            .channel("topic", Reducer::LastValue)
            .channel("tags", Reducer::Append)
            .channel("meta", Reducer::Merge)
            .channel("count", Reducer::Add)
            .channel_with_default("mode", Reducer::LastValue, "fast")
            .node("all", |_: State| Update::new())
            .node("payload", |_: Payload| Update::new())
            .node("number", |_: i64| Update::new())
            .node("any", |_: Value| Update::new())
            .edge(START, "all")
            .conditional_edges("all", "fan", |_: State| END, None);
        // `topic` and `meta.score` are missing until the input fills them,
        // `payload` and `number` take Send payloads: nothing to report.
        assert_eq!(g.check(), Ok(()));
        // A default of the wrong type for the field is reported, nested too.
        let g = Graph::new("g")
            .channel_with_default("meta", Reducer::Merge, json!({"score": "high"}))
            .node("a", |_: State| Update::new())
            .edge(START, "a");
        let problems = g.check().unwrap_err();
        assert!(
            problems.contains("field `meta.score`: invalid type: string \"high\", expected i64"),
            "{problems}"
        );
        assert!(
            problems.contains("starts at {\"score\":\"high\"}"),
            "{problems}"
        );
        // The echo graph passes.
        assert_eq!(echo().check(), Ok(()));
    }

    #[test]
    fn strict_graphs_and_the_reserved_marker_name() {
        assert!(!echo().strict);
        assert!(echo().strict().strict);
        let g = echo().channel(sandgraph_spec::STRICT_MARKER_CHANNEL, Reducer::LastValue);
        assert_eq!(
            g.check(),
            Err("channel name \"__strict__\" is reserved (it marks a strict graph)".into())
        );
    }

    #[test]
    fn runs_nodes_and_reports_bad_state() {
        let g = echo();
        assert_eq!(
            g.run_node("echo", r#"{"topic":"hi","log":[]}"#, &ctx()),
            Ok(Outcome::Update(r#"{"log":["seen:hi"]}"#.into()))
        );
        assert_eq!(
            g.run_node("echo", r#"{"topic":5}"#, &ctx()),
            Err(CallError::InvalidState(
                "topic: invalid type: integer `5`, expected a string at line 1 column 10".into()
            ))
        );
        assert_eq!(
            g.run_node("echo", "not json", &ctx()),
            Err(CallError::InvalidState(
                "expected ident at line 1 column 2".into()
            ))
        );
        assert_eq!(
            g.run_node("nope", "{}", &ctx()),
            Err(CallError::Unknown("unknown node \"nope\"".into()))
        );
    }

    #[test]
    fn node_failures_commands_and_interrupts() {
        let g = Graph::new("g")
            .node("fail", |_: Value| Err::<Update, _>("bad input"))
            .node("cmd", |_: Value| Command::new().goto("x").send("y", 1))
            .node_with_context(
                "ask",
                |_: Value, ctx: &Context| -> Result<Update, NodeError> {
                    let a = ctx.interrupt("a?")?;
                    let b = ctx.interrupt("b?")?;
                    Ok(Update::new().set("ab", [a, b]))
                },
            );
        assert_eq!(
            g.run_node("fail", "{}", &ctx()),
            Err(CallError::Failed("bad input".into()))
        );
        assert_eq!(
            g.run_node("cmd", "{}", &ctx()),
            Ok(Outcome::Command {
                update: "{}".into(),
                goto: vec!["x".into()],
                sends: vec![("y".into(), "1".into())]
            })
        );
        let resumed = |values: &[Value]| ctx().with_resume(values.to_vec());
        assert_eq!(
            g.run_node("ask", "{}", &resumed(&[])),
            Ok(Outcome::Interrupt(r#""a?""#.into()))
        );
        assert_eq!(
            g.run_node("ask", "{}", &resumed(&[json!(1)])),
            Ok(Outcome::Interrupt(r#""b?""#.into()))
        );
        assert_eq!(
            g.run_node("ask", "{}", &resumed(&[json!(1), json!("two")])),
            Ok(Outcome::Update(r#"{"ab":[1,"two"]}"#.into()))
        );
    }

    use crate::NodeError;

    #[test]
    fn routes() {
        #[derive(Deserialize)]
        struct Items {
            items: Vec<i64>,
        }
        let g = Graph::new("g")
            .conditional_edges(
                "plan",
                "fan_out",
                |s: Items| {
                    s.items
                        .into_iter()
                        .map(|x| Send::new("square", json!({ "x": x })))
                        .collect::<Vec<_>>()
                },
                None,
            )
            .conditional_edges("a", "fails", |_: Value| Err::<&str, _>("no route"), None);
        assert_eq!(
            g.route("fan_out", r#"{"items":[1,2]}"#),
            Ok(vec![
                Route::send("square", json!({"x": 1})),
                Route::send("square", json!({"x": 2}))
            ])
        );
        assert_eq!(
            g.route("fan_out", r#"{"items":"x"}"#),
            Err(CallError::InvalidState(
                "items: invalid type: string \"x\", expected a sequence at line 1 column 12".into()
            ))
        );
        assert_eq!(
            g.route("fails", "{}"),
            Err(CallError::Failed("no route".into()))
        );
        assert_eq!(
            g.route("ghost", "{}"),
            Err(CallError::Unknown("unknown router \"ghost\"".into()))
        );
    }

    #[test]
    fn custom_reducers() {
        let g = Graph::new("g")
            .channel("plain", Reducer::Append)
            .custom_channel("max", |current: Value, update: Value| {
                let update = update.as_i64().ok_or("not an integer")?;
                Ok::<_, String>(json!(current.as_i64().map_or(update, |c| c.max(update))))
            });
        assert_eq!(g.reduce("max", "null", "3"), Ok("3".into()));
        assert_eq!(g.reduce("max", "5", "3"), Ok("5".into()));
        assert_eq!(
            g.reduce("max", "5", "\"x\""),
            Err(CallError::Failed("channel \"max\": not an integer".into()))
        );
        assert!(matches!(
            g.reduce("max", "{", "1"),
            Err(CallError::InvalidState(m)) if m.starts_with("current value: ")
        ));
        assert!(matches!(
            g.reduce("max", "1", ""),
            Err(CallError::InvalidState(m)) if m.starts_with("update: ")
        ));
        assert_eq!(
            g.reduce("plain", "[]", "1"),
            Err(CallError::Unknown(
                "no custom reducer for channel \"plain\"".into()
            ))
        );
    }

    #[test]
    fn validation() {
        #[derive(Deserialize)]
        struct Input {
            times: Option<i64>,
        }
        let g = Graph::new("g");
        let vctx = ValidateContext::default();
        assert_eq!(g.validate_input("anything", &vctx), Ok(()));
        let g = g.validate(|input: Input, ctx: &ValidateContext| {
            assert_eq!(ctx.step(), 0);
            match input.times {
                Some(t) if t > 10 => Err("times must be at most 10"),
                _ => Ok(()),
            }
        });
        assert_eq!(g.validate_input(r#"{"times":3}"#, &vctx), Ok(()));
        assert_eq!(
            g.validate_input(r#"{"times":11}"#, &vctx),
            Err("times must be at most 10".into())
        );
        assert_eq!(
            g.validate_input(r#"{"times":"x"}"#, &vctx),
            Err("invalid input: times: invalid type: string \"x\", expected i64 at line 1 column 12".into())
        );
    }
}
