//! Chat messages as a graph keeps them in state, and [`add_messages`], the
//! reducer of a `messages` channel (LangGraph's `MessagesState`).
//!
//! A message is JSON, the same in the Rust, Python and JavaScript SDKs:
//!
//! ```text
//! {"type": "human" | "ai" | "system" | "tool", "content": "...", "id": "msg-0",
//!  "name": "...",                              (optional; tool messages: the tool)
//!  "tool_calls": [{"id", "name", "args"}],     (ai messages, maybe [])
//!  "tool_call_id": "...", "status": "success" | "error"}   (tool messages)
//! ```
//!
//! Absent optional keys are omitted. `{"type": "remove", "id": X}` removes
//! the message `X`; with the id [`REMOVE_ALL_MESSAGES`] it clears the list.
//!
//! ```
//! use sandgraph_sdk::messages::{Message, add_messages};
//! use sandgraph_sdk::serde_json::json;
//!
//! let state = add_messages(json!([]), json!(["hi", ["ai", "hello"]])).unwrap();
//! assert_eq!(state, json!([
//!     {"type": "human", "content": "hi", "id": "msg-0"},
//!     {"type": "ai", "content": "hello", "id": "msg-1", "tool_calls": []},
//! ]));
//! // Same id: replaced in place; a remove marker deletes.
//! let state = add_messages(state, json!([
//!     Message::human("hi there").with_id("msg-0"),
//!     Message::remove("msg-1"),
//! ])).unwrap();
//! assert_eq!(state, json!([{"type": "human", "content": "hi there", "id": "msg-0"}]));
//! ```

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::Graph;

/// The id of a remove marker that clears every message before it.
pub const REMOVE_ALL_MESSAGES: &str = "__remove_all__";

/// The name of the channel [`Graph::messages_channel`] declares.
pub const MESSAGES: &str = "messages";

/// Who wrote a message, or a removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    /// The user (`human`).
    Human,
    /// The model (`ai`).
    Ai,
    /// Instructions (`system`).
    System,
    /// A tool's result (`tool`).
    Tool,
    /// A marker removing the message of its id (`remove`).
    Remove,
}

impl MessageType {
    /// The JSON name: `human`, `ai`, `system`, `tool` or `remove`.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Human => "human",
            MessageType::Ai => "ai",
            MessageType::System => "system",
            MessageType::Tool => "tool",
            MessageType::Remove => "remove",
        }
    }

    /// A role or type name as messages give it (`user`, `assistant`,
    /// `developer` too).
    fn parse(role: &str) -> Option<Self> {
        Some(match role {
            "human" | "user" => MessageType::Human,
            "ai" | "assistant" => MessageType::Ai,
            "system" | "developer" => MessageType::System,
            "tool" => MessageType::Tool,
            "remove" => MessageType::Remove,
            _ => return None,
        })
    }
}

/// A model's request to call a tool, as an `ai` message holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id; the tool message answering it quotes it back.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments: a JSON object, or the raw text when the model's
    /// arguments were not one.
    pub args: Value,
}

/// One message of a conversation (see the [module](self) for its JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who wrote it, or [`MessageType::Remove`].
    pub kind: MessageType,
    /// The text.
    pub content: String,
    /// Its id; [`add_messages`] gives one to a message without.
    pub id: Option<String>,
    /// A name (a tool message's tool).
    pub name: Option<String>,
    /// An `ai` message's tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// A `tool` message's `success` or `error`.
    pub status: Option<String>,
}

impl Message {
    fn new(kind: MessageType, content: impl Into<String>) -> Self {
        Message {
            kind,
            content: content.into(),
            id: None,
            name: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            status: None,
        }
    }

    /// A user message.
    pub fn human(content: impl Into<String>) -> Self {
        Message::new(MessageType::Human, content)
    }

    /// A model message (add tool calls with [`Message::with_tool_calls`]).
    pub fn ai(content: impl Into<String>) -> Self {
        Message::new(MessageType::Ai, content)
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::new(MessageType::System, content)
    }

    /// The result of the tool `name`'s call `tool_call_id`, a success.
    pub fn tool(
        content: impl Into<String>,
        name: impl Into<String>,
        tool_call_id: impl Into<String>,
    ) -> Self {
        Message {
            name: Some(name.into()),
            tool_call_id: Some(tool_call_id.into()),
            status: Some("success".to_owned()),
            ..Message::new(MessageType::Tool, content)
        }
    }

    /// A marker removing the message `id` (or all, with
    /// [`REMOVE_ALL_MESSAGES`]).
    pub fn remove(id: impl Into<String>) -> Self {
        Message {
            id: Some(id.into()),
            ..Message::new(MessageType::Remove, "")
        }
    }

    /// The same message with the id `id`.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The same message with these tool calls.
    pub fn with_tool_calls(mut self, tool_calls: Vec<ToolCall>) -> Self {
        self.tool_calls = tool_calls;
        self
    }

    /// The same tool message with status `error`.
    pub fn with_error_status(mut self) -> Self {
        self.status = Some("error".to_owned());
        self
    }

    /// The message as JSON, keys in the order of the [module](self) docs.
    pub fn to_value(&self) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), self.kind.as_str().into());
        if self.kind == MessageType::Remove {
            out.insert("id".into(), self.id.clone().into());
            return Value::Object(out);
        }
        out.insert("content".into(), self.content.clone().into());
        let optional = [("id", &self.id), ("name", &self.name)];
        for (key, value) in optional {
            if let Some(value) = value {
                out.insert(key.into(), value.clone().into());
            }
        }
        if self.kind == MessageType::Ai {
            out.insert("tool_calls".into(), json!(self.tool_calls));
        }
        let optional = [
            ("tool_call_id", &self.tool_call_id),
            ("status", &self.status),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                out.insert(key.into(), value.clone().into());
            }
        }
        Value::Object(out)
    }

    /// Coerces a message as [`add_messages`] accepts it: a string (a user
    /// message), a `[role, content]` pair, or an object with `type` or
    /// `role` and `content`.
    ///
    /// # Errors
    ///
    /// Why `value` is not a message.
    pub fn from_value(value: &Value) -> Result<Message, String> {
        match value {
            Value::String(text) => Ok(Message::human(text.clone())),
            Value::Array(pair) => from_pair(pair),
            Value::Object(object) => from_object(object),
            other => Err(format!(
                "expected a message (a string, a [role, content] pair or an object with type \
                 and content), not {}",
                sandgraph_spec::json::kind(other)
            )),
        }
    }
}

fn from_pair(pair: &[Value]) -> Result<Message, String> {
    let [Value::String(role), Value::String(content)] = pair else {
        return Err("a [role, content] pair needs exactly two strings".to_owned());
    };
    match MessageType::parse(role) {
        Some(MessageType::Tool) => Err(
            "a [role, content] pair cannot make a tool message (it needs a tool_call_id)"
                .to_owned(),
        ),
        Some(MessageType::Remove) | None => Err(format!("unknown role {role:?}")),
        Some(kind) => Ok(Message::new(kind, content.clone())),
    }
}

fn text_field(object: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(format!(
            "{key} must be a string, not {}",
            sandgraph_spec::json::kind(other)
        )),
    }
}

fn from_object(object: &Map<String, Value>) -> Result<Message, String> {
    let role = match (text_field(object, "type")?, text_field(object, "role")?) {
        (Some(role), _) | (None, Some(role)) => role,
        (None, None) => return Err("a message object needs a type or role".to_owned()),
    };
    let kind = MessageType::parse(&role).ok_or_else(|| format!("unknown type {role:?}"))?;
    let id = text_field(object, "id")?;
    if kind == MessageType::Remove {
        return id
            .map(Message::remove)
            .ok_or_else(|| "a remove marker needs an id".to_owned());
    }
    let content = text_field(object, "content")?
        .ok_or_else(|| "a message object needs a string content".to_owned())?;
    let mut message = Message::new(kind, content);
    message.id = id;
    message.name = text_field(object, "name")?;
    if kind == MessageType::Ai
        && let Some(calls) = object.get("tool_calls").filter(|v| !v.is_null())
    {
        message.tool_calls =
            serde_json::from_value(calls.clone()).map_err(|e| format!("tool_calls: {e}"))?;
    }
    if kind == MessageType::Tool {
        message.tool_call_id = Some(
            text_field(object, "tool_call_id")?
                .ok_or_else(|| "a tool message needs a tool_call_id".to_owned())?,
        );
        let status = text_field(object, "status")?.unwrap_or_else(|| "success".to_owned());
        if status != "success" && status != "error" {
            return Err(format!("status must be success or error, not {status:?}"));
        }
        message.status = Some(status);
    }
    Ok(message)
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Message::from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// Coerces one side of [`add_messages`]: `null` is empty, a non-list one
/// item (so a lone `[role, content]` pair is a list of two strings: put
/// it in a list).
///
/// # Errors
///
/// The first item that is not a message, naming its index.
pub fn coerce_messages(value: &Value) -> Result<Vec<Message>, String> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items.as_slice(),
        single => std::slice::from_ref(single),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| Message::from_value(item).map_err(|why| format!("message {i}: {why}")))
        .collect()
}

/// Merges `right` into `left`, LangGraph's `add_messages` with
/// deterministic ids: a message whose id is in `left` replaces it in
/// place, a new one is appended, a remove marker deletes its id (an
/// unknown id is an error), and one with [`REMOVE_ALL_MESSAGES`] keeps only
/// what follows it. A message without an id gets `msg-<n>`, `n` counting
/// from `left`'s length and skipping ids in use.
///
/// # Errors
///
/// An item that is not a message (naming its index), or a remove marker
/// for an id that does not exist.
pub fn add_messages(left: Value, right: Value) -> Result<Value, String> {
    let left = coerce_messages(&left)?;
    let mut right = coerce_messages(&right)?;
    assign_ids(&left, &mut right);
    let last_clear = right.iter().rposition(|m| {
        m.kind == MessageType::Remove && m.id.as_deref() == Some(REMOVE_ALL_MESSAGES)
    });
    let (left, right) = match last_clear {
        Some(i) => (Vec::new(), right.split_off(i + 1)),
        None => (left, right),
    };
    let merged = merge(left, right)?;
    Ok(Value::Array(merged.iter().map(Message::to_value).collect()))
}

/// Gives each message of `right` without an id the next free `msg-<n>`.
fn assign_ids(left: &[Message], right: &mut [Message]) {
    let mut used: HashSet<String> = left
        .iter()
        .chain(right.iter())
        .filter_map(|m| m.id.clone())
        .collect();
    let mut n = left.len();
    for message in right.iter_mut().filter(|m| m.id.is_none()) {
        let id = loop {
            let candidate = format!("msg-{n}");
            n += 1;
            if used.insert(candidate.clone()) {
                break candidate;
            }
        };
        message.id = Some(id);
    }
}

/// Step 4 of the algorithm: replace, append, mark and drop.
fn merge(left: Vec<Message>, right: Vec<Message>) -> Result<Vec<Message>, String> {
    let mut merged = left;
    let mut at: HashMap<String, usize> = HashMap::new();
    for (i, m) in merged.iter().enumerate() {
        if let Some(id) = &m.id {
            at.entry(id.clone()).or_insert(i);
        }
    }
    let mut removed: HashSet<String> = HashSet::new();
    for message in right {
        let id = message.id.clone().unwrap_or_default();
        match (message.kind, at.get(&id)) {
            (MessageType::Remove, Some(_)) => {
                removed.insert(id);
            }
            (MessageType::Remove, None) => {
                return Err(format!(
                    "attempting to delete a message with an id that doesn't exist ('{id}')"
                ));
            }
            (_, Some(&i)) => {
                removed.remove(&id);
                merged[i] = message;
            }
            (_, None) => {
                at.insert(id, merged.len());
                merged.push(message);
            }
        }
    }
    merged.retain(|m| !m.id.as_ref().is_some_and(|id| removed.contains(id)));
    Ok(merged)
}

impl Graph {
    /// Declares the channel `messages` (LangGraph's `MessagesState`): a
    /// list of [`Message`]s, starting empty, whose writes are merged by
    /// [`add_messages`] (in the graph, as the channel's custom reducer).
    /// Input and updates may give messages in any form `add_messages`
    /// accepts.
    ///
    /// ```
    /// use sandgraph_sdk::messages::Message;
    /// use sandgraph_sdk::{END, Graph, START, Update};
    ///
    /// let graph = Graph::new("chat")
    ///     .messages_channel()
    ///     .node("reply", |_: serde_json::Value| {
    ///         Update::new().set("messages", vec![Message::ai("hello")])
    ///     })
    ///     .edge(START, "reply")
    ///     .edge("reply", END);
    /// assert_eq!(graph.check(), Ok(()));
    /// ```
    pub fn messages_channel(self) -> Self {
        self.channel_with_default(MESSAGES, crate::Reducer::custom(add_messages), json!([]))
    }
}

#[cfg(test)]
#[path = "messages_tests.rs"]
mod tests;
