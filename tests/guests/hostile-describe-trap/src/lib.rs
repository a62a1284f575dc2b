//! A graph whose `describe` panics with `describe refuses to describe
//! itself`: the instance traps, and the load fails naming the trap.
//!
//! The panic is compiled for wasm only, so the native test below can check
//! the graph it would describe.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};

fn noop(_: Value) -> Update {
    Update::new()
}

// On wasm the code after the hostile call is unreachable, on purpose.
#[cfg_attr(target_arch = "wasm32", allow(unreachable_code))]
fn graph() -> Graph {
    #[cfg(target_arch = "wasm32")]
    panic!("describe refuses to describe itself");
    Graph::new("hostile_describe_trap")
        .node("noop", noop)
        .edge(START, "noop")
        .edge("noop", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
