//! Calls the graph tool named by `tool` with `args` through the host's
//! `tools` capability, and writes what happened into the state: `result`
//! (the tool's final state) or `error` (`{"kind", "message"}`), plus
//! `listed`, the names `tools.list()` returned. A call that fails is
//! handled by the node, so the run itself completes.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Update};

fn call(state: Value, ctx: &Context) -> Update {
    let tools = ctx.tools();
    let listed: Vec<String> = tools.list().into_iter().map(|t| t.name).collect();
    let tool = state["tool"].as_str().unwrap_or_default();
    let update = Update::new().set("listed", listed);
    match tools.call(tool, &state["args"]) {
        Ok(result) => update.set("result", result),
        Err(e) => update.set("error", json!({"kind": e.kind(), "message": e.to_string()})),
    }
}

fn graph() -> Graph {
    Graph::new("graph_tools")
        .description("Call the graph tool named in the input.")
        .channel("tool", Reducer::LastValue)
        .channel("args", Reducer::LastValue)
        .channel("listed", Reducer::LastValue)
        .channel("result", Reducer::LastValue)
        .channel("error", Reducer::LastValue)
        .node_with_context("call", call)
        .edge(START, "call")
        .edge("call", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
