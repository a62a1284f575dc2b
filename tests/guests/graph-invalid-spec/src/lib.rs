//! A graph whose spec the host must refuse at load: the edge `a -> b`
//! names a node that does not exist. The SDK sends the spec as written;
//! the host's message should read like
//! `edge "a" -> "b": unknown target node "b"`.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};

fn graph() -> Graph {
    Graph::new("graph_invalid_spec")
        .node("a", |_: Value| Update::new())
        .edge(START, "a")
        .edge("a", "b")
        .edge("a", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn check_reports_the_bad_edge() {
        assert_eq!(
            super::graph().check(),
            Err(r#"edge "a" -> "b": unknown target node "b""#.to_owned())
        );
    }
}
