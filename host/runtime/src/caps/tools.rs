//! The `tools` capability: other mounted graph tools, run as sub-runs of
//! the current run.
//!
//! Context: [`ToolsCtx`] (per store). Backend: [`ToolsBackend`] (the
//! registry). Grant: [`ToolsGrant`].

use std::sync::Arc;

use crate::bindings::tools::{self as wit, ToolError, ToolInfo};
use crate::caps::CapsCtx;

/// What the operator grants a graph: `[graphs.<name>.grants] tools = {...}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolsGrant {
    /// Tool names the graph may call.
    pub allow: Vec<String>,
    /// Tool calls per run; `None`: no limit.
    pub max_calls: Option<u32>,
}

/// Where granted tool calls go (the registry).
pub trait ToolsBackend: Send + Sync + 'static {}

/// A run's `tools` access: its grant and the backend serving it.
#[derive(Clone)]
pub struct ToolsAccess {
    /// What the run may do.
    pub grant: ToolsGrant,
    /// Where its calls go.
    pub backend: Arc<dyn ToolsBackend>,
}

/// The per-store context of `tools`.
pub(crate) type ToolsCtx = CapsCtx;

fn not_granted() -> String {
    "this graph has no tools grant: the operator grants it in sandgraph.toml \
     ([graphs.<name>.grants] tools = { allow = [...] })"
        .to_owned()
}

impl wit::Host for ToolsCtx {
    fn list(&mut self) -> Vec<ToolInfo> {
        Vec::new()
    }

    async fn call(&mut self, _name: String, _args: String) -> Result<String, ToolError> {
        Err(ToolError::Denied(not_granted()))
    }
}
