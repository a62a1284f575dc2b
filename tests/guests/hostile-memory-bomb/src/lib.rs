//! A node that allocates 1 MiB chunks and touches every page, without
//! bound, until the host's memory limit stops it (the allocation fails and
//! the instance traps).

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};
use std::hint::black_box;

const CHUNK: usize = 1 << 20;
const PAGE: usize = 4096;

fn hoard(_: Value) -> Update {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; CHUNK];
        for page in chunk.chunks_mut(PAGE) {
            page[0] = 0xAB;
        }
        chunks.push(black_box(chunk));
        black_box(&chunks);
    }
}

fn graph() -> Graph {
    Graph::new("hostile_memory_bomb")
        .node("hoard", hoard)
        .edge(START, "hoard")
        .edge("hoard", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
