//! Defaults, the TOML form, and the error code table.

use std::time::Duration;

use sandgraph_llm::{
    ClientConfig, DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, DEFAULT_MODEL, LlmError, MAX_BACKOFF,
    MAX_RESPONSE_BYTES, MAX_RETRY_AFTER,
};

#[test]
fn defaults() {
    let config = ClientConfig::default();
    assert_eq!(config.base_url, "https://api.deepseek.com");
    assert_eq!(config.base_url, DEFAULT_BASE_URL);
    assert_eq!(config.model, "deepseek-chat");
    assert_eq!(config.model, DEFAULT_MODEL);
    assert_eq!(config.api_key_env, "DEEPSEEK_API_KEY");
    assert_eq!(config.api_key_env, DEFAULT_API_KEY_ENV);
    assert_eq!(config.timeout, Duration::from_secs(120));
    assert_eq!(config.connect_timeout, Duration::from_secs(10));
    assert_eq!(config.max_retries, 3);
    assert_eq!(config.backoff, Duration::from_millis(500));
    assert_eq!(config.max_response_bytes, 8 * 1024 * 1024);
    assert_eq!(config.max_response_bytes, MAX_RESPONSE_BYTES);
    assert_eq!(MAX_BACKOFF, Duration::from_secs(30));
    assert_eq!(MAX_RETRY_AFTER, Duration::from_secs(60));
}

#[test]
fn toml_with_every_field() {
    let config: ClientConfig = toml::from_str(
        r#"
        base_url = "http://127.0.0.1:11434/v1"
        model = "qwen2.5:7b"
        api_key_env = "OLLAMA_KEY"
        timeout_ms = 300000
        connect_timeout_ms = 2500
        max_retries = 0
        backoff_ms = 250
        max_response_bytes = 1048576
        "#,
    )
    .unwrap();
    assert_eq!(
        config,
        ClientConfig {
            base_url: "http://127.0.0.1:11434/v1".into(),
            model: "qwen2.5:7b".into(),
            api_key_env: "OLLAMA_KEY".into(),
            timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_millis(2500),
            max_retries: 0,
            backoff: Duration::from_millis(250),
            max_response_bytes: 1 << 20,
        }
    );
}

#[test]
fn toml_fields_default_individually() {
    let config: ClientConfig = toml::from_str(r#"model = "gpt-4.1-mini""#).unwrap();
    assert_eq!(
        config,
        ClientConfig {
            model: "gpt-4.1-mini".into(),
            ..ClientConfig::default()
        }
    );
    let empty: ClientConfig = toml::from_str("").unwrap();
    assert_eq!(empty, ClientConfig::default());
}

#[test]
fn toml_rejects_unknown_fields() {
    for (text, field) in [
        ("timeout = 5", "timeout"),
        ("api_key = \"sk-x\"", "api_key"),
        ("base_url = \"http://x\"\nretries = 2", "retries"),
    ] {
        let error = toml::from_str::<ClientConfig>(text)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("unknown field `{field}`")),
            "{error}"
        );
    }
}

#[test]
fn toml_rejects_wrong_types() {
    let error = toml::from_str::<ClientConfig>("timeout_ms = \"2s\"").unwrap_err();
    assert!(error.to_string().contains("timeout_ms"), "{error}");
}

#[test]
fn error_codes_and_retryability() {
    let text = || String::from("m");
    let table = [
        (LlmError::MissingKey { var: text() }, "missing_key", false),
        (
            LlmError::Auth {
                status: 401,
                message: text(),
            },
            "auth",
            false,
        ),
        (
            LlmError::RateLimited {
                attempts: 4,
                message: text(),
            },
            "rate_limited",
            true,
        ),
        (
            LlmError::Server {
                status: 503,
                attempts: 4,
                message: text(),
            },
            "server",
            true,
        ),
        (
            LlmError::Status {
                status: 400,
                message: text(),
            },
            "status",
            false,
        ),
        (LlmError::Timeout { after_ms: 5 }, "timeout", true),
        (LlmError::Transport { message: text() }, "transport", true),
        (LlmError::TooLarge { limit: 5 }, "too_large", false),
        (LlmError::Malformed { message: text() }, "malformed", false),
        (LlmError::Config { message: text() }, "config", false),
    ];
    for (error, code, retryable) in table {
        assert_eq!(error.code(), code);
        assert_eq!(error.is_retryable(), retryable, "{code}");
        let shown = error.to_string();
        assert!(shown.starts_with(|c: char| c.is_lowercase()), "{shown}");
        assert!(!shown.ends_with('.'), "{shown}");
    }
}
