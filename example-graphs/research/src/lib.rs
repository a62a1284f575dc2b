//! `research`: a ReAct agent on the SDK's agent blocks. The `agent` node
//! asks the model (alias `fast`) through a [`ChatModel`], offering the
//! graph tools this graph is granted (`ctx.tools().list()`, with their JSON
//! Schemas); [`tools_condition`] sends a turn with tool calls to the
//! `tools` node, a [`ToolNode`] running each call as a sub-run, which loops
//! back to `agent`, until the model answers without tool calls (`answer`)
//! or `max_steps` model turns are used (`error`). The conversation is the
//! `messages` channel ([`Graph::messages_channel`]).
//!
//! `{"question": "Greet Ada formally."}` with `greet_graph` granted ends
//! with the model's `answer`, `steps: 2` and the whole conversation in
//! `messages`. A failed tool call goes back to the model as an error tool
//! message; a failed model call (no grant, quota used up, provider down)
//! ends the run with `error` saying why.

use sandgraph_sdk::llm::ToolDefinition;
use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{
    ChatModel, Context, END, Graph, Message, Reducer, START, ToolNode, Update, tools_condition,
};
use serde::Deserialize;

/// The most model turns whatever `max_steps` says: a turn with tool calls
/// takes two supersteps (`agent`, `tools`), so the loop always ends here,
/// before the host's step budget (25 supersteps) stops the run.
const STEP_CAP: i64 = 12;

const SYSTEM: &str = "You are a research assistant. Call the tools when they help, \
    then answer the question in a few sentences.";

#[derive(Deserialize)]
struct State {
    question: String,
    max_steps: i64,
    steps: i64,
    #[serde(default)]
    messages: Vec<Message>,
    error: Option<String>,
}

/// One model turn. On the first, the instructions and the question start
/// the conversation.
fn agent(s: State, ctx: &Context) -> Update {
    let steps = s.steps + 1;
    let mut new = Vec::new();
    if s.messages.is_empty() {
        new = vec![Message::system(SYSTEM), Message::human(s.question)];
    }
    let tools = (ctx.tools().list().into_iter())
        .map(|t| ToolDefinition {
            name: t.name,
            description: t.description,
            parameters: t.parameters,
        })
        .collect();
    let model = ChatModel::new(Some("fast")).bind_tools(tools);
    let conversation: Vec<&Message> = s.messages.iter().chain(&new).collect();
    let update = Update::new().set("steps", steps);
    let reply = match model.invoke(ctx, &json!(conversation)) {
        Ok(reply) => reply,
        // No grant, the quota used up, the provider down: the run ends here.
        Err(e) => return update.set("messages", new).set("error", e.to_string()),
    };
    let calls = reply["tool_calls"].as_array().map_or(0, Vec::len);
    let mut turn: Vec<Value> = new.iter().map(Message::to_value).collect();
    turn.push(reply.clone());
    let mut update = update.set("messages", turn);
    if calls == 0 {
        return update.set("answer", reply["content"].clone());
    }
    let max_steps = s.max_steps.clamp(1, STEP_CAP);
    if steps >= max_steps {
        // The tools node still runs this turn's calls, then the run ends.
        let why = format!("no answer after {steps} model turns (max_steps is {max_steps})");
        update = update.set("error", why);
    }
    update
}

fn graph() -> Graph {
    let tools = ToolNode::new([]);
    Graph::new("research")
        .description("Answer a question, calling the granted graph tools as needed.")
        .as_tool(true)
        .parameters(json!({
            "question": {"type": "string", "required": true, "description": "What to find out."},
            "max_steps": {
                "type": "integer",
                "default": 6,
                "description": "Most model turns (1 to 12)."
            }
        }))
        .channel("question", Reducer::LastValue)
        .channel_with_default("max_steps", Reducer::LastValue, 6)
        .messages_channel()
        .channel_with_default("steps", Reducer::LastValue, 0)
        .channel("answer", Reducer::LastValue)
        .channel("error", Reducer::LastValue)
        .node_with_context("agent", agent)
        .describe_node("agent", "One model turn.")
        .node_with_context("tools", move |s: Value, ctx: &Context| {
            tools.invoke(&s, ctx).map(Update::from_serialize)
        })
        .describe_node("tools", "Runs the turn's tool calls as sub-runs.")
        .edge(START, "agent")
        .conditional_edges(
            "agent",
            "tools_condition",
            tools_condition,
            [("tools", "tools"), (END, END)],
        )
        .conditional_edges(
            "tools",
            "next",
            |s: State| if s.error.is_some() { END } else { "agent" },
            [("agent", "agent"), (END, END)],
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
}
