//! Custom reducers, run by the host through the `reduce` export.
//!
//! - `best` keeps the largest integer written (`current` is `null` at first).
//! - `words` is a sorted set of strings: a string or a list of strings is
//!   merged in; default `[]`.
//!
//! Nodes `a` and `b` run in parallel from START: `a` writes `best: 3` and
//! `words: ["pear", "apple"]`, `b` writes `best: 7` and `words: "apple"`.
//! Then `report` (a join) copies `best` into the last-value `reported`.
//! With input `{"best": 10}` the result has `best: 10`; otherwise `best: 7`,
//! `words: ["apple", "pear"]`, `reported: 7`.
//!
//! With input `{"bad": true}`, `a` writes `best: "x"` and the reducer fails
//! with `best: expected an integer, got "x"`.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{END, Graph, Reducer, START, Update};
use serde::Deserialize;

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    bad: bool,
}

#[derive(Deserialize)]
struct Report {
    best: i64,
}

fn max(current: Value, update: Value) -> Result<Value, String> {
    let update = update
        .as_i64()
        .ok_or_else(|| format!("best: expected an integer, got {update}"))?;
    Ok(json!(current.as_i64().map_or(update, |c| c.max(update))))
}

fn union(current: Value, update: Value) -> Result<Value, String> {
    let mut words: Vec<Value> = match current {
        Value::Array(words) => words,
        Value::Null => Vec::new(),
        other => return Err(format!("words: current value is not a list: {other}")),
    };
    match update {
        Value::Array(new) => words.extend(new),
        word @ Value::String(_) => words.push(word),
        other => return Err(format!("words: expected a string or a list, got {other}")),
    }
    let mut words: Vec<String> = words
        .into_iter()
        .map(|w| match w {
            Value::String(w) => Ok(w),
            other => Err(format!("words: not a string: {other}")),
        })
        .collect::<Result<_, _>>()?;
    words.sort();
    words.dedup();
    Ok(json!(words))
}

fn graph() -> Graph {
    Graph::new("graph_custom_reducer")
        .channel("bad", Reducer::LastValue)
        .channel("best", Reducer::custom(max))
        .channel_with_default("words", Reducer::custom(union), json!([]))
        .channel("reported", Reducer::LastValue)
        .node("a", |input: Input| {
            let best = if input.bad { json!("x") } else { json!(3) };
            Update::new()
                .set("best", best)
                .set("words", ["pear", "apple"])
        })
        .node("b", |_: Value| {
            Update::new().set("best", 7).set("words", "apple")
        })
        .node("report", |s: Report| Update::new().set("reported", s.best))
        .edge(START, "a")
        .edge(START, "b")
        .join(["a", "b"], "report")
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
    fn reducers() {
        assert_eq!(max(Value::Null, json!(3)), Ok(json!(3)));
        assert_eq!(max(json!(7), json!(3)), Ok(json!(7)));
        assert!(max(json!(7), json!("x")).is_err());
        assert_eq!(
            union(json!(["pear"]), json!(["apple", "pear"])),
            Ok(json!(["apple", "pear"]))
        );
        assert_eq!(union(Value::Null, json!("a")), Ok(json!(["a"])));
    }
}
