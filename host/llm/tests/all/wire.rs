//! What the client sends: the OpenAI wire form, the key header, the path.

use crate::common::{self, KEY, KEY_VAR, UNSET_VAR, ask, client, config};
use sandgraph_llm::{ChatRequest, Message, OpenAiClient, Provider, ToolCall, ToolSpec};
use sandgraph_test_llm::{Reply, ScriptedLlm};
use serde_json::json;

#[tokio::test]
async fn request_carries_model_messages_tools_and_key() {
    common::setup();
    let llm = ScriptedLlm::start([Reply::tool_call("lookup", r#"{"q":"x"}"#)]).await;
    let request = ChatRequest {
        model: "deepseek-chat".into(),
        messages: vec![
            Message::system("be brief"),
            Message::user("find x"),
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "call_0".into(),
                    name: "search".into(),
                    // Raw text, sent as is even when it is not JSON.
                    arguments: r#"{"q": "x""#.into(),
                }],
            },
            Message::tool("call_0", r#"{"hits":[]}"#),
            Message::Assistant {
                content: Some("nothing found, trying again".into()),
                tool_calls: vec![],
            },
        ],
        tools: vec![
            ToolSpec {
                name: "search".into(),
                description: "search the web".into(),
                parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
            },
            ToolSpec {
                name: "lookup".into(),
                description: "look a word up".into(),
                parameters: json!({"type": "object"}),
            },
        ],
        temperature: Some(0.5),
        max_tokens: Some(100),
    };
    let response = client(&llm).chat(&request).await.unwrap();
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].id, "call_1");

    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.path, "/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(
        sent.body,
        json!({
            "model": "deepseek-chat",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "find x"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"x\""}}
                ]},
                {"role": "tool", "tool_call_id": "call_0", "content": "{\"hits\":[]}"},
                {"role": "assistant", "content": "nothing found, trying again"},
            ],
            "tools": [
                {"type": "function", "function": {
                    "name": "search",
                    "description": "search the web",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                }},
                {"type": "function", "function": {
                    "name": "lookup",
                    "description": "look a word up",
                    "parameters": {"type": "object"},
                }},
            ],
            "temperature": 0.5,
            "max_tokens": 100,
        })
    );
    assert_eq!(sent.tool_names(), ["search", "lookup"]);
    assert_eq!(sent.messages().len(), 5);
}

#[tokio::test]
async fn loopback_without_key_sends_no_authorization() {
    common::setup();
    let llm = ScriptedLlm::start([Reply::text("hi")]).await;
    let client = OpenAiClient::new(sandgraph_llm::ClientConfig {
        api_key_env: UNSET_VAR.into(),
        ..config(&llm)
    })
    .unwrap();
    let response = client.chat(&ask("hello")).await.unwrap();
    assert_eq!(response.content.as_deref(), Some("hi"));
    assert_eq!(llm.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn empty_tools_and_temperature_are_omitted_and_model_defaults() {
    common::setup();
    let llm = ScriptedLlm::start([Reply::text("hi")]).await;
    let client = OpenAiClient::new(sandgraph_llm::ClientConfig {
        model: "local-model".into(),
        ..config(&llm)
    })
    .unwrap();
    assert_eq!(client.model(), "local-model");
    client.chat(&ask("hello")).await.unwrap();
    let body = &llm.requests()[0].body;
    assert_eq!(
        body,
        &json!({"model": "local-model", "messages": [{"role": "user", "content": "hello"}]})
    );
}

#[tokio::test]
async fn base_url_with_v1_and_trailing_slash() {
    common::setup();
    let llm = ScriptedLlm::start([Reply::text("hi")]).await;
    let client = OpenAiClient::new(sandgraph_llm::ClientConfig {
        base_url: format!("{}/v1/", llm.base_url()),
        ..config(&llm)
    })
    .unwrap();
    assert_eq!(
        client.endpoint(),
        format!("{}/v1/chat/completions", llm.base_url())
    );
    client.chat(&ask("hello")).await.unwrap();
    assert_eq!(llm.requests()[0].path, "/v1/chat/completions");
}

#[tokio::test]
async fn tool_loop_round_trip() {
    common::setup();
    let llm = ScriptedLlm::start([
        Reply::tool_calls(&[("add", r#"{"a":1,"b":2}"#), ("mul", r#"{"a":3,"b":4}"#)]),
        Reply::respond(|request| {
            let results: Vec<&str> = request
                .messages()
                .iter()
                .filter(|message| message["role"] == "tool")
                .filter_map(|message| message["content"].as_str())
                .collect();
            Reply::text(&format!("results: {}", results.join(", ")))
        }),
    ])
    .await;
    let client = client(&llm);
    let mut request = ChatRequest {
        tools: vec![ToolSpec {
            name: "add".into(),
            description: "add".into(),
            parameters: json!({"type": "object"}),
        }],
        ..ask("compute")
    };
    let first = client.chat(&request).await.unwrap();
    assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(first.content, None, "DeepSeek's empty content is None");
    let ids: Vec<&str> = first
        .tool_calls
        .iter()
        .map(|call| call.id.as_str())
        .collect();
    assert_eq!(ids, ["call_1_0", "call_1_1"]);
    request.messages.push(first.to_message());
    request.messages.push(Message::tool("call_1_0", "3"));
    request.messages.push(Message::tool("call_1_1", "12"));
    let second = client.chat(&request).await.unwrap();
    assert_eq!(second.content.as_deref(), Some("results: 3, 12"));
    assert_eq!(second.finish_reason.as_deref(), Some("stop"));
    assert!(second.usage.is_some_and(|usage| usage.prompt_tokens > 0));
    assert_eq!(llm.remaining(), 0);
    assert_eq!(
        llm.requests()[1].messages()[1]["tool_calls"][1]["function"]["name"],
        "mul"
    );
    // The key variable named in the config is the one read.
    assert_eq!(client.config().api_key_env, KEY_VAR);
}
