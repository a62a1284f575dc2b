//! An OpenAI-compatible chat-completions client with tool calling.
//!
//! One wire format serves DeepSeek (the default), OpenAI and local servers
//! (Ollama, vLLM, llama.cpp): `POST {base_url}/chat/completions` with
//! `model`, `messages` and `tools`, answered by a `chat.completion` whose
//! first choice is the reply. The crate has no wasm engine dependency; the
//! agent loop that calls graph tools lives above it and sees only the
//! [`Provider`] trait, so it can be tested with a fake.
//!
//! - The provider-neutral types: [`Message`], [`ToolSpec`], [`ToolCall`],
//!   [`ChatRequest`], [`ChatResponse`], [`Usage`] and the [`Provider`]
//!   trait.
//! - [`ClientConfig`]: base URL, model, the environment variable holding
//!   the key, timeouts, retries, the response size limit; deserializable
//!   from TOML with durations in milliseconds.
//! - [`OpenAiClient`]: the HTTP implementation (reqwest, rustls with its
//!   aws-lc provider).
//! - [`LlmError`]: failures with stable [`codes`](LlmError::code).
//!
//! Behaviour worth knowing:
//!
//! - The key is read once from the environment at [`OpenAiClient::new`];
//!   loopback servers need none. It is never logged, never in an error:
//!   any echo of it in server text is replaced by `[redacted]`.
//! - 429, 500, 502, 503, 504, connect failures and timeouts are retried
//!   `max_retries` times, waiting `Retry-After` (capped at
//!   [`MAX_RETRY_AFTER`]) or an exponential backoff capped at
//!   [`MAX_BACKOFF`].
//! - Bodies are read incrementally and refused past `max_response_bytes`.
//! - Tool-call arguments are returned as the raw text the model sent; the
//!   caller validates them.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sandgraph_llm::LlmError> {
//! use sandgraph_llm::{ChatRequest, ClientConfig, Message, OpenAiClient, Provider};
//! let client = OpenAiClient::new(ClientConfig::default())?; // reads DEEPSEEK_API_KEY
//! let request = ChatRequest {
//!     messages: vec![Message::user("Hello!")],
//!     ..ChatRequest::default()
//! };
//! let reply = client.chat(&request).await?;
//! println!("{:?}", reply.content);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod cassette;
mod client;
mod config;
mod error;
mod types;
mod wire;

pub use client::OpenAiClient;
pub use config::{
    ClientConfig, DEFAULT_API_KEY_ENV, DEFAULT_BACKOFF, DEFAULT_BASE_URL, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RETRIES, DEFAULT_MODEL, DEFAULT_TIMEOUT, MAX_BACKOFF, MAX_RESPONSE_BYTES,
    MAX_RETRY_AFTER,
};
pub use error::LlmError;
pub use types::{ChatRequest, ChatResponse, Message, Provider, ToolCall, ToolSpec, Usage};
