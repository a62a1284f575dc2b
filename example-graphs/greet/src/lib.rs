//! `greet_graph`: a tool with typed parameters, a default, an enum and an
//! input check.
//!
//! `{"name": "Ada", "style": "formal", "times": 2, "tags": ["x"]}` ends with
//! `greeting: "Good day, Ada. Good day, Ada."` and `tags: ["x"]`.

use sandgraph_sdk::serde_json::json;
use sandgraph_sdk::{END, Graph, NodeError, Reducer, START, Update, ValidateContext};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Style {
    Formal,
    Casual,
}

#[derive(Deserialize)]
struct State {
    name: String,
    style: Style,
    #[serde(default = "one")]
    times: i64,
    #[serde(default)]
    tags: Vec<String>,
}

fn one() -> i64 {
    1
}

/// Only what `validate` needs; the host has already checked types against
/// the parameter spec.
#[derive(Deserialize)]
struct Input {
    times: Option<i64>,
}

fn greet(s: State) -> Result<Update, NodeError> {
    let once = match s.style {
        Style::Formal => format!("Good day, {}.", s.name),
        Style::Casual => format!("Hey {}!", s.name),
    };
    let times =
        usize::try_from(s.times).map_err(|_| NodeError::msg("times must not be negative"))?;
    let greeting = vec![once; times].join(" ");
    Ok(Update::new().set("greeting", greeting).set("tags", s.tags))
}

fn graph() -> Graph {
    Graph::new("greet_graph")
        .description("Greet someone, formally or casually.")
        .as_tool(true)
        .parameters(json!({
            "name": {"type": "string", "required": true, "description": "The name to greet."},
            "style": {
                "type": "string",
                "required": true,
                "enum": ["formal", "casual"],
                "description": "Greeting style."
            },
            "times": {"type": "integer", "description": "Repeat count.", "default": 1},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Extra tags."}
        }))
        .channel("name", Reducer::LastValue)
        .channel("style", Reducer::LastValue)
        .channel("times", Reducer::LastValue)
        .channel("tags", Reducer::LastValue)
        .channel("greeting", Reducer::LastValue)
        .node("greet", greet)
        .describe_node("greet", "Builds the greeting.")
        .edge(START, "greet")
        .edge("greet", END)
        .validate(|input: Input, _: &ValidateContext| match input.times {
            Some(times) if times > 10 => Err("times must be at most 10"),
            _ => Ok(()),
        })
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_sdk::serde_json::from_value;

    #[test]
    fn graph_is_valid() {
        graph().check().unwrap();
    }

    #[test]
    fn greets() {
        let state = from_value(json!({"name": "Ada", "style": "formal", "times": 2})).unwrap();
        let update = greet(state).unwrap();
        assert_eq!(
            update.get("greeting"),
            Some(&json!("Good day, Ada. Good day, Ada."))
        );
        assert_eq!(update.get("tags"), Some(&json!([])));

        let state = from_value(json!({"name": "Ada", "style": "casual", "tags": ["t"]})).unwrap();
        let update = greet(state).unwrap();
        assert_eq!(update.get("greeting"), Some(&json!("Hey Ada!")));
        assert_eq!(update.get("tags"), Some(&json!(["t"])));
    }
}
