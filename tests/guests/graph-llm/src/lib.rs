//! Asks the host's model through the `llm` capability and writes what
//! happened into the state.
//!
//! `ask` makes `calls` chat calls (default 1) with the alias `model`
//! (default `"fast"`) and the user message `question`; each outcome is
//! appended to `answers`: `{"content", "finish_reason", "prompt_tokens",
//! "completion_tokens"}` or `{"error": {"kind", "message"}}`. Every
//! failure is handled by the node, so the run completes. With `oversize`
//! the question is padded past the host's 1 MiB request bound (a hostile
//! request). Then `review` interrupts when `review` is true (a durable
//! thread pauses after the model was asked) and writes `approved` with the
//! resume value.

use sandgraph_sdk::llm::ChatRequest;
use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Context, END, Graph, NodeError, Reducer, START, Update};

/// Bytes of padding of an `oversize` request: past the host's 1 MiB.
const OVERSIZE_BYTES: usize = 2 * 1024 * 1024;

fn ask(state: Value, ctx: &Context) -> Update {
    let mut question = state["question"].as_str().unwrap_or("hello?").to_owned();
    if state["oversize"] == json!(true) {
        question.push_str(&"x".repeat(OVERSIZE_BYTES));
    }
    let model = state["model"].as_str().unwrap_or("fast");
    let calls = state["calls"].as_u64().unwrap_or(1);
    let request = ChatRequest::new()
        .model(model)
        .system("Answer briefly.")
        .user(question);
    let mut update = Update::new();
    for _ in 0..calls {
        let outcome = match ctx.llm().chat(&request) {
            Ok(answer) => json!({
                "content": answer.content,
                "finish_reason": answer.finish_reason,
                "prompt_tokens": answer.usage.prompt_tokens,
                "completion_tokens": answer.usage.completion_tokens,
            }),
            Err(e) => json!({"error": {"kind": e.kind(), "message": e.message()}}),
        };
        update = update.push("answers", outcome);
    }
    update
}

fn review(state: Value, ctx: &Context) -> Result<Update, NodeError> {
    if state["review"] != json!(true) {
        return Ok(Update::new());
    }
    let approved = ctx.interrupt(json!({"answers": state["answers"]}))?;
    Ok(Update::new().set("approved", approved))
}

fn graph() -> Graph {
    Graph::new("graph_llm")
        .description("Ask the host's model a question.")
        .channel("question", Reducer::LastValue)
        .channel("model", Reducer::LastValue)
        .channel("calls", Reducer::LastValue)
        .channel("oversize", Reducer::LastValue)
        .channel("review", Reducer::LastValue)
        .channel("answers", Reducer::Append)
        .channel("approved", Reducer::LastValue)
        .node_with_context("ask", ask)
        .node_with_context("review", review)
        .edge(START, "ask")
        .edge("ask", "review")
        .edge("review", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
