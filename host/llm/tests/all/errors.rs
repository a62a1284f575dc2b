//! Failure classification: auth, statuses, size limits, malformed bodies,
//! missing keys and bad configuration — and the key never leaking.

use std::time::Duration;

use crate::common::{self, KEY, KEY_VAR, UNSET_VAR, ask, client, config};
use sandgraph_llm::{ClientConfig, LlmError, OpenAiClient, Provider};
use sandgraph_test_llm::{Reply, ScriptedLlm};

async fn fail(reply: Reply, config_for: impl FnOnce(ClientConfig) -> ClientConfig) -> LlmError {
    common::setup();
    let llm = ScriptedLlm::start([reply]).await;
    let client = OpenAiClient::new(config_for(ClientConfig {
        max_retries: 0,
        ..config(&llm)
    }))
    .unwrap();
    client.chat(&ask("hi")).await.unwrap_err()
}

fn malformed(error: LlmError) -> String {
    match error {
        LlmError::Malformed { message } => message,
        other => panic!("expected malformed, got {other:?}"),
    }
}

#[tokio::test]
async fn forbidden_is_auth() {
    let error = fail(Reply::status(403, "forbidden"), |config| config).await;
    assert_eq!(
        error,
        LlmError::Auth {
            status: 403,
            message: format!("forbidden; check the key in {KEY_VAR}")
        }
    );
    assert_eq!(
        error.to_string(),
        format!("authentication failed (403): forbidden; check the key in {KEY_VAR}")
    );
}

#[tokio::test]
async fn key_never_appears_in_errors() {
    common::setup();
    let echo = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}}}"#
    );
    let long_echo = format!("{}{KEY}{}", "x".repeat(500), "y".repeat(100));
    let llm = ScriptedLlm::start([
        Reply::status(401, &echo),
        Reply::status(400, &format!("bad key {KEY} here")),
        // The key straddles the excerpt cut: no prefix of it may survive.
        Reply::status(404, &long_echo),
        Reply::status(503, &echo),
        Reply::raw(&format!("not json {KEY}")),
        Reply::raw(&format!(r#"{{"error":{{"message":"{KEY}"}}}}"#)),
    ])
    .await;
    let client = OpenAiClient::new(ClientConfig {
        max_retries: 0,
        ..config(&llm)
    })
    .unwrap();
    let mut errors = Vec::new();
    for _ in 0..6 {
        errors.push(client.chat(&ask("hi")).await.unwrap_err());
    }
    let codes: Vec<&str> = errors.iter().map(LlmError::code).collect();
    assert_eq!(
        codes,
        [
            "auth",
            "status",
            "status",
            "server",
            "malformed",
            "malformed"
        ]
    );
    for error in &errors {
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains(KEY), "{text}");
            assert!(!text.contains(&KEY[..12]), "{text}");
        }
    }
    assert!(
        errors[0]
            .to_string()
            .contains("Incorrect API key provided: [redacted].")
    );
    assert_eq!(
        errors[1].to_string(),
        "request failed with status 400: bad key [redacted] here"
    );
    // The client itself does not show the key either.
    let shown = format!("{client:?}");
    assert!(
        !shown.contains(KEY) && shown.contains("[redacted]"),
        "{shown}"
    );
    // It was sent, though.
    assert_eq!(
        llm.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
}

#[tokio::test]
async fn plain_text_error_body_is_excerpted() {
    let body = format!("not found: {}", "z".repeat(2000));
    let error = fail(Reply::status(404, &body), |config| config).await;
    let LlmError::Status { status, message } = &error else {
        panic!("expected status, got {error:?}");
    };
    assert_eq!(*status, 404);
    assert!(message.starts_with("not found: zzz"), "{message}");
    assert_eq!(
        message.chars().count(),
        513,
        "512 characters and an ellipsis"
    );
    assert!(message.ends_with('…'));
}

#[tokio::test]
async fn body_over_the_limit_with_content_length() {
    let error = fail(Reply::text(&"x".repeat(4096)), |config| ClientConfig {
        max_response_bytes: 1024,
        ..config
    })
    .await;
    assert_eq!(error, LlmError::TooLarge { limit: 1024 });
    assert_eq!(error.code(), "too_large");
    assert_eq!(
        error.to_string(),
        "the response is larger than the limit of 1024 bytes"
    );
}

#[tokio::test]
async fn body_over_the_limit_streamed() {
    // Chunked: no Content-Length, so the limit must hold while reading.
    let big = format!(
        r#"{{"choices":[{{"message":{{"content":"{}"}}}}]}}"#,
        "x".repeat(200_000)
    );
    let error = fail(Reply::raw(&big).chunked(), |config| ClientConfig {
        max_response_bytes: 64 * 1024,
        ..config
    })
    .await;
    assert_eq!(error, LlmError::TooLarge { limit: 64 * 1024 });
}

#[tokio::test]
async fn body_under_the_limit_streamed_is_read() {
    common::setup();
    let text = "y".repeat(100_000);
    let llm = ScriptedLlm::start([Reply::text(&text).chunked()]).await;
    let response = client(&llm).chat(&ask("hi")).await.unwrap();
    assert_eq!(response.content, Some(text));
}

#[tokio::test]
async fn not_json_is_malformed_with_excerpt() {
    let message = malformed(fail(Reply::raw("<html>maintenance</html>"), |c| c).await);
    assert!(message.starts_with("the body is not JSON ("), "{message}");
    assert!(
        message.ends_with("): <html>maintenance</html>"),
        "{message}"
    );
}

#[tokio::test]
async fn missing_choices_is_malformed() {
    let error = fail(
        Reply::raw(r#"{"id":"x","object":"chat.completion"}"#),
        |c| c,
    )
    .await;
    assert_eq!(error.to_string(), "malformed response: choices is missing");
    let error = fail(Reply::raw(r#"{"choices":[]}"#), |c| c).await;
    assert_eq!(error.to_string(), "malformed response: choices is empty");
}

#[tokio::test]
async fn tool_call_without_name_is_malformed_with_path() {
    let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
        {"id":"a","type":"function","function":{"name":"ok","arguments":"{}"}},
        {"id":"b","type":"function","function":{"arguments":"{}"}}
    ]},"finish_reason":"tool_calls"}]}"#;
    let error = fail(Reply::raw(body), |c| c).await;
    assert_eq!(error.code(), "malformed");
    assert!(!error.is_retryable());
    assert_eq!(
        error.to_string(),
        "malformed response: choices[0].message.tool_calls[1].function.name is missing"
    );
}

#[tokio::test]
async fn arguments_object_is_kept_as_text() {
    common::setup();
    let body = r#"{"choices":[{"message":{"tool_calls":[
        {"id":"a","function":{"name":"f","arguments":{"x":1}}}
    ]}}]}"#;
    let llm = ScriptedLlm::start([Reply::raw(body)]).await;
    let response = client(&llm).chat(&ask("hi")).await.unwrap();
    assert_eq!(response.tool_calls[0].arguments, r#"{"x":1}"#);
    assert_eq!(response.finish_reason, None);
    assert_eq!(response.usage, None);
}

#[test]
fn missing_key_for_a_remote_server() {
    common::setup();
    let error = OpenAiClient::new(ClientConfig {
        api_key_env: UNSET_VAR.into(),
        ..ClientConfig::default()
    })
    .unwrap_err();
    assert_eq!(
        error,
        LlmError::MissingKey {
            var: UNSET_VAR.into()
        }
    );
    assert_eq!(error.code(), "missing_key");
    assert_eq!(
        error.to_string(),
        format!("the API key is missing: set the environment variable {UNSET_VAR}")
    );
}

#[test]
fn key_present_for_a_remote_server() {
    common::setup();
    let client = OpenAiClient::new(ClientConfig {
        api_key_env: KEY_VAR.into(),
        ..ClientConfig::default()
    })
    .unwrap();
    assert_eq!(
        client.endpoint(),
        "https://api.deepseek.com/chat/completions"
    );
    assert_eq!(client.model(), "deepseek-chat");
}

#[test]
fn loopback_names_need_no_key() {
    common::setup();
    for base_url in [
        "http://localhost:11434/v1",
        "http://127.0.0.1:8000",
        "http://[::1]:8080/v1",
    ] {
        OpenAiClient::new(ClientConfig {
            base_url: base_url.into(),
            api_key_env: UNSET_VAR.into(),
            ..ClientConfig::default()
        })
        .unwrap_or_else(|error| panic!("{base_url}: {error}"));
    }
}

#[test]
fn bad_configuration_is_rejected_at_new() {
    common::setup();
    let local = |change: fn(&mut ClientConfig)| {
        let mut config = ClientConfig {
            base_url: "http://127.0.0.1:9".into(),
            ..ClientConfig::default()
        };
        change(&mut config);
        OpenAiClient::new(config).unwrap_err()
    };
    type Change = fn(&mut ClientConfig);
    let cases: [(Change, &str); 7] = [
        (|c| c.base_url = "api.deepseek.com".into(), "is not a URL"),
        (
            |c| c.base_url = "ftp://example.com".into(),
            "must use http or https",
        ),
        (
            |c| c.base_url = "http://127.0.0.1/?key=1".into(),
            "query or fragment",
        ),
        (|c| c.model = " ".into(), "model must not be empty"),
        (
            |c| c.api_key_env = String::new(),
            "not an environment variable name",
        ),
        (|c| c.timeout = Duration::ZERO, "must be positive"),
        (|c| c.max_response_bytes = 0, "must be positive"),
    ];
    for (change, expected) in cases {
        let error = local(change);
        assert_eq!(error.code(), "config", "{error}");
        let text = error.to_string();
        assert!(text.starts_with("invalid configuration: "), "{text}");
        assert!(text.contains(expected), "{text}");
    }
}
