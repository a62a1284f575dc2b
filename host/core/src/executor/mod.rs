//! The Pregel executor: runs a compiled graph in bulk-synchronous supersteps
//! the way LangGraph runs a compiled `StateGraph`.
//!
//! Each superstep (1) plans the tasks triggered by the previous step, (2)
//! runs them concurrently against an immutable snapshot of the state taken at
//! step start, and (3) at the barrier applies all of their writes at once, in
//! task order, through the channels' reducers. Writes of step N are visible
//! only from step N+1 on.
//!
//! The loop is split into [`LoopState::from_input`] (apply the input, route
//! from `__start__`), [`LoopState::plan`] and [`LoopState::commit`] around the
//! concurrent task execution, so that a checkpointer can later persist the
//! serializable [`LoopState`] between supersteps and resume from it.

mod drive;
mod graph;
mod state;
mod tasks;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::checkpoint::{Checkpoint, CheckpointSource, Checkpointer, Start, ThreadState};
use crate::reducers::kind;
use crate::{Backend, ErrorCode, NodeContext, RunError, SharedJson, Worker};
use drive::drive;
pub use graph::CompiledGraph;
use graph::Writer;
use state::{LoopState, Task, TaskOutcome, TaskWrites, apply_writes};

/// Supersteps a run may take unless its [`RunConfig`] says otherwise (the
/// historical LangGraph default, still the JS one).
pub const DEFAULT_RECURSION_LIMIT: u32 = 25;

/// Dynamic targets one node result may name: its `goto` targets and `Send`s
/// plus what its routers return. Real fan-outs are tens to hundreds of
/// tasks; past this a result is a guest trying to make the host allocate
/// (200,000 sends took 1.1 GiB before this bound), refused as
/// `invalid_update` before the payloads are parsed.
pub const MAX_TARGETS_PER_RESULT: usize = 1024;

/// Tasks one superstep may plan. A step's tasks queue within their run
/// (at most `instances` run at once), so this bounds the queue and the
/// step's bookkeeping, not the parallelism.
pub const MAX_TASKS_PER_STEP: usize = 4096;

/// How to run a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Most supersteps this invocation may run; at least 1.
    pub recursion_limit: u32,
    /// Base context for every task: `tool`, `request`, `thread_id` and
    /// `configurable` are passed as they are; `step` and `resume` are filled
    /// in per task.
    pub context: NodeContext,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            recursion_limit: DEFAULT_RECURSION_LIMIT,
            context: NodeContext::default(),
        }
    }
}

/// The writes of one task of a superstep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskUpdate {
    /// The node the task ran.
    pub node: String,
    /// The task's writes to known channels, as a JSON object.
    pub update: Value,
}

/// A completed superstep, reported after its writes were applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepEvent {
    /// Superstep number, from 0.
    pub step: u32,
    /// One entry per task, in task order.
    pub updates: Vec<TaskUpdate>,
    /// For a step of a sub-run (a graph called through the `tools`
    /// capability), the graphs called, outermost first; empty (and not
    /// serialized) for the run's own steps. A sub-run's steps are reported
    /// before the step of the caller's task that called it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sub_run: Vec<String>,
    /// The nodes of the next superstep (its PULL tasks by node name, then
    /// its PUSH targets in emission order): empty when the run ends after
    /// this step. Never serialized, so the events the CLI and MCP print
    /// keep their shape; hosts that show it (the studio) write it
    /// themselves.
    #[serde(skip)]
    pub next: Vec<String>,
}

/// A node's request for human input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interrupt {
    /// Deterministic id (32 hex digits) derived from the step, the task and
    /// the interrupt's index within the task.
    pub id: String,
    /// The node that interrupted.
    pub node: String,
    /// The payload shown to the caller.
    pub value: Value,
}

/// How a run ended, when it did not fail.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// No task was left to run: the final state (every channel with a value).
    Completed(Map<String, Value>),
    /// A superstep interrupted: none of its writes were applied, and `state`
    /// is the state committed before it.
    Interrupted {
        /// The committed state (every channel with a value).
        state: Map<String, Value>,
        /// One per interrupting task, in task order.
        interrupts: Vec<Interrupt>,
    },
}

/// Runs `graph` on `input` until no task is left, a node interrupts, a task
/// fails, the recursion limit is reached or `backend.check_continue()` stops
/// the run.
///
/// `input` must be a JSON object; its keys that name channels are written as
/// `__start__`'s writes, other keys are dropped with a warning (a strict
/// graph refuses them as `invalid_input`, and a node's writes to unknown
/// channels as `invalid_update`). `on_step` is
/// called once per completed superstep. The future is `Send`, and dropping
/// it aborts the tasks it spawned.
///
/// Tasks run on workers from `backend`: one "main" worker, obtained at the
/// start, runs single-task steps, routers and custom reducers of `__start__`
/// and the barrier; a step with several tasks runs task 0 on the main worker
/// and each other task on a fresh worker, all concurrently on tokio tasks.
/// When a task fails, tasks after it in task order are aborted, earlier ones
/// finish, and the error of the first failed task in task order is returned;
/// a panic in a spawned task becomes a `trap` error. `check_continue` is
/// asked before each superstep that has tasks to run.
pub async fn run<B: Backend + 'static>(
    graph: &Arc<CompiledGraph>,
    backend: &Arc<B>,
    input: Value,
    config: &RunConfig,
    on_step: &mut (dyn FnMut(&StepEvent) + Send),
) -> Result<RunOutcome, RunError> {
    run_thread(
        graph,
        backend,
        None,
        Start::Input(input),
        config,
        on_step,
        None,
    )
    .await
}

/// Runs a durable thread: like [`run`], starting from the thread's stored
/// state (`existing`, `None` for a new thread) as `start` says, saving a
/// [`Checkpoint`] after the input and after every superstep, and a
/// [`TaskRecord`](crate::TaskRecord) as each task finishes, through `saver`
/// (which decides when each becomes durable: see [`Checkpointer`]).
///
/// Tasks already recorded as finished for the head checkpoint's superstep
/// are not run again; interrupted tasks re-run from their first line with
/// their resume values. `saver.flush()` runs before this returns, whatever
/// the outcome.
pub async fn run_thread<B: Backend + 'static>(
    graph: &Arc<CompiledGraph>,
    backend: &Arc<B>,
    existing: Option<ThreadState>,
    start: Start,
    config: &RunConfig,
    on_step: &mut (dyn FnMut(&StepEvent) + Send),
    saver: Option<&dyn Checkpointer>,
) -> Result<RunOutcome, RunError> {
    let result = drive(graph, backend, existing, start, config, on_step, saver).await;
    if let Some(saver) = saver {
        let flushed = saver.flush().await;
        match (&result, flushed) {
            (Ok(_), Err(e)) => return Err(e),
            (Err(_), Err(e)) => {
                tracing::error!("saving the thread failed after the run failed: {e}")
            }
            _ => {}
        }
    }
    result
}

/// Updates a thread's state as if `as_node` had just run and written
/// `values`: the writes go through the reducers, `as_node`'s edges and
/// conditional edges trigger the next superstep, and the result is a new
/// checkpoint (source `update`) to store as the thread's head. Without
/// `as_node`, the node that ran last is used; when several ran in that
/// superstep the call is ambiguous and fails. Pending task records of the
/// old head no longer apply.
pub async fn update_state<B: Backend + 'static>(
    graph: &Arc<CompiledGraph>,
    backend: &Arc<B>,
    thread: ThreadState,
    values: Value,
    as_node: Option<&str>,
) -> Result<Checkpoint, RunError> {
    let bad = |m: String| RunError::new(ErrorCode::InvalidInput, m);
    // The one lossless check of values a person writes into a state (guest
    // JSON is checked as the runtime parses it, tool arguments against
    // their parameters), so a final state needs none.
    if values.is_object() {
        crate::json::check_lossless(&values).map_err(|e| bad(e.in_document("the state update")))?;
    }
    let Value::Object(values) = values else {
        return Err(bad(format!(
            "state updates must be a json object, not {}",
            kind(&values)
        )));
    };
    let node = match as_node {
        Some(n) if graph.nodes.contains(n) => n.to_owned(),
        Some(n) => return Err(bad(format!("as_node names no node of the graph: {n:?}"))),
        None => last_writer(&thread.checkpoint)?,
    };
    let parent = thread.checkpoint.id.clone();
    let mut state = LoopState::from_checkpoint(thread.checkpoint);
    settle(&**backend, &state)?;
    let mut worker = backend.worker().await?;
    let writes = graph.filter_writes(Writer::StateUpdate(&node), values)?;
    let mut next = Vec::new();
    let mut sends = Vec::new();
    if graph.has_conditionals(&node) {
        let mut fresh = state.channels.clone();
        apply_writes(graph, &mut worker, &mut fresh, &node, writes.clone()).await?;
        let fresh = SharedJson::new(Value::Object(fresh));
        for cond in graph.conditionals(&node) {
            let answers = worker.route(&cond.router, &fresh).await?;
            graph.resolve_routes(&node, cond, answers, &mut next, &mut sends)?;
        }
    }
    let task = Task { node, push: None };
    let outcome = TaskOutcome::Done(TaskWrites {
        writes,
        next,
        sends,
    });
    state
        .commit(graph, &**backend, &mut worker, &[task], vec![outcome])
        .await?;
    settle(&**backend, &state)?;
    Ok(state.checkpoint(graph, Some(&parent), CheckpointSource::Update))
}

/// The node that ran in the checkpoint's last superstep, if exactly one did.
fn last_writer(c: &Checkpoint) -> Result<String, RunError> {
    let newest = |seen: &BTreeMap<String, u64>| seen.values().copied().max().unwrap_or(0);
    let top = c.versions_seen.values().map(newest).max();
    let last: Vec<&String> = c
        .versions_seen
        .iter()
        .filter(|(_, seen)| Some(newest(seen)) == top)
        .map(|(n, _)| n)
        .collect();
    match last.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(RunError::new(
            ErrorCode::InvalidInput,
            "no node has run on this thread yet: name the node the update is from",
        )),
        many => Err(RunError::new(
            ErrorCode::InvalidInput,
            format!(
                "the last superstep ran several nodes ({}): name the node the update is from",
                many.iter()
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

fn invalid_update(message: String) -> RunError {
    RunError::new(ErrorCode::InvalidUpdate, message)
}

/// Charges transient bytes to the run's byte budget, if it has one.
fn charge<B: Backend>(
    backend: &B,
    bytes: usize,
    what: &dyn Fn() -> String,
) -> Result<(), RunError> {
    match backend.bytes() {
        Some(budget) => budget.charge(bytes, what),
        None => Ok(()),
    }
}

fn release<B: Backend>(backend: &B, bytes: usize) {
    if let Some(budget) = backend.bytes() {
        budget.release(bytes);
    }
}

/// The barrier of the byte budget: the state now held (channels and
/// pending sends) replaces everything the step charged.
fn settle<B: Backend>(backend: &B, state: &LoopState) -> Result<(), RunError> {
    let Some(budget) = backend.bytes() else {
        return Ok(());
    };
    budget.settle(state.cost(), &|| {
        format!("the state after step {}", state.step)
    })
}
