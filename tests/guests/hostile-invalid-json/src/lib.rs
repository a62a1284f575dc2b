//! A node whose update text is not a JSON object, chosen by the input's
//! `mode`:
//!
//! | mode                | update text          |
//! |---------------------|----------------------|
//! | `garbage` (default) | `this is not json`   |
//! | `empty`             | (empty)              |
//! | `truncated`         | `{"x":`              |
//! | `trailing`          | `{"x":1} trailing`   |
//! | `not_object`        | `[1,2,3]`            |
//! | `nan`               | `{"x":NaN}`          |
//! | `infinity`          | `{"x":Infinity}`     |
//! | `lone_surrogate`    | `{"x":"\ud800"}`     |
//! | `command_garbage`   | a `command` result whose update is `this is not json` (node `emit_command`) |

use sandgraph_sdk::{Command, END, Graph, Reducer, START, Update};
use serde::Deserialize;

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    mode: String,
}

fn text(mode: &str) -> &'static str {
    match mode {
        "empty" => "",
        "truncated" => r#"{"x":"#,
        "trailing" => r#"{"x":1} trailing"#,
        "not_object" => "[1,2,3]",
        "nan" => r#"{"x":NaN}"#,
        "infinity" => r#"{"x":Infinity}"#,
        "lone_surrogate" => r#"{"x":"\ud800"}"#,
        _ => "this is not json",
    }
}

fn graph() -> Graph {
    Graph::new("hostile_invalid_json")
        .channel("mode", Reducer::LastValue)
        .conditional_edges(
            START,
            "by_mode",
            |input: Input| match input.mode.as_str() {
                "command_garbage" => "emit_command",
                _ => "emit",
            },
            None,
        )
        .node("emit", |input: Input| {
            Update::raw_json_unchecked(text(&input.mode))
        })
        .node("emit_command", |_: Input| {
            Command::new().update(Update::raw_json_unchecked("this is not json"))
        })
        .edge("emit", END)
        .edge("emit_command", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
