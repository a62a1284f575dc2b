//! Echoes the call context into the state, so a host can check what it
//! passes through: `tool`, `request`, `thread_id` and `configurable` of the
//! node's context. `validate` refuses a call whose request text contains
//! `not mine`, with the reason `"<tool>" does not handle: <request>`, and
//! panics on one containing `panic in validate`; every `validate` call
//! first logs `validate called` at info level, so a host can count them.
//! The node logs `validate calls in this instance: N` (info), so a host can
//! tell whether a call's `validate` ran in the instance its node runs in.
//! Declares no parameters, so its tool takes one `input` argument, no
//! description, so its tool gets a synthesized one, and a 5 s timeout.

use std::sync::atomic::{AtomicU32, Ordering};

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Update, ValidateContext};

/// `validate` calls made in this instance.
static VALIDATE_CALLS: AtomicU32 = AtomicU32::new(0);

fn echo(_: Value, ctx: &Context) -> Update {
    let calls = VALIDATE_CALLS.load(Ordering::Relaxed);
    sandgraph_sdk::log::info(format!("validate calls in this instance: {calls}"));
    Update::new().set(
        "context",
        json!({
            "tool": ctx.tool(),
            "request": ctx.request(),
            "thread_id": ctx.thread_id(),
            "configurable": ctx.configurable(),
        }),
    )
}

fn check(_: Value, ctx: &ValidateContext) -> Result<(), String> {
    VALIDATE_CALLS.fetch_add(1, Ordering::Relaxed);
    sandgraph_sdk::log::info("validate called");
    match ctx.request() {
        Some(request) if request.contains("panic in validate") => {
            panic!("validate gave up on: {request}")
        }
        Some(request) if request.contains("not mine") => {
            Err(format!("\"{}\" does not handle: {request}", ctx.tool()))
        }
        _ => Ok(()),
    }
}

fn graph() -> Graph {
    Graph::new("graph_context")
        .timeout_ms(5000)
        .channel("topic", Reducer::LastValue)
        .channel("context", Reducer::LastValue)
        .node_with_context("echo", echo)
        .edge(START, "echo")
        .edge("echo", END)
        .validate(check)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_is_valid() {
        graph().check().unwrap();
    }

    #[test]
    fn echoes_the_context_and_refuses_foreign_requests() {
        let ctx = Context::default()
            .with_tool("t")
            .with_thread_id("th")
            .with_request("r");
        let update = echo(json!({}), &ctx);
        assert_eq!(
            update.get("context"),
            Some(&json!({"tool": "t", "request": "r", "thread_id": "th", "configurable": {}}))
        );
        let vctx = ValidateContext::default()
            .with_tool("t")
            .with_request("this is not mine");
        assert_eq!(
            check(json!({}), &vctx),
            Err("\"t\" does not handle: this is not mine".to_owned())
        );
        assert!(check(json!({}), &ValidateContext::default()).is_ok());
    }
}
