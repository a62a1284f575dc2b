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

    /// Whether the server refused the request as longer than the model's
    /// context: a 400, 413 or 422 whose message says so in one of the
    /// wordings of OpenAI, DeepSeek, vLLM, llama.cpp, Mistral, Gemini or
    /// Anthropic's compatible endpoints.
    /// Retrying the same request cannot succeed; a shorter one may. (Ollama
    /// reports nothing: it cuts the prompt itself.)
    pub fn is_context_overflow(&self) -> bool {
        let LlmError::Status { status, message } = self else {
            return false;
        };
        if !matches!(status, 400 | 413 | 422) {
            return false;
        }
        let message = message.to_lowercase();
        CONTEXT_OVERFLOW_PHRASES
            .iter()
            .any(|phrase| message.contains(phrase))
    }
}

/// What a server's message says, lowercased, when it refuses a request as
/// longer than the model's context ([`LlmError::is_context_overflow`]).
const CONTEXT_OVERFLOW_PHRASES: &[&str] = &[
    "context length",
    "context_length",
    "context size",
    "context window",
    "maximum context",
    "prompt is too long",
    "exceeds the maximum number of tokens",
    "reduce the length of the messages",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, message: &str) -> LlmError {
        LlmError::Status {
            status,
            message: message.to_owned(),
        }
    }

    #[test]
    fn context_overflow_is_a_refusal_that_says_so() {
        for message in [
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            "the request exceeds the available context size, try increasing it",
            "prompt is too long: 210000 tokens > 200000 maximum",
            "The input token count (40000) exceeds the maximum number of tokens allowed (32768).",
            "Please reduce the length of the messages or completion.",
        ] {
            assert!(status(400, message).is_context_overflow(), "{message}");
        }
        assert!(status(413, "Context window exceeded").is_context_overflow());
        // Other refusals, and the same words under another status, are not.
        assert!(!status(400, "model not found").is_context_overflow());
        assert!(!status(404, "maximum context length is 8192").is_context_overflow());
        let server = LlmError::Server {
            status: 500,
            attempts: 4,
            message: "maximum context length".to_owned(),
        };
        assert!(!server.is_context_overflow());
    }
}
