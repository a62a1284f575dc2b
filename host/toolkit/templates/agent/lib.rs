//! `{{graph}}`: a sandgraph graph that asks a model. The `ask` node sends
//! the question to the model the operator maps to the alias `default`
//! (through the host, which holds the provider and its key), and writes
//! the `answer`; a failed call (no grant, quota used up, provider down)
//! ends the run with `error` saying why.
//!
//! The host grants models per graph, in the operator's `sandgraph.toml`:
//!
//! ```toml
//! [llm]
//! model = "deepseek-chat"   # the alias "default"
//!
//! [graphs.{{graph}}.grants]
//! llm = { models = ["default"], max_calls = 4, max_tokens = 2000 }
//! ```
//!
//! The golden case `tests/basic.json` replays a recorded exchange
//! (`tests/basic.cassette.jsonl`), so `sandgraph test` needs no model or key.

use sandgraph_sdk::llm::{ChatRequest, ChatResponse, LlmError};
use sandgraph_sdk::serde_json::json;
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Update};
use serde::Deserialize;

/// The model alias the graph asks; the operator maps it to a model.
const MODEL: &str = "default";

/// Most tokens of an answer.
const MAX_ANSWER_TOKENS: u32 = 200;

const SYSTEM: &str = "Answer the question in one short sentence.";

#[derive(Deserialize)]
struct State {
    question: String,
}

/// The request for `question`: everything the model is asked.
fn request(question: &str) -> ChatRequest {
    ChatRequest::new()
        .model(MODEL)
        .system(SYSTEM)
        .user(question)
        .max_tokens(MAX_ANSWER_TOKENS)
}

/// The update for the model's reply, or for why there is none.
fn answer(reply: Result<ChatResponse, LlmError>) -> Update {
    match reply {
        Ok(reply) => Update::new().set("answer", reply.content.trim()),
        Err(e) => Update::new().set("error", e.to_string()),
    }
}

/// Asks the model.
fn ask(s: State, ctx: &Context) -> Update {
    answer(ctx.llm().chat(&request(&s.question)))
}

/// The graph. Strict: an input key or a node write that names no channel
/// fails the run, naming the key.
pub fn graph() -> Graph {
    Graph::new("{{graph}}")
        .description("Answer a question in one sentence, asking a model.")
        .as_tool(true)
        .parameters(json!({
            "question": {"type": "string", "required": true, "description": "What to answer."}
        }))
        .strict()
        .channel("question", Reducer::LastValue)
        .channel("answer", Reducer::LastValue)
        .channel("error", Reducer::LastValue)
        .node_with_context("ask", ask)
        .describe_node("ask", "Ask the model the question.")
        .edge(START, "ask")
        .edge("ask", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    use sandgraph_sdk::llm::{Role, Usage};

    use super::*;

    #[test]
    fn graph_is_valid() {
        graph().check().unwrap();
    }

    // Off wasm there is no host to ask: the node's parts are tested alone.
    #[test]
    fn the_request_asks_the_question() {
        let r = request("Why wasm?");
        assert_eq!(r.model.as_deref(), Some(MODEL));
        assert_eq!(r.messages.len(), 2);
        assert_eq!(r.messages[0].role, Role::System);
        assert_eq!(r.messages[1].role, Role::User);
        assert_eq!(r.messages[1].content, "Why wasm?");
    }

    #[test]
    fn the_answer_or_the_error_is_written() {
        let reply = ChatResponse {
            content: " Because. ".into(),
            tool_calls: Vec::new(),
            finish_reason: "stop".into(),
            usage: Usage::default(),
        };
        assert_eq!(answer(Ok(reply)).get("answer"), Some(&json!("Because.")));
        let denied = answer(Err(LlmError::Denied("no grant".into())));
        assert!(denied.get("answer").is_none());
        assert!(denied.get("error").is_some());
    }
}
