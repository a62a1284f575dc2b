//! A valid graph named `run_code`, a name reserved for the code-running
//! tool. The runtime loads it (the name is well formed), but the graph tool
//! registry must refuse to mount it: `the name "run_code" is reserved`.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

fn graph() -> Graph {
    Graph::new("run_code")
        .channel("ran", Reducer::LastValue)
        .node("run", |_: Value| Update::new().set("ran", true))
        .edge(START, "run")
        .edge("run", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn check_flags_the_reserved_name() {
        assert_eq!(
            super::graph().check(),
            Err(r#"graph name "run_code" is reserved"#.to_owned())
        );
    }
}
