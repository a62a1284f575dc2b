//! `approval_graph`: drafts a text about `topic`, then interrupts with the
//! draft and asks for approval. `"yes"` publishes it (`published: true`) and
//! ends; any other answer counts a revision, revises the draft and asks again.
//!
//! Run it on a durable thread: `sandgraph run approval.wasm --thread t1
//! --input '{"topic":"wasm"}'`, then `--resume '"no"'` or `--resume '"yes"'`.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Context, END, Graph, NodeError, Reducer, START, Update};

#[derive(serde::Deserialize)]
struct State {
    topic: String,
    #[serde(default)]
    revisions: i64,
    #[serde(default)]
    draft: String,
}

fn draft(s: State) -> Update {
    let text = match s.revisions {
        0 => format!("A short note about {}.", s.topic),
        n => format!("A short note about {} (revision {n}).", s.topic),
    };
    Update::new().set("draft", text)
}

fn review(s: State, ctx: &Context) -> Result<Update, NodeError> {
    let answer = ctx.interrupt(json!({"question": "publish this draft?", "draft": s.draft}))?;
    Ok(if answer == "yes" {
        Update::new().set("published", true)
    } else {
        Update::new().set("revisions", s.revisions + 1)
    })
}

fn graph() -> Graph {
    Graph::new("approval_graph")
        .description("Draft a text about a topic and publish it once a human approves.")
        .channel("topic", Reducer::LastValue)
        .channel("draft", Reducer::LastValue)
        .channel_with_default("revisions", Reducer::LastValue, 0)
        .channel_with_default("published", Reducer::LastValue, false)
        .node("draft", draft)
        .node_with_context("review", review)
        .edge(START, "draft")
        .edge("draft", "review")
        .conditional_edges(
            "review",
            "after_review",
            |s: Value| {
                if s["published"] == true {
                    "publish"
                } else {
                    "revise"
                }
            },
            [("publish", END), ("revise", "draft")],
        )
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
