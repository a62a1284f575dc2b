//! A graph built against `sandgraph:graph@0.1.0` (the world before the
//! brokered capabilities), without the SDK: one node `greet` that writes
//! `{"reply": "hello <name>"}` and logs through the 0.1.0 `host` import.
//! Hosts must keep loading and running it unchanged.

wit_bindgen::generate!({
    path: "../../../wit/frozen/0.1.0",
    world: "graph-component",
});

use exports::sandgraph::graph::graph::{
    CallContext, GraphError, GraphSpec, Guest, NodeResult, RouteTarget,
};
use sandgraph::graph::host::{self, LogLevel};
use sandgraph::graph::types::{ChannelSpec, NodeSpec, Reducer, Registration};

struct Component;

/// The value of `"name"` in a flat JSON object of strings (enough for this
/// fixture; the SDK does real decoding).
fn name_of(state: &str) -> Option<&str> {
    let rest = &state[state.find("\"name\"")? + 6..];
    let rest = &rest[rest.find('"')? + 1..];
    Some(&rest[..rest.find('"')?])
}

impl Guest for Component {
    fn describe() -> GraphSpec {
        GraphSpec {
            name: "compat_v0_1".into(),
            description: Some("A graph built against sandgraph:graph@0.1.0".into()),
            registration: Registration {
                as_tool: true,
                as_graph_tool: true,
            },
            parameters: Some(r#"{"name": "string"}"#.into()),
            timeout_ms: None,
            channels: vec![
                ChannelSpec {
                    name: "name".into(),
                    reducer: Reducer::LastValue,
                    default: None,
                },
                ChannelSpec {
                    name: "reply".into(),
                    reducer: Reducer::LastValue,
                    default: None,
                },
            ],
            nodes: vec![NodeSpec {
                name: "greet".into(),
                description: None,
            }],
            edges: vec![],
            conditional_edges: vec![],
            entry_points: vec!["greet".into()],
            finish_points: vec!["greet".into()],
        }
    }

    fn run_node(node: String, state: String, _: CallContext) -> Result<NodeResult, GraphError> {
        if node != "greet" {
            return Err(GraphError::Unknown(node));
        }
        if host::cancelled() {
            return Err(GraphError::Failed("cancelled".into()));
        }
        let name = name_of(&state).unwrap_or("stranger");
        host::log(
            LogLevel::Info,
            &format!("greeting {name} from a 0.1.0 component"),
        );
        Ok(NodeResult::Update(format!(
            r#"{{"reply": "hello {name}"}}"#
        )))
    }

    fn route(router: String, _: String) -> Result<Vec<RouteTarget>, GraphError> {
        Err(GraphError::Unknown(router))
    }

    fn reduce(channel: String, _: String, _: String) -> Result<String, GraphError> {
        Err(GraphError::Unknown(channel))
    }

    fn validate(_: String, _: CallContext) -> Result<(), String> {
        Ok(())
    }
}

export!(Component);
