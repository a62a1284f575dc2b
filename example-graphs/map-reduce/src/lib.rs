//! `map_reduce_graph`: `plan` fans out one `square` task per item with
//! `Send`; each appends `x * x` to `results`; the `N` tasks then trigger `sum`
//! once, which writes the total.
//!
//! `{"items": [1, 2, 3]}` ends with `total: 14`.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{END, Graph, NodeError, Reducer, START, Send, Update};
use serde::Deserialize;

#[derive(Deserialize)]
struct Plan {
    items: Vec<i64>,
}

#[derive(Deserialize)]
struct Square {
    x: i64,
}

#[derive(Deserialize)]
struct Results {
    results: Vec<i64>,
}

fn graph() -> Graph {
    Graph::new("map_reduce_graph")
        .description("Square every item in parallel, then sum the squares.")
        .channel("items", Reducer::LastValue)
        .channel("results", Reducer::Append)
        .channel("total", Reducer::LastValue)
        .node("plan", |_: Value| Update::new())
        .edge(START, "plan")
        .conditional_edges(
            "plan",
            "fan_out",
            |s: Plan| {
                s.items
                    .into_iter()
                    .map(|x| Send::new("square", json!({ "x": x })))
                    .collect::<Vec<_>>()
            },
            None,
        )
        .node("square", |s: Square| {
            let square = s.x.checked_mul(s.x).ok_or("square overflows i64")?;
            Ok::<_, NodeError>(Update::new().push("results", square))
        })
        .edge("square", "sum")
        .node("sum", |s: Results| {
            let total = s
                .results
                .iter()
                .try_fold(0i64, |sum, x| sum.checked_add(*x));
            let total = total.ok_or("total overflows i64")?;
            Ok::<_, NodeError>(Update::new().set("total", total))
        })
        .edge("sum", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
