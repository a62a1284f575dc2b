//! A node that fails with a 32 MiB message written to attack whoever reads
//! it: it starts with an OSC sequence that retitles a terminal
//! (`ESC ]0;pwned BEL`), then forges a host line (`\nerror[ok]: forged`),
//! colours the rest red and pads it with more forged lines. The host must
//! cap the message (marking the cut) and show every control character as
//! a visible escape, on the terminal, in the journal and over MCP.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, NodeError, START, Update};

/// Size of the error message: far past any cap the host may keep.
const MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// The message: escapes and forged lines first, then padding of more
/// forged lines up to [`MESSAGE_BYTES`].
fn message() -> String {
    let mut m = String::with_capacity(MESSAGE_BYTES);
    m.push_str("\u{1b}]0;pwned\u{7}");
    m.push_str("\nerror[ok]: forged\r\n\u{1b}[31m\u{9b}2J");
    let filler = "\nerror[ok]: forged line\u{1b}[2K";
    while m.len() + filler.len() <= MESSAGE_BYTES {
        m.push_str(filler);
    }
    while m.len() < MESSAGE_BYTES {
        m.push('x');
    }
    m
}

fn fail(_: Value) -> Result<Update, NodeError> {
    Err(NodeError::msg(message()))
}

fn graph() -> Graph {
    Graph::new("hostile_escape_error")
        .node("fail", fail)
        .edge(START, "fail")
        .edge("fail", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }

    #[test]
    fn message_is_32_mib_and_hostile() {
        let m = super::message();
        assert_eq!(m.len(), super::MESSAGE_BYTES);
        assert!(m.starts_with("\u{1b}]0;pwned\u{7}"));
        assert!(m.contains("\nerror[ok]: forged"));
    }
}
