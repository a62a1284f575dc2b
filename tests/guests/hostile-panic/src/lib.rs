//! A node that panics with the message `boom from guest`. The SDK forwards
//! the panic message to the host log, then the instance traps.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};

fn explode(_: Value) -> Update {
    panic!("boom from guest");
}

fn graph() -> Graph {
    Graph::new("hostile_panic")
        .node("explode", explode)
        .edge(START, "explode")
        .edge("explode", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
