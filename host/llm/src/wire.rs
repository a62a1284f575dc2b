//! The OpenAI chat-completions wire format: request bodies out, responses
//! and error bodies in.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::{ChatRequest, ChatResponse, LlmError, Message, ToolCall, ToolSpec, Usage};

/// How much of a body an error message quotes, in characters.
pub(crate) const EXCERPT_CHARS: usize = 512;

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        // Always present: `null` when the turn is tool calls only.
        content: Option<&'a str>,
        // Omitted when empty: OpenAI rejects an empty `tool_calls` array.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    #[serde(skip_serializing_if = "Value::is_null")]
    parameters: &'a Value,
}

fn wire_message(message: &Message) -> WireMessage<'_> {
    match message {
        Message::System { content } => WireMessage::System { content },
        Message::User { content } => WireMessage::User { content },
        Message::Assistant {
            content,
            tool_calls,
        } => WireMessage::Assistant {
            content: content.as_deref(),
            tool_calls: tool_calls.iter().map(wire_tool_call).collect(),
        },
        Message::Tool {
            tool_call_id,
            content,
        } => WireMessage::Tool {
            tool_call_id,
            content,
        },
    }
}

fn wire_tool_call(call: &ToolCall) -> WireToolCall<'_> {
    WireToolCall {
        id: &call.id,
        kind: "function",
        function: WireFunctionCall {
            name: &call.name,
            arguments: &call.arguments,
        },
    }
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunction {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
        },
    }
}

/// The request body for `request`, with `model` used when the request
/// names none.
pub(crate) fn request_body(request: &ChatRequest, model: &str) -> Result<Vec<u8>, LlmError> {
    let body = WireRequest {
        model: if request.model.is_empty() {
            model
        } else {
            &request.model
        },
        messages: request.messages.iter().map(wire_message).collect(),
        tools: request.tools.iter().map(wire_tool).collect(),
        temperature: request.temperature,
        max_tokens: request.max_tokens,
    };
    serde_json::to_vec(&body).map_err(|error| LlmError::Config {
        message: format!("the request cannot be serialized: {error}"),
    })
}

/// The server's message from an error body: OpenAI's
/// `{"error":{"message":...}}`, a bare `{"error":"..."}` (Ollama), a
/// top-level `message`, or else the start of the body.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        let message = match value.get("error") {
            Some(Value::Object(error)) => error.get("message").and_then(Value::as_str),
            Some(Value::String(error)) => Some(error.as_str()),
            _ => value.get("message").and_then(Value::as_str),
        };
        if let Some(message) = message.filter(|message| !message.trim().is_empty()) {
            return excerpt(message);
        }
    }
    if body.trim().is_empty() {
        "(empty body)".to_owned()
    } else {
        excerpt(body)
    }
}

/// The first [`EXCERPT_CHARS`] characters of `text`, trimmed, with `…` when
/// cut.
pub(crate) fn excerpt(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn malformed(message: impl Into<String>) -> LlmError {
    LlmError::Malformed {
        message: message.into(),
    }
}

/// Parses a success body. `body` is already redacted of the key.
pub(crate) fn parse_response(body: &str) -> Result<ChatResponse, LlmError> {
    let root: Value = serde_json::from_str(body).map_err(|error| {
        malformed(format!(
            "the body is not JSON ({error}): {}",
            if body.trim().is_empty() {
                "(empty body)".to_owned()
            } else {
                excerpt(body)
            }
        ))
    })?;
    let root = root
        .as_object()
        .ok_or_else(|| malformed("the body is not a JSON object"))?;
    let choices = match root.get("choices") {
        None | Some(Value::Null) => {
            // Some proxies answer errors with status 200.
            let hint = match root.get("error") {
                Some(error) => format!(
                    " (the server sent an error: {})",
                    error_message(&json_text(error))
                ),
                None => String::new(),
            };
            return Err(malformed(format!("choices is missing{hint}")));
        }
        Some(Value::Array(choices)) => choices,
        Some(_) => return Err(malformed("choices is not an array")),
    };
    let choice = choices
        .first()
        .ok_or_else(|| malformed("choices is empty"))?
        .as_object()
        .ok_or_else(|| malformed("choices[0] is not an object"))?;
    let message = match choice.get("message") {
        None | Some(Value::Null) => return Err(malformed("choices[0].message is missing")),
        Some(Value::Object(message)) => message,
        Some(_) => return Err(malformed("choices[0].message is not an object")),
    };
    let content = parse_content(message.get("content"))?;
    let tool_calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(index, call)| parse_tool_call(index, call))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(malformed("choices[0].message.tool_calls is not an array")),
    };
    let finish_reason = match choice.get("finish_reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(reason)) => Some(reason.clone()),
        Some(_) => return Err(malformed("choices[0].finish_reason is not a string")),
    };
    let usage = match root.get("usage") {
        Some(Value::Object(usage)) => Some(Usage {
            prompt_tokens: count(usage, "prompt_tokens"),
            completion_tokens: count(usage, "completion_tokens"),
        }),
        _ => None,
    };
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason,
        usage,
    })
}

fn json_text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn count(usage: &Map<String, Value>, field: &str) -> u64 {
    usage.get(field).and_then(Value::as_u64).unwrap_or(0)
}

/// `content` may be missing, `null`, a string, or (some servers) an array
/// of `{"type":"text","text":...}` parts, which are joined. `""` is `None`.
fn parse_content(content: Option<&Value>) -> Result<Option<String>, LlmError> {
    let text = match content {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (index, part) in parts.iter().enumerate() {
                match part.get("text") {
                    Some(Value::String(piece)) => text.push_str(piece),
                    // Non-text parts (refusals, audio, ...) carry no text.
                    None | Some(Value::Null) => {}
                    Some(_) => {
                        return Err(malformed(format!(
                            "choices[0].message.content[{index}].text is not a string"
                        )));
                    }
                }
            }
            text
        }
        Some(_) => return Err(malformed("choices[0].message.content is not a string")),
    };
    Ok(Some(text).filter(|text| !text.is_empty()))
}

fn parse_tool_call(index: usize, call: &Value) -> Result<ToolCall, LlmError> {
    let path = format!("choices[0].message.tool_calls[{index}]");
    let call = call
        .as_object()
        .ok_or_else(|| malformed(format!("{path} is not an object")))?;
    let id = required_string(call, "id", &path)?;
    let function = match call.get("function") {
        None | Some(Value::Null) => return Err(malformed(format!("{path}.function is missing"))),
        Some(Value::Object(function)) => function,
        Some(_) => return Err(malformed(format!("{path}.function is not an object"))),
    };
    let function_path = format!("{path}.function");
    let name = required_string(function, "name", &function_path)?;
    if name.is_empty() {
        return Err(malformed(format!("{function_path}.name is empty")));
    }
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => {
            return Err(malformed(format!("{function_path}.arguments is missing")));
        }
        Some(Value::String(arguments)) => arguments.clone(),
        // Some local servers send the arguments object itself.
        Some(arguments @ Value::Object(_)) => json_text(arguments),
        Some(_) => {
            return Err(malformed(format!(
                "{function_path}.arguments is not a string or object"
            )));
        }
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}

fn required_string(
    object: &Map<String, Value>,
    field: &str,
    path: &str,
) -> Result<String, LlmError> {
    match object.get(field) {
        None | Some(Value::Null) => Err(malformed(format!("{path}.{field} is missing"))),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(malformed(format!("{path}.{field} is not a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<ChatResponse, LlmError> {
        parse_response(&value.to_string())
    }

    fn message(message: Value) -> Value {
        json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }] })
    }

    fn malformed_message(result: Result<ChatResponse, LlmError>) -> String {
        match result {
            Err(LlmError::Malformed { message }) => message,
            other => panic!("expected malformed, got {other:?}"),
        }
    }

    #[test]
    fn content_shapes() {
        let text = |value: Value| parse(message(value)).unwrap().content;
        assert_eq!(text(json!({ "role": "assistant" })), None);
        assert_eq!(text(json!({ "content": null })), None);
        assert_eq!(text(json!({ "content": "" })), None);
        assert_eq!(text(json!({ "content": "hi" })), Some("hi".into()));
        assert_eq!(
            text(
                json!({ "content": [{ "type": "text", "text": "a" }, { "type": "refusal" }, { "type": "text", "text": "b" }] })
            ),
            Some("ab".into())
        );
        assert_eq!(
            malformed_message(parse(message(json!({ "content": 3 })))),
            "choices[0].message.content is not a string"
        );
    }

    #[test]
    fn tool_call_arguments_object_is_serialized() {
        let response = parse(message(json!({
            "tool_calls": [{ "id": "a", "function": { "name": "f", "arguments": { "x": 1, "y": [true] } } }]
        })))
        .unwrap();
        assert_eq!(response.tool_calls[0].arguments, r#"{"x":1,"y":[true]}"#);
    }

    #[test]
    fn tool_calls_null_or_empty() {
        for calls in [Value::Null, json!([])] {
            let response = parse(message(json!({ "content": "x", "tool_calls": calls }))).unwrap();
            assert!(response.tool_calls.is_empty());
        }
    }

    #[test]
    fn tool_call_paths() {
        let call = |call: Value| {
            malformed_message(parse(message(json!({
                "tool_calls": [{ "id": "ok", "function": { "name": "f", "arguments": "{}" } }, call]
            }))))
        };
        assert_eq!(
            call(json!({ "function": { "name": "f", "arguments": "{}" } })),
            "choices[0].message.tool_calls[1].id is missing"
        );
        assert_eq!(
            call(json!({ "id": "b" })),
            "choices[0].message.tool_calls[1].function is missing"
        );
        assert_eq!(
            call(json!({ "id": "b", "function": { "arguments": "{}" } })),
            "choices[0].message.tool_calls[1].function.name is missing"
        );
        assert_eq!(
            call(json!({ "id": "b", "function": { "name": "", "arguments": "{}" } })),
            "choices[0].message.tool_calls[1].function.name is empty"
        );
        assert_eq!(
            call(json!({ "id": "b", "function": { "name": "f" } })),
            "choices[0].message.tool_calls[1].function.arguments is missing"
        );
        assert_eq!(
            call(json!({ "id": "b", "function": { "name": "f", "arguments": 7 } })),
            "choices[0].message.tool_calls[1].function.arguments is not a string or object"
        );
        assert_eq!(
            call(json!("x")),
            "choices[0].message.tool_calls[1] is not an object"
        );
    }

    #[test]
    fn structural_paths() {
        assert_eq!(malformed_message(parse(json!({}))), "choices is missing");
        assert_eq!(
            malformed_message(parse(json!([]))),
            "the body is not a JSON object"
        );
        assert_eq!(
            malformed_message(parse(json!({ "choices": [] }))),
            "choices is empty"
        );
        assert_eq!(
            malformed_message(parse(json!({ "choices": {} }))),
            "choices is not an array"
        );
        assert_eq!(
            malformed_message(parse(json!({ "choices": [{ "index": 0 }] }))),
            "choices[0].message is missing"
        );
        assert_eq!(
            malformed_message(parse(json!({ "error": { "message": "overloaded" } }))),
            "choices is missing (the server sent an error: overloaded)"
        );
    }

    #[test]
    fn usage_is_tolerant() {
        let mut body = message(json!({ "content": "x" }));
        body["usage"] = json!({ "prompt_tokens": 5 });
        assert_eq!(
            parse(body).unwrap().usage,
            Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 0
            })
        );
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(r#"{"error":{"message":"bad","type":"x"}}"#),
            "bad"
        );
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(error_message(r#"{"message":"nope"}"#), "nope");
        assert_eq!(error_message("  "), "(empty body)");
        assert_eq!(
            error_message("<html>gateway</html>"),
            "<html>gateway</html>"
        );
        let long = "é".repeat(EXCERPT_CHARS + 10);
        let cut = error_message(&long);
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn request_wire_form() {
        let request = ChatRequest {
            model: String::new(),
            messages: vec![
                Message::Assistant {
                    content: None,
                    tool_calls: vec![],
                },
                Message::Assistant {
                    content: Some("t".into()),
                    tool_calls: vec![ToolCall {
                        id: "c".into(),
                        name: "f".into(),
                        arguments: "{".into(),
                    }],
                },
            ],
            tools: vec![ToolSpec {
                name: "f".into(),
                description: "d".into(),
                parameters: Value::Null,
            }],
            temperature: Some(0.2),
            max_tokens: None,
        };
        let body: Value = serde_json::from_slice(&request_body(&request, "m").unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [
                    { "role": "assistant", "content": null },
                    { "role": "assistant", "content": "t", "tool_calls": [
                        { "id": "c", "type": "function", "function": { "name": "f", "arguments": "{" } }
                    ] },
                ],
                "tools": [{ "type": "function", "function": { "name": "f", "description": "d" } }],
                "temperature": 0.2,
            })
        );
        // A token cap goes out as `max_tokens`; none sends no field.
        let capped = ChatRequest {
            max_tokens: Some(64),
            ..ChatRequest::default()
        };
        let body: Value = serde_json::from_slice(&request_body(&capped, "m").unwrap()).unwrap();
        assert_eq!(body["max_tokens"], json!(64));
        assert!(!body.as_object().unwrap().contains_key("temperature"));
    }
}
