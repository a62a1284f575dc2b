use std::any::Any;
use std::future::Future;
use std::sync::{Mutex, OnceLock};

use serde_json::{Map, Value};

use crate::RunError;
use crate::budget::ByteBudget;

/// A dynamic task: run `node` in the next superstep with `payload` as its
/// private input.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SendPacket {
    /// The node to run; must be a node of the graph (not `__end__`).
    pub node: String,
    /// The task's input, instead of the graph state.
    pub payload: Value,
}

/// What a node body produced, already decoded and checked for lossless JSON,
/// naming at most [`MAX_TARGETS_PER_RESULT`](crate::MAX_TARGETS_PER_RESULT)
/// goto targets and sends.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeOutput {
    /// State writes.
    Update(Map<String, Value>),
    /// State writes plus dynamic edges (`goto` adds to the static edges).
    Command {
        /// State writes, as in [`NodeOutput::Update`].
        update: Map<String, Value>,
        /// Nodes (or `__end__`) to trigger in the next superstep.
        goto: Vec<String>,
        /// Dynamic tasks for the next superstep, in order.
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

/// What a worker holds beside a [`SharedJson`]'s text for as long as the
/// text lives: the runtime's charge of its bytes to the run's budget.
pub type TextHold = Box<dyn Any + Send + Sync>;

/// A value workers hand to guest code as JSON text: a superstep's state
/// snapshot, read by every PULL task of the step, a send's payload, the
/// state a node's routers read. Its text is made once, by the first worker
/// that asks ([`SharedJson::text`]), and shared by every later one for as
/// long as the value lives: the tasks of a superstep do not serialise the
/// same state again, each for itself.
pub struct SharedJson {
    value: Value,
    text: OnceLock<(String, TextHold)>,
    /// Held while the text is made, so concurrent workers wait for one
    /// serialisation instead of each making its own.
    making: Mutex<()>,
}

impl SharedJson {
    /// `value`, its text not made yet.
    pub fn new(value: Value) -> Self {
        SharedJson {
            value,
            text: OnceLock::new(),
            making: Mutex::new(()),
        }
    }

    /// The value.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The value's JSON text: made by `make` (with what to hold beside it,
    /// dropped with it) at the first call, the same text for every later
    /// one. A concurrent call waits for the one making it; a `make` that
    /// fails leaves no text, and the next call makes it again.
    ///
    /// # Errors
    ///
    /// What `make` returned.
    pub fn text<E>(
        &self,
        make: impl FnOnce(&Value) -> Result<(String, TextHold), E>,
    ) -> Result<&str, E> {
        if let Some((text, _)) = self.text.get() {
            return Ok(text);
        }
        let _making = self.making.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((text, _)) = self.text.get() {
            return Ok(text);
        }
        let made = make(&self.value)?;
        Ok(&self.text.get_or_init(|| made).0)
    }

    /// The value back; the text, if made, is dropped with what it held.
    pub fn into_value(self) -> Value {
        self.value
    }
}

impl std::fmt::Debug for SharedJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedJson")
            .field("value", &self.value)
            .field("text_made", &self.text.get().is_some())
            .finish()
    }
}

/// Facts about the call passed to every node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeContext {
    /// Tool name the graph is mounted under.
    pub tool: String,
    /// The original request text when the call was routed by a model.
    pub request: Option<String>,
    /// The durable thread, when the run has one.
    pub thread_id: Option<String>,
    /// Superstep number, from 0.
    pub step: u32,
    /// Resume values for this task, oldest first.
    pub resume: Vec<Value>,
    /// Extra configurable keys.
    pub configurable: Map<String, Value>,
}

/// One isolated place to run guest code: a fresh sandboxed instance in
/// production. A worker is used by one task at a time; sequential tasks of a
/// run may reuse one.
///
/// A worker bounds what it hands on: a node result or a router's answer
/// naming more than [`MAX_TARGETS_PER_RESULT`](crate::MAX_TARGETS_PER_RESULT)
/// goto targets and sends is refused (`invalid_update`) before any payload
/// is decoded (the runtime does it at the WIT boundary); the executor then
/// bounds the total of a node's result and its routers' answers.
pub trait Worker: Send + 'static {
    /// Runs node `node` with `input` (the step-start state snapshot, shared
    /// by the step's PULL tasks, or a send's payload).
    fn run_node(
        &mut self,
        node: &str,
        input: &SharedJson,
        ctx: &NodeContext,
    ) -> impl Future<Output = Result<NodeOutput, RunError>> + Send;

    /// Runs router `router` against `state` (committed state plus the source
    /// node's own writes, shared by the node's routers).
    fn route(
        &mut self,
        router: &str,
        state: &SharedJson,
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
    /// The workers this backend hands out.
    type Worker: Worker;

    /// A fresh worker, never shared with another run.
    fn worker(&self) -> impl Future<Output = Result<Self::Worker, RunError>> + Send;

    /// `Ok(())` while the run may start another superstep; the error to end
    /// the run with once it must not (soft deadline passed, caller
    /// cancelled, budget spent). The executor asks before every superstep
    /// that has tasks to run, not when the run is about to complete.
    fn check_continue(&self) -> Result<(), RunError>;

    /// The run's host byte budget, when it has one: the executor charges
    /// the state, step events and checkpoint copies to it, the workers the
    /// outputs they parse.
    fn bytes(&self) -> Option<&ByteBudget> {
        None
    }
}
