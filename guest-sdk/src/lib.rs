//! Write sandgraph state graphs in Rust and compile them to sandboxed
//! WebAssembly components.
//!
//! A graph is LangGraph-shaped: **channels** (the keys of a JSON state, each
//! with a [`Reducer`] that combines writes), **nodes** (functions from the
//! state to an [`Update`]), and **edges** (static, join barriers, and
//! conditional edges whose router picks the next nodes at run time). The host
//! runs it in bulk-synchronous supersteps; this crate turns your builder into
//! the component the host loads, and hides the component-model plumbing.
//!
//! # A complete graph
//!
//! ```
//! use sandgraph_sdk::serde_json::{json, Value};
//! use sandgraph_sdk::{Graph, Reducer, Update, ValidateContext, START, END};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct State {
//!     n: i64,
//!     target: i64,
//! }
//!
//! fn graph() -> Graph {
//!     Graph::new("count_to")
//!         .description("Count from 0 up to `target`.")
//!         .as_tool(true)
//!         .parameters(json!({
//!             "target": {"type": "integer", "required": true, "description": "Where to stop."}
//!         }))
//!         .channel_with_default("n", Reducer::LastValue, 0)
//!         .channel("target", Reducer::LastValue)
//!         .channel("log", Reducer::Append)
//!         .node("count", |s: State| {
//!             Update::new().set("n", s.n + 1).push("log", format!("n={}", s.n + 1))
//!         })
//!         .describe_node("count", "Adds one to n.")
//!         .edge(START, "count")
//!         .conditional_edges(
//!             "count",
//!             "should_continue",
//!             |s: State| if s.n < s.target { "continue" } else { "done" },
//!             [("continue", "count"), ("done", END)],
//!         )
//!         .validate(|input: Value, _ctx: &ValidateContext| {
//!             match input["target"].as_i64() {
//!                 Some(t) if t > 100 => Err("target must be at most 100"),
//!                 _ => Ok(()),
//!             }
//!         })
//! }
//!
//! // Exports the component (in a `crate-type = ["cdylib"]` crate built for
//! // `wasm32-wasip2`).
//! sandgraph_sdk::export_graph!(graph);
//!
//! // And in the crate's tests, natively:
//! assert_eq!(graph().check(), Ok(()));
//! ```
//!
//! # Nodes
//!
//! A node body is `Fn(S) -> R` ([`Graph::node`]) or `Fn(S, &Context) -> R`
//! ([`Graph::node_with_context`]). `S` is any [`serde::de::DeserializeOwned`]
//! type; the host's state (or a [`Send`] payload) is decoded into it, and a
//! mismatch is reported to the host as an `invalid-state` error naming the
//! field. `R` is an [`Update`], a [`Command`] (an update plus `goto` and
//! `send`), or a `Result` of either whose error is any `Display` type, an
//! [`Interrupted`], or a [`NodeError`] (which both convert into, so `?`
//! works on anything).
//!
//! [`Context::interrupt`] pauses the run for a human, LangGraph-style: the
//! k-th call in a task returns the caller's k-th resume value once there is
//! one, and until then `Err(Interrupted)`, which `?` propagates.
//!
//! # Routers
//!
//! [`Graph::conditional_edges`] takes a router `Fn(S) -> R` where `R` is
//! anything [`IntoRoutes`]: a node name or path-map key (`&str`, `String`),
//! [`END`], a [`Send`], a [`Route`], a `Vec`/array/`Option` of those, or a
//! `Result`.
//!
//! # Agents
//!
//! LangGraph's agent blocks, shaped the same in the Python and JavaScript
//! SDKs: [`Graph::messages_channel`] (`MessagesState`: a `messages` channel
//! merged by [`add_messages`], which replaces by id, removes and assigns
//! deterministic ids), [`ChatModel`] over the host's models, [`Tool`]s
//! defined in the graph next to granted graph tools, [`ToolNode`],
//! [`tools_condition`] and [`create_react_agent`]:
//!
//! ```
//! use sandgraph_sdk::create_react_agent;
//!
//! let graph = create_react_agent("default", ["search".into()], Some("Cite your sources."))
//!     .name("research")
//!     .as_tool(true);
//! assert_eq!(graph.check(), Ok(()));
//! ```
//!
//! # Mistakes
//!
//! The builder never panics. The spec sent to the host is what you wrote,
//! and the host refuses a bad one with a message naming the node or edge;
//! [`Graph::check`] reports the same problems in a native `#[test]`, and
//! also decodes the state the channels start with into each node's and
//! router's state type, so a field of the wrong type (`tags: String` for an
//! `Append` channel) fails the test instead of the run. Errors in
//! host-supplied data (state that does not decode, unknown node names)
//! become `graph-error`s, never traps. A panic in your own code traps the
//! instance; its message goes to the host log first.
//!
//! By default the host drops (with a warning in its log) an input key that
//! is not a channel and a node's write to a channel the graph does not
//! declare, as LangGraph does. A graph built with [`Graph::strict`] refuses
//! both instead: the run fails with `invalid_input` or `invalid_update`,
//! naming the key and the channel it probably meant.
//!
//! # Off wasm
//!
//! The crate also compiles natively, so graphs can be unit-tested with
//! plain `cargo test`: [`log`] writes to stderr and [`cancelled`] is false.
//! [`Context::default`] with its `with_*` setters stands in for the host's
//! call context.
//!
//! # Cargo features
//!
//! - `unchecked-json` (off): `Update::raw_json_unchecked`, which sends
//!   arbitrary text as a node's update. Only the host's hostile-guest tests
//!   need it.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

// The bindings' default module path (`default_bindings_module`) starts with
// `::sandgraph_sdk`, as seen from an author's crate; this makes the same
// path resolve inside the SDK itself.
extern crate self as sandgraph_sdk;

mod component;
mod context;
mod decode;
mod graph;
pub mod http;
pub mod llm;
pub mod log;
pub mod messages;
mod node;
pub mod prebuilt;
mod route;
pub mod tools;
mod update;

pub use context::{Context, Interrupted, ValidateContext};
pub use graph::{CustomReducer, Graph, Reducer};
pub use messages::{Message, REMOVE_ALL_MESSAGES, add_messages};
pub use node::{IntoNodeResult, NodeError};
pub use prebuilt::{ChatModel, Tool, ToolNode, create_react_agent, tools_condition};
pub use route::{IntoPathMap, IntoRoutes, Route};
pub use update::{Command, Send, Update};

/// Re-exported so graphs need no direct `serde_json` dependency for
/// [`json!`](serde_json::json) and [`Value`](serde_json::Value).
pub use serde_json;

/// The virtual node a run starts from: `.edge(START, node)` adds an entry
/// point.
pub const START: &str = sandgraph_spec::START;

/// The virtual node a run ends at: `.edge(node, END)` adds a finish point,
/// and routers and `goto` may name it.
pub const END: &str = sandgraph_spec::END;

/// True once the run's soft deadline has passed or its caller cancelled:
/// a long-running node should check it and wrap up. After a grace period
/// the host stops the graph by force. Always false off wasm.
pub fn cancelled() -> bool {
    component::host::cancelled()
}

/// Exports a graph as the component's `sandgraph:graph/graph` interface.
///
/// Call it once per crate, at the top level, with the path of a
/// `fn() -> Graph`. The function runs once per component instance, the
/// first time the host calls in.
///
/// ```
/// use sandgraph_sdk::{Graph, Update, START, END};
///
/// fn graph() -> Graph {
///     Graph::new("noop")
///         .node("n", |_: serde_json::Value| Update::new())
///         .edge(START, "n")
///         .edge("n", END)
/// }
///
/// sandgraph_sdk::export_graph!(graph);
/// ```
#[macro_export]
macro_rules! export_graph {
    ($graph:path) => {
        const _: () = {
            struct SandgraphGraph;

            impl $crate::__private::GraphFactory for SandgraphGraph {
                fn build() -> $crate::Graph {
                    $graph()
                }
            }

            type SandgraphComponent = $crate::__private::Component<SandgraphGraph>;

            $crate::__private::export!(
                SandgraphComponent with_types_in $crate::__private::bindings
            );
        };
    };
}

/// Implementation details of [`export_graph!`]; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::component::bindings::__export_graph_component as export;
    pub use crate::component::{Component, GraphFactory, bindings};
    pub use wit_bindgen;
}
