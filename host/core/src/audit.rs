//! The audit record of a brokered capability call (`llm`, `tools`,
//! `http`): what a graph asked for, what the host decided, and what it
//! cost. The runtime fills in what it knows; whoever journals it (the
//! registry, over the store) adds the time, the thread and the
//! component's digest.
//!
//! Refusals are counted, not written one by one: the refusals of one kind
//! (graph, capability, decision) in one run are one row whose `count` says
//! how many there were, so a graph that loops on refused calls costs the
//! journal a row, not a row per call.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

/// One capability call, allowed or refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The graphs of the `tools` chain that led to this call, outermost
    /// first, ending with `graph`; empty for a call of the outermost run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
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
    /// Time from the call to its answer, in milliseconds (for a row of
    /// counted refusals, the first's).
    pub latency_ms: u64,
    /// How many calls the row stands for: 1, or for refusals of one kind
    /// in one run, how many there were (the row keeps the first's target
    /// and reason). Rows written before counting read as 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u64,
}

fn one() -> u64 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_one(n: &u64) -> bool {
    *n == 1
}

impl Default for CapabilityCall {
    /// An empty row that stands for one call.
    fn default() -> Self {
        CapabilityCall {
            seq: 0,
            at_ms: 0,
            graph: String::new(),
            chain: Vec::new(),
            graph_digest: None,
            thread_id: None,
            capability: String::new(),
            target: String::new(),
            decision: String::new(),
            reason: None,
            request_bytes: 0,
            response_bytes: 0,
            tokens: None,
            latency_ms: 0,
            count: 1,
        }
    }
}

/// What a [`CapabilityLog`] keeps with a row until the row is written (or
/// given up), then drops: the runtime's charge of the row's bytes to the
/// run's byte budget, given back on drop.
pub type Written = Box<dyn Send>;

/// Where the runtime reports capability calls. Called on the async path of
/// the call: an implementation that writes to disk hands the write to a
/// thread of its own and keeps a bounded queue; the returned future waits
/// while that queue is full, so a guest that outruns the disk waits (the
/// runtime bounds the wait by the run's deadline), never the host.
pub trait CapabilityLog: Send + Sync + 'static {
    /// Queues one row; `written` is dropped once it is written or given up.
    fn record(
        &self,
        call: CapabilityCall,
        written: Written,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}
