//! The brokered capabilities a graph may import (`sandgraph:graph@0.2.0`):
//! `llm` (models, through the host's provider and key) and `tools` (other
//! mounted graph tools, as sub-runs of the current run).
//!
//! Deny by default: a run gets what its [`Capabilities`] grant and nothing
//! else. An ungranted call is the capability's typed `denied` error, which
//! the graph's node may handle; nothing leaves the host. Each capability is
//! one module with its grant, its per-store context (the generated `Host`
//! trait's implementation) and its backend trait, so tests inject a fake.

use std::sync::Arc;

use crate::sandbox::RunControl;

pub mod llm;
pub mod tools;

/// What one run may use, and where granted calls go. The default grants
/// nothing.
#[derive(Clone, Default)]
pub struct Capabilities {
    /// The `llm` grant and the backend that serves it.
    pub llm: Option<llm::LlmAccess>,
    /// The `tools` grant and the backend that serves it.
    pub tools: Option<tools::ToolsAccess>,
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("llm", &self.llm.as_ref().map(|a| &a.grant))
            .field("tools", &self.tools.as_ref().map(|a| &a.grant))
            .finish()
    }
}

/// The capabilities of one store: the run's grants and control (deadline,
/// cancellation, fuel, byte budget), shared by the run's instances.
pub(crate) struct CapsCtx {
    pub(crate) caps: Arc<Capabilities>,
    #[allow(
        dead_code,
        reason = "read by the llm and tools contexts as they are served"
    )]
    pub(crate) control: Arc<RunControl>,
}

impl CapsCtx {
    pub(crate) fn new(control: Arc<RunControl>) -> Self {
        CapsCtx {
            caps: control.caps.clone(),
            control,
        }
    }
}
