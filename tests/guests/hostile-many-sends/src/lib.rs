//! One node result with 200,000 `Send`s (tiny payloads) to `sink`: a
//! superstep of 200,000 tasks, far past any sane fan-out. The host must
//! refuse it with `invalid_update` naming the node and the count, not
//! queue the tasks (or run out of memory or time trying).
//!
//! The spec has no place for a command's send targets, and every node must
//! be reachable from START, so the router `destinations` (after `start`)
//! declares `sink` in its path map and always answers with no route.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{Command, END, Graph, START, Send, Update};

/// Sends in the one node result.
const SENDS: u32 = 200_000;

fn start(_: Value) -> Command {
    Command::new().sends((0..SENDS).map(|i| Send::new("sink", i)))
}

fn graph() -> Graph {
    Graph::new("hostile_many_sends")
        .node("start", start)
        .node("sink", |_: Value| Update::new())
        .edge(START, "start")
        .conditional_edges(
            "start",
            "destinations",
            |_: Value| None::<&str>,
            [("sink", "sink")],
        )
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
