//! Calls the tool named by `tool` (default `no_such_graph`) with `args`
//! (default `{}`) again and again, up to `times` calls (default 1,000,000)
//! or until the host cancels the run, ignoring every refusal: the journal
//! flood of a graph with no grant at all, or, granted a tool, a way to
//! spend that tool's quotas many times over. Writes how many calls it made,
//! how many succeeded, and the last error's kind and message.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Update};

fn flood(state: Value, ctx: &Context) -> Update {
    let tool = state["tool"].as_str().unwrap_or("no_such_graph");
    let times = state["times"].as_u64().unwrap_or(1_000_000);
    let tools = ctx.tools();
    let args = match &state["args"] {
        Value::Null => json!({}),
        args => args.clone(),
    };
    let (mut made, mut ok) = (0u64, 0u64);
    let mut last = Value::Null;
    while made < times {
        made += 1;
        match tools.call(tool, &args) {
            Ok(_) => ok += 1,
            Err(e) => last = json!({"kind": e.kind(), "message": e.to_string()}),
        }
    }
    Update::new()
        .set("made", made)
        .set("ok", ok)
        .set("last_error", last)
}

fn graph() -> Graph {
    Graph::new("hostile_refusal_loop")
        .description("Loop on a refused capability call.")
        .channel("tool", Reducer::LastValue)
        .channel("times", Reducer::LastValue)
        .channel("args", Reducer::LastValue)
        .channel("made", Reducer::LastValue)
        .channel("ok", Reducer::LastValue)
        .channel("last_error", Reducer::LastValue)
        .node_with_context("flood", flood)
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
