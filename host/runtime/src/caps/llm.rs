//! The `llm` capability: `chat` through the host's model provider.
//!
//! Context: [`LlmCtx`] (per store). Backend: [`sandgraph_llm::Provider`]
//! with the operator's model aliases ([`LlmBackend`]). Grant: [`LlmGrant`].

use std::collections::BTreeMap;
use std::sync::Arc;

use sandgraph_llm::Provider;

use crate::bindings::llm::{self as wit, ChatRequest, ChatResponse, LlmError};
use crate::caps::CapsCtx;

/// What the operator grants a graph: `[graphs.<name>.grants] llm = {...}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LlmGrant {
    /// Model aliases the graph may name; `"default"` is `[llm].model`.
    pub models: Vec<String>,
    /// Chat calls per run; `None`: no limit.
    pub max_calls: Option<u32>,
    /// Prompt plus completion tokens per run; `None`: no limit.
    pub max_tokens: Option<u64>,
}

/// Where granted chat calls go: the provider and the operator's aliases.
#[derive(Clone)]
pub struct LlmBackend {
    /// The provider (the operator's `[llm]`), holding the key.
    pub provider: Arc<dyn Provider>,
    /// Alias to provider model name (`[llm.models]`).
    pub models: BTreeMap<String, String>,
    /// The model used for the alias `"default"` (and a request naming none).
    pub default_model: String,
}

/// A run's `llm` access: its grant and the backend serving it.
#[derive(Clone)]
pub struct LlmAccess {
    /// What the run may do.
    pub grant: LlmGrant,
    /// Where its calls go.
    pub backend: LlmBackend,
}

/// The per-store context of `llm`.
pub(crate) type LlmCtx = CapsCtx;

impl wit::Host for LlmCtx {
    async fn chat(&mut self, _request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let Some(_access) = self.caps.llm.clone() else {
            return Err(LlmError::Denied(
                "this graph has no llm grant: the operator grants it in sandgraph.toml \
                 ([graphs.<name>.grants] llm = { models = [...] })"
                    .to_owned(),
            ));
        };
        Err(LlmError::Denied(
            "the llm capability is not served yet".to_owned(),
        ))
    }
}
