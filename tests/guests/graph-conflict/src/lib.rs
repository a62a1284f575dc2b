//! Two parallel nodes, `a` and `b`, both write the last-value channel
//! `value` in the same superstep: the host must fail the run with a conflict.
//! Both also push to the append channel `log`, which is fine on its own.
//!
//! With input `{"only_a": true}`, `b` writes nothing to `value` and the run
//! succeeds with `value: "a"`.

use sandgraph_sdk::{END, Graph, Reducer, START, Update};
use serde::Deserialize;

#[derive(Deserialize)]
struct State {
    #[serde(default)]
    only_a: bool,
}

fn graph() -> Graph {
    Graph::new("graph_conflict")
        .channel("only_a", Reducer::LastValue)
        .channel("value", Reducer::LastValue)
        .channel("log", Reducer::Append)
        .node("a", |_: State| {
            Update::new().set("value", "a").push("log", "a")
        })
        .node("b", |s: State| {
            let update = Update::new().push("log", "b");
            if s.only_a {
                update
            } else {
                update.set("value", "b")
            }
        })
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
