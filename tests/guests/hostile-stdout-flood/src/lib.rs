//! A node that writes 10 MiB to stdout and 10 MiB to stderr, then returns
//! `{"done": true}` normally. Write errors are ignored: the host may close
//! or discard both streams.

use std::io::Write;

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

const TOTAL: usize = 10 << 20;
const LINE: &[u8] = b"flood flood flood flood flood flood flood flood flood flood flood\n";

fn flood(out: &mut dyn Write) -> usize {
    let mut written = 0;
    while written < TOTAL {
        match out.write(LINE) {
            Ok(0) | Err(_) => break,
            Ok(n) => written += n,
        }
    }
    let _ = out.flush();
    written
}

fn graph() -> Graph {
    Graph::new("hostile_stdout_flood")
        .channel("done", Reducer::LastValue)
        .channel("stdout_bytes", Reducer::LastValue)
        .channel("stderr_bytes", Reducer::LastValue)
        .node("flood", |_: Value| {
            let stdout = flood(&mut std::io::stdout().lock());
            let stderr = flood(&mut std::io::stderr().lock());
            Update::new()
                .set("done", true)
                .set("stdout_bytes", stdout)
                .set("stderr_bytes", stderr)
        })
        .edge(START, "flood")
        .edge("flood", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
