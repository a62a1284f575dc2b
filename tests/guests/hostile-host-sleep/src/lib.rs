//! A node blocked in a host call: `std::thread::sleep` for an hour, which
//! on wasm32-wasip2 waits on a WASI clock pollable inside the host. No wasm
//! runs while it waits, so neither fuel nor epoch interruption can end it;
//! the host must end it when the run is cancelled or its deadline passes.

use std::time::Duration;

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

fn sleep(_: Value) -> Update {
    std::thread::sleep(Duration::from_secs(3600));
    Update::new().set("woke", true)
}

fn graph() -> Graph {
    Graph::new("hostile_host_sleep")
        .channel("woke", Reducer::LastValue)
        .node("sleep", sleep)
        .edge(START, "sleep")
        .edge("sleep", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
