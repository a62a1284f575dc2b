//! Retries: 429 and 5xx, Retry-After, backoff, timeouts, connect failures,
//! and what is left when attempts run out.

use std::time::{Duration, Instant};

use crate::common::{self, ask, client, config};
use sandgraph_llm::{ClientConfig, LlmError, OpenAiClient, Provider};
use sandgraph_test_llm::{Reply, ScriptedLlm};

const BUSY: &str = r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#;

#[tokio::test]
async fn rate_limit_waits_for_retry_after() {
    common::setup();
    let llm = ScriptedLlm::start([
        Reply::status(429, BUSY).with_header("Retry-After", "1"),
        Reply::text("ok"),
    ])
    .await;
    let started = Instant::now();
    let response = client(&llm).chat(&ask("hi")).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(response.content.as_deref(), Some("ok"));
    assert_eq!(llm.requests().len(), 2);
    // The configured backoff is 10 ms: only Retry-After explains a second.
    assert!(waited >= Duration::from_millis(950), "waited {waited:?}");
}

#[tokio::test]
async fn server_error_backs_off_then_succeeds() {
    common::setup();
    let llm = ScriptedLlm::start([
        Reply::status(503, r#"{"error":{"message":"Server Overloaded"}}"#),
        Reply::text("ok"),
    ])
    .await;
    let client = OpenAiClient::new(ClientConfig {
        backoff: Duration::from_millis(300),
        ..config(&llm)
    })
    .unwrap();
    let started = Instant::now();
    let response = client.chat(&ask("hi")).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(response.content.as_deref(), Some("ok"));
    assert_eq!(llm.requests().len(), 2);
    assert!(waited >= Duration::from_millis(280), "waited {waited:?}");
}

#[tokio::test]
async fn rate_limit_exhausted_reports_attempts() {
    common::setup();
    let llm = ScriptedLlm::start(
        (0..3).map(|_| Reply::status(429, BUSY).with_header("Retry-After", "0")),
    )
    .await;
    let error = client(&llm).chat(&ask("hi")).await.unwrap_err();
    assert_eq!(
        error,
        LlmError::RateLimited {
            attempts: 3,
            message: "Rate limit reached".into()
        }
    );
    assert_eq!(error.code(), "rate_limited");
    assert!(error.is_retryable());
    assert_eq!(
        error.to_string(),
        "rate limited (429) after 3 attempts: Rate limit reached"
    );
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn server_error_exhausted_reports_last_status_and_body() {
    common::setup();
    let llm = ScriptedLlm::start([
        Reply::status(500, "oops"),
        Reply::status(503, "busy"),
        Reply::status(502, "<html><body>502 Bad Gateway</body></html>"),
    ])
    .await;
    let error = client(&llm).chat(&ask("hi")).await.unwrap_err();
    assert_eq!(
        error,
        LlmError::Server {
            status: 502,
            attempts: 3,
            message: "<html><body>502 Bad Gateway</body></html>".into()
        }
    );
    assert_eq!(error.code(), "server");
    assert!(error.is_retryable());
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn exhausted_script_fails_clearly() {
    common::setup();
    let llm = ScriptedLlm::start([]).await;
    let client = OpenAiClient::new(ClientConfig {
        max_retries: 0,
        ..config(&llm)
    })
    .unwrap();
    let error = client.chat(&ask("hi")).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "server error (500) after 1 attempts: scripted llm: no reply left for request 1"
    );
}

#[tokio::test]
async fn other_statuses_are_not_retried() {
    common::setup();
    let llm = ScriptedLlm::start([
        Reply::status(
            422,
            r#"{"error":{"message":"Invalid Parameters","type":"invalid_request_error"}}"#,
        ),
        Reply::text("never sent"),
    ])
    .await;
    let error = client(&llm).chat(&ask("hi")).await.unwrap_err();
    assert_eq!(
        error,
        LlmError::Status {
            status: 422,
            message: "Invalid Parameters".into()
        }
    );
    assert!(!error.is_retryable());
    assert_eq!(llm.requests().len(), 1);
    assert_eq!(llm.remaining(), 1);
}

#[tokio::test]
async fn timeout_is_retried() {
    common::setup();
    let llm = ScriptedLlm::start([
        Reply::text("late").delay(Duration::from_secs(5)),
        Reply::text("on time"),
    ])
    .await;
    let client = OpenAiClient::new(ClientConfig {
        timeout: Duration::from_millis(1000),
        max_retries: 1,
        ..config(&llm)
    })
    .unwrap();
    let response = client.chat(&ask("hi")).await.unwrap();
    assert_eq!(response.content.as_deref(), Some("on time"));
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn timeout_error_after_the_configured_time() {
    common::setup();
    let llm = ScriptedLlm::start([Reply::text("late").delay(Duration::from_secs(5))]).await;
    let client = OpenAiClient::new(ClientConfig {
        timeout: Duration::from_millis(250),
        max_retries: 0,
        ..config(&llm)
    })
    .unwrap();
    let started = Instant::now();
    let error = client.chat(&ask("hi")).await.unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error, LlmError::Timeout { after_ms: 250 });
    assert_eq!(error.code(), "timeout");
    assert!(error.is_retryable());
    assert_eq!(error.to_string(), "the request timed out after 250 ms");
    assert!(elapsed >= Duration::from_millis(240), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
}

#[tokio::test]
async fn connect_failure_is_retried_then_transport_error() {
    common::setup();
    // A port nothing listens on: bind one, note it, release it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = OpenAiClient::new(ClientConfig {
        base_url: format!("http://127.0.0.1:{port}"),
        api_key_env: common::UNSET_VAR.into(),
        max_retries: 1,
        backoff: Duration::from_millis(10),
        ..ClientConfig::default()
    })
    .unwrap();
    let error = client.chat(&ask("hi")).await.unwrap_err();
    assert_eq!(error.code(), "transport", "{error:?}");
    assert!(error.is_retryable());
    let text = error.to_string();
    assert!(text.starts_with("transport error: "), "{text}");
    assert!(text.ends_with("(after 2 attempts)"), "{text}");
    assert!(!text.contains("for url"), "{text}");
}

#[tokio::test]
async fn https_goes_through_rustls() {
    common::setup();
    // A plain-HTTP server behind an https URL: the TLS handshake (rustls)
    // starts and fails, which is a transport error, not a
    // panic about a missing crypto provider.
    let llm = ScriptedLlm::start([Reply::text("unreachable")]).await;
    let client = OpenAiClient::new(ClientConfig {
        base_url: llm.base_url().replace("http://", "https://"),
        max_retries: 0,
        ..config(&llm)
    })
    .unwrap();
    let error = client.chat(&ask("hi")).await.unwrap_err();
    assert_eq!(error.code(), "transport", "{error}");
    assert_eq!(llm.remaining(), 1, "no request was parsed: {error}");
}
