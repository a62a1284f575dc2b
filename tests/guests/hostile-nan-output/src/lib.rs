//! A node whose update is JSON (or nearly) that the host must refuse or
//! handle losslessly, chosen by the input's `mode`:
//!
//! | mode             | update text                        |
//! |------------------|------------------------------------|
//! | `neg_zero`       | `{"x":-0}`                         |
//! | `neg_zero_float` | `{"x":-0.0}`                       |
//! | `big_int`        | `{"x":1152921504606846976}` (2^60) |
//! | `big_neg_int`    | `{"x":-1152921504606846976}`       |
//! | `huge_float`     | `{"x":1e400}`                      |
//! | `dup_key`        | `{"x":1,"x":2}`                    |
//! | `nested_dup_key` | `{"x":{"y":1,"y":2}}`              |
//! | `deep`           | `{"x":[[[…]]]}`, 10 000 levels     |
//! | `nan`            | `{"x":NaN}`                        |
//! | `infinity`       | `{"x":-Infinity}`                  |
//!
//! Any other mode writes `{"x":1}`.

use sandgraph_sdk::{END, Graph, Reducer, START, Update};
use serde::Deserialize;

const DEPTH: usize = 10_000;

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    mode: String,
}

fn text(mode: &str) -> String {
    match mode {
        "neg_zero" => r#"{"x":-0}"#.into(),
        "neg_zero_float" => r#"{"x":-0.0}"#.into(),
        "big_int" => format!(r#"{{"x":{}}}"#, 1u64 << 60),
        "big_neg_int" => format!(r#"{{"x":-{}}}"#, 1u64 << 60),
        "huge_float" => r#"{"x":1e400}"#.into(),
        "dup_key" => r#"{"x":1,"x":2}"#.into(),
        "nested_dup_key" => r#"{"x":{"y":1,"y":2}}"#.into(),
        "deep" => format!(r#"{{"x":{}{}}}"#, "[".repeat(DEPTH), "]".repeat(DEPTH)),
        "nan" => r#"{"x":NaN}"#.into(),
        "infinity" => r#"{"x":-Infinity}"#.into(),
        _ => r#"{"x":1}"#.into(),
    }
}

fn graph() -> Graph {
    Graph::new("hostile_nan_output")
        .channel("mode", Reducer::LastValue)
        .channel("x", Reducer::LastValue)
        .node("emit", |input: Input| {
            Update::raw_json_unchecked(text(&input.mode))
        })
        .edge(START, "emit")
        .edge("emit", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
