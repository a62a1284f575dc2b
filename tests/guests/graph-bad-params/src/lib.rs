//! A graph whose parameter spec the registry must refuse: `required` may
//! only be the literal `true`, so mounting fails with
//! `unsupported JSON schema: parameters.x.required must be true when present`.
//! The spec itself is well formed (parameters are an object), so the
//! runtime loads it.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

fn graph() -> Graph {
    Graph::new("graph_bad_params")
        .as_tool(true)
        .parameters(json!({"x": {"type": "string", "required": false}}))
        .channel("x", Reducer::LastValue)
        .node("a", |_: Value| Update::new())
        .edge(START, "a")
        .edge("a", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid_apart_from_its_parameters() {
        super::graph().check().unwrap();
    }
}
