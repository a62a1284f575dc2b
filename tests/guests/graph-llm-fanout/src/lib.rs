//! Parallel tasks that each ask the host's model through the `llm`
//! capability: `plan` sends one `ask` task per `n`, each makes one chat
//! call (alias `fast`) and appends the answer's content (or
//! `{"error": message}`) to `answers`.
//!
//! `{"n": 4}` ends with four answers.

use sandgraph_sdk::llm::ChatRequest;
use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Send, Update};
use serde::Deserialize;

#[derive(Deserialize)]
struct Plan {
    n: u32,
}

fn ask(_: Value, ctx: &Context) -> Update {
    let request = ChatRequest::new().model("fast").user("q");
    let answer = match ctx.llm().chat(&request) {
        Ok(answer) => json!(answer.content),
        Err(e) => json!({"error": e.message()}),
    };
    Update::new().push("answers", answer)
}

fn graph() -> Graph {
    Graph::new("graph_llm_fanout")
        .description("Ask the host's model from parallel tasks.")
        .channel("n", Reducer::LastValue)
        .channel("answers", Reducer::Append)
        .node("plan", |_: Value| Update::new())
        .edge(START, "plan")
        .conditional_edges(
            "plan",
            "fan_out",
            |s: Plan| {
                (0..s.n)
                    .map(|_| Send::new("ask", json!({})))
                    .collect::<Vec<_>>()
            },
            None,
        )
        .node_with_context("ask", ask)
        .edge("ask", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
