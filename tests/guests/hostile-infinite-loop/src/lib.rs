//! A node that spins forever in pure computation: no host calls, no
//! allocation. Only the host's forced stop (epoch interruption or fuel) ends
//! it.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};
use std::hint::black_box;

fn spin(_: Value) -> Update {
    let mut n = 0u64;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

fn graph() -> Graph {
    Graph::new("hostile_infinite_loop")
        .node("spin", spin)
        .edge(START, "spin")
        .edge("spin", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
