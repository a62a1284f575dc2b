//! Client configuration, its defaults and its TOML form.

use std::time::Duration;

use serde::Deserialize;

/// DeepSeek's OpenAI-compatible endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.deepseek.com";
/// DeepSeek's general chat model.
pub const DEFAULT_MODEL: &str = "deepseek-chat";
/// The environment variable the API key is read from by default.
pub const DEFAULT_API_KEY_ENV: &str = "DEEPSEEK_API_KEY";
/// Whole-request timeout: long completions with many tools take a minute or
/// more on busy providers.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// TCP + TLS connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Re-sends after 429, 5xx, connect and timeout failures.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// Base of the exponential backoff between retries.
pub const DEFAULT_BACKOFF: Duration = Duration::from_millis(500);
/// Cap of one backoff wait (the base doubles per attempt).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Cap of a server-requested `Retry-After` wait: a server asking for more is
/// treated as asking for this long, so one call cannot stall for hours.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Largest response body read. A non-streamed completion is a few KiB to a
/// few hundred KiB even with long reasoning; 8 MiB leaves room for that and
/// still bounds what a broken or hostile server can make the host buffer.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// How to reach an OpenAI-compatible chat-completions server.
///
/// Deserializes from TOML/JSON with every field optional and unknown fields
/// rejected; durations are given in milliseconds there (`timeout_ms`,
/// `connect_timeout_ms`, `backoff_ms`):
///
/// ```toml
/// base_url = "http://127.0.0.1:11434/v1"
/// model = "qwen2.5:7b"
/// timeout_ms = 300000
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(from = "ConfigFile")]
pub struct ClientConfig {
    /// Server base URL; `/chat/completions` is appended (after removing
    /// trailing slashes). Must be `http` or `https`, without query or
    /// fragment.
    pub base_url: String,
    /// Model used when a request leaves `ChatRequest::model` empty.
    pub model: String,
    /// The environment variable holding the API key, read once by
    /// `OpenAiClient::new`. Not needed for loopback servers.
    pub api_key_env: String,
    /// Timeout of one whole attempt (connect, send, read the body).
    pub timeout: Duration,
    /// Timeout of connecting (TCP and TLS).
    pub connect_timeout: Duration,
    /// Re-sends after 429, 500, 502, 503, 504, connect failures and
    /// timeouts; `0` sends once.
    pub max_retries: u32,
    /// First backoff wait; doubles per attempt, capped at [`MAX_BACKOFF`].
    /// A `Retry-After` header replaces it.
    pub backoff: Duration,
    /// Largest response body accepted, in bytes.
    pub max_response_bytes: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            base_url: DEFAULT_BASE_URL.to_owned(),
            model: DEFAULT_MODEL.to_owned(),
            api_key_env: DEFAULT_API_KEY_ENV.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            backoff: DEFAULT_BACKOFF,
            max_response_bytes: MAX_RESPONSE_BYTES,
        }
    }
}

impl ClientConfig {
    /// Where requests (and the API key) go: the base URL's origin,
    /// `scheme://host[:port]` with the host lowercased and the scheme's
    /// default port left out, e.g. `https://api.deepseek.com`. `None` when
    /// the base URL is not an `http` or `https` URL with a host (then
    /// `OpenAiClient::new` refuses it).
    pub fn origin(&self) -> Option<String> {
        let url = reqwest::Url::parse(self.base_url.trim()).ok()?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return None;
        }
        Some(url.origin().ascii_serialization())
    }

    /// Whether requests go to the origin of [`DEFAULT_BASE_URL`] (same
    /// scheme, host and port; any path). Plain `http` to the same host is
    /// another origin: the key would cross the network unencrypted.
    pub fn is_default_origin(&self) -> bool {
        let default = ClientConfig::default();
        self.origin().is_some() && self.origin() == default.origin()
    }

    /// Whether `api_key_env` names a variable holding a key, read as
    /// `OpenAiClient::new` reads it (trimmed, non-empty): whether a client
    /// built now would send an `Authorization` header.
    pub fn key_is_set(&self) -> bool {
        !self.api_key_env.is_empty()
            && !self.api_key_env.contains(['=', '\0'])
            && std::env::var(&self.api_key_env).is_ok_and(|key| !key.trim().is_empty())
    }
}

/// The serialized form: durations in milliseconds.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ConfigFile {
    base_url: String,
    model: String,
    api_key_env: String,
    timeout_ms: u64,
    connect_timeout_ms: u64,
    max_retries: u32,
    backoff_ms: u64,
    max_response_bytes: usize,
}

impl Default for ConfigFile {
    fn default() -> Self {
        let config = ClientConfig::default();
        ConfigFile {
            base_url: config.base_url,
            model: config.model,
            api_key_env: config.api_key_env,
            timeout_ms: millis(config.timeout),
            connect_timeout_ms: millis(config.connect_timeout),
            max_retries: config.max_retries,
            backoff_ms: millis(config.backoff),
            max_response_bytes: config.max_response_bytes,
        }
    }
}

impl From<ConfigFile> for ClientConfig {
    fn from(file: ConfigFile) -> Self {
        ClientConfig {
            base_url: file.base_url,
            model: file.model,
            api_key_env: file.api_key_env,
            timeout: Duration::from_millis(file.timeout_ms),
            connect_timeout: Duration::from_millis(file.connect_timeout_ms),
            max_retries: file.max_retries,
            backoff: Duration::from_millis(file.backoff_ms),
            max_response_bytes: file.max_response_bytes,
        }
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base_url: &str) -> ClientConfig {
        ClientConfig {
            base_url: base_url.to_owned(),
            ..ClientConfig::default()
        }
    }

    #[test]
    fn the_origin_is_scheme_host_and_port() {
        assert_eq!(
            ClientConfig::default().origin().as_deref(),
            Some("https://api.deepseek.com")
        );
        for (url, origin) in [
            ("https://API.DeepSeek.com/v1/", "https://api.deepseek.com"),
            ("https://api.deepseek.com:443", "https://api.deepseek.com"),
            ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
            (" http://[::1]:11434 ", "http://[::1]:11434"),
            (
                "https://api.deepseek.com.evil.example",
                "https://api.deepseek.com.evil.example",
            ),
        ] {
            assert_eq!(at(url).origin().as_deref(), Some(origin), "{url}");
        }
        for url in ["api.deepseek.com", "ftp://api.deepseek.com", "", "http://"] {
            assert_eq!(at(url).origin(), None, "{url}");
        }
    }

    #[test]
    fn only_the_default_origin_is_the_default() {
        assert!(ClientConfig::default().is_default_origin());
        assert!(at("https://api.deepseek.com/v1").is_default_origin());
        assert!(at("https://API.deepseek.com:443/").is_default_origin());
        for url in [
            "http://api.deepseek.com",
            "https://api.deepseek.com:8443",
            "https://api.deepseek.com.evil.example",
            "https://evil.example/api.deepseek.com",
            "https://api.deepseek.com@evil.example",
            "http://127.0.0.1:9",
            "not a url",
        ] {
            assert!(!at(url).is_default_origin(), "{url}");
        }
    }

    #[test]
    fn a_key_is_set_when_its_variable_holds_text() {
        let named = |var: &str| ClientConfig {
            api_key_env: var.to_owned(),
            ..ClientConfig::default()
        };
        // A name nothing sets, and names that are not variables.
        for var in ["SANDGRAPH_LLM_CONFIG_UNIT_TEST_UNSET", "", "A=B", "A\0B"] {
            assert!(!named(var).key_is_set(), "{var:?}");
        }
        // Cargo runs every test with PATH set (and not blank).
        assert!(named("PATH").key_is_set());
    }
}
