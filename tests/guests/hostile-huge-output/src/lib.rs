//! A node whose update is a 20 MiB JSON string: over the host's 16 MiB
//! bound on a returned value, well within a 128 MiB memory limit.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

const SIZE: usize = 20 << 20;

fn graph() -> Graph {
    Graph::new("hostile_huge_output")
        .channel("blob", Reducer::LastValue)
        .node("emit", |_: Value| {
            Update::new().set("blob", "x".repeat(SIZE))
        })
        .edge(START, "emit")
        .edge("emit", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
