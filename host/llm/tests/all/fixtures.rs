//! Documented DeepSeek and OpenAI response bodies (see ../fixtures/README.md),
//! served over real HTTP and parsed.

use crate::common::{self, KEY_VAR, ask, client};
use sandgraph_llm::{ChatResponse, LlmError, Provider, ToolCall, Usage};
use sandgraph_test_llm::{Reply, ScriptedLlm};

async fn served(reply: Reply) -> Result<ChatResponse, LlmError> {
    common::setup();
    let llm = ScriptedLlm::start([reply]).await;
    let result = client(&llm).chat(&ask("hi")).await;
    assert_eq!(llm.requests().len(), 1, "fixtures are not retried");
    result
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn usage(prompt_tokens: u64, completion_tokens: u64) -> Option<Usage> {
    Some(Usage {
        prompt_tokens,
        completion_tokens,
    })
}

#[tokio::test]
async fn deepseek_text_with_reasoning_content() {
    let response = served(Reply::raw(include_str!("../fixtures/deepseek_text.json")))
        .await
        .unwrap();
    assert_eq!(
        response,
        ChatResponse {
            content: Some("Hello! How can I help you today?".into()),
            tool_calls: vec![],
            finish_reason: Some("stop".into()),
            usage: usage(10, 48),
        }
    );
}

#[tokio::test]
async fn deepseek_tool_call() {
    let response = served(Reply::raw(include_str!(
        "../fixtures/deepseek_tool_call.json"
    )))
    .await
    .unwrap();
    assert_eq!(
        response,
        ChatResponse {
            content: None,
            tool_calls: vec![call(
                "call_0_6d8666ea-44a0-4833-b4b1-9504572e5ae0",
                "get_weather",
                r#"{"location": "Hangzhou"}"#,
            )],
            finish_reason: Some("tool_calls".into()),
            usage: usage(174, 20),
        }
    );
}

#[tokio::test]
async fn openai_text() {
    let response = served(Reply::raw(include_str!("../fixtures/openai_text.json")))
        .await
        .unwrap();
    assert_eq!(
        response,
        ChatResponse {
            content: Some("Hello! How can I assist you today?".into()),
            tool_calls: vec![],
            finish_reason: Some("stop".into()),
            usage: usage(19, 10),
        }
    );
}

#[tokio::test]
async fn openai_tool_call_keeps_raw_arguments() {
    let response = served(Reply::raw(include_str!(
        "../fixtures/openai_tool_call.json"
    )))
    .await
    .unwrap();
    assert_eq!(
        response,
        ChatResponse {
            content: None,
            tool_calls: vec![call(
                "call_abc123",
                "get_current_weather",
                "{\n\"location\": \"Boston, MA\"\n}",
            )],
            finish_reason: Some("tool_calls".into()),
            usage: usage(82, 17),
        }
    );
}

#[tokio::test]
async fn openai_parallel_tool_calls_in_order() {
    let response = served(Reply::raw(include_str!(
        "../fixtures/openai_parallel_tool_calls.json"
    )))
    .await
    .unwrap();
    assert_eq!(
        response.tool_calls,
        [
            call(
                "call_12345xyz",
                "get_weather",
                r#"{"location":"Paris, France"}"#
            ),
            call(
                "call_67890abc",
                "get_weather",
                r#"{"location":"Bogotá, Colombia"}"#
            ),
            call(
                "call_99999def",
                "send_email",
                r#"{"to":"bob@email.com","body":"Hi bob"}"#
            ),
        ]
    );
    assert_eq!(response.content, None);
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.usage, usage(152, 71));
}

#[tokio::test]
async fn openai_401_is_auth_error_naming_the_variable() {
    let error = served(Reply::status(
        401,
        include_str!("../fixtures/openai_error_401.json"),
    ))
    .await
    .unwrap_err();
    assert_eq!(error.code(), "auth");
    assert!(!error.is_retryable());
    let LlmError::Auth { status, message } = &error else {
        panic!("expected auth, got {error:?}");
    };
    assert_eq!(*status, 401);
    assert!(
        message.starts_with("Incorrect API key provided: sk-abc12***"),
        "{message}"
    );
    assert!(
        message.ends_with(&format!("; check the key in {KEY_VAR}")),
        "{message}"
    );
    assert!(
        error
            .to_string()
            .starts_with("authentication failed (401): Incorrect API key provided"),
        "{error}"
    );
}

#[tokio::test]
async fn deepseek_402_is_status_error_with_server_message() {
    let error = served(Reply::status(
        402,
        include_str!("../fixtures/deepseek_error_402.json"),
    ))
    .await
    .unwrap_err();
    assert_eq!(
        error,
        LlmError::Status {
            status: 402,
            message: "Insufficient Balance".into()
        }
    );
    assert_eq!(error.code(), "status");
    assert_eq!(
        error.to_string(),
        "request failed with status 402: Insufficient Balance"
    );
}
