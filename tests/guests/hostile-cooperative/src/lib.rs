//! A node that spins until `ctx.cancelled()` turns true, then returns
//! `{"stopped_early": true}` (and how many polls it made): the soft deadline
//! converges without a forced stop.

use std::hint::black_box;

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Update};

/// Iterations between polls: keeps host calls cheap relative to the work.
const POLL_EVERY: u64 = 1 << 14;

fn work(_: Value, ctx: &Context) -> Update {
    let mut polls = 0u64;
    let mut n = 0u64;
    loop {
        for _ in 0..POLL_EVERY {
            n = black_box(n.wrapping_add(1));
        }
        polls += 1;
        if ctx.cancelled() {
            return Update::new().set("stopped_early", true).set("polls", polls);
        }
    }
}

fn graph() -> Graph {
    Graph::new("hostile_cooperative")
        .channel("stopped_early", Reducer::LastValue)
        .channel("polls", Reducer::LastValue)
        .node_with_context("work", work)
        .edge(START, "work")
        .edge("work", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
