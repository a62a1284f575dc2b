//! `bench_chain`: ten sequential nodes `n0` → `n1` → … → `n9`, each
//! appending its own name to `trail`. Used by the runtime benchmark to cost
//! one superstep of a straight-line graph.
//!
//! `{}` ends as `{"trail": ["n0", "n1", …, "n9"]}`.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

const NODES: usize = 10;

fn graph() -> Graph {
    let names: Vec<String> = (0..NODES).map(|i| format!("n{i}")).collect();
    let graph = Graph::new("bench_chain")
        .description("Ten sequential nodes, each appending its name to a list.")
        .channel("trail", Reducer::Append);
    let graph = names.iter().fold(graph, |graph, name| {
        let item = name.clone();
        graph.node(name, move |_: Value| Update::new().push("trail", &item))
    });
    let mut graph = graph.edge(START, &names[0]);
    for pair in names.windows(2) {
        graph = graph.edge(&pair[0], &pair[1]);
    }
    graph.edge(&names[NODES - 1], END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
