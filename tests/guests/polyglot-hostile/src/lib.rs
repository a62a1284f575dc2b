//! `hostile_graph`: the Rust twin of the Python and JavaScript hostile
//! graphs (`tests/polyglot/<lang>/hostile`), so the conformance cases in
//! `tests/conformance/hostile` hold the three languages to the same
//! containment. One node, `act`, misbehaves as `mode` says:
//!
//! - `loop`: spins forever without calling the host;
//! - `bomb`: keeps 1 MiB buffers, touched, without bound;
//! - `huge`: writes a 20,000,000-character string to `out` (over the
//!   host's 16 MiB bound on a JSON value from a guest);
//! - `raise`: fails with "hostile raise";
//! - anything else: writes `out: "ok"`.

use sandgraph_sdk::{END, Graph, NodeError, Reducer, START, Update};
use std::hint::black_box;

const CHUNK: usize = 1 << 20;
const PAGE: usize = 4096;

#[derive(serde::Deserialize)]
struct State {
    #[serde(default)]
    mode: String,
}

fn act(s: State) -> Result<Update, NodeError> {
    match s.mode.as_str() {
        "loop" => {
            let mut n: u64 = 0;
            loop {
                n = black_box(n.wrapping_add(1));
            }
        }
        "bomb" => {
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
        "huge" => Ok(Update::new().set("out", "x".repeat(20_000_000))),
        "raise" => Err(NodeError::msg("hostile raise")),
        _ => Ok(Update::new().set("out", "ok")),
    }
}

fn graph() -> Graph {
    Graph::new("hostile_graph")
        .description("Misbehaves as `mode` says: loop, bomb, huge, raise.")
        .channel("mode", Reducer::LastValue)
        .channel("out", Reducer::LastValue)
        .node("act", act)
        .edge(START, "act")
        .edge("act", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
