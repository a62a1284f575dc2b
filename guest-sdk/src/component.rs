//! The only place that sees wit-bindgen: the generated bindings, the one
//! `Guest` implementation the `export_graph!` macro exports, and the
//! conversions between the generated types and the SDK's own.

use std::cell::OnceCell;
use std::marker::PhantomData;

use crate::context::{CallInfo, Context, ValidateContext};
use crate::graph::{CallError, Graph, Outcome, ReducerKind};
use crate::route::Route;

/// Generated bindings of the `graph-component` world in `wit/`, written
/// ahead of time so a graph crate does not build wit-bindgen's macro (its
/// WIT parser and component encoder); the test `the_sdk_bindings_are_current`
/// (tests/tests/graphs/sdk_bindings.rs) fails when they are out of date. Public
/// (hidden) only because the exported `export_graph!` expansion names them
/// through `$crate`.
#[doc(hidden)]
#[rustfmt::skip]
pub mod bindings;

use bindings::exports::sandgraph::graph::graph as wit;
use bindings::sandgraph::graph::types as wit_types;

/// Builds the author's graph; implemented by the `export_graph!` expansion.
#[doc(hidden)]
pub trait GraphFactory {
    /// Returns the graph. Called once per instance, on the first export call.
    fn build() -> Graph;
}

/// The exported component, generic over the author's graph.
#[doc(hidden)]
pub struct Component<F>(PhantomData<F>);

thread_local! {
    // A component instance is single-threaded; this is its one graph.
    static GRAPH: OnceCell<Graph> = const { OnceCell::new() };
}

fn with_graph<F: GraphFactory, T>(f: impl FnOnce(&Graph) -> T) -> T {
    GRAPH.with(|cell| {
        let graph = cell.get_or_init(|| {
            install_panic_hook();
            F::build()
        });
        f(graph)
    })
}

/// Forwards panic messages to the host log before the instance traps, so
/// the host sees why even when the guest's stderr goes nowhere.
fn install_panic_hook() {
    #[cfg(target_arch = "wasm32")]
    {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            crate::log::error(format!("graph panicked: {info}"));
            previous(info);
        }));
    }
}

impl<F: GraphFactory> wit::Guest for Component<F> {
    fn describe() -> wit::GraphSpec {
        with_graph::<F, _>(|graph| {
            for problem in graph.problems() {
                crate::log::warn(format!("graph definition: {problem}"));
            }
            spec(graph)
        })
    }

    fn run_node(
        node: String,
        state: String,
        context: wit::CallContext,
    ) -> Result<wit::NodeResult, wit::GraphError> {
        with_graph::<F, _>(|graph| {
            let ctx = Context::from_info(call_info(context)).map_err(CallError::InvalidState)?;
            let outcome = graph.run_node(&node, &state, &ctx)?;
            Ok(match outcome {
                Outcome::Update(update) => wit::NodeResult::Update(update),
                Outcome::Command {
                    update,
                    goto,
                    sends,
                } => wit::NodeResult::Command(wit_types::Command {
                    update,
                    goto,
                    sends: sends
                        .into_iter()
                        .map(|(node, payload)| wit_types::Send { node, payload })
                        .collect(),
                }),
                Outcome::Interrupt(payload) => wit::NodeResult::Interrupt(payload),
            })
        })
        .map_err(graph_error)
    }

    fn route(router: String, state: String) -> Result<Vec<wit::RouteTarget>, wit::GraphError> {
        with_graph::<F, _>(|graph| {
            let routes = graph.route(&router, &state)?;
            routes
                .into_iter()
                .map(|route| match route {
                    Route::Node(node) => Ok(wit::RouteTarget::Node(node)),
                    Route::Send(send) => {
                        let (node, payload) = send.into_wire().map_err(CallError::Failed)?;
                        Ok(wit::RouteTarget::Send(wit_types::Send { node, payload }))
                    }
                })
                .collect::<Result<Vec<_>, CallError>>()
        })
        .map_err(graph_error)
    }

    fn reduce(channel: String, current: String, update: String) -> Result<String, wit::GraphError> {
        with_graph::<F, _>(|graph| graph.reduce(&channel, &current, &update)).map_err(graph_error)
    }

    fn validate(input: String, context: wit::CallContext) -> Result<(), String> {
        with_graph::<F, _>(|graph| {
            let ctx = ValidateContext::from_info(call_info(context))?;
            graph.validate_input(&input, &ctx)
        })
    }
}

fn call_info(context: wit::CallContext) -> CallInfo {
    CallInfo {
        tool: context.tool,
        request: context.request,
        thread_id: context.thread_id,
        step: context.step,
        resume: context.resume,
        configurable: context.configurable,
    }
}

fn graph_error(error: CallError) -> wit::GraphError {
    match error {
        CallError::InvalidState(msg) => wit::GraphError::InvalidState(msg),
        CallError::Unknown(msg) => wit::GraphError::Unknown(msg),
        CallError::Failed(msg) => wit::GraphError::Failed(msg),
    }
}

/// Converts the builder's model into the WIT record, as written: the host
/// validates it and names whatever is wrong.
fn spec(graph: &Graph) -> wit::GraphSpec {
    let model = graph;
    wit::GraphSpec {
        name: model.name.clone(),
        description: model.description.clone(),
        registration: wit_types::Registration {
            as_tool: model.as_tool,
            as_graph_tool: model.as_graph_tool,
        },
        parameters: model.parameters.clone(),
        timeout_ms: model.timeout_ms,
        channels: model
            .channels
            .iter()
            .map(|channel| wit_types::ChannelSpec {
                name: channel.name.clone(),
                reducer: match channel.reducer {
                    ReducerKind::LastValue => wit_types::Reducer::LastValue,
                    ReducerKind::Append => wit_types::Reducer::Append,
                    ReducerKind::Merge => wit_types::Reducer::Merge,
                    ReducerKind::Add => wit_types::Reducer::Add,
                    ReducerKind::Custom => wit_types::Reducer::Custom,
                },
                default: channel.default.clone(),
            })
            .chain(model.strict.then(strict_marker))
            .collect(),
        nodes: model
            .nodes
            .iter()
            .map(|node| wit_types::NodeSpec {
                name: node.name.clone(),
                description: node.description.clone(),
            })
            .collect(),
        edges: model
            .edges
            .iter()
            .map(|edge| wit_types::Edge {
                sources: edge.sources.clone(),
                target: edge.target.clone(),
            })
            .collect(),
        conditional_edges: model
            .conditional_edges
            .iter()
            .map(|edge| wit_types::ConditionalEdge {
                source: edge.source.clone(),
                router: edge.router.clone(),
                path_map: edge
                    .path_map
                    .iter()
                    .map(|(key, target)| wit_types::PathEntry {
                        key: key.clone(),
                        target: target.clone(),
                    })
                    .collect(),
            })
            .collect(),
        entry_points: model.entry_points.clone(),
        finish_points: model.finish_points.clone(),
    }
}

/// The channel that tells the host the graph is strict: last-value with no
/// default, so a host that does not know it keeps it out of the state.
fn strict_marker() -> wit_types::ChannelSpec {
    wit_types::ChannelSpec {
        name: sandgraph_spec::STRICT_MARKER_CHANNEL.to_owned(),
        reducer: wit_types::Reducer::LastValue,
        default: None,
    }
}

/// Thin wrappers over the host imports. Off wasm (native unit tests and
/// clippy) the imports do not exist: `log` goes to stderr and `cancelled` is
/// always false.
pub(crate) mod host {
    use crate::log::Level;

    #[cfg(target_arch = "wasm32")]
    pub(crate) fn log(level: Level, message: &str) {
        use super::bindings::sandgraph::graph::host;
        use super::wit_types::LogLevel;
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        host::log(level, message);
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn log(level: Level, message: &str) {
        eprintln!("[{level}] {message}");
    }

    #[cfg(target_arch = "wasm32")]
    pub(crate) fn cancelled() -> bool {
        super::bindings::sandgraph::graph::host::cancelled()
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn cancelled() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{END, Reducer, START, Update};
    use serde_json::Value;

    #[test]
    fn spec_maps_onto_the_wit_record() {
        let graph = Graph::new("g")
            .description("d")
            .as_tool(true)
            .as_graph_tool(false)
            .parameters_json(r#"{"x":{"type":"integer"}}"#)
            .timeout_ms(500)
            .channel("log", Reducer::Append)
            .custom_channel("best", |_: Value, u: Value| Ok::<_, String>(u))
            .node("a", |_: Value| Update::new())
            .node("b", |_: Value| Update::new())
            .describe_node("b", "the b node")
            .edge(START, "a")
            .join(["a"], "b")
            .conditional_edges("b", "r", |_: Value| END, [("done", END)])
            .edge("b", END);
        let spec = spec(&graph);
        assert_eq!(spec.name, "g");
        assert_eq!(spec.description.as_deref(), Some("d"));
        assert!(spec.registration.as_tool && !spec.registration.as_graph_tool);
        assert_eq!(
            spec.parameters.as_deref(),
            Some(r#"{"x":{"type":"integer"}}"#)
        );
        assert_eq!(spec.timeout_ms, Some(500));
        assert!(matches!(
            spec.channels[0].reducer,
            wit_types::Reducer::Append
        ));
        assert_eq!(spec.channels[0].default.as_deref(), Some("[]"));
        assert!(matches!(
            spec.channels[1].reducer,
            wit_types::Reducer::Custom
        ));
        assert_eq!(spec.channels[1].default, None);
        assert_eq!(spec.nodes[1].description.as_deref(), Some("the b node"));
        assert_eq!(spec.edges.len(), 1);
        assert_eq!(
            (
                spec.edges[0].sources.as_slice(),
                spec.edges[0].target.as_str()
            ),
            (&["a".to_owned()][..], "b")
        );
        assert_eq!(spec.conditional_edges[0].router, "r");
        assert_eq!(spec.conditional_edges[0].path_map[0].target, END);
        assert_eq!(spec.entry_points, ["a"]);
        assert_eq!(spec.finish_points, ["b"]);
        assert_eq!(spec.channels.len(), 2, "not strict: no marker");
    }

    #[test]
    fn a_strict_graph_carries_the_marker_channel_last() {
        let graph = Graph::new("g")
            .strict()
            .channel("log", Reducer::Append)
            .node("a", |_: Value| Update::new())
            .edge(START, "a");
        assert_eq!(graph.check(), Ok(()));
        let spec = spec(&graph);
        let names: Vec<&str> = spec.channels.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["log", "__strict__"]);
        assert!(matches!(
            spec.channels[1].reducer,
            wit_types::Reducer::LastValue
        ));
        assert_eq!(spec.channels[1].default, None);
    }
}
