//! One result with 200,000 `Send`s (tiny payloads) to `sink`: a superstep
//! of 200,000 tasks, far past any sane fan-out. The host must refuse it
//! with `invalid_update` naming the result's maker and the count, before it
//! parses the payloads (or runs out of memory or time trying).
//!
//! With input `{}` the node `start` returns them in its command. With
//! input `{"via_router": true}` `start` returns no send and its router
//! `destinations` answers with them instead: the bound holds for a
//! router's answer too.
//!
//! The spec has no place for a command's send targets, and every node must
//! be reachable from START, so the router `destinations` (after `start`)
//! declares `sink` in its path map; in the first mode it answers with no
//! route.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{Command, END, Graph, Reducer, Route, START, Send, Update};

/// Sends in the one result.
const SENDS: u32 = 200_000;

fn via_router(state: &Value) -> bool {
    state["via_router"] == Value::Bool(true)
}

fn start(state: Value) -> Command {
    if via_router(&state) {
        return Command::new();
    }
    Command::new().sends((0..SENDS).map(|i| Send::new("sink", i)))
}

fn destinations(state: Value) -> Vec<Route> {
    if !via_router(&state) {
        return Vec::new();
    }
    (0..SENDS).map(|i| Route::send("sink", i)).collect()
}

fn graph() -> Graph {
    Graph::new("hostile_many_sends")
        .channel("via_router", Reducer::LastValue)
        .node("start", start)
        .node("sink", |_: Value| Update::new())
        .edge(START, "start")
        .conditional_edges("start", "destinations", destinations, [("sink", "sink")])
        .edge("sink", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
