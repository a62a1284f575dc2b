//! The seed's `echo_graph`: appends `seen:<topic>` to the `log` list.
//!
//! `{"topic": "hi"}` ends as `{"topic": "hi", "log": ["seen:hi"]}`.

use sandgraph_sdk::{END, Graph, Reducer, START, Update};

#[derive(serde::Deserialize)]
struct State {
    topic: String,
}

fn graph() -> Graph {
    Graph::new("echo_graph")
        .description("Echo the given topic.")
        .as_tool(true)
        .channel("topic", Reducer::LastValue)
        .channel("log", Reducer::Append)
        .node("echo", |s: State| {
            Update::new().push("log", format!("seen:{}", s.topic))
        })
        .edge(START, "echo")
        .edge("echo", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
