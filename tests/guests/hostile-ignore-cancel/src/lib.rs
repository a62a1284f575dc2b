//! A node that keeps working (allocating and hashing) forever and never
//! checks `cancelled()`: the soft deadline cannot stop it, only the host's
//! forced stop after the grace period.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::hint::black_box;

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};

fn busy(_: Value) -> Update {
    sandgraph_sdk::log::info("busy: ignoring cancellation");
    let mut round = 0u64;
    loop {
        let mut hasher = DefaultHasher::new();
        let scratch = vec![round; 64];
        scratch.hash(&mut hasher);
        round = black_box(hasher.finish());
    }
}

fn graph() -> Graph {
    Graph::new("hostile_ignore_cancel")
        .node("busy", busy)
        .edge(START, "busy")
        .edge("busy", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
