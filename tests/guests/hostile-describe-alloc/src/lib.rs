//! A graph whose `describe` allocates 1 MiB chunks and touches every page,
//! without bound, until the load memory cap refuses an allocation (the
//! instance then traps).
//!
//! The hoarding is compiled for wasm only, so the native test below can
//! check the graph it would describe.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};

fn noop(_: Value) -> Update {
    Update::new()
}

#[cfg(target_arch = "wasm32")]
fn hoard() -> ! {
    const CHUNK: usize = 1 << 20;
    const PAGE: usize = 4096;
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; CHUNK];
        for page in chunk.chunks_mut(PAGE) {
            page[0] = 0xAB;
        }
        chunks.push(std::hint::black_box(chunk));
        std::hint::black_box(&chunks);
    }
}

// On wasm the code after the hostile call is unreachable, on purpose.
#[cfg_attr(target_arch = "wasm32", allow(unreachable_code))]
fn graph() -> Graph {
    #[cfg(target_arch = "wasm32")]
    hoard();
    Graph::new("hostile_describe_alloc")
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
