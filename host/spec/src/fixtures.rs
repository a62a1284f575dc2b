//! Specs for the crate's tests: a valid one to mutate, and short builders
//! for its parts.

use serde_json::json;

use crate::{
    ChannelSpec, ConditionalEdge, END, Edge, GraphSpec, NodeSpec, PathEntry, Reducer, Registration,
};

pub(crate) fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.to_owned(),
        description: None,
    }
}

pub(crate) fn channel(
    name: &str,
    reducer: Reducer,
    default: Option<serde_json::Value>,
) -> ChannelSpec {
    ChannelSpec {
        name: name.to_owned(),
        reducer,
        default,
    }
}

pub(crate) fn edge(sources: &[&str], target: &str) -> Edge {
    Edge {
        sources: sources.iter().map(|s| (*s).to_owned()).collect(),
        target: target.to_owned(),
    }
}

pub(crate) fn cond(source: &str, router: &str, map: &[(&str, &str)]) -> ConditionalEdge {
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
pub(crate) fn valid() -> GraphSpec {
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
