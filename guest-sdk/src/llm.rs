//! Asking a model from a node, through the host.
//!
//! The host holds the provider and its key; a graph names a model *alias*
//! the operator granted it and gets the answer, its tool calls and the
//! tokens it used. The graph never sees the key or the provider's address.
//!
//! ```no_run
//! use sandgraph_sdk::llm::{ChatRequest, LlmError};
//! use sandgraph_sdk::serde_json::{Value, json};
//! use sandgraph_sdk::{Context, END, Graph, NodeError, START, Update};
//!
//! fn summarize(state: Value, ctx: &Context) -> Result<Update, NodeError> {
//!     let request = ChatRequest::new()
//!         .model("fast")
//!         .system("Answer in one sentence.")
//!         .user(format!("Summarize: {}", state["text"]))
//!         .max_tokens(200);
//!     match ctx.llm().chat(&request) {
//!         Ok(answer) => Ok(Update::new()
//!             .set("summary", answer.content)
//!             .set("tokens", answer.usage.total())),
//!         // Handle one case; `?` or `into()` ends the node with any other.
//!         Err(LlmError::Denied(why)) => Ok(Update::new().set("summary", json!(why))),
//!         Err(e) => Err(e.into()),
//!     }
//! }
//!
//! fn graph() -> Graph {
//!     Graph::new("summarize_graph")
//!         .node_with_context("summarize", summarize)
//!         .edge(START, "summarize")
//!         .edge("summarize", END)
//! }
//! ```
//!
//! The operator grants models per graph in `sandgraph.toml`:
//!
//! ```toml
//! [llm.models]
//! fast = "deepseek-chat"
//!
//! [graphs.research.grants]
//! llm = { models = ["fast"], max_calls = 20, max_tokens = 50000 }
//! ```
//!
//! A request naming no alias uses `"default"` (the operator's `[llm].model`),
//! which must be granted too. Calls and tokens are counted per run; past
//! either quota a call fails with [`LlmError::Quota`] before it is sent.
//! The wait for the answer costs the graph no fuel, but counts against the
//! run's deadline ([`LlmError::Timeout`]).

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::component::bindings::sandgraph::graph::llm as wit;

/// The host's models, as granted to this graph ([`crate::Context::llm`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Llm {
    _private: (),
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions for the model.
    System,
    /// A user turn.
    User,
    /// A model turn.
    Assistant,
    /// The result of a tool call.
    Tool,
}

/// A model's request to call a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's id for the call; the `tool` message answering it
    /// quotes it back.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model sent them: JSON text, not validated.
    pub arguments: String,
}

impl ToolCall {
    /// The arguments parsed as `T`.
    ///
    /// # Errors
    ///
    /// [`LlmError::Malformed`] when they are not JSON of that shape.
    pub fn parse_arguments<T: DeserializeOwned>(&self) -> Result<T, LlmError> {
        serde_json::from_str(&self.arguments)
            .map_err(|e| LlmError::Malformed(format!("arguments of tool call {}: {e}", self.name)))
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text; empty for an assistant turn that only calls tools.
    pub content: String,
    /// The tool calls of an assistant turn.
    pub tool_calls: Vec<ToolCall>,
    /// The call a [`Role::Tool`] message answers.
    pub tool_call_id: Option<String>,
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::new(Role::User, content)
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::new(Role::Assistant, content)
    }

    /// The result of the tool call `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(tool_call_id.into()),
            ..Message::new(Role::Tool, content)
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// JSON Schema of its arguments (an object); `Value::Null` for none.
    pub parameters: Value,
}

impl ToolDefinition {
    /// A tool named `name` doing `description`, taking arguments matching
    /// the JSON Schema `parameters`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolDefinition {
            name: name.into(),
            description: Some(description.into()),
            parameters,
        }
    }
}

/// One chat request; build it with the chained methods.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// The model alias; `None` is `"default"`.
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The tools offered.
    pub tools: Vec<ToolDefinition>,
    /// Sampling temperature (0 to 2); `None` is the provider's default.
    pub temperature: Option<f32>,
    /// Most tokens of the answer; the host lowers it to what the run's
    /// grant has left.
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    /// An empty request for the default model.
    pub fn new() -> Self {
        ChatRequest::default()
    }

    /// Asks the model the operator maps to `alias` (`[llm.models]`).
    pub fn model(mut self, alias: impl Into<String>) -> Self {
        self.model = Some(alias.into());
        self
    }

    /// Appends `message`.
    pub fn message(mut self, message: Message) -> Self {
        self.messages.push(message);
        self
    }

    /// Appends a system message.
    pub fn system(self, content: impl Into<String>) -> Self {
        self.message(Message::system(content))
    }

    /// Appends a user message.
    pub fn user(self, content: impl Into<String>) -> Self {
        self.message(Message::user(content))
    }

    /// Offers the model `tool`.
    pub fn tool(mut self, tool: ToolDefinition) -> Self {
        self.tools.push(tool);
        self
    }

    /// Sets the sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Caps the answer's tokens.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }
}

/// Tokens a call used, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: u32,
    /// Tokens of the answer.
    pub completion_tokens: u32,
}

impl Usage {
    /// Prompt plus answer tokens: what the run's `max_tokens` counts.
    pub fn total(&self) -> u64 {
        u64::from(self.prompt_tokens) + u64::from(self.completion_tokens)
    }
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatResponse {
    /// The text; empty when the model only called tools.
    pub content: String,
    /// The tools the model asks to call, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped (`stop`, `length`, `tool_calls`, ...).
    pub finish_reason: String,
    /// Tokens used.
    pub usage: Usage,
}

impl ChatResponse {
    /// The assistant message to append to the conversation before the
    /// tool results.
    pub fn to_message(&self) -> Message {
        Message {
            tool_calls: self.tool_calls.clone(),
            ..Message::assistant(self.content.clone())
        }
    }
}

/// Why a chat call failed. Every case converts into a node error, so `?`
/// ends the node with it; match on it to handle a case instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LlmError {
    /// The graph has no `llm` grant, or none for this alias, or the host
    /// has no model; nothing was sent.
    Denied(String),
    /// The run used up its granted calls or tokens; nothing was sent.
    Quota(String),
    /// The model did not answer before the run's deadline, or the run was
    /// cancelled.
    Timeout(String),
    /// The provider failed or could not be reached.
    Provider(String),
    /// The request is malformed or too large (nothing was sent), or the
    /// answer could not be used.
    Malformed(String),
}

impl LlmError {
    /// The case as a short name: `denied`, `quota`, `timeout`, `provider`,
    /// `malformed`.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Denied(_) => "denied",
            LlmError::Quota(_) => "quota",
            LlmError::Timeout(_) => "timeout",
            LlmError::Provider(_) => "provider",
            LlmError::Malformed(_) => "malformed",
        }
    }

    /// The host's explanation.
    pub fn message(&self) -> &str {
        match self {
            LlmError::Denied(m)
            | LlmError::Quota(m)
            | LlmError::Timeout(m)
            | LlmError::Provider(m)
            | LlmError::Malformed(m) => m,
        }
    }
}

impl fmt::Display for LlmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "llm call failed ({}): {}", self.kind(), self.message())
    }
}

impl std::error::Error for LlmError {}

impl From<wit::LlmError> for LlmError {
    fn from(e: wit::LlmError) -> Self {
        match e {
            wit::LlmError::Denied(m) => LlmError::Denied(m),
            wit::LlmError::Quota(m) => LlmError::Quota(m),
            wit::LlmError::Timeout(m) => LlmError::Timeout(m),
            wit::LlmError::Provider(m) => LlmError::Provider(m),
            wit::LlmError::Malformed(m) => LlmError::Malformed(m),
        }
    }
}

fn to_wit_call(c: &ToolCall) -> wit::ToolCall {
    wit::ToolCall {
        id: c.id.clone(),
        name: c.name.clone(),
        arguments: c.arguments.clone(),
    }
}

fn from_wit_call(c: wit::ToolCall) -> ToolCall {
    ToolCall {
        id: c.id,
        name: c.name,
        arguments: c.arguments,
    }
}

fn to_wit(request: &ChatRequest) -> wit::ChatRequest {
    wit::ChatRequest {
        model: request.model.clone(),
        messages: request
            .messages
            .iter()
            .map(|m| wit::Message {
                role: match m.role {
                    Role::System => wit::Role::System,
                    Role::User => wit::Role::User,
                    Role::Assistant => wit::Role::Assistant,
                    Role::Tool => wit::Role::Tool,
                },
                content: m.content.clone(),
                tool_calls: m.tool_calls.iter().map(to_wit_call).collect(),
                tool_call_id: m.tool_call_id.clone(),
            })
            .collect(),
        tools: request
            .tools
            .iter()
            .map(|t| wit::ToolDefinition {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: if t.parameters.is_null() {
                    String::new()
                } else {
                    t.parameters.to_string()
                },
            })
            .collect(),
        temperature: request.temperature,
        max_tokens: request.max_tokens,
    }
}

impl Llm {
    pub(crate) fn new() -> Self {
        Llm { _private: () }
    }

    /// Sends `request` to the model and waits for its answer.
    ///
    /// # Errors
    ///
    /// See [`LlmError`].
    pub fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let answer = wit::chat(&to_wit(request))?;
        Ok(ChatResponse {
            content: answer.content,
            tool_calls: answer.tool_calls.into_iter().map(from_wit_call).collect(),
            finish_reason: answer.finish_reason,
            usage: Usage {
                prompt_tokens: answer.usage.prompt_tokens,
                completion_tokens: answer.usage.completion_tokens,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_build_and_lower_to_the_wit_form() {
        let request = ChatRequest::new()
            .model("fast")
            .system("s")
            .user("u")
            .message(Message::tool_result("c1", "r"))
            .tool(ToolDefinition::new("f", "d", json!({"type": "object"})))
            .tool(ToolDefinition {
                name: "g".into(),
                description: None,
                parameters: Value::Null,
            })
            .temperature(0.5)
            .max_tokens(10);
        let wit = to_wit(&request);
        assert_eq!(wit.model.as_deref(), Some("fast"));
        assert_eq!(wit.messages.len(), 3);
        assert!(matches!(wit.messages[2].role, wit::Role::Tool));
        assert_eq!(wit.messages[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(wit.tools[0].parameters, r#"{"type":"object"}"#);
        assert_eq!(wit.tools[1].parameters, "");
        assert_eq!(wit.max_tokens, Some(10));
    }

    #[test]
    fn errors_convert_into_node_errors_and_say_their_kind() {
        let e = LlmError::from(wit::LlmError::Quota("spent".into()));
        assert_eq!(e.kind(), "quota");
        assert_eq!(e.to_string(), "llm call failed (quota): spent");
        let node: crate::NodeError = e.into();
        assert!(!node.is_interrupt());
        let call = ToolCall {
            id: "c".into(),
            name: "f".into(),
            arguments: "{".into(),
        };
        assert_eq!(
            call.parse_arguments::<Value>().unwrap_err().kind(),
            "malformed"
        );
        let usage = Usage {
            prompt_tokens: u32::MAX,
            completion_tokens: 1,
        };
        assert_eq!(usage.total(), u64::from(u32::MAX) + 1);
    }
}
