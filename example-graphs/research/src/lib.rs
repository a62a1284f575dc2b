//! `research`: a ReAct agent. Each superstep is one model turn: the `agent`
//! node asks the model (alias `fast`), offering the graph tools this graph
//! is granted (`ctx.tools().list()`, with their JSON Schemas), runs every
//! tool call the model asks for as a sub-run (`ctx.tools().call`), appends
//! the turn to `messages`, and loops back to itself until the model
//! answers without tool calls (`answer`) or `max_steps` turns are used
//! (`error`).
//!
//! `{"question": "Greet Ada formally."}` with `greet_graph` granted ends
//! with the model's `answer`, `steps: 2` and the whole conversation in
//! `messages`. A failed tool call goes back to the model as the tool's
//! answer; a failed model call (no grant, quota used up, provider down)
//! ends the run with `error` saying why.

use sandgraph_sdk::llm::{ChatRequest, Message, Role, ToolCall, ToolDefinition};
use sandgraph_sdk::serde_json::{self, Value, json};
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Update};
use serde::{Deserialize, Serialize};

/// The most model turns whatever `max_steps` says, so the loop always ends
/// here, before the host's step budget (25 supersteps) stops the run.
const STEP_CAP: i64 = 20;

const SYSTEM: &str = "You are a research assistant. Call the tools when they help, \
    then answer the question in a few sentences.";

#[derive(Deserialize)]
struct State {
    question: String,
    max_steps: i64,
    steps: i64,
    #[serde(default)]
    messages: Vec<Turn>,
    answer: Option<String>,
    error: Option<String>,
}

/// A [`Message`] as it is kept in the `messages` channel.
#[derive(Serialize, Deserialize)]
struct Turn {
    role: String,
    content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Call>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

impl From<&Message> for Turn {
    fn from(m: &Message) -> Self {
        let role = match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        Turn {
            role: role.to_owned(),
            content: m.content.clone(),
            tool_calls: (m.tool_calls.iter())
                .map(|c| Call {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            tool_call_id: m.tool_call_id.clone(),
        }
    }
}

impl From<Turn> for Message {
    fn from(t: Turn) -> Self {
        let role = match t.role.as_str() {
            "system" => Role::System,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => Role::User,
        };
        Message {
            role,
            content: t.content,
            tool_calls: (t.tool_calls.into_iter())
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            tool_call_id: t.tool_call_id,
        }
    }
}

/// One model turn, and the tool calls it asks for.
fn agent(s: State, ctx: &Context) -> Update {
    let steps = s.steps + 1;
    // This turn's messages: on the first, the instructions and the question.
    let mut new = Vec::new();
    if s.messages.is_empty() {
        new = vec![Message::system(SYSTEM), Message::user(s.question)];
    }
    let request = ChatRequest {
        model: Some("fast".to_owned()),
        messages: s
            .messages
            .into_iter()
            .map(Message::from)
            .chain(new.clone())
            .collect(),
        tools: (ctx.tools().list().into_iter())
            .map(|t| ToolDefinition {
                name: t.name,
                description: t.description,
                parameters: t.parameters,
            })
            .collect(),
        ..ChatRequest::default()
    };
    let update = |new: &[Message]| {
        Update::new()
            .set("steps", steps)
            .extend("messages", new.iter().map(Turn::from))
    };
    let reply = match ctx.llm().chat(&request) {
        Ok(reply) => reply,
        // No grant, the quota used up, the provider down: the run ends here.
        Err(e) => return update(&new).set("error", e.to_string()),
    };
    new.push(reply.to_message());
    if reply.tool_calls.is_empty() {
        return update(&new).set("answer", reply.content);
    }
    for call in &reply.tool_calls {
        new.push(Message::tool_result(&call.id, run_tool(ctx, call)));
    }
    let max_steps = s.max_steps.clamp(1, STEP_CAP);
    if steps >= max_steps {
        let why = format!("no answer after {steps} model turns (max_steps is {max_steps})");
        return update(&new).set("error", why);
    }
    update(&new)
}

/// The tool's final state as JSON text, or why the call failed: either way
/// the model reads it and carries on.
fn run_tool(ctx: &Context, call: &ToolCall) -> String {
    let args: Value = match serde_json::from_str(&call.arguments) {
        Ok(args) => args,
        Err(e) => return format!("error: the arguments are not JSON: {e}"),
    };
    match ctx.tools().call(&call.name, args) {
        Ok(state) => state.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

fn graph() -> Graph {
    Graph::new("research")
        .description("Answer a question, calling the granted graph tools as needed.")
        .as_tool(true)
        .parameters(json!({
            "question": {"type": "string", "required": true, "description": "What to find out."},
            "max_steps": {
                "type": "integer",
                "default": 6,
                "description": "Most model turns (1 to 20)."
            }
        }))
        .channel("question", Reducer::LastValue)
        .channel_with_default("max_steps", Reducer::LastValue, 6)
        .channel("messages", Reducer::Append)
        .channel_with_default("steps", Reducer::LastValue, 0)
        .channel("answer", Reducer::LastValue)
        .channel("error", Reducer::LastValue)
        .node_with_context("agent", agent)
        .describe_node("agent", "One model turn and the tool calls it asks for.")
        .edge(START, "agent")
        .conditional_edges(
            "agent",
            "next",
            |s: State| match (s.answer, s.error) {
                (None, None) => "continue",
                _ => "done",
            },
            [("continue", "agent"), ("done", END)],
        )
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
    fn messages_keep_their_tool_calls() {
        let call = ToolCall {
            id: "c1".into(),
            name: "greet_graph".into(),
            arguments: r#"{"name":"Ada"}"#.into(),
        };
        let message = Message {
            tool_calls: vec![call],
            ..Message::assistant("")
        };
        let json = serde_json::to_value(Turn::from(&message)).unwrap();
        assert_eq!(json["tool_calls"][0]["name"], "greet_graph");
        let back: Turn = serde_json::from_value(json).unwrap();
        assert_eq!(Message::from(back), message);
        let result = serde_json::to_value(Turn::from(&Message::tool_result("c1", "ok"))).unwrap();
        assert_eq!(
            result,
            json!({"role": "tool", "content": "ok", "tool_call_id": "c1"})
        );
    }
}
