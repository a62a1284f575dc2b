//! The HTTP client: key handling, retries, bounded body reads.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use crate::config::{MAX_BACKOFF, MAX_RETRY_AFTER, millis};
use crate::wire;
use crate::{ChatRequest, ChatResponse, ClientConfig, LlmError, Provider};

/// Largest error body read to find the server's message; the rest is
/// dropped (an error body is only quoted, never parsed as a completion).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Replaces the key wherever server text echoes it.
const REDACTED: &str = "[redacted]";

/// The API key. Its `Debug` never shows it, and it is only ever written
/// into the `Authorization` header.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// An OpenAI-compatible chat-completions client (DeepSeek, OpenAI, Ollama,
/// vLLM, llama.cpp, ...). Cheap to share behind an `Arc`; one connection
/// pool per client, shared by clones.
#[derive(Clone)]
pub struct OpenAiClient {
    config: ClientConfig,
    endpoint: Url,
    key: Option<ApiKey>,
    http: reqwest::Client,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("model", &self.config.model)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

fn config_error(message: impl Into<String>) -> LlmError {
    LlmError::Config {
        message: message.into(),
    }
}

/// Whether `url` points at this machine: `localhost` (and `*.localhost`),
/// `127.0.0.0/8` or `::1` (also as `::ffff:127.x.y.z`).
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|ip| ip.is_loopback())
        }
        Err(_) => {
            let domain = host.trim_end_matches('.').to_ascii_lowercase();
            domain == "localhost" || domain.ends_with(".localhost")
        }
    }
}

fn endpoint(base_url: &str) -> Result<Url, LlmError> {
    let base = Url::parse(base_url.trim())
        .map_err(|error| config_error(format!("base_url {base_url:?} is not a URL: {error}")))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(config_error(format!(
            "base_url {base_url:?} must use http or https, not {}",
            base.scheme()
        )));
    }
    if base.host().is_none() {
        return Err(config_error(format!("base_url {base_url:?} has no host")));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(config_error(format!(
            "base_url {base_url:?} must not have a query or fragment"
        )));
    }
    let joined = format!("{}/chat/completions", base.as_str().trim_end_matches('/'));
    Url::parse(&joined).map_err(|error| config_error(format!("base_url {base_url:?}: {error}")))
}

impl OpenAiClient {
    /// Validates `config`, reads the API key from the environment variable
    /// it names, and builds the HTTP client. No request is sent.
    ///
    /// A missing or empty key is an error ([`LlmError::MissingKey`]) unless
    /// the base URL is on loopback: local servers need none, and then no
    /// `Authorization` header is sent.
    pub fn new(config: ClientConfig) -> Result<Self, LlmError> {
        let endpoint = endpoint(&config.base_url)?;
        if config.model.trim().is_empty() {
            return Err(config_error("model must not be empty"));
        }
        if config.api_key_env.is_empty() || config.api_key_env.contains(['=', '\0']) {
            return Err(config_error(format!(
                "api_key_env {:?} is not an environment variable name",
                config.api_key_env
            )));
        }
        if config.timeout.is_zero() || config.connect_timeout.is_zero() {
            return Err(config_error("timeout and connect_timeout must be positive"));
        }
        if config.max_response_bytes == 0 {
            return Err(config_error("max_response_bytes must be positive"));
        }
        let key = std::env::var(&config.api_key_env)
            .ok()
            .map(|key| key.trim().to_owned())
            .filter(|key| !key.is_empty())
            .map(ApiKey);
        let loopback = is_loopback(&endpoint);
        if key.is_none() && !loopback {
            return Err(LlmError::MissingKey {
                var: config.api_key_env.clone(),
            });
        }
        if key.is_some() && endpoint.scheme() == "http" && !loopback {
            tracing::warn!(
                endpoint = %endpoint,
                "the API key is sent over plain http to a non-loopback host"
            );
        }
        let mut headers = HeaderMap::new();
        if let Some(ApiKey(key)) = &key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                config_error(format!(
                    "the key in {} contains characters not allowed in a header",
                    config.api_key_env
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            // A redirect would re-send the prompt (and possibly the key)
            // somewhere else; an API endpoint never needs one.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("sandgraph/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| {
                config_error(format!("cannot build the HTTP client: {}", chain(&error)))
            })?;
        Ok(OpenAiClient {
            config,
            endpoint,
            key,
            http,
        })
    }

    /// The model used when a request names none.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// The configuration the client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The URL requests are posted to (`{base_url}/chat/completions`).
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    /// Replaces every occurrence of the key in server-provided text.
    fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(ApiKey(key)) if text.contains(key.as_str()) => {
                text.replace(key.as_str(), REDACTED)
            }
            _ => text.to_owned(),
        }
    }

    async fn send(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let body = wire::request_body(request, &self.config.model)?;
        let attempts = self.config.max_retries.saturating_add(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let failure = match self.attempt(&body).await {
                Ok(response) => return Ok(response),
                Err(Failed::Final(error)) => return Err(error),
                Err(Failed::Transient(failure)) => failure,
            };
            if attempt >= attempts {
                return Err(failure.exhausted(attempts));
            }
            let wait = failure
                .retry_after
                .unwrap_or_else(|| backoff(self.config.backoff, attempt - 1));
            tracing::warn!(
                status = failure.status.map(|status| status.as_u16()),
                attempt,
                of = attempts,
                wait_ms = millis(wait),
                reason = %failure.reason(),
                "llm request failed, retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    async fn attempt(&self, body: &[u8]) -> Result<ChatResponse, Failed> {
        let response = self
            .http
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_vec())
            .send()
            .await
            .map_err(|error| self.transport(&error))?;
        let status = response.status();
        if status.is_success() {
            let body = read_body(response, self.config.max_response_bytes, false)
                .await
                .map_err(|error| self.body_error(error))?;
            let text = self.redact(&String::from_utf8_lossy(&body));
            return wire::parse_response(&text).map_err(Failed::Final);
        }
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let body = read_body(response, MAX_ERROR_BODY_BYTES, true)
            .await
            .map_err(|error| self.body_error(error))?;
        // Redact before cutting the excerpt, so no prefix of the key survives.
        let message = wire::error_message(&self.redact(&String::from_utf8_lossy(&body)));
        match status.as_u16() {
            401 | 403 => Err(Failed::Final(LlmError::Auth {
                status: status.as_u16(),
                message: format!("{message}; check the key in {}", self.config.api_key_env),
            })),
            429 | 500 | 502 | 503 | 504 => Err(Failed::Transient(Transient {
                status: Some(status),
                retry_after,
                kind: TransientKind::Status(message),
            })),
            code => Err(Failed::Final(LlmError::Status {
                status: code,
                message,
            })),
        }
    }

    fn transport(&self, error: &reqwest::Error) -> Failed {
        if error.is_timeout() {
            Failed::Transient(Transient {
                status: None,
                retry_after: None,
                kind: TransientKind::Timeout(millis(self.config.timeout)),
            })
        } else if error.is_connect() {
            Failed::Transient(Transient {
                status: None,
                retry_after: None,
                kind: TransientKind::Connect(self.redact(&chain(error))),
            })
        } else {
            Failed::Final(LlmError::Transport {
                message: self.redact(&chain(error)),
            })
        }
    }

    fn body_error(&self, error: BodyError) -> Failed {
        match error {
            BodyError::TooLarge => Failed::Final(LlmError::TooLarge {
                limit: self.config.max_response_bytes,
            }),
            BodyError::Http(error) => self.transport(&error),
        }
    }
}

impl Provider for OpenAiClient {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        self.send(request).boxed()
    }
}

/// The error chain of a reqwest error, without the URL (the endpoint is
/// configuration, and a URL may carry a query).
fn chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

enum Failed {
    /// Not retried.
    Final(LlmError),
    /// Retried while attempts remain.
    Transient(Transient),
}

struct Transient {
    status: Option<StatusCode>,
    retry_after: Option<Duration>,
    kind: TransientKind,
}

enum TransientKind {
    /// A retryable status, with the server's message.
    Status(String),
    /// The attempt timed out after this many milliseconds.
    Timeout(u64),
    /// Connecting failed.
    Connect(String),
}

impl Transient {
    fn reason(&self) -> String {
        match &self.kind {
            TransientKind::Status(message) => message.clone(),
            TransientKind::Timeout(after_ms) => format!("timed out after {after_ms} ms"),
            TransientKind::Connect(message) => message.clone(),
        }
    }

    fn exhausted(self, attempts: u32) -> LlmError {
        match self.kind {
            TransientKind::Status(message) => match self.status.map(|status| status.as_u16()) {
                Some(429) => LlmError::RateLimited { attempts, message },
                status => LlmError::Server {
                    status: status.unwrap_or(500),
                    attempts,
                    message,
                },
            },
            TransientKind::Timeout(after_ms) => LlmError::Timeout { after_ms },
            TransientKind::Connect(message) => LlmError::Transport {
                message: if attempts > 1 {
                    format!("{message} (after {attempts} attempts)")
                } else {
                    message
                },
            },
        }
    }
}

/// `base * 2^retry`, capped at [`MAX_BACKOFF`]; `retry` counts from 0.
fn backoff(base: Duration, retry: u32) -> Duration {
    let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(MAX_BACKOFF)
}

/// The `Retry-After` wait (delay-seconds or an HTTP date), capped at
/// [`MAX_RETRY_AFTER`]; `None` when absent or unreadable.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => {
            let at = httpdate::parse_http_date(value).ok()?;
            at.duration_since(now).unwrap_or(Duration::ZERO)
        }
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

enum BodyError {
    TooLarge,
    Http(reqwest::Error),
}

/// Reads the body chunk by chunk, never holding more than `limit` bytes.
/// Past the limit: an error, or (`truncate`) the first `limit` bytes.
async fn read_body(
    mut response: reqwest::Response,
    limit: usize,
    truncate: bool,
) -> Result<Vec<u8>, BodyError> {
    if !truncate
        && response
            .content_length()
            .is_some_and(|length| length > limit as u64)
    {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Http)? {
        if body.len() + chunk.len() > limit {
            if truncate {
                body.extend_from_slice(&chunk[..limit - body.len()]);
                break;
            }
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_millis(500);
        assert_eq!(backoff(base, 0), Duration::from_millis(500));
        assert_eq!(backoff(base, 1), Duration::from_secs(1));
        assert_eq!(backoff(base, 3), Duration::from_secs(4));
        assert_eq!(backoff(base, 6), MAX_BACKOFF);
        assert_eq!(backoff(base, 40), MAX_BACKOFF);
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
            headers
        };
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
        assert_eq!(
            retry_after(&headers("2"), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_after(&headers("86400"), now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after(&headers("soon"), now), None);
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(
            retry_after(&headers(&date), now),
            Some(Duration::from_secs(7))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(retry_after(&headers(&past), now), Some(Duration::ZERO));
    }

    #[test]
    fn loopback_hosts() {
        for url in [
            "http://localhost:11434/v1",
            "http://LOCALHOST",
            "http://api.localhost",
            "http://127.0.0.1:8080",
            "http://127.3.2.1",
            "http://[::1]:8000",
            "http://[::ffff:127.0.0.1]",
        ] {
            assert!(is_loopback(&Url::parse(url).unwrap()), "{url}");
        }
        for url in [
            "https://api.deepseek.com",
            "http://10.0.0.1",
            "http://localhost.example.com",
            "http://[::2]",
        ] {
            assert!(!is_loopback(&Url::parse(url).unwrap()), "{url}");
        }
    }

    #[test]
    fn endpoints() {
        let url = |base: &str| endpoint(base).map(|url| url.to_string());
        assert_eq!(
            url("https://api.deepseek.com").unwrap(),
            "https://api.deepseek.com/chat/completions"
        );
        assert_eq!(
            url("https://api.openai.com/v1/").unwrap(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            url("http://127.0.0.1:8080//").unwrap(),
            "http://127.0.0.1:8080/chat/completions"
        );
        for bad in [
            "",
            "api.deepseek.com",
            "ftp://host",
            "http://host/?k=v",
            "http://host/#f",
            "file:///tmp",
        ] {
            assert_eq!(url(bad).unwrap_err().code(), "config", "{bad}");
        }
    }

    #[test]
    fn key_debug_is_redacted() {
        assert_eq!(format!("{:?}", ApiKey("sk-secret".into())), "[redacted]");
    }
}
