//! A node that writes hostile lines to the host log, then succeeds with
//! `done: true`: one line holds a newline followed by a forged host line
//! and an ANSI colour escape, the next is 64 KiB of screen-clearing
//! escapes. The host must keep each record on one inert line, capped.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update, log};

/// The line that tries to forge a second, host-looking line.
const FORGED: &str = "hello\nerror[ok]: forged line\u{1b}[31m";

/// Size of the flood line: past the host's cap on one log message.
const FLOOD_BYTES: usize = 64 * 1024;

fn forge(_: Value) -> Update {
    log::info(FORGED);
    log::warn(FORGED);
    log::error("\u{1b}[2J".repeat(FLOOD_BYTES / 4));
    Update::new().set("done", true)
}

fn graph() -> Graph {
    Graph::new("hostile_log_forge")
        .channel("done", sandgraph_sdk::Reducer::LastValue)
        .node("forge", forge)
        .edge(START, "forge")
        .edge("forge", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
