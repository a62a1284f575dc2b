//! Human-in-the-loop. `prepare` appends `"prepared"` to `log`; then `ask`
//! interrupts twice in one task:
//!
//! 1. payload `{"question": "approve?"}`; resumed with any JSON value `A`,
//! 2. payload `{"question": "name?", "approved": A}`; resumed with `B`,
//!
//! and finally writes `approved: A`, `name: B` and appends `"asked"`. A
//! resumed run re-runs `ask` from the top (with the resume values so far)
//! but never `prepare` again, so `log` ends as `["prepared", "asked"]`.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Context, END, Graph, NodeError, Reducer, START, Update};

fn ask(_: Value, ctx: &Context) -> Result<Update, NodeError> {
    let approved = ctx.interrupt(json!({"question": "approve?"}))?;
    let name = ctx.interrupt(json!({"question": "name?", "approved": approved}))?;
    Ok(Update::new()
        .set("approved", approved)
        .set("name", name)
        .push("log", "asked"))
}

fn graph() -> Graph {
    Graph::new("graph_interrupt")
        .channel("log", Reducer::Append)
        .channel("approved", Reducer::LastValue)
        .channel("name", Reducer::LastValue)
        .node("prepare", |_: Value| Update::new().push("log", "prepared"))
        .node_with_context("ask", ask)
        .edge(START, "prepare")
        .edge("prepare", "ask")
        .edge("ask", END)
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
    fn asks_twice() {
        let err = ask(json!({}), &Context::default()).unwrap_err();
        assert!(err.is_interrupt());
        let ctx = Context::default().with_resume([json!(true)]);
        assert!(ask(json!({}), &ctx).unwrap_err().is_interrupt());
        let ctx = Context::default().with_resume([json!(true), json!("Ada")]);
        let update = ask(json!({}), &ctx).unwrap();
        assert_eq!(update.get("name"), Some(&json!("Ada")));
    }
}
