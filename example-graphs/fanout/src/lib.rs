//! `fanout_graph`: `split` fans out to eight parallel branches `b0`..`b7`,
//! each appending its name to `items`; a join barrier then runs `join`,
//! which counts them (`count: 8`).

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

const BRANCHES: usize = 8;

#[derive(serde::Deserialize)]
struct Items {
    items: Vec<String>,
}

fn graph() -> Graph {
    let branches: Vec<String> = (0..BRANCHES).map(|i| format!("b{i}")).collect();
    let graph = Graph::new("fanout_graph")
        .description("Run eight branches in parallel and count their results.")
        .channel("items", Reducer::Append)
        .channel("count", Reducer::LastValue)
        .node("split", |_: Value| Update::new())
        .edge(START, "split");
    branches
        .iter()
        .fold(graph, |graph, branch| {
            let item = branch.clone();
            graph
                .node(branch, move |_: Value| Update::new().push("items", &item))
                .edge("split", branch)
        })
        .node("join", |s: Items| Update::new().set("count", s.items.len()))
        .join(&branches, "join")
        .edge("join", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
