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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::task::{AbortHandle, JoinSet};
use tracing::Instrument as _;

use crate::checkpoint::{
    Checkpoint, CheckpointSource, Checkpointer, Start, TaskRecord, TaskResult, ThreadState,
    new_checkpoint_id, now_ms,
};
use crate::json::value_cost;
use crate::reducers::{self, kind};
use crate::text::guest_name;
use crate::{
    Backend, ConditionalEdge, END, ErrorCode, GraphSpec, NodeContext, NodeOutput, Reducer,
    RouteTarget, RunError, START, SendPacket, SpecError, Worker,
};

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

/// Most unknown keys a strict graph's error names one by one; the rest
/// are counted. A guest can write thousands of keys; the message is for a
/// person.
const MAX_UNKNOWN_KEYS_LISTED: usize = 8;

/// Most channel names a strict graph's error lists as the ones allowed.
const MAX_CHANNELS_LISTED: usize = 16;

/// Who writes to the channels, for [`CompiledGraph::filter_writes`].
#[derive(Debug, Clone, Copy)]
enum Writer<'a> {
    /// The run's input, as `__start__`'s writes.
    Input,
    /// A node's update.
    Node(&'a str),
    /// An operator's state update, applied as the node's.
    StateUpdate(&'a str),
}

impl Writer<'_> {
    fn node(&self) -> &str {
        match self {
            Writer::Input => START,
            Writer::Node(node) | Writer::StateUpdate(node) => node,
        }
    }
}

/// A validated graph spec plus the indexes the executor plans with.
///
/// Immutable once built; share it between runs as `Arc<CompiledGraph>`.
#[derive(Debug)]
pub struct CompiledGraph {
    spec: GraphSpec,
    /// Channel name -> reducer.
    reducers: HashMap<String, Reducer>,
    /// Channels that start with a value, and that value.
    defaults: Map<String, Value>,
    nodes: HashSet<String>,
    /// Entry points, deduplicated.
    entry: BTreeSet<String>,
    /// Source node -> targets of its single-source static edges (no `__end__`).
    edges_from: HashMap<String, Vec<String>>,
    /// Join edges (several sources), deduplicated by key.
    joins: Vec<Join>,
    /// Source node -> indexes into `joins`.
    joins_of: HashMap<String, Vec<usize>>,
    /// Source node (or `__start__`) -> indexes into the spec's conditional
    /// edges, in spec order.
    conditionals_of: HashMap<String, Vec<usize>>,
}

/// A join edge: its target runs once every source has run since it last did.
#[derive(Debug)]
struct Join {
    /// Stable name of the barrier (`join:a+b:c`, as LangGraph names it).
    key: String,
    sources: BTreeSet<String>,
    target: String,
}

impl CompiledGraph {
    /// Validates `spec` and builds the executor's indexes.
    pub fn new(spec: GraphSpec) -> Result<Self, SpecError> {
        spec.validate()?;
        let reducers = spec
            .channels
            .iter()
            .map(|c| (c.name.clone(), c.reducer))
            .collect();
        let defaults = spec
            .channels
            .iter()
            .filter_map(|c| Some((c.name.clone(), c.default.clone()?)))
            .collect();
        let nodes = spec.nodes.iter().map(|n| n.name.clone()).collect();
        let entry = spec.entry_points.iter().cloned().collect();

        let mut edges_from: HashMap<String, Vec<String>> = HashMap::new();
        let mut joins: Vec<Join> = Vec::new();
        let mut joins_of: HashMap<String, Vec<usize>> = HashMap::new();
        for edge in &spec.edges {
            if edge.target == END {
                continue;
            }
            if let [source] = edge.sources.as_slice() {
                let targets = edges_from.entry(source.clone()).or_default();
                if !targets.contains(&edge.target) {
                    targets.push(edge.target.clone());
                }
                continue;
            }
            let key = format!("join:{}:{}", edge.sources.join("+"), edge.target);
            if joins.iter().any(|j| j.key == key) {
                continue;
            }
            for source in &edge.sources {
                joins_of
                    .entry(source.clone())
                    .or_default()
                    .push(joins.len());
            }
            joins.push(Join {
                key,
                sources: edge.sources.iter().cloned().collect(),
                target: edge.target.clone(),
            });
        }
        let mut conditionals_of: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, cond) in spec.conditional_edges.iter().enumerate() {
            conditionals_of
                .entry(cond.source.clone())
                .or_default()
                .push(i);
        }
        Ok(CompiledGraph {
            spec,
            reducers,
            defaults,
            nodes,
            entry,
            edges_from,
            joins,
            joins_of,
            conditionals_of,
        })
    }

    /// The spec this graph was compiled from.
    pub fn spec(&self) -> &GraphSpec {
        &self.spec
    }

    /// `state` with its keys in channel declaration order, so results read
    /// the way the graph declares its state.
    fn in_channel_order(&self, mut state: Map<String, Value>) -> Map<String, Value> {
        let mut ordered = Map::with_capacity(state.len());
        for c in &self.spec.channels {
            if let Some(v) = state.remove(&c.name) {
                ordered.insert(c.name.clone(), v);
            }
        }
        ordered.extend(state);
        ordered
    }

    fn conditionals(&self, source: &str) -> impl Iterator<Item = &ConditionalEdge> {
        self.conditionals_of
            .get(source)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.spec.conditional_edges.get(i))
    }

    fn has_conditionals(&self, source: &str) -> bool {
        self.conditionals_of.contains_key(source)
    }

    /// Keeps the writes to known channels. A strict graph refuses writes
    /// to unknown ones, naming them (with a did-you-mean); any other graph
    /// drops them with a warning, as LangGraph does.
    fn filter_writes(
        &self,
        writer: Writer<'_>,
        update: Map<String, Value>,
    ) -> Result<Map<String, Value>, RunError> {
        let (known, unknown): (Map<String, Value>, Map<String, Value>) = update
            .into_iter()
            .partition(|(channel, _)| self.reducers.contains_key(channel));
        if unknown.is_empty() {
            return Ok(known);
        }
        if self.spec.strict {
            return Err(self.unknown_keys_error(writer, unknown.keys()));
        }
        for channel in unknown.keys() {
            let hint = self.spec.channel_hint(channel);
            let channel = guest_name(channel);
            let node = writer.node();
            tracing::warn!(node, %channel, hint, "write to an unknown channel dropped");
        }
        Ok(known)
    }

    /// The error of a strict graph for keys that name no channel.
    fn unknown_keys_error<'k>(
        &self,
        writer: Writer<'_>,
        keys: impl ExactSizeIterator<Item = &'k String>,
    ) -> RunError {
        let count = keys.len();
        let mut listed: Vec<String> = keys
            .take(MAX_UNKNOWN_KEYS_LISTED)
            .map(|key| {
                // Declaration order, so a tie always suggests the same name.
                let channels = self.spec.channels.iter().map(|c| c.name.as_str());
                format!(
                    "{}{}",
                    guest_name(key),
                    crate::suggest::aside(key, channels)
                )
            })
            .collect();
        if count > listed.len() {
            listed.push(format!("and {} more", count - listed.len()));
        }
        let (keys, are_not) = if count == 1 {
            ("key", "is not a channel")
        } else {
            ("keys", "are not channels")
        };
        let listed = listed.join(", ");
        let graph = &self.spec.name;
        let channels = self.channel_list();
        match writer {
            Writer::Input => RunError::new(
                ErrorCode::InvalidInput,
                format!(
                    "the input of strict graph {graph:?} has {keys} {listed}, which {are_not}: \
                     pass only the graph's channels ({channels})"
                ),
            ),
            Writer::Node(node) => invalid_update(format!(
                "node {node:?} of strict graph {graph:?} wrote {keys} {listed}, which {are_not}: \
                 write only declared channels ({channels}) or declare the channel"
            )),
            Writer::StateUpdate(node) => RunError::new(
                ErrorCode::InvalidInput,
                format!(
                    "the state update (as node {node:?}) of strict graph {graph:?} has {keys} \
                     {listed}, which {are_not}: update only the graph's channels ({channels})"
                ),
            ),
        }
    }

    /// The channel names for a message, in declaration order, at most
    /// [`MAX_CHANNELS_LISTED`] of them.
    fn channel_list(&self) -> String {
        let channels = &self.spec.channels;
        let mut names: Vec<&str> = channels
            .iter()
            .take(MAX_CHANNELS_LISTED)
            .map(|c| c.name.as_str())
            .collect();
        let more = channels.len().saturating_sub(MAX_CHANNELS_LISTED);
        let more = (more > 0).then(|| format!("and {more} more"));
        names.extend(more.as_deref());
        if names.is_empty() {
            "it has none".to_owned()
        } else {
            names.join(", ")
        }
    }

    fn check_send(&self, source: &str, send: &SendPacket) -> Result<(), RunError> {
        if send.node == END {
            return Err(invalid_update(format!(
                "node {source:?} sent a task to __end__: a send must target a node"
            )));
        }
        if !self.nodes.contains(&send.node) {
            return Err(invalid_update(format!(
                "node {source:?} sent a task to unknown node {}",
                guest_name(&send.node)
            )));
        }
        Ok(())
    }

    /// Resolves a goto target: `Some(node)`, or `None` for `__end__`.
    fn resolve_goto<'t>(&self, source: &str, target: &'t str) -> Result<Option<&'t str>, RunError> {
        if target == END {
            Ok(None)
        } else if self.nodes.contains(target) {
            Ok(Some(target))
        } else {
            Err(invalid_update(format!(
                "node {source:?} returned goto {}, which is not a node",
                guest_name(target)
            )))
        }
    }

    /// Turns a router's answers into triggered nodes and sends.
    fn resolve_routes(
        &self,
        source: &str,
        cond: &ConditionalEdge,
        answers: Vec<RouteTarget>,
        next: &mut Vec<String>,
        sends: &mut Vec<SendPacket>,
    ) -> Result<(), RunError> {
        let router = &cond.router;
        for answer in answers {
            let name = match answer {
                RouteTarget::Send(send) => {
                    self.check_send(source, &send)?;
                    sends.push(send);
                    continue;
                }
                RouteTarget::Node(name) => name,
            };
            let target = if cond.path_map.is_empty() {
                if name != END && !self.nodes.contains(&name) {
                    return Err(invalid_update(format!(
                        "router {router:?} of node {source:?} returned {}, which is neither a node nor __end__",
                        guest_name(&name)
                    )));
                }
                name
            } else {
                match cond.path_map.iter().find(|e| e.key == name) {
                    Some(entry) => entry.target.clone(),
                    None => {
                        let allowed: Vec<String> = cond
                            .path_map
                            .iter()
                            .map(|e| format!("{:?}", e.key))
                            .collect();
                        return Err(invalid_update(format!(
                            "router {router:?} of node {source:?} returned {}, which is not a key of its path map (allowed: {})",
                            guest_name(&name),
                            allowed.join(", ")
                        )));
                    }
                }
            };
            if target != END {
                next.push(target);
            }
        }
        Ok(())
    }
}

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
/// [`TaskRecord`] as each task finishes, through `saver` (which decides when
/// each becomes durable: see [`Checkpointer`]).
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

/// Resume values per task path, from an answer to the pending interrupts.
fn resume_values(
    pending: &ThreadState,
    answer: Value,
) -> Result<HashMap<String, Vec<Value>>, RunError> {
    let interrupted: Vec<(&TaskRecord, &String, &Vec<Value>)> = pending
        .pending
        .iter()
        .filter_map(|r| match &r.result {
            TaskResult::Interrupted { id, resume, .. } => Some((r, id, resume)),
            TaskResult::Done { .. } => None,
        })
        .collect();
    let bad = |m: String| RunError::new(ErrorCode::InvalidInput, m);
    if interrupted.is_empty() {
        return Err(bad("the thread has no pending interrupt to resume".into()));
    }
    if answer.is_null() {
        return Err(bad("null cannot be a resume value".into()));
    }
    let ids: Vec<&str> = interrupted.iter().map(|(_, id, _)| id.as_str()).collect();
    let keyed = answer
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.keys().all(|k| ids.contains(&k.as_str())));
    let mut out = HashMap::new();
    if keyed {
        let map = answer.as_object().cloned().unwrap_or_default();
        for (record, id, resume) in &interrupted {
            let Some(value) = map.get(id.as_str()) else {
                return Err(bad(format!(
                    "the resume map has no value for pending interrupt {id} (node {:?})",
                    record.node
                )));
            };
            let mut values = (*resume).clone();
            values.push(value.clone());
            out.insert(record.path.clone(), values);
        }
    } else if let [(record, _, resume)] = interrupted.as_slice() {
        let mut values = (*resume).clone();
        values.push(answer);
        out.insert(record.path.clone(), values);
    } else {
        return Err(bad(format!(
            "the thread has {} pending interrupts ({}): resume with a JSON object mapping each interrupt id to its value",
            ids.len(),
            ids.join(", ")
        )));
    }
    Ok(out)
}

async fn drive<B: Backend + 'static>(
    graph: &Arc<CompiledGraph>,
    backend: &Arc<B>,
    existing: Option<ThreadState>,
    start: Start,
    config: &RunConfig,
    on_step: &mut (dyn FnMut(&StepEvent) + Send),
    saver: Option<&dyn Checkpointer>,
) -> Result<RunOutcome, RunError> {
    if config.recursion_limit == 0 {
        return Err(RunError::new(
            ErrorCode::InvalidInput,
            "recursion_limit must be at least 1",
        ));
    }
    let mut main_worker = backend.worker().await?;
    let started = Started::new(graph, &mut main_worker, existing, start).await?;
    let state = started.state;
    settle(&**backend, &state)?;
    let mut driver = Driver {
        graph,
        backend,
        config,
        saver,
        main: Some(main_worker),
        head: started.head,
        prior: started.prior,
        resume: started.resume,
        first_step: state.step,
    };
    if started.wrote_input {
        driver.save(&state, CheckpointSource::Input).await?;
    }
    driver.run(state, on_step).await
}

/// Where an invocation starts: the state, the checkpoint it follows, and
/// what the thread's pending records say about the first superstep.
struct Started {
    state: LoopState,
    /// The thread's head checkpoint, for a stored thread.
    head: Option<String>,
    /// The input was applied: a checkpoint of it is saved first.
    wrote_input: bool,
    /// Finished tasks of the head's superstep, by task path.
    prior: HashMap<String, TaskRecord>,
    /// Resume values per task path.
    resume: HashMap<String, Vec<Value>>,
}

impl Started {
    /// The start `start` asks for, from the thread's stored state
    /// `existing` (`None` for a new thread); input and routers of
    /// `__start__` run on `worker`.
    async fn new<W: Worker>(
        graph: &CompiledGraph,
        worker: &mut W,
        existing: Option<ThreadState>,
        start: Start,
    ) -> Result<Self, RunError> {
        match (existing, start) {
            (None, Start::Input(input)) => {
                let state = LoopState::from_input(graph, worker, input).await?;
                Ok(Started::with_input(state, None))
            }
            (None, _) => Err(RunError::new(
                ErrorCode::InvalidInput,
                "the thread has no checkpoint to continue or resume: start it with input",
            )),
            (Some(thread), Start::Input(input)) => {
                let parent = thread.checkpoint.id.clone();
                let mut state = LoopState::from_checkpoint(thread.checkpoint);
                state.apply_input(graph, worker, input).await?;
                Ok(Started::with_input(state, Some(parent)))
            }
            (Some(thread), Start::Continue) => {
                let resume = thread
                    .pending
                    .iter()
                    .filter_map(|record| match &record.result {
                        TaskResult::Interrupted { resume, .. } => {
                            Some((record.path.clone(), resume.clone()))
                        }
                        TaskResult::Done { .. } => None,
                    })
                    .collect();
                Ok(Started::pending(thread, resume))
            }
            (Some(thread), Start::Resume(answer)) => {
                let resume = resume_values(&thread, answer)?;
                Ok(Started::pending(thread, resume))
            }
        }
    }

    /// A start from new input, after the checkpoint `head` if any.
    fn with_input(state: LoopState, head: Option<String>) -> Self {
        Started {
            state,
            head,
            wrote_input: true,
            prior: HashMap::new(),
            resume: HashMap::new(),
        }
    }

    /// Continuing the thread's pending superstep with these resume values.
    fn pending(thread: ThreadState, resume: HashMap<String, Vec<Value>>) -> Self {
        let prior = done_records(&thread);
        let head = thread.checkpoint.id.clone();
        Started {
            state: LoopState::from_checkpoint(thread.checkpoint),
            head: Some(head),
            wrote_input: false,
            prior,
            resume,
        }
    }
}

/// The superstep loop of one invocation, and what it carries from one
/// step to the next.
struct Driver<'a, B: Backend> {
    graph: &'a Arc<CompiledGraph>,
    backend: &'a Arc<B>,
    config: &'a RunConfig,
    saver: Option<&'a dyn Checkpointer>,
    /// `None` only while task 0 of a multi-task step holds it, or if that
    /// task panicked (then a fresh one is fetched).
    main: Option<B::Worker>,
    /// The thread's head checkpoint.
    head: Option<String>,
    /// Finished tasks of the head's superstep, by task path.
    prior: HashMap<String, TaskRecord>,
    /// Resume values per task path.
    resume: HashMap<String, Vec<Value>>,
    /// Budget per invocation: a resumed run gets a fresh one.
    first_step: u32,
}

impl<B: Backend + 'static> Driver<'_, B> {
    /// Runs supersteps until none is left to run or one interrupts.
    async fn run(
        mut self,
        mut state: LoopState,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<RunOutcome, RunError> {
        loop {
            let tasks = state.plan();
            if tasks.is_empty() {
                return Ok(RunOutcome::Completed(
                    self.graph.in_channel_order(state.channels),
                ));
            }
            self.check_continue(&state)?;
            tracing::debug!(step = state.step, tasks = tasks.len(), "superstep");
            let (outcomes, resumes) = self.execute(&mut state, &tasks).await?;
            let interrupts = collect_interrupts(state.step, &tasks, &outcomes, &resumes);
            if !interrupts.is_empty() {
                return Ok(RunOutcome::Interrupted {
                    state: self.graph.in_channel_order(state.channels),
                    interrupts,
                });
            }
            let event = self.commit(&mut state, &tasks, outcomes).await?;
            on_step(&event);
            drop(event);
            self.prior.clear();
            self.resume.clear();
            self.save(&state, CheckpointSource::Loop).await?;
        }
    }

    /// The backend lets the run go on and the recursion limit is not
    /// reached.
    fn check_continue(&self, state: &LoopState) -> Result<(), RunError> {
        self.backend.check_continue()?;
        if state.step.saturating_sub(self.first_step) >= self.config.recursion_limit {
            return Err(RunError::new(
                ErrorCode::RecursionLimit,
                format!(
                    "recursion limit of {} reached without hitting a stop condition",
                    self.config.recursion_limit
                ),
            ));
        }
        Ok(())
    }

    /// Runs the step's tasks on a snapshot of the state; their outcomes and
    /// resume values, in task order.
    async fn execute(
        &mut self,
        state: &mut LoopState,
        tasks: &[Task],
    ) -> Result<(Vec<TaskOutcome>, Vec<Vec<Value>>), RunError> {
        let step = state.step;
        // Tasks finished before a crash or failure are taken from their
        // records, never run twice.
        let reused = reuse_records(&**self.backend, tasks, &self.prior)?;
        let resumes: Vec<Vec<Value>> = tasks
            .iter()
            .map(|t| self.resume.get(&t.path()).cloned().unwrap_or_default())
            .collect();
        // One immutable snapshot per step, shared by every task. The
        // channels move into it and come back once the tasks are done.
        let snapshot = Arc::new(Value::Object(std::mem::take(&mut state.channels)));
        let mut ctx = self.config.context.clone();
        ctx.step = step;
        ctx.resume.clear();
        let recorder = match (self.saver, self.head.as_deref()) {
            (Some(saver), Some(head)) => Some(Recorder {
                saver,
                checkpoint_id: head,
                step,
            }),
            _ => None,
        };
        let run = StepRun {
            graph: self.graph,
            backend: self.backend,
            tasks,
            resumes: &resumes,
            snapshot: &snapshot,
            ctx: &ctx,
            recorder: recorder.as_ref(),
        };
        let outcomes = run.execute(&mut self.main, reused).await;
        state.channels = match Arc::try_unwrap(snapshot) {
            Ok(Value::Object(map)) => map,
            Ok(_) => Map::new(),
            Err(shared) => shared.as_object().cloned().unwrap_or_default(),
        };
        Ok((outcomes?, resumes))
    }

    /// The barrier on the main worker, then the byte budget's.
    async fn commit(
        &mut self,
        state: &mut LoopState,
        tasks: &[Task],
        outcomes: Vec<TaskOutcome>,
    ) -> Result<StepEvent, RunError> {
        let worker = main_worker(&mut self.main, &**self.backend).await?;
        let event = state
            .commit(self.graph, &**self.backend, worker, tasks, outcomes)
            .await?;
        settle(&**self.backend, state)?;
        Ok(event)
    }

    /// Saves a checkpoint of `state` as the thread's new head, when the
    /// thread is stored.
    async fn save(&mut self, state: &LoopState, source: CheckpointSource) -> Result<(), RunError> {
        if let Some(saver) = self.saver {
            let parent = self.head.as_deref();
            let id =
                save_checkpoint(&**self.backend, saver, self.graph, state, parent, source).await?;
            self.head = Some(id);
        }
        Ok(())
    }
}

/// The main worker, fetched afresh when the last one was lost.
async fn main_worker<'w, B: Backend>(
    main: &'w mut Option<B::Worker>,
    backend: &B,
) -> Result<&'w mut B::Worker, RunError> {
    Ok(match main {
        Some(worker) => worker,
        None => main.insert(backend.worker().await?),
    })
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
        let fresh = Value::Object(fresh);
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

fn done_records(thread: &ThreadState) -> HashMap<String, TaskRecord> {
    thread
        .pending
        .iter()
        .filter(|r| matches!(r.result, TaskResult::Done { .. }))
        .map(|r| (r.path.clone(), r.clone()))
        .collect()
}

/// Per task, the outcome recorded before a crash or failure (never run
/// twice), its writes charged to the run's byte budget; `None` to run it.
fn reuse_records<B: Backend>(
    backend: &B,
    tasks: &[Task],
    prior: &HashMap<String, TaskRecord>,
) -> Result<Vec<Option<TaskOutcome>>, RunError> {
    tasks
        .iter()
        .map(|t| {
            let reused = prior
                .get(&t.path())
                .filter(|r| r.node == t.node)
                .and_then(|r| match &r.result {
                    TaskResult::Done {
                        writes,
                        next,
                        sends,
                    } => Some(TaskOutcome::Done(TaskWrites {
                        writes: writes.clone(),
                        next: next.clone(),
                        sends: sends.clone(),
                    })),
                    TaskResult::Interrupted { .. } => None,
                });
            if let Some(TaskOutcome::Done(w)) = &reused {
                charge(backend, w.cost(), &|| {
                    format!("the recorded writes of node {:?}", t.node)
                })?;
            }
            Ok(reused)
        })
        .collect()
}

/// Where finished tasks are recorded, and against which checkpoint.
struct Recorder<'a> {
    saver: &'a dyn Checkpointer,
    checkpoint_id: &'a str,
    step: u32,
}

impl Recorder<'_> {
    async fn record(
        &self,
        task: &Task,
        outcome: &TaskOutcome,
        resume: &[Value],
    ) -> Result<(), RunError> {
        let result = match outcome {
            TaskOutcome::Done(w) => TaskResult::Done {
                writes: w.writes.clone(),
                next: w.next.clone(),
                sends: w.sends.clone(),
            },
            TaskOutcome::Interrupted(value) => TaskResult::Interrupted {
                id: interrupt_id(self.step, &task.path(), resume.len()),
                value: value.clone(),
                resume: resume.to_vec(),
            },
        };
        let record = TaskRecord {
            path: task.path(),
            node: task.node.clone(),
            result,
        };
        self.saver.put_task(self.checkpoint_id, &record).await?;
        // Not necessarily durable yet (a sync checkpointer commits it with
        // the step's checkpoint): the checkpointer logs `task record saved`
        // when it is.
        tracing::debug!(target: "sandgraph::checkpoint", step = self.step, task = %record.path, node = %record.node, "task recorded");
        Ok(())
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

/// Saves a checkpoint of `state` and returns its id; the copy is charged
/// while it is written.
async fn save_checkpoint<B: Backend>(
    backend: &B,
    saver: &dyn Checkpointer,
    graph: &CompiledGraph,
    state: &LoopState,
    parent: Option<&str>,
    source: CheckpointSource,
) -> Result<String, RunError> {
    let copy = state.cost();
    charge(backend, copy, &|| {
        format!("the checkpoint of step {}", state.step)
    })?;
    let checkpoint = state.checkpoint(graph, parent, source);
    let id = checkpoint.id.clone();
    let saved = saver.put_checkpoint(&checkpoint).await;
    drop(checkpoint);
    release(backend, copy);
    saved.map(|()| id)
}

/// Everything the loop needs between supersteps; serializable so a later
/// checkpointer can persist it after each commit and resume from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoopState {
    /// Number of the next superstep.
    pub(crate) step: u32,
    /// Every channel that has a value.
    pub(crate) channels: Map<String, Value>,
    /// Nodes triggered for the next superstep (its PULL tasks).
    pub(crate) pull: BTreeSet<String>,
    /// Per join barrier (by key), the sources that ran since it last fired.
    pub(crate) joins_seen: BTreeMap<String, BTreeSet<String>>,
    /// Dynamic tasks for the next superstep (its PUSH tasks), in the order
    /// they were emitted.
    pub(crate) sends: Vec<SendPacket>,
    /// Channel -> version, bumped when the channel is written.
    #[serde(default)]
    pub(crate) versions: BTreeMap<String, u64>,
    /// Node -> the channel versions it read when it last ran.
    #[serde(default)]
    pub(crate) versions_seen: BTreeMap<String, BTreeMap<String, u64>>,
}

/// One task of a superstep.
#[derive(Debug, Clone, PartialEq)]
struct Task {
    node: String,
    /// `None`: a PULL task reading the state snapshot; `Some`: a PUSH task
    /// (the index among the step's sends, and its payload).
    push: Option<(usize, Value)>,
}

impl Task {
    /// Identifies the task within its step (LangGraph's task path).
    fn path(&self) -> String {
        match &self.push {
            None => format!("pull:{}", self.node),
            Some((index, _)) => format!("push:{index}"),
        }
    }
}

/// What a task produced.
#[derive(Debug)]
enum TaskOutcome {
    Done(TaskWrites),
    Interrupted(Value),
}

#[derive(Debug)]
struct TaskWrites {
    /// Writes to known channels.
    writes: Map<String, Value>,
    /// Nodes triggered by goto and routers (not yet static edges).
    next: Vec<String>,
    /// Sends from the node's command, then from its routers.
    sends: Vec<SendPacket>,
}

impl TaskWrites {
    /// Host bytes the writes and sends hold.
    fn cost(&self) -> usize {
        let writes: usize = self
            .writes
            .iter()
            .map(|(k, v)| k.len() + value_cost(v))
            .sum();
        writes + self.sends.iter().map(send_cost).sum::<usize>()
    }
}

fn send_cost(send: &SendPacket) -> usize {
    send.node.len() + value_cost(&send.payload)
}

impl LoopState {
    /// Host bytes the state holds: the channels and the pending sends.
    fn cost(&self) -> usize {
        let channels: usize = self
            .channels
            .iter()
            .map(|(k, v)| k.len() + value_cost(v))
            .sum();
        channels + self.sends.iter().map(send_cost).sum::<usize>()
    }

    /// Starts a run: channels at their defaults, the input applied as
    /// `__start__`'s writes, entry points triggered and the conditional edges
    /// of `__start__` routed on the resulting state.
    async fn from_input<W: Worker>(
        graph: &CompiledGraph,
        worker: &mut W,
        input: Value,
    ) -> Result<Self, RunError> {
        let mut state = LoopState {
            step: 0,
            channels: graph.defaults.clone(),
            pull: BTreeSet::new(),
            joins_seen: BTreeMap::new(),
            sends: Vec::new(),
            versions: graph.defaults.keys().map(|k| (k.clone(), 0)).collect(),
            versions_seen: BTreeMap::new(),
        };
        state.apply_input(graph, worker, input).await?;
        Ok(state)
    }

    /// Resumes the loop from a stored checkpoint.
    fn from_checkpoint(c: Checkpoint) -> Self {
        LoopState {
            step: c.step,
            channels: c.values,
            pull: c.pull,
            joins_seen: c.joins_seen,
            sends: c.sends,
            versions: c.channel_versions,
            versions_seen: c.versions_seen,
        }
    }

    /// Applies `input` as `__start__`'s writes and plans a fresh start:
    /// entry points plus `__start__`'s conditional edges; pending tasks,
    /// sends and join barriers are discarded.
    async fn apply_input<W: Worker>(
        &mut self,
        graph: &CompiledGraph,
        worker: &mut W,
        input: Value,
    ) -> Result<(), RunError> {
        let Value::Object(input) = input else {
            return Err(RunError::new(
                ErrorCode::InvalidInput,
                format!("the input must be a json object, not {}", kind(&input)),
            ));
        };
        let writes = graph.filter_writes(Writer::Input, input)?;
        let written = apply_writes(graph, worker, &mut self.channels, START, writes).await?;
        self.bump(written);
        let mut pull = graph.entry.clone();
        let mut sends = Vec::new();
        if graph.has_conditionals(START) {
            let state = Value::Object(self.channels.clone());
            let mut next = Vec::new();
            for cond in graph.conditionals(START) {
                let answers = worker.route(&cond.router, &state).await?;
                graph.resolve_routes(START, cond, answers, &mut next, &mut sends)?;
            }
            pull.extend(next);
        }
        self.pull = pull;
        self.sends = sends;
        self.joins_seen.clear();
        Ok(())
    }

    /// Gives every channel in `written` one new version, above all others
    /// (LangGraph: all channels updated in a step share the new version).
    fn bump(&mut self, written: BTreeSet<String>) {
        if written.is_empty() {
            return;
        }
        let next = self.versions.values().copied().max().unwrap_or(0) + 1;
        for channel in written {
            self.versions.insert(channel, next);
        }
    }

    /// The checkpoint of the current state.
    fn checkpoint(
        &self,
        graph: &CompiledGraph,
        parent: Option<&str>,
        source: CheckpointSource,
    ) -> Checkpoint {
        Checkpoint {
            id: new_checkpoint_id(parent),
            parent: parent.map(str::to_owned),
            source,
            step: self.step,
            created_at_ms: now_ms(),
            channel_versions: self.versions.clone(),
            versions_seen: self.versions_seen.clone(),
            values: graph.in_channel_order(self.channels.clone()),
            pull: self.pull.clone(),
            joins_seen: self.joins_seen.clone(),
            sends: self.sends.clone(),
        }
    }

    /// The tasks of the next superstep, in task order: PULL tasks by node
    /// name, then PUSH tasks in emission order.
    fn plan(&self) -> Vec<Task> {
        let pull = self.pull.iter().map(|node| Task {
            node: node.clone(),
            push: None,
        });
        let push = self.sends.iter().enumerate().map(|(i, send)| Task {
            node: send.node.clone(),
            push: Some((i, send.payload.clone())),
        });
        pull.chain(push).collect()
    }

    /// The barrier: applies the step's writes in task order, computes the
    /// next step's triggers and advances the step. On error the state must be
    /// discarded.
    async fn commit<B: Backend, W: Worker>(
        &mut self,
        graph: &CompiledGraph,
        backend: &B,
        worker: &mut W,
        tasks: &[Task],
        outcomes: Vec<TaskOutcome>,
    ) -> Result<StepEvent, RunError> {
        let writes = barrier_writes(graph, self.step, tasks, outcomes)?;
        // The step event is a copy of every task's writes.
        let event_cost = writes.iter().map(|w| w.cost()).sum::<usize>();
        charge(backend, event_cost, &|| {
            format!("the event of step {}", self.step)
        })?;

        let mut updates = Vec::with_capacity(tasks.len());
        let mut pull = BTreeSet::new();
        let mut sends = Vec::new();
        let mut written = BTreeSet::new();
        for task in tasks {
            self.versions_seen
                .insert(task.node.clone(), self.versions.clone());
        }
        for (task, task_writes) in tasks.iter().zip(writes) {
            let TaskWrites {
                writes,
                next,
                sends: task_sends,
            } = task_writes;
            updates.push(TaskUpdate {
                node: task.node.clone(),
                update: Value::Object(writes.clone()),
            });
            written
                .extend(apply_writes(graph, worker, &mut self.channels, &task.node, writes).await?);
            self.triggered_by(graph, &task.node, next, &mut pull);
            sends.extend(task_sends);
        }
        self.fire_joins(graph, &mut pull);
        let event = StepEvent {
            step: self.step,
            updates,
            sub_run: Vec::new(),
        };
        self.pull = pull;
        self.sends = sends;
        self.bump(written);
        self.step = self.step.saturating_add(1);
        Ok(event)
    }

    /// What the task of `node` triggers for the next step (its static
    /// edges, then its goto and router targets `next`); the join barriers
    /// waiting for `node` see it ran.
    fn triggered_by(
        &mut self,
        graph: &CompiledGraph,
        node: &str,
        next: Vec<String>,
        pull: &mut BTreeSet<String>,
    ) {
        if let Some(targets) = graph.edges_from.get(node) {
            pull.extend(targets.iter().cloned());
        }
        pull.extend(next);
        for &j in graph.joins_of.get(node).into_iter().flatten() {
            if let Some(join) = graph.joins.get(j) {
                self.joins_seen
                    .entry(join.key.clone())
                    .or_default()
                    .insert(node.to_owned());
            }
        }
    }

    /// Every join barrier whose sources have all run fires: its target is
    /// triggered and it starts over.
    fn fire_joins(&mut self, graph: &CompiledGraph, pull: &mut BTreeSet<String>) {
        for join in &graph.joins {
            if self
                .joins_seen
                .get(&join.key)
                .is_some_and(|seen| seen.is_superset(&join.sources))
            {
                self.joins_seen.remove(&join.key);
                pull.insert(join.target.clone());
            }
        }
    }
}

/// The writes of a step that reached the barrier (none interrupted), once
/// they pass the checks of the barrier.
fn barrier_writes(
    graph: &CompiledGraph,
    step: u32,
    tasks: &[Task],
    outcomes: Vec<TaskOutcome>,
) -> Result<Vec<TaskWrites>, RunError> {
    let writes: Vec<TaskWrites> = outcomes
        .into_iter()
        .filter_map(|outcome| match outcome {
            TaskOutcome::Done(writes) => Some(writes),
            TaskOutcome::Interrupted(_) => None,
        })
        .collect();
    if writes.len() != tasks.len() {
        return Err(RunError::new(
            ErrorCode::Trap,
            "internal error: a superstep with an interrupt reached the barrier",
        ));
    }
    check_last_value_conflicts(graph, tasks, &writes)?;
    check_task_count(step, tasks, &writes)?;
    Ok(writes)
}

/// The next superstep may plan at most [`MAX_TASKS_PER_STEP`] tasks; the
/// error names the node that asked for the most.
fn check_task_count(step: u32, tasks: &[Task], writes: &[TaskWrites]) -> Result<(), RunError> {
    let total: usize = writes.iter().map(|w| w.next.len() + w.sends.len()).sum();
    if total <= MAX_TASKS_PER_STEP {
        return Ok(());
    }
    let (node, most) = tasks
        .iter()
        .zip(writes)
        .map(|(t, w)| (t.node.as_str(), w.next.len() + w.sends.len()))
        .max_by_key(|(_, n)| *n)
        .unwrap_or(("?", 0));
    Err(invalid_update(format!(
        "superstep {} would start {total} tasks (node {node:?} asked for {most}); a superstep may start at most {MAX_TASKS_PER_STEP}",
        step + 1
    )))
}

/// A last-value channel takes one write per superstep.
fn check_last_value_conflicts(
    graph: &CompiledGraph,
    tasks: &[Task],
    writes: &[TaskWrites],
) -> Result<(), RunError> {
    let mut writers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (task, task_writes) in tasks.iter().zip(writes) {
        for channel in task_writes.writes.keys() {
            if graph.reducers.get(channel) == Some(&Reducer::LastValue) {
                writers.entry(channel).or_default().push(&task.node);
            }
        }
    }
    match writers.into_iter().find(|(_, nodes)| nodes.len() > 1) {
        Some((channel, nodes)) => {
            let names: Vec<String> = nodes.iter().map(|n| format!("{n:?}")).collect();
            Err(invalid_update(format!(
                "channel {channel:?} received {} values in one step (from nodes {}); a last-value channel takes one write per step: give it a reducer (append, merge, add or custom)",
                nodes.len(),
                names.join(", ")
            )))
        }
        None => Ok(()),
    }
}

/// Applies one writer's writes (to known channels) through the reducers;
/// custom reducers run on `worker`.
async fn apply_writes<W: Worker>(
    graph: &CompiledGraph,
    worker: &mut W,
    channels: &mut Map<String, Value>,
    writer: &str,
    writes: Map<String, Value>,
) -> Result<BTreeSet<String>, RunError> {
    let mut written = BTreeSet::new();
    for (channel, update) in writes {
        let Some(&reducer) = graph.reducers.get(&channel) else {
            continue;
        };
        let value = match reducer {
            Reducer::Custom => {
                let current = channels.get(&channel).unwrap_or(&Value::Null);
                worker.reduce(&channel, current, &update).await?
            }
            builtin => reducers::apply(builtin, &channel, channels.get(&channel), update, writer)?,
        };
        channels.insert(channel.clone(), value);
        written.insert(channel);
    }
    Ok(written)
}

/// One superstep's tasks and what they run against.
struct StepRun<'a, B: Backend> {
    graph: &'a Arc<CompiledGraph>,
    backend: &'a Arc<B>,
    tasks: &'a [Task],
    /// Per task, the resume values of its interrupts.
    resumes: &'a [Vec<Value>],
    /// The state at step start, read by every PULL task.
    snapshot: &'a Arc<Value>,
    /// The step's context; a task's adds its resume values.
    ctx: &'a NodeContext,
    /// Where each fresh outcome is recorded as soon as its task finishes.
    recorder: Option<&'a Recorder<'a>>,
}

/// What a spawned task hands back: the worker it ran on (none when one
/// could not be had) and its outcome.
type Spawned<W> = (Option<W>, Result<TaskOutcome, RunError>);

/// The spawned tasks of a step with several to run.
struct Running<W> {
    set: JoinSet<Spawned<W>>,
    /// Per spawned task, its task index, to abort it.
    aborts: Vec<(usize, AbortHandle)>,
    /// Per tokio task, its position among the spawned (0 holds the main
    /// worker) and its task index.
    index_of: HashMap<tokio::task::Id, (usize, usize)>,
}

impl<B: Backend + 'static> StepRun<'_, B> {
    /// Runs the tasks that have no outcome yet (`reused[i]` is `None`) and
    /// returns all outcomes in task order, or the error of the failed task
    /// that comes first in task order.
    async fn execute(
        &self,
        main: &mut Option<B::Worker>,
        reused: Vec<Option<TaskOutcome>>,
    ) -> Result<Vec<TaskOutcome>, RunError> {
        let todo: Vec<usize> = reused
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_none())
            .map(|(i, _)| i)
            .collect();
        let mut results: Vec<Option<Result<TaskOutcome, RunError>>> =
            reused.into_iter().map(|r| r.map(Ok)).collect();
        if let [i] = todo.as_slice() {
            results[*i] = Some(Ok(self.run_alone(main, *i).await?));
        } else if !todo.is_empty() {
            self.run_concurrently(main, &todo, &mut results).await?;
        }
        results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| {
                    Err(RunError::new(
                        ErrorCode::Trap,
                        "internal error: a task vanished",
                    ))
                })
            })
            .collect()
    }

    /// The context of task `i`.
    fn task_ctx(&self, i: usize) -> NodeContext {
        let mut c = self.ctx.clone();
        c.resume = self.resumes.get(i).cloned().unwrap_or_default();
        c
    }

    /// The only task to run, on the main worker.
    async fn run_alone(
        &self,
        main: &mut Option<B::Worker>,
        i: usize,
    ) -> Result<TaskOutcome, RunError> {
        let task = &self.tasks[i];
        let worker = main_worker(main, &**self.backend).await?;
        let span = tracing::debug_span!("task", node = %task.node, step = self.ctx.step);
        let outcome = run_task(worker, self.graph, task, self.snapshot, &self.task_ctx(i))
            .instrument(span)
            .await?;
        if let Some(r) = self.recorder {
            r.record(task, &outcome, &self.resumes[i]).await?;
        }
        Ok(outcome)
    }

    /// Runs the tasks `todo` concurrently, the first on the main worker,
    /// and fills in their results. When one fails, tasks after it in task
    /// order are aborted and earlier ones finish; the error of the first
    /// failed task in task order is returned.
    async fn run_concurrently(
        &self,
        main: &mut Option<B::Worker>,
        todo: &[usize],
        results: &mut [Option<Result<TaskOutcome, RunError>>],
    ) -> Result<(), RunError> {
        let mut running = self.spawn(main, todo);
        let mut first_failure: Option<usize> = None;
        while let Some(joined) = running.set.join_next_with_id().await {
            let (i, result) = match joined {
                Ok((id, (worker, result))) => {
                    let Some(&(n, i)) = running.index_of.get(&id) else {
                        continue;
                    };
                    if n == 0 {
                        *main = worker;
                    }
                    (i, result)
                }
                Err(err) if err.is_cancelled() => continue,
                Err(err) => {
                    let Some(&(_, i)) = running.index_of.get(&err.id()) else {
                        continue;
                    };
                    (i, Err(self.panicked(i)))
                }
            };
            let result = self.record_finished(i, result).await;
            if result.is_err() && first_failure.is_none_or(|f| i < f) {
                // Tasks after it in task order cannot matter any more; earlier
                // ones might still fail and take precedence, so they finish.
                first_failure = Some(i);
                for (later, handle) in &running.aborts {
                    if *later > i {
                        handle.abort();
                    }
                }
            }
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(result);
            }
        }
        match first_failure.and_then(|f| results.get_mut(f).and_then(Option::take)) {
            Some(Err(err)) => Err(err),
            _ => Ok(()),
        }
    }

    /// Spawns the tasks `todo` on tokio tasks, the first with the main
    /// worker, the others each with a fresh one.
    fn spawn(&self, main: &mut Option<B::Worker>, todo: &[usize]) -> Running<B::Worker> {
        let mut running = Running {
            set: JoinSet::new(),
            aborts: Vec::with_capacity(todo.len()),
            index_of: HashMap::with_capacity(todo.len()),
        };
        for (n, &i) in todo.iter().enumerate() {
            let worker = if n == 0 { main.take() } else { None };
            let graph = Arc::clone(self.graph);
            let backend = Arc::clone(self.backend);
            let snapshot = Arc::clone(self.snapshot);
            let ctx = self.task_ctx(i);
            let task = self.tasks[i].clone();
            let span = tracing::debug_span!("task", node = %task.node, step = ctx.step);
            let handle = running.set.spawn(
                async move {
                    let mut worker = match worker {
                        Some(worker) => worker,
                        None => match backend.worker().await {
                            Ok(worker) => worker,
                            Err(err) => return (None, Err(err)),
                        },
                    };
                    let outcome = run_task(&mut worker, &graph, &task, &snapshot, &ctx).await;
                    (Some(worker), outcome)
                }
                .instrument(span),
            );
            running.index_of.insert(handle.id(), (n, i));
            running.aborts.push((i, handle));
        }
        running
    }

    /// The error of task `i`, whose tokio task panicked.
    fn panicked(&self, i: usize) -> RunError {
        let node = self.tasks.get(i).map_or("?", |t| t.node.as_str());
        let message = format!("internal error: the task of node {node:?} panicked");
        RunError::new(ErrorCode::Trap, message)
    }

    /// A finished task is recorded at once, so a crash or a failing sibling
    /// never makes it run again; a failed record fails the task.
    async fn record_finished(
        &self,
        i: usize,
        result: Result<TaskOutcome, RunError>,
    ) -> Result<TaskOutcome, RunError> {
        if let (Ok(outcome), Some(r)) = (&result, self.recorder) {
            r.record(&self.tasks[i], outcome, &self.resumes[i]).await?;
        }
        result
    }
}

/// One task: the node body, then (unless it interrupted) each of its
/// conditional edges' routers on the fresh state (the step-start snapshot
/// plus this task's own writes).
async fn run_task<W: Worker>(
    worker: &mut W,
    graph: &CompiledGraph,
    task: &Task,
    snapshot: &Value,
    ctx: &NodeContext,
) -> Result<TaskOutcome, RunError> {
    let node = task.node.as_str();
    let input = match &task.push {
        None => snapshot,
        Some((_, payload)) => payload,
    };
    let (update, goto, command_sends) = match worker.run_node(node, input, ctx).await? {
        NodeOutput::Update(update) => (update, Vec::new(), Vec::new()),
        NodeOutput::Command {
            update,
            goto,
            sends,
        } => (update, goto, sends),
        NodeOutput::Interrupt(value) => return Ok(TaskOutcome::Interrupted(value)),
    };
    check_targets(node, goto.len() + command_sends.len())?;
    let writes = graph.filter_writes(Writer::Node(node), update)?;
    let mut next = Vec::new();
    for target in &goto {
        if let Some(target) = graph.resolve_goto(node, target)? {
            next.push(target.to_owned());
        }
    }
    for send in &command_sends {
        graph.check_send(node, send)?;
    }
    let mut sends = command_sends;

    if graph.has_conditionals(node) {
        let mut fresh = snapshot.as_object().cloned().unwrap_or_default();
        apply_writes(graph, worker, &mut fresh, node, writes.clone()).await?;
        let fresh = Value::Object(fresh);
        for cond in graph.conditionals(node) {
            let answers = worker.route(&cond.router, &fresh).await?;
            graph.resolve_routes(node, cond, answers, &mut next, &mut sends)?;
            check_targets(node, next.len() + sends.len())?;
        }
    }
    Ok(TaskOutcome::Done(TaskWrites {
        writes,
        next,
        sends,
    }))
}

/// A node result (with its routers' answers) may name at most
/// [`MAX_TARGETS_PER_RESULT`] goto targets and sends.
pub(crate) fn check_targets(node: &str, count: usize) -> Result<(), RunError> {
    if count > MAX_TARGETS_PER_RESULT {
        return Err(invalid_update(format!(
            "node {node:?} returned {count} goto targets and sends; a node result may name at most {MAX_TARGETS_PER_RESULT}"
        )));
    }
    Ok(())
}

fn collect_interrupts(
    step: u32,
    tasks: &[Task],
    outcomes: &[TaskOutcome],
    resumes: &[Vec<Value>],
) -> Vec<Interrupt> {
    tasks
        .iter()
        .zip(outcomes)
        .zip(resumes)
        .filter_map(|((task, outcome), resume)| match outcome {
            TaskOutcome::Interrupted(value) => Some(Interrupt {
                // The k-th interrupt of a task (k = answers it already had).
                id: interrupt_id(step, &task.path(), resume.len()),
                node: task.node.clone(),
                value: value.clone(),
            }),
            TaskOutcome::Done(_) => None,
        })
        .collect()
}

/// 32 hex digits of FNV-1a-128 over the step, task path and interrupt index.
fn interrupt_id(step: u32, task_path: &str, index: usize) -> String {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let text = format!("{step}\u{0}{task_path}\u{0}{index}");
    let hash = text.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u128::from(byte)).wrapping_mul(PRIME)
    });
    format!("{hash:032x}")
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn fnv1a_128_matches_reference_vectors() {
        // Reference values of FNV-1a-128 for "" and "a".
        let hash = |bytes: &[u8]| {
            bytes
                .iter()
                .fold(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d_u128, |h, &b| {
                    (h ^ u128::from(b)).wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b)
                })
        };
        assert_eq!(
            format!("{:032x}", hash(b"")),
            "6c62272e07bb014262b821756295c58d"
        );
        assert_eq!(
            format!("{:032x}", hash(b"a")),
            "d228cb696f1a8caf78912b704e4a8964"
        );
        let id = interrupt_id(3, "pull:a", 0);
        assert_eq!(id.len(), 32);
        assert_eq!(id, interrupt_id(3, "pull:a", 0));
        assert_ne!(id, interrupt_id(4, "pull:a", 0));
        assert_ne!(id, interrupt_id(3, "pull:b", 0));
        assert_ne!(id, interrupt_id(3, "pull:a", 1));
    }
}

#[cfg(test)]
mod loop_state_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn plan_orders_pull_tasks_by_name_then_push_tasks_by_emission() {
        let state = LoopState {
            step: 3,
            channels: Map::new(),
            pull: ["zeta", "alpha", "mid"]
                .into_iter()
                .map(String::from)
                .collect(),
            joins_seen: BTreeMap::new(),
            versions: BTreeMap::new(),
            versions_seen: BTreeMap::new(),
            sends: vec![
                SendPacket {
                    node: "w".into(),
                    payload: json!(2),
                },
                SendPacket {
                    node: "alpha".into(),
                    payload: json!(1),
                },
            ],
        };
        let plan = state.plan();
        let order: Vec<(String, String)> =
            plan.iter().map(|t| (t.node.clone(), t.path())).collect();
        assert_eq!(
            order,
            [
                ("alpha".to_owned(), "pull:alpha".to_owned()),
                ("mid".to_owned(), "pull:mid".to_owned()),
                ("zeta".to_owned(), "pull:zeta".to_owned()),
                ("w".to_owned(), "push:0".to_owned()),
                ("alpha".to_owned(), "push:1".to_owned()),
            ]
        );
        assert_eq!(plan[4].push, Some((1, json!(1))));
    }

    #[test]
    fn loop_state_round_trips_through_json() {
        let state = LoopState {
            step: 7,
            channels: json!({"x": 1, "items": [1, 2]})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            pull: ["b".to_owned()].into_iter().collect(),
            joins_seen: [(
                "join:a+b:c".to_owned(),
                ["a".to_owned()].into_iter().collect(),
            )]
            .into_iter()
            .collect(),
            versions: BTreeMap::new(),
            versions_seen: BTreeMap::new(),
            sends: vec![SendPacket {
                node: "w".into(),
                payload: json!({"i": 1}),
            }],
        };
        let text = serde_json::to_string(&state).unwrap();
        let back: LoopState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, state);
        assert_eq!(
            serde_json::to_value(&state).unwrap(),
            json!({
                "step": 7,
                "channels": {"x": 1, "items": [1, 2]},
                "pull": ["b"],
                "joins_seen": {"join:a+b:c": ["a"]},
                "sends": [{"node": "w", "payload": {"i": 1}}],
                "versions": {},
                "versions_seen": {}
            })
        );
    }
}
