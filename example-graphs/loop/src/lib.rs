//! `loop_graph`: `count` adds one to `n` and loops back through the router
//! `should_continue` while `n < target`.
//!
//! `{"target": 3}` ends as `{"n": 3, "target": 3}`.

use sandgraph_sdk::{END, Graph, Reducer, START, Update};

#[derive(serde::Deserialize)]
struct State {
    n: i64,
    target: i64,
}

fn graph() -> Graph {
    Graph::new("loop_graph")
        .description("Count up to a target, one superstep at a time.")
        .channel_with_default("n", Reducer::LastValue, 0)
        .channel("target", Reducer::LastValue)
        .node("count", |s: State| Update::new().set("n", s.n + 1))
        .edge(START, "count")
        .conditional_edges(
            "count",
            "should_continue",
            |s: State| if s.n < s.target { "continue" } else { "done" },
            [("continue", "count"), ("done", END)],
        )
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
