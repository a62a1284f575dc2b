//! A flood of run events: `emit` runs `steps` times (from the input,
//! default 40), each time writing `blob`, 16 strings of 60 KiB (about
//! 1 MiB, each string under the studio's 64 KiB cut and the whole under
//! its 1 MiB bound on one value, so every step's event is streamed whole),
//! and counting `done`. A streaming client that never reads must not make
//! the host hold all of it, nor hold the run back.
//!
//! `{"steps": 3}` ends as `{"steps": 3, "done": 3, "blob": [...]}`.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

/// Strings in each step's `blob`.
const STRINGS: usize = 16;

/// Bytes of each string.
const STRING_BYTES: usize = 60 * 1024;

/// Steps when the input names none.
const DEFAULT_STEPS: u64 = 40;

fn emit(state: Value) -> Update {
    let done = state["done"].as_u64().unwrap_or(0) + 1;
    let fill = char::from(b'a' + (done % 26) as u8);
    let blob: Vec<String> = (0..STRINGS)
        .map(|_| fill.to_string().repeat(STRING_BYTES))
        .collect();
    Update::new().set("done", done).set("blob", blob)
}

fn after_emit(state: Value) -> &'static str {
    let steps = state["steps"].as_u64().unwrap_or(DEFAULT_STEPS);
    if state["done"].as_u64().unwrap_or(0) >= steps {
        "finished"
    } else {
        "again"
    }
}

fn graph() -> Graph {
    Graph::new("hostile_stream_flood")
        .channel("steps", Reducer::LastValue)
        .channel("done", Reducer::LastValue)
        .channel("blob", Reducer::LastValue)
        .node("emit", emit)
        .edge(START, "emit")
        .conditional_edges(
            "emit",
            "after_emit",
            after_emit,
            [("again", "emit"), ("finished", END)],
        )
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
