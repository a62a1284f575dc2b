//! A scripted supervisor and its workers, for end-to-end tests of the
//! agent-graph host over the example graphs `echo_graph` and `greet_graph`.
//!
//! * A supervisor turn is a request offering `view_agent_graph`. On the
//!   first turn (its user message starts with `Goal:`) it adds three work
//!   items (`echo alpha`, `greet Ada`, `echo beta`, all `subagentId`
//!   presets) with the idempotency key `wave-1`, then yields. On a wake (the
//!   message lists `graph_record_…` ids) it finishes the graph with every
//!   record id listed, idempotency key `finish`. Anything else: it views.
//! * A worker request offers one graph tool; the reply calls it with
//!   arguments read from the instruction (the user message).

use std::time::Duration;

use serde_json::{Value, json};

use crate::{Recorded, Reply};

/// The graph id named in a supervisor message (`agent graph <id>`).
fn graph_id(text: &str) -> Option<String> {
    let at = text.to_ascii_lowercase().find("agent graph ")? + "agent graph ".len();
    let id: String = text[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ':' && *c != '.')
        .collect();
    (!id.is_empty()).then_some(id)
}

fn record_ids(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter(|w| w.starts_with("graph_record_"))
        .map(str::to_owned)
        .collect()
}

fn supervisor(request: &Recorded) -> Reply {
    let user = request.last_content("user").unwrap_or("");
    let Some(graph) = graph_id(user) else {
        return Reply::text("no graph id in the message");
    };
    if user.starts_with("Goal:") {
        let update = json!({
            "graphId": graph,
            "operation": "add_work",
            "idempotencyKey": "wave-1",
            "addWork": [
                {"targetKind": "new_preset", "subagentId": "echo_graph", "instruction": "echo alpha"},
                {"targetKind": "new_preset", "subagentId": "greet_graph", "instruction": "greet Ada"},
                {"targetKind": "new_preset", "subagentId": "echo_graph", "instruction": "echo beta"},
            ],
        });
        return Reply::tool_calls(&[
            ("update_agent_graph", &update.to_string()),
            ("yield_agent_graph", &json!({"graphId": graph}).to_string()),
        ]);
    }
    let ids = record_ids(user);
    if ids.is_empty() {
        return Reply::tool_call("view_agent_graph", &json!({"graphId": graph}).to_string());
    }
    let finish = json!({
        "graphId": graph,
        "operation": "finish",
        "idempotencyKey": "finish",
        "finish": {"resultIds": ids, "reason": "all three results are in"},
    });
    Reply::tool_call("update_agent_graph", &finish.to_string())
}

fn worker(request: &Recorded) -> Reply {
    let tools = request.tool_names();
    let instruction = request
        .messages()
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let word = instruction
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .nth(1)
        .unwrap_or("none")
        .to_owned();
    match tools.first().map(String::as_str) {
        Some("greet_graph") => Reply::tool_call(
            "greet_graph",
            &json!({"name": word, "style": "casual"}).to_string(),
        ),
        Some(tool) => Reply::tool_call(tool, &json!({"input": {"topic": word}}).to_string()),
        None => Reply::text("no tools"),
    }
}

/// One reply of the scripted supervisor-and-workers model; push as many as
/// requests are expected. Worker replies wait `worker_delay` first, which
/// keeps a wave running long enough to be interrupted.
pub fn supervisor_demo(worker_delay: Duration) -> Reply {
    supervisor_demo_with(worker_delay, Duration::ZERO)
}

/// [`supervisor_demo`] whose supervisor replies also wait
/// `supervisor_delay`, so a supervisor turn can be interrupted too.
pub fn supervisor_demo_with(worker_delay: Duration, supervisor_delay: Duration) -> Reply {
    Reply::respond(move |request| {
        if request.tool_names().iter().any(|t| t == "view_agent_graph") {
            supervisor(request).delay(supervisor_delay)
        } else {
            worker(request).delay(worker_delay)
        }
    })
}
