//! LangGraph's prebuilt agent blocks over the host's models and tools:
//! [`ChatModel`], [`Tool`], [`ToolNode`], [`tools_condition`] and
//! [`create_react_agent`]. They keep the conversation in the `messages`
//! channel ([`Graph::messages_channel`]) as [`Message`] JSON.
//!
//! ```
//! use sandgraph_sdk::prebuilt::{Tool, create_react_agent};
//! use sandgraph_sdk::serde_json::json;
//!
//! let add = Tool::new(
//!     "add",
//!     "Adds two integers.",
//!     json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
//!     |args| Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0))),
//! );
//! // A local tool and the graph tool `search` (granted by the operator).
//! let graph = create_react_agent("default", [add.into(), "search".into()], Some("Be brief."))
//!     .name("assistant")
//!     .description("Answers questions with a calculator and a search tool.");
//! assert_eq!(graph.check(), Ok(()));
//! ```

use std::fmt;
use std::rc::Rc;

use serde_json::{Value, json};

use crate::llm::{self, ChatRequest, ChatResponse, LlmError, ToolDefinition};
use crate::messages::{MESSAGES, Message, MessageType, ToolCall, coerce_messages};
use crate::tools::{ToolError, ToolInfo};
use crate::{Context, END, Graph, NodeError, START, Update};

type ToolFn = dyn Fn(Value) -> Result<Value, String>;

/// A tool function defined in the graph, offered to a model and run by a
/// [`ToolNode`] in the node's own task.
#[derive(Clone)]
pub struct Tool {
    name: String,
    description: String,
    schema: Value,
    run: Rc<ToolFn>,
}

impl Tool {
    /// A tool `name` doing `description`, whose arguments match the JSON
    /// Schema `schema` (an object schema), run by `f` on the model's
    /// arguments. `Err(message)` becomes an error tool message (see
    /// [`ToolNode`]).
    pub fn new<F>(
        name: impl Into<String>,
        description: impl Into<String>,
        schema: Value,
        f: F,
    ) -> Self
    where
        F: Fn(Value) -> Result<Value, String> + 'static,
    {
        Tool {
            name: name.into(),
            description: description.into(),
            schema,
            run: Rc::new(f),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How it is offered to a model.
    pub fn definition(&self) -> ToolDefinition {
        ToolDefinition::new(&self.name, &self.description, self.schema.clone())
    }
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool").field("name", &self.name).finish()
    }
}

/// A tool an agent may use: a local [`Tool`] or a granted graph tool, by
/// name (`"search".into()`).
#[derive(Debug, Clone)]
pub enum AgentTool {
    /// Runs in the graph.
    Local(Tool),
    /// A graph tool run by the host (`ctx.tools().call`), its schema from
    /// `ctx.tools().list()`.
    Graph(String),
}

impl From<Tool> for AgentTool {
    fn from(tool: Tool) -> Self {
        AgentTool::Local(tool)
    }
}

impl From<&str> for AgentTool {
    fn from(name: &str) -> Self {
        AgentTool::Graph(name.to_owned())
    }
}

impl From<String> for AgentTool {
    fn from(name: String) -> Self {
        AgentTool::Graph(name)
    }
}

/// The host's graph tools as a [`ToolNode`] sees them (a seam for tests).
trait GraphTools {
    fn list(&self) -> Vec<ToolInfo>;
    fn call(&self, name: &str, args: &Value) -> Result<Value, ToolError>;
}

impl GraphTools for Context {
    fn list(&self) -> Vec<ToolInfo> {
        self.tools().list()
    }

    fn call(&self, name: &str, args: &Value) -> Result<Value, ToolError> {
        self.tools().call(name, args)
    }
}

/// Runs the tool calls of the latest `ai` message (LangGraph's
/// `ToolNode`): local [`Tool`]s in the graph, any other name as a graph
/// tool through the host, all in order, one after another. It returns
/// `{"messages": [tool message, ...]}` in call order.
///
/// A failing call becomes a tool message with status `error` and content
/// `Error: <message>\n Please fix your mistakes.` (a host tool error's
/// message is `<kind>: <text>`), unless
/// [`ToolNode::handle_tool_errors`] is off, when the node fails. An
/// unknown tool name or arguments that are not a JSON object are always
/// error messages.
#[derive(Debug, Clone)]
pub struct ToolNode {
    local: Vec<Tool>,
    handle_errors: bool,
}

impl ToolNode {
    /// A tool node running `tools` (graph tools need no listing here: any
    /// granted one runs).
    pub fn new(tools: impl IntoIterator<Item = AgentTool>) -> Self {
        let local = tools
            .into_iter()
            .filter_map(|t| match t {
                AgentTool::Local(tool) => Some(tool),
                AgentTool::Graph(_) => None,
            })
            .collect();
        ToolNode {
            local,
            handle_errors: true,
        }
    }

    /// Whether a failing call becomes an error message (default) or fails
    /// the node.
    pub fn handle_tool_errors(mut self, yes: bool) -> Self {
        self.handle_errors = yes;
        self
    }

    /// Runs the calls for `input`: a state with `messages`, or a list of
    /// messages.
    ///
    /// # Errors
    ///
    /// No `ai` message in the input, messages that do not coerce, or a
    /// failing call when errors are not handled.
    pub fn invoke(&self, input: &Value, ctx: &Context) -> Result<Value, NodeError> {
        self.run(input, ctx)
    }

    fn run(&self, input: &Value, host: &dyn GraphTools) -> Result<Value, NodeError> {
        let messages = coerce_messages(input.get(MESSAGES).unwrap_or(input))?;
        let ai = messages
            .iter()
            .rev()
            .find(|m| m.kind == MessageType::Ai)
            .ok_or_else(|| NodeError::msg("no ai message found in input"))?;
        let mut graph_tools: Option<Vec<ToolInfo>> = None;
        let mut out = Vec::with_capacity(ai.tool_calls.len());
        for call in &ai.tool_calls {
            let result = if !call.args.is_object() {
                Err(format!(
                    "Error: the arguments of {} are not a JSON object",
                    call.name
                ))
            } else if let Some(tool) = self.local.iter().find(|t| t.name == call.name) {
                self.handled((tool.run)(call.args.clone()))?
            } else {
                let listed = graph_tools.get_or_insert_with(|| host.list());
                if listed.iter().any(|t| t.name == call.name) {
                    let result = host.call(&call.name, &call.args);
                    self.handled(result.map_err(|e| format!("{}: {}", e.kind(), inner(&e))))?
                } else {
                    Err(self.unknown(&call.name, listed))
                }
            };
            out.push(tool_message(call, result).to_value());
        }
        Ok(json!({ MESSAGES: out }))
    }

    /// `Err(message)` of a failed call as an error message's content, or
    /// the node's failure.
    fn handled(&self, result: Result<Value, String>) -> Result<Result<Value, String>, NodeError> {
        match result {
            Ok(value) => Ok(Ok(value)),
            Err(e) if self.handle_errors => {
                Ok(Err(format!("Error: {e}\n Please fix your mistakes.")))
            }
            Err(e) => Err(NodeError::msg(e)),
        }
    }

    fn unknown(&self, name: &str, listed: &[ToolInfo]) -> String {
        let names: Vec<&str> = self
            .local
            .iter()
            .map(|t| t.name.as_str())
            .chain(listed.iter().map(|t| t.name.as_str()))
            .collect();
        format!(
            "Error: {name} is not a valid tool, try one of [{}].",
            names.join(", ")
        )
    }
}

/// A host tool error's text without the SDK's `Display` prefix.
fn inner(e: &ToolError) -> &str {
    match e {
        ToolError::Denied(m)
        | ToolError::NotFound(m)
        | ToolError::InvalidArgs(m)
        | ToolError::Recursion(m)
        | ToolError::Quota(m)
        | ToolError::Failed(m) => m,
    }
}

fn tool_message(call: &ToolCall, result: Result<Value, String>) -> Message {
    match result {
        Ok(Value::String(text)) => Message::tool(text, &call.name, &call.id),
        Ok(value) => Message::tool(value.to_string(), &call.name, &call.id),
        Err(content) => Message::tool(content, &call.name, &call.id).with_error_status(),
    }
}

/// Routes to `"tools"` when the last message (of `messages`, or of a list)
/// is an `ai` message with tool calls, else to [`END`]. Its path map is
/// `[("tools", "tools"), (END, END)]`.
///
/// # Errors
///
/// `no messages found in input state`, or messages that do not coerce.
pub fn tools_condition(state: Value) -> Result<&'static str, String> {
    let messages = coerce_messages(state.get(MESSAGES).unwrap_or(&state))?;
    let last = messages
        .last()
        .ok_or_else(|| "no messages found in input state".to_owned())?;
    if last.kind == MessageType::Ai && !last.tool_calls.is_empty() {
        Ok("tools")
    } else {
        Ok(END)
    }
}

/// A chat model over the host's `llm` capability, LangChain-shaped.
#[derive(Debug, Clone, Default)]
pub struct ChatModel {
    model: Option<String>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    tools: Vec<ToolDefinition>,
}

impl ChatModel {
    /// The model granted as `alias` (`None`: the operator's `default`).
    pub fn new(alias: Option<&str>) -> Self {
        ChatModel {
            model: alias.map(str::to_owned),
            ..ChatModel::default()
        }
    }

    /// Sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Most tokens of an answer.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The same model, offering `tools`.
    pub fn bind_tools(&self, tools: Vec<ToolDefinition>) -> Self {
        ChatModel {
            tools,
            ..self.clone()
        }
    }

    /// Asks the model; `messages` is anything
    /// [`add_messages`](crate::messages::add_messages) accepts. The answer
    /// is an `ai` message (without id) plus `usage_metadata` and
    /// `response_metadata.finish_reason`.
    ///
    /// # Errors
    ///
    /// Messages that do not coerce ([`LlmError::Malformed`]) or the host's
    /// error.
    pub fn invoke(&self, ctx: &Context, messages: &Value) -> Result<Value, LlmError> {
        let request = self.request(messages)?;
        Ok(answer(ctx.llm().chat(&request)?))
    }

    fn request(&self, messages: &Value) -> Result<ChatRequest, LlmError> {
        let messages = coerce_messages(messages).map_err(LlmError::Malformed)?;
        let mut request = ChatRequest::new();
        request.model = self.model.clone();
        request.temperature = self.temperature;
        request.max_tokens = self.max_tokens;
        request.tools = self.tools.clone();
        for m in messages {
            request = request.message(to_wire(m));
        }
        Ok(request)
    }
}

/// A state message as `sandgraph:graph/llm` takes it.
fn to_wire(m: Message) -> llm::Message {
    match m.kind {
        MessageType::Human => llm::Message::user(m.content),
        MessageType::System | MessageType::Remove => llm::Message::system(m.content),
        MessageType::Tool => {
            llm::Message::tool_result(m.tool_call_id.unwrap_or_default(), m.content)
        }
        MessageType::Ai => llm::Message {
            tool_calls: m
                .tool_calls
                .into_iter()
                .map(|c| llm::ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: match c.args {
                        Value::String(raw) => raw,
                        args => args.to_string(),
                    },
                })
                .collect(),
            ..llm::Message::assistant(m.content)
        },
    }
}

/// The model's answer as an `ai` message with its metadata.
fn answer(response: ChatResponse) -> Value {
    let calls = response
        .tool_calls
        .into_iter()
        .map(|c| ToolCall {
            args: match serde_json::from_str::<Value>(&c.arguments) {
                Ok(args) if args.is_object() => args,
                _ => Value::String(c.arguments),
            },
            id: c.id,
            name: c.name,
        })
        .collect();
    let mut message = Message::ai(response.content)
        .with_tool_calls(calls)
        .to_value();
    let (input, output) = (
        response.usage.prompt_tokens,
        response.usage.completion_tokens,
    );
    message["usage_metadata"] = json!({
        "input_tokens": input,
        "output_tokens": output,
        "total_tokens": u64::from(input) + u64::from(output),
    });
    message["response_metadata"] = json!({ "finish_reason": response.finish_reason });
    message
}

/// LangGraph's prebuilt ReAct agent: the `messages` channel, a node
/// `agent` calling the model `model_alias` with `tools` bound (and
/// `prompt` as a leading system message on every call, not stored), and,
/// when there are tools, a [`ToolNode`] `tools` with
/// `agent —tools_condition→ {tools, END}` and `tools → agent`.
///
/// The graph is named `agent`; the result is an ordinary builder, so
/// [`Graph::name`], `.description(...)` and `.as_tool(true)` apply. Its parameters accept `messages` or a
/// `question`, which starts the conversation as a user message. Graph
/// tools' schemas are read with `ctx.tools().list()` at run time.
pub fn create_react_agent(
    model_alias: &str,
    tools: impl IntoIterator<Item = AgentTool>,
    prompt: Option<&str>,
) -> Graph {
    let tools: Vec<AgentTool> = tools.into_iter().collect();
    let model = ChatModel::new(Some(model_alias));
    let prompt = prompt.map(str::to_owned);
    let bound = tools.clone();
    let agent = move |state: Value, ctx: &Context| -> Result<Update, NodeError> {
        let history = match state.get(MESSAGES) {
            Some(Value::Array(history)) => history.clone(),
            _ => Vec::new(),
        };
        // Written back with the reply: a `question` starts the conversation.
        let mut new = Vec::new();
        if history.is_empty()
            && let Some(Value::String(question)) = state.get("question")
        {
            new.push(Message::human(question.clone()).to_value());
        }
        let system = prompt.iter().map(|p| Message::system(p.clone()).to_value());
        let messages: Vec<Value> = system.chain(history).chain(new.clone()).collect();
        let model = model.bind_tools(definitions(&bound, ctx));
        let reply = model
            .invoke(ctx, &Value::Array(messages))
            .map_err(|e| NodeError::msg(format!("{}: {}", e.kind(), e.message())))?;
        new.push(reply);
        Ok(Update::new().set(MESSAGES, new))
    };
    let graph = Graph::new("agent")
        .parameters(json!({
            "question": {"type": "string", "description": "What to ask the agent."},
            "messages": {"type": "array", "description": "The conversation so far."},
        }))
        .messages_channel()
        .channel("question", crate::Reducer::LastValue)
        .node_with_context("agent", agent)
        .edge(START, "agent");
    if tools.is_empty() {
        return graph.edge("agent", END);
    }
    let tool_node = ToolNode::new(tools);
    graph
        .node_with_context("tools", move |state: Value, ctx: &Context| {
            tool_node.invoke(&state, ctx).map(Update::from_serialize)
        })
        .conditional_edges(
            "agent",
            "tools_condition",
            tools_condition,
            [("tools", "tools"), (END, END)],
        )
        .edge("tools", "agent")
}

/// The tool definitions to bind: local tools', and the listed schemas of
/// the named graph tools (in the order given).
fn definitions(tools: &[AgentTool], host: &dyn GraphTools) -> Vec<ToolDefinition> {
    let mut listed: Option<Vec<ToolInfo>> = None;
    tools
        .iter()
        .filter_map(|tool| match tool {
            AgentTool::Local(tool) => Some(tool.definition()),
            AgentTool::Graph(name) => listed
                .get_or_insert_with(|| host.list())
                .iter()
                .find(|t| &t.name == name)
                .map(|t| ToolDefinition {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: t.parameters.clone(),
                }),
        })
        .collect()
}

#[cfg(test)]
#[path = "prebuilt_tests.rs"]
mod tests;
