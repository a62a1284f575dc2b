//! A fan-out of spinning tasks: `plan` sends `n` tasks (default 300) to
//! `spin`, and each loops forever in pure computation (no host calls, no
//! allocation), so only the host's forced stop ends them. One call of this
//! graph asks for far more instances at once than any fair share; the
//! noisy-neighbour test runs it beside an unrelated client's calls.
//!
//! Called as a tool with `{"n": 300}`, or with no arguments.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{END, Graph, Reducer, START, Send, Update};
use serde::Deserialize;
use std::hint::black_box;

/// Tasks sent when the call does not say.
const DEFAULT_TASKS: u64 = 300;

#[derive(Deserialize)]
struct Plan {
    #[serde(default = "default_tasks")]
    n: u64,
}

fn default_tasks() -> u64 {
    DEFAULT_TASKS
}

fn spin(_: Value) -> Update {
    let mut n = 0u64;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

fn graph() -> Graph {
    Graph::new("hostile_fanout_spin")
        .description("Send n tasks that each spin forever.")
        .as_tool(true)
        .parameters(json!({
            "n": {
                "type": "integer",
                "default": DEFAULT_TASKS,
                "description": "How many spinning tasks to send."
            }
        }))
        .channel("n", Reducer::LastValue)
        .node("plan", |_: Value| Update::new())
        .edge(START, "plan")
        .conditional_edges(
            "plan",
            "fan_out",
            |plan: Plan| {
                (0..plan.n)
                    .map(|task| Send::new("spin", json!({ "task": task })))
                    .collect::<Vec<_>>()
            },
            None,
        )
        .node("spin", spin)
        .edge("spin", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
