//! The audit record of a brokered capability call (`llm`, `tools`,
//! `http`): what a graph asked for, what the host decided, and what it
//! cost. The runtime fills in what it knows; whoever journals it (the
//! registry, over the store) adds the time, the thread and the
//! component's digest.

use serde::{Deserialize, Serialize};

/// One capability call, allowed or refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityCall {
    /// Position in the journal, from 1; set by the journal.
    #[serde(default)]
    pub seq: u64,
    /// Unix milliseconds when the call was decided; set by the journal
    /// writer.
    #[serde(default)]
    pub at_ms: u64,
    /// The graph that asked.
    pub graph: String,
    /// The sha256 (hex) of its component, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_digest: Option<String>,
    /// The durable thread of the run, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// `llm`, `tools` or `http`.
    pub capability: String,
    /// The model (alias -> model), the tool, or the `scheme://host:port`.
    pub target: String,
    /// `allowed`, or why not: `denied`, `quota`, `recursion`,
    /// `invalid`, `failed`, `timeout`.
    pub decision: String,
    /// The refusal or failure, for a person (escaped by the writer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bytes the graph sent (arguments, request body).
    pub request_bytes: u64,
    /// Bytes handed back to the graph.
    pub response_bytes: u64,
    /// Tokens the provider reported (`llm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Time from the call to its answer, in milliseconds.
    pub latency_ms: u64,
}

/// Where the runtime reports capability calls. Called on the async path of
/// the call: an implementation that writes to disk should hand the write
/// to a blocking thread.
pub trait CapabilityLog: Send + Sync + 'static {
    /// Records one call.
    fn record(&self, call: CapabilityCall);
}
