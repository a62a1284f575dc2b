//! `{{graph}}`: a sandgraph graph. It counts the words of `text`, then
//! appends a line about it to `log`.
//!
//! `{"text": "hello wasm world"}` ends as
//! `{"text": "hello wasm world", "words": 3, "log": ["3 words"]}`.
//!
//! Build the component with `sandgraph build . --out {{name}}.wasm`, run the
//! golden cases of `tests/` with `sandgraph test {{name}}.wasm`, and the
//! native unit tests below with `cargo test`.

use sandgraph_sdk::serde_json::json;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};
use serde::Deserialize;

/// What `count` reads of the state. A node's state type names only the
/// keys it needs; `check()` tests that it decodes the channels' defaults.
#[derive(Deserialize)]
struct Text {
    text: String,
}

/// What `report` reads.
#[derive(Deserialize)]
struct Counted {
    words: i64,
}

/// Counts the words of the text.
fn count(s: Text) -> Update {
    let words = s.text.split_whitespace().count();
    Update::new().set("words", words)
}

/// Appends one line about the count to the log.
fn report(s: Counted) -> Update {
    let unit = if s.words == 1 { "word" } else { "words" };
    Update::new().push("log", format!("{} {unit}", s.words))
}

/// The graph. Strict: an input key or a node write that names no channel
/// fails the run, naming the key.
pub fn graph() -> Graph {
    Graph::new("{{graph}}")
        .description("Count the words of a text.")
        .as_tool(true)
        .parameters(json!({
            "text": {"type": "string", "required": true, "description": "The text to count."}
        }))
        .strict()
        .channel("text", Reducer::LastValue)
        .channel_with_default("words", Reducer::LastValue, 0)
        .channel("log", Reducer::Append)
        .node("count", count)
        .describe_node("count", "Count the words of the text.")
        .node("report", report)
        .describe_node("report", "Log the count.")
        .edge(START, "count")
        .edge("count", "report")
        .edge("report", END)
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
    fn count_counts_words() {
        let update = count(Text {
            text: "hello  wasm\nworld".into(),
        });
        assert_eq!(update.get("words"), Some(&json!(3)));
    }

    #[test]
    fn report_says_word_or_words() {
        assert_eq!(
            report(Counted { words: 1 }).get("log"),
            Some(&json!(["1 word"]))
        );
        assert_eq!(
            report(Counted { words: 0 }).get("log"),
            Some(&json!(["0 words"]))
        );
    }
}
