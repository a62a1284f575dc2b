//! A routing fallback: every parameter is optional, so `{}` is valid
//! arguments. Writes `handled: "fallback"` and the request it was given.
//!
//! `{}` ends as `{"note": null, "handled": "fallback", "request": <request or null>}`.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Update};

fn handle(_: Value, ctx: &Context) -> Update {
    Update::new()
        .set("handled", "fallback")
        .set("request", ctx.request())
}

fn graph() -> Graph {
    Graph::new("graph_fallback")
        .description("Answers requests no other graph handles.")
        .parameters(json!({"note": {"type": "string", "description": "Optional note."}}))
        .channel("note", Reducer::LastValue)
        .channel("handled", Reducer::LastValue)
        .channel("request", Reducer::LastValue)
        .node_with_context("handle", handle)
        .edge(START, "handle")
        .edge("handle", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
