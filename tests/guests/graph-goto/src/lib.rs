//! `Command` control flow. `start` returns a command that writes
//! `visited: ["start"]`, `goto`s `jumped`, and sends `{"job": 1}` and
//! `{"job": 2}` to `worker`; it also has a static edge to `static_next`,
//! which still runs (goto adds to static edges). All of `jumped`,
//! `static_next`, `worker` ×2 run in the next superstep and append to
//! `visited`, so the final `visited` is, in some order within the second
//! step: `["start", "jumped", "static_next", "worker:1", "worker:2"]`.
//!
//! With input `{"goto_end": true}`, `start` instead `goto`s END and sends
//! nothing: `visited` is `["start", "static_next"]`.
//!
//! The spec has no place for a node's `goto`/`send` destinations, and the
//! host requires every node to be reachable from START, so the router
//! `destinations` (after `start`) declares them in its path map and always
//! answers with no route at all.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{Command, END, Graph, Reducer, START, Update};
use serde::Deserialize;

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    goto_end: bool,
}

#[derive(Deserialize)]
struct Job {
    job: i64,
}

fn start(input: Input) -> Command {
    let command = Command::new().update(Update::new().push("visited", "start"));
    if input.goto_end {
        command.goto(END)
    } else {
        command
            .goto("jumped")
            .send("worker", json!({"job": 1}))
            .send("worker", json!({"job": 2}))
    }
}

fn graph() -> Graph {
    Graph::new("graph_goto")
        .channel("goto_end", Reducer::LastValue)
        .channel("visited", Reducer::Append)
        .node("start", start)
        .node("jumped", |_: Value| Update::new().push("visited", "jumped"))
        .node("static_next", |_: Value| {
            Update::new().push("visited", "static_next")
        })
        .node("worker", |job: Job| {
            Update::new().push("visited", format!("worker:{}", job.job))
        })
        .edge(START, "start")
        .edge("start", "static_next")
        .conditional_edges(
            "start",
            "destinations",
            |_: Value| None::<&str>,
            [("jumped", "jumped"), ("worker", "worker")],
        )
        .edge("jumped", END)
        .edge("static_next", END)
        .edge("worker", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
