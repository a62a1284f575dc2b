//! The client's errors, each with a stable code.

/// Why a chat call failed. Messages never contain the API key: text a
/// server sends back is redacted before it lands here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// The key's environment variable is unset or empty and the server is
    /// not on loopback.
    #[error("the API key is missing: set the environment variable {var}")]
    MissingKey {
        /// The variable to set.
        var: String,
    },
    /// 401 or 403. `message` is the server's message followed by
    /// `; check the key in VAR`.
    #[error("authentication failed ({status}): {message}")]
    Auth {
        /// The HTTP status.
        status: u16,
        /// The server's message and which variable to check.
        message: String,
    },
    /// 429 on every attempt.
    #[error("rate limited (429) after {attempts} attempts: {message}")]
    RateLimited {
        /// Requests sent, retries included.
        attempts: u32,
        /// The last server message or body excerpt.
        message: String,
    },
    /// 500, 502, 503 or 504 on the last of all attempts.
    #[error("server error ({status}) after {attempts} attempts: {message}")]
    Server {
        /// The last HTTP status.
        status: u16,
        /// Requests sent, retries included.
        attempts: u32,
        /// The last server message or body excerpt.
        message: String,
    },
    /// Any other non-success status (400, 402, 404, 422, 501, ...); not
    /// retried.
    #[error("request failed with status {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The server's `error.message`, or an excerpt of the body.
        message: String,
    },
    /// The whole-attempt timeout passed, on the last of all attempts.
    #[error("the request timed out after {after_ms} ms")]
    Timeout {
        /// The configured per-attempt timeout.
        after_ms: u64,
    },
    /// Connecting or talking to the server failed.
    #[error("transport error: {message}")]
    Transport {
        /// What failed (the error chain, without URL queries).
        message: String,
    },
    /// The response body is larger than `max_response_bytes`.
    #[error("the response is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The configured limit.
        limit: usize,
    },
    /// The response is not a chat completion we can read.
    #[error("malformed response: {message}")]
    Malformed {
        /// What is wrong, with the JSON path at fault.
        message: String,
    },
    /// The configuration cannot work (bad base URL, zero timeout, ...).
    #[error("invalid configuration: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
}

impl LlmError {
    /// A stable machine-readable code: `missing_key`, `auth`,
    /// `rate_limited`, `server`, `status`, `timeout`, `transport`,
    /// `too_large`, `malformed` or `config`.
    pub fn code(&self) -> &'static str {
        match self {
            LlmError::MissingKey { .. } => "missing_key",
            LlmError::Auth { .. } => "auth",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Server { .. } => "server",
            LlmError::Status { .. } => "status",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Transport { .. } => "transport",
            LlmError::TooLarge { .. } => "too_large",
            LlmError::Malformed { .. } => "malformed",
            LlmError::Config { .. } => "config",
        }
    }

    /// Whether the same request may succeed later (rate limits, server
    /// errors, timeouts, transport failures). The client has already retried
    /// these `max_retries` times; this tells a caller whether a later retry
    /// of its own makes sense.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. }
                | LlmError::Server { .. }
                | LlmError::Timeout { .. }
                | LlmError::Transport { .. }
        )
    }
}
