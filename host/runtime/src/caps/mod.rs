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

use sandgraph_core::audit::{CapabilityCall, CapabilityLog};
use sandgraph_core::text::guest_text;

use crate::sandbox::RunControl;

pub mod http;
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
    /// The `http` grant (outgoing `wasi:http` requests).
    pub http: Option<http::HttpGrant>,
    /// Where every capability call of the run, allowed or refused, is
    /// reported (the capability journal); `None`: not journaled.
    pub log: Option<Arc<dyn CapabilityLog>>,
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("llm", &self.llm.as_ref().map(|a| &a.grant))
            .field("tools", &self.tools.as_ref().map(|a| &a.grant))
            .field("http", &self.http)
            .field("log", &self.log.is_some())
            .finish()
    }
}

/// The capabilities of one store: the run's grants and control (deadline,
/// cancellation, fuel, byte budget), shared by the run's instances.
pub(crate) struct CapsCtx {
    pub(crate) caps: Arc<Capabilities>,
    pub(crate) control: Arc<RunControl>,
}

impl CapsCtx {
    pub(crate) fn new(control: Arc<RunControl>) -> Self {
        CapsCtx {
            caps: control.caps.clone(),
            control,
        }
    }

    /// Reports one call to the run's capability log, if it has one. The
    /// graph is the run's own; `reason` is escaped and bounded here, since
    /// it may quote the graph.
    pub(crate) fn record(&self, call: Call<'_>) {
        record(&self.control, call);
    }
}

/// [`CapsCtx::record`] for a run's control.
pub(crate) fn record(control: &RunControl, call: Call<'_>) {
    let Some(log) = &control.caps.log else {
        return;
    };
    log.record(CapabilityCall {
        graph: control
            .chain
            .last()
            .map(|g| g.to_string())
            .unwrap_or_default(),
        capability: call.capability.to_owned(),
        target: guest_text(call.target, MAX_RECORDED_TARGET_BYTES),
        decision: call.decision.to_owned(),
        reason: call
            .reason
            .map(|r| guest_text(r, MAX_RECORDED_REASON_BYTES)),
        request_bytes: call.request_bytes,
        response_bytes: call.response_bytes,
        tokens: call.tokens,
        latency_ms: u64::try_from(call.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        ..CapabilityCall::default()
    });
}

/// Longest target kept in a journal row (a URL can be long; the scheme,
/// host and port are what matter).
const MAX_RECORDED_TARGET_BYTES: usize = 512;
/// Longest refusal or failure text kept in a journal row.
const MAX_RECORDED_REASON_BYTES: usize = 1024;

/// What a capability reports about one call ([`CapsCtx::record`]).
pub(crate) struct Call<'a> {
    pub(crate) capability: &'static str,
    pub(crate) target: &'a str,
    pub(crate) decision: &'static str,
    pub(crate) reason: Option<&'a str>,
    pub(crate) request_bytes: u64,
    pub(crate) response_bytes: u64,
    pub(crate) tokens: Option<u64>,
    pub(crate) started: std::time::Instant,
}
