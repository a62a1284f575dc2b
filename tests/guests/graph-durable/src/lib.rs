//! A multi-step graph for crash tests: `start` → (`fast`, `slow`) → join
//! `merge` → `finish`. `slow` takes `slow_ms` (default 150) milliseconds.
//! Every node appends its name to `trail` and logs `ran <node>` through the
//! host just before it returns, so a test can count executions.
//!
//! `{}` ends as `{"trail": ["start", "fast", "slow", "merge", "finish"], ...}`.

use std::time::{Duration, Instant};

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update, log};

fn step(name: &'static str) -> impl Fn(Value) -> Update {
    move |_| {
        log::info(format!("ran {name}"));
        Update::new().push("trail", name)
    }
}

fn slow(s: Value) -> Update {
    let ms = s["slow_ms"].as_u64().unwrap_or(150);
    // Busy work rather than sleep, so the host's fuel and epochs see it.
    let until = Instant::now() + Duration::from_millis(ms);
    let mut n = 0u64;
    while Instant::now() < until {
        n = std::hint::black_box(n.wrapping_add(1));
    }
    log::info("ran slow");
    Update::new().push("trail", "slow")
}

fn graph() -> Graph {
    Graph::new("graph_durable")
        .channel("slow_ms", Reducer::LastValue)
        .channel("trail", Reducer::Append)
        .node("start", step("start"))
        .node("fast", step("fast"))
        .node("slow", slow)
        .node("merge", step("merge"))
        .node("finish", step("finish"))
        .edge(START, "start")
        .edge("start", "fast")
        .edge("start", "slow")
        .join(["fast", "slow"], "merge")
        .edge("merge", "finish")
        .edge("finish", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
