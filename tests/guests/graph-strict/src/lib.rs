//! A strict graph. Channels: `topic` (last value), `mode` (last value) and
//! `tags` (append). `tag` pushes the topic onto `tags`; with
//! `mode: "typo"` it writes `tgas` instead, a channel the graph does not
//! declare, which a strict graph refuses as `invalid_update` (a non-strict
//! one would drop it with a warning). An input key that is not a channel
//! (`tpoic`) is refused as `invalid_input` before any node runs.

use sandgraph_sdk::{END, Graph, Reducer, START, Update};
use serde::Deserialize;

#[derive(Deserialize)]
struct State {
    topic: String,
    #[serde(default)]
    mode: Option<String>,
}

fn tag(state: State) -> Update {
    let channel = match state.mode.as_deref() {
        Some("typo") => "tgas",
        _ => "tags",
    };
    Update::new().push(channel, state.topic)
}

fn graph() -> Graph {
    Graph::new("graph_strict")
        .strict()
        .channel("topic", Reducer::LastValue)
        .channel("mode", Reducer::LastValue)
        .channel("tags", Reducer::Append)
        .node("tag", tag)
        .edge(START, "tag")
        .edge("tag", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
