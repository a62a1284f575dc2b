//! A node that recurses without bound, each frame holding a 512-byte
//! buffer, until the wasm stack overflows and the instance traps.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};
use std::hint::black_box;

#[inline(never)]
fn dive(depth: u64) -> u64 {
    // Never true; keeps `unconditional_recursion` quiet.
    if depth == u64::MAX {
        return 0;
    }
    let mut frame = [0u8; 512];
    frame[(depth % 512) as usize] = depth as u8;
    black_box(&mut frame);
    // Not a tail call: the frame is still live after the call returns.
    dive(black_box(depth + 1)).wrapping_add(u64::from(frame[(depth % 7) as usize]))
}

fn recurse(_: Value) -> Update {
    Update::new().set("depth", dive(0))
}

fn graph() -> Graph {
    Graph::new("hostile_recursion")
        .channel("depth", sandgraph_sdk::Reducer::LastValue)
        .node("recurse", recurse)
        .edge(START, "recurse")
        .edge("recurse", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
