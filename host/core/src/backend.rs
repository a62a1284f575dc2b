use std::future::Future;

use serde_json::{Map, Value};

use crate::RunError;

/// A dynamic task: run `node` in the next superstep with `payload` as its
/// private input.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SendPacket {
    pub node: String,
    pub payload: Value,
}

/// What a node body produced, already decoded and checked for lossless JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeOutput {
    /// State writes.
    Update(Map<String, Value>),
    /// State writes plus dynamic edges (`goto` adds to the static edges).
    Command {
        update: Map<String, Value>,
        goto: Vec<String>,
        sends: Vec<SendPacket>,
    },
    /// The node asks a human; the payload is shown to the caller.
    Interrupt(Value),
}

/// One answer of a router.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteTarget {
    /// A node name, a path-map key, or `__end__`.
    Node(String),
    /// A dynamic task.
    Send(SendPacket),
}

/// Facts about the call passed to every node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeContext {
    pub tool: String,
    pub request: Option<String>,
    pub thread_id: Option<String>,
    pub step: u32,
    /// Resume values for this task, oldest first.
    pub resume: Vec<Value>,
    pub configurable: Map<String, Value>,
}

/// One isolated place to run guest code: a fresh sandboxed instance in
/// production. A worker is used by one task at a time; sequential tasks of a
/// run may reuse one.
pub trait Worker: Send + 'static {
    /// Runs node `node` with `input` (the step-start state snapshot, or a
    /// send's payload).
    fn run_node(
        &mut self,
        node: &str,
        input: &Value,
        ctx: &NodeContext,
    ) -> impl Future<Output = Result<NodeOutput, RunError>> + Send;

    /// Runs router `router` against `state` (committed state plus the source
    /// node's own writes).
    fn route(
        &mut self,
        router: &str,
        state: &Value,
    ) -> impl Future<Output = Result<Vec<RouteTarget>, RunError>> + Send;

    /// Folds one `update` into a custom-reducer channel's `current` value
    /// (`null` when the channel has none yet).
    fn reduce(
        &mut self,
        channel: &str,
        current: &Value,
        update: &Value,
    ) -> impl Future<Output = Result<Value, RunError>> + Send;
}

/// Per-run source of workers plus the run's stop signal. The runtime creates
/// one per run so all of the run's workers share its fuel, deadlines and
/// cancellation.
pub trait Backend: Send + Sync {
    type Worker: Worker;

    /// A fresh worker, never shared with another run.
    fn worker(&self) -> impl Future<Output = Result<Self::Worker, RunError>> + Send;

    /// `Some(error)` once the run must not start another superstep (soft
    /// deadline passed, caller cancelled, budget spent).
    fn check_continue(&self) -> Result<(), RunError>;
}
