//! The provider-neutral request and response types.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::LlmError;

/// A tool the model may call: a function name, what it does, and a JSON
/// Schema for its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The function name the model uses to call the tool.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object; `null` sends no `parameters`
    /// (a function without arguments).
    pub parameters: serde_json::Value,
}

/// One tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id the tool result must quote back (`Message::Tool::tool_call_id`).
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments exactly as the model sent them: JSON text, NOT parsed
    /// and not validated (models do send invalid JSON).
    pub arguments: String,
}

/// One conversation message.
///
/// Serialized (for storage) as `{"role": "system" | "user" | "assistant" |
/// "tool", ...fields}`; the client translates to the OpenAI wire form itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The instructions.
        content: String,
    },
    /// A user turn.
    User {
        /// The user's text.
        content: String,
    },
    /// A model turn: text, tool calls, or both.
    Assistant {
        /// The text, if any.
        #[serde(default)]
        content: Option<String>,
        /// The tool calls, in order; empty for a plain text turn.
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The result text (often JSON).
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Message {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message::User {
            content: content.into(),
        }
    }

    /// A tool result for the call with id `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Message {
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }
}

/// One chat-completions request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    /// The model name; empty means the client's configured model.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools offered; empty sends no `tools` field.
    pub tools: Vec<ToolSpec>,
    /// Sampling temperature; `None` leaves the provider's default.
    pub temperature: Option<f32>,
    /// Most tokens the answer may have (`max_tokens` on the wire); `None`
    /// leaves the provider's default.
    pub max_tokens: Option<u32>,
}

/// Token counts the provider reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
}

/// The model's answer: the first choice's message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The text; `None` when the provider sent `null`, nothing, or `""`.
    pub content: Option<String>,
    /// The tool calls, in order; empty when none.
    pub tool_calls: Vec<ToolCall>,
    /// Why generation stopped (`stop`, `tool_calls`, `length`, ...).
    pub finish_reason: Option<String>,
    /// Token usage, when the provider reported it.
    pub usage: Option<Usage>,
}

impl ChatResponse {
    /// The assistant message to append to the conversation.
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// A chat-completions backend. Object safe: use `Arc<dyn Provider>`.
pub trait Provider: Send + Sync {
    /// Sends one request and returns the first choice.
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_storage_form_round_trips() {
        let messages = vec![
            Message::system("s"),
            Message::user("u"),
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "c".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                }],
            },
            Message::tool("c", "r"),
        ];
        let value = serde_json::to_value(&messages).unwrap();
        assert_eq!(
            value,
            json!([
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "name": "f", "arguments": "{}"}]},
                {"role": "tool", "tool_call_id": "c", "content": "r"},
            ])
        );
        let back: Vec<Message> = serde_json::from_value(value).unwrap();
        assert_eq!(back, messages);
        let bare: Message = serde_json::from_value(json!({"role": "assistant"})).unwrap();
        assert_eq!(
            bare,
            Message::Assistant {
                content: None,
                tool_calls: vec![]
            }
        );
    }
}
