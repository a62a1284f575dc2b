//! A fan-out that floods the host with parsed JSON: `plan` sends 64 tasks to
//! `bloat`, and each appends one ~14 MB JSON array of 7,000,000 zeros to
//! the `zeros` channel. Each text is under the host's bound on one returned
//! value, but parsed into JSON values it grows ~30x, and 64 of them would
//! take tens of GiB of host memory: only a host-side byte budget per run
//! stops it (with `memory_limit`).
//!
//! The update text is written directly (`raw_json_unchecked`; it is valid
//! JSON): building it as `serde_json` values would need ~0.5 GB of guest
//! memory, past the guest's own cap.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{END, Graph, Reducer, START, Send, Update};

/// Parallel tasks.
const TASKS: u64 = 64;

/// Zeros in each task's array: `[0,0,...]` is 2 bytes per zero, ~14 MB.
const ZEROS: usize = 7_000_000;

/// `{"zeros":[[0,0,...,0]]}`: one item, the array, appended to `zeros`.
fn bloat(_: Value) -> Update {
    let mut text = String::with_capacity(ZEROS * 2 + 16);
    text.push_str(r#"{"zeros":[["#);
    for i in 0..ZEROS {
        if i > 0 {
            text.push(',');
        }
        text.push('0');
    }
    text.push_str("]]}");
    Update::raw_json_unchecked(text)
}

fn graph() -> Graph {
    Graph::new("hostile_fanout_bloat")
        .channel("zeros", Reducer::Append)
        .node("plan", |_: Value| Update::new())
        .edge(START, "plan")
        .conditional_edges(
            "plan",
            "fan_out",
            |_: Value| {
                (0..TASKS)
                    .map(|task| Send::new("bloat", json!({ "task": task })))
                    .collect::<Vec<_>>()
            },
            None,
        )
        .node("bloat", bloat)
        .edge("bloat", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_is_valid() {
        graph().check().unwrap();
    }
}
