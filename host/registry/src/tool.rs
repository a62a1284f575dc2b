//! One graph as a tool: its definition (name, description, schemas, flags,
//! limits) and [`GraphTool::run`], the one way a run of it starts.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandgraph_core::audit::CapabilityLog;
use sandgraph_core::{GraphSpec, NodeContext, Reducer, Start, json};
use sandgraph_factors::llm::LlmAccess;
use sandgraph_factors::tools::ToolsAccess;
use sandgraph_runtime::caps::{Capabilities, SubRun};

use crate::subrun::Backends;
use sandgraph_params::ParameterSchema;
use sandgraph_runtime::{
    CancellationToken, ErrorCode, Graph, Limits, PreparedRun, RunError, RunOptions, RunOutcome,
    Runtime, StepEvent,
};
use sandgraph_store::Durability;
use serde_json::{Map, Value};
use tokio::sync::OnceCell;

use crate::compile::Cache;
use crate::config::{GraphOverrides, OperatorConfig};
use crate::error::{MountErrorKind, MountWarning};
use crate::registry::RESERVED_NAME;

/// Where a tool's graph came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    /// A component file.
    File(PathBuf),
    /// An already loaded graph ([`crate::Registry::create`]).
    Graph,
}

impl ToolSource {
    /// The file path or `<graph "name">`, for messages.
    pub fn label(&self, name: &str) -> String {
        match self {
            ToolSource::File(p) => p.display().to_string(),
            ToolSource::Graph => format!("<graph \"{name}\">"),
        }
    }
}

/// Options of one tool call beyond its arguments.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The caller's cancellation, forwarded to the run unchanged.
    pub cancel: CancellationToken,
    /// The durable thread of the call, passed to the run as its thread id.
    pub thread_id: Option<String>,
    /// Extra configurable keys passed to every node. A `thread_id` key here
    /// is dropped: only [`CallOptions::thread_id`] sets the thread.
    pub configurable: Map<String, Value>,
    /// The original request text when a model routed the call; `validate`
    /// and the nodes see it.
    pub request: Option<String>,
    /// Durable threads. With this and [`CallOptions::thread_id`], the run
    /// checkpoints into the thread and starts from its stored state, so a
    /// stateful graph keeps its memory across calls (the input is applied
    /// as new input; a pending interrupt is discarded, as in LangGraph).
    /// Without it the thread id only reaches the nodes.
    pub threads: Option<sandgraph_store::ThreadStore>,
    /// Set when the call is a `tools` call of a running graph: the run is
    /// then its sub-run (same deadline, cancellation, fuel and budget).
    pub sub_run_of: Option<SubRun>,
    /// What [`GraphTool::check`] returned for the arguments of a
    /// [`Start::Input`] run: the run then neither checks them against the
    /// parameters nor runs `validate` again.
    pub checked: Option<Checked>,
}

/// The proof that arguments passed [`GraphTool::check`]: the parameters and
/// the graph's `validate` accepted them. Only the registry makes one; it
/// holds the graph input derived from the arguments and counts only for
/// the graph it was checked on, with the same arguments.
#[derive(Clone)]
pub struct Checked {
    graph: Arc<Graph>,
    args: Value,
    input: Value,
}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("graph", &self.graph.name())
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl Checked {
    /// The arguments that were checked.
    pub fn args(&self) -> &Value {
        &self.args
    }

    /// The graph input derived from the arguments: what the run starts
    /// with.
    pub fn input(&self) -> &Value {
        &self.input
    }

    /// [`Checked::input`], owned.
    pub fn into_input(self) -> Value {
        self.input
    }

    /// The input to run `graph` with `args`, when this proof is for them.
    fn accept(self, graph: &Arc<Graph>, args: &Value) -> Result<Value, RunError> {
        if Arc::ptr_eq(&self.graph, graph) && self.args == *args {
            return Ok(self.input);
        }
        Err(RunError::new(
            ErrorCode::InvalidInput,
            format!(
                "the checked arguments are not these arguments of graph \"{}\": check them with this tool",
                graph.name()
            ),
        ))
    }
}

/// What a successful tool call returns.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolOutput {
    /// The final state (lossless JSON), or for an interrupted run
    /// `{"status": "interrupted", "thread_id": .., "interrupts": [..]}`.
    pub value: Value,
    /// `value` as pretty JSON, 2-space indent: the text shown to a model.
    pub text: String,
    /// The run stopped at an interrupt (`value` is the interrupt report).
    pub interrupted: bool,
}

impl ToolOutput {
    fn new(value: Value, interrupted: bool) -> Result<Self, RunError> {
        let text = serde_json::to_string_pretty(&value).map_err(|e| {
            RunError::new(
                ErrorCode::InvalidOutput,
                format!("cannot render the result: {e}"),
            )
        })?;
        Ok(ToolOutput {
            value,
            text,
            interrupted,
        })
    }
}

/// How the graph of a tool is loaded at first need.
struct LazyLoad {
    digest: String,
    /// Released once the graph is loaded.
    bytes: Mutex<Option<Arc<[u8]>>>,
    cache: Cache,
}

/// A graph mounted as a tool.
pub struct GraphTool {
    name: String,
    description: String,
    parameters: ParameterSchema,
    output_schema: Value,
    as_tool: bool,
    as_graph_tool: bool,
    limits: Limits,
    /// The grants of its runs, each with the host's backend (no log).
    grants: Capabilities,
    /// Where its runs' capability calls are reported.
    log: Option<Arc<dyn CapabilityLog>>,
    /// Whether the name is the operator's choice (see
    /// [`GraphTool::identity_bound`]).
    bound: bool,
    spec: GraphSpec,
    source: ToolSource,
    digest: Option<String>,
    runtime: Runtime,
    graph: OnceCell<Arc<Graph>>,
    lazy: Option<LazyLoad>,
}

impl std::fmt::Debug for GraphTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphTool")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("as_tool", &self.as_tool)
            .field("as_graph_tool", &self.as_graph_tool)
            .field("loaded", &self.is_loaded())
            .finish_non_exhaustive()
    }
}

/// A tool ready to be registered, plus the advisory notices of its mount
/// (a model-visible tool without declared parameters, grants withheld).
pub(crate) struct Built {
    pub(crate) tool: GraphTool,
    pub(crate) notices: Vec<String>,
}

/// The capabilities the operator granted a graph, each with its backend.
fn granted(overrides: Option<&GraphOverrides>, backends: &Backends) -> Capabilities {
    let llm = overrides
        .and_then(|o| o.grants.llm())
        .map(|grant| LlmAccess {
            grant,
            backend: backends.llm.clone(),
        });
    let tools = overrides
        .and_then(|o| o.grants.tools())
        .map(|grant| ToolsAccess {
            grant,
            backend: backends.tools.clone(),
        });
    let http = overrides
        .and_then(|o| o.grants.http())
        .map(|g| match &backends.http_cassette {
            Some(c) => g.with_cassette(c.clone()),
            None => g,
        });
    let mut grants = Capabilities::default();
    grants.set(llm);
    grants.set(tools);
    grants.set(http);
    grants
}

/// The tool's description (the graph's, else one made from its spec) and
/// its output schema.
fn described(spec: &GraphSpec) -> (String, Value) {
    let description = match spec.description.as_deref().map(str::trim) {
        Some(d) if !d.is_empty() => d.to_owned(),
        _ => synthesize_description(spec),
    };
    let output_schema = serde_json::json!({
        "type": "object",
        "description": format!(
            "The final state of the graph: {}. A run that stops at an interrupt \
             returns {{\"status\": \"interrupted\", \"thread_id\", \"interrupts\"}} \
             instead; on a durable thread it can be resumed.",
            key_list(spec, false)
        ),
        "anyOf": [
            {"type": "object", "description": "the final state"},
            interrupt_report_schema(),
        ],
    });
    (description, output_schema)
}

/// The schema of an interrupted call's value (see [`ToolOutput::value`]).
fn interrupt_report_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "description": "the run stopped at an interrupt",
        "required": ["status", "thread_id", "interrupts"],
        "properties": {
            "status": {"const": "interrupted"},
            "thread_id": {"type": ["string", "null"]},
            "interrupts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "value"],
                    "properties": {"id": {"type": "string"}, "value": {}}
                }
            }
        }
    })
}

impl GraphTool {
    /// Builds the tool of `spec`. The graph is `graph` when already loaded,
    /// else loaded at the first call from `lazy`.
    pub(crate) fn build(
        runtime: &Runtime,
        config: &OperatorConfig,
        backends: &Backends,
        spec: GraphSpec,
        source: ToolSource,
        graph: Option<Arc<Graph>>,
        lazy: Option<(String, Arc<[u8]>, Cache)>,
    ) -> Result<Built, MountWarning> {
        let label = || PathBuf::from(source.label(&spec.name));
        if spec.name == RESERVED_NAME {
            return Err(MountWarning::new(
                label(),
                MountErrorKind::Reserved,
                format!("the name \"{RESERVED_NAME}\" is reserved"),
            ));
        }
        let parameters = match &spec.parameters {
            Some(p) => ParameterSchema::compile(p).map_err(|e| {
                MountWarning::new(label(), MountErrorKind::UnsupportedSchema, e.to_string())
            })?,
            None => ParameterSchema::fallback_input(&state_keys(&spec)),
        };
        let overrides = config.graph(&spec.name);
        let as_tool = overrides
            .and_then(|o| o.as_tool)
            .unwrap_or(spec.registration.as_tool);
        let as_graph_tool = overrides
            .and_then(|o| o.as_graph_tool)
            .unwrap_or(spec.registration.as_graph_tool);
        let notice = (as_tool && parameters.is_fallback()).then(|| {
            format!(
                "graph \"{}\" is a model-visible tool without declared parameters: models see one \
                 opaque `input` argument; declare `parameters`",
                spec.name
            )
        });
        let grants = granted(overrides, backends);
        let mut limits = config.limits_for(&spec.name, &runtime.config().default_limits);
        if let Some(ms) = spec.timeout_ms {
            limits.timeout = limits.timeout.min(Duration::from_millis(ms.max(1)));
        }
        let (description, output_schema) = described(&spec);
        let cell = OnceCell::new();
        if let Some(g) = graph {
            // A fresh cell cannot be full.
            let _ = cell.set(g);
        }
        let digest = lazy.as_ref().map(|(d, _, _)| d.clone());
        Ok(Built {
            tool: GraphTool {
                name: spec.name.clone(),
                description,
                parameters,
                output_schema,
                as_tool,
                as_graph_tool,
                limits,
                grants,
                log: backends.log.clone(),
                bound: true,
                spec,
                source,
                digest,
                runtime: runtime.clone(),
                graph: cell,
                lazy: lazy.map(|(digest, bytes, cache)| LazyLoad {
                    digest,
                    bytes: Mutex::new(Some(bytes)),
                    cache,
                }),
            },
            notices: notice.into_iter().collect(),
        })
    }

    /// The tool name (the graph's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The graph's own description, else one synthesized from its nodes
    /// and state keys (`synthesize_description`).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The compiled parameters: declared, or the fallback `input`.
    pub fn parameters(&self) -> &ParameterSchema {
        &self.parameters
    }

    /// The JSON Schema of the arguments.
    pub fn input_schema(&self) -> &Value {
        self.parameters.json_schema()
    }

    /// The JSON Schema of the result: an object (the final state).
    pub fn output_schema(&self) -> Value {
        self.output_schema.clone()
    }

    /// Offered to models as a tool: MCP's `tools/list` and the studio list
    /// it. The seed's `asTool` (`as-tool` in the WIT registration,
    /// `as_tool` in `sandgraph.toml`), after the operator's override.
    pub fn model_visible(&self) -> bool {
        self.as_tool
    }

    /// Offered to the routing agent as a candidate and listed for
    /// discovery. The seed's `asGraphTool` (`as-graph-tool` in the WIT
    /// registration, `as_graph_tool` in `sandgraph.toml`), after the
    /// operator's override.
    pub fn routable(&self) -> bool {
        self.as_graph_tool
    }

    /// The limits of every call: runtime defaults, operator caps, the
    /// graph's overrides and its own `timeout_ms`.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The effective timeout of a call, in milliseconds.
    pub fn timeout_ms(&self) -> u64 {
        u64::try_from(self.limits.timeout.as_millis()).unwrap_or(u64::MAX)
    }

    /// The graph's spec.
    pub fn spec(&self) -> &GraphSpec {
        &self.spec
    }

    /// Where the graph came from.
    pub fn source(&self) -> &ToolSource {
        &self.source
    }

    /// Whether the tool's name is one the operator chose for this
    /// component: the file's own name in its folder (`research.wasm` for
    /// the graph `research`), or a `sandgraph.lock` entry pinning the
    /// component's digest under that name; a graph the caller loaded
    /// itself ([`crate::Registry::create`]) is bound too. The registry
    /// mounts only bound tools, so grants, `tools` targets, threads and the
    /// tool name all follow a name the operator chose: a component cannot
    /// take a name's privileges by calling itself that name.
    pub fn identity_bound(&self) -> bool {
        self.bound
    }

    /// Marks the tool as not bound to its name and drops its grants, so
    /// that nothing it was built with outlives the refusal to mount it.
    pub(crate) fn unbind(&mut self) {
        self.bound = false;
        self.grants = Capabilities::default();
    }

    /// The sha256 (hex) of the component bytes, when mounted from bytes.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// Whether the graph is loaded (compiled or deserialized) yet.
    pub fn is_loaded(&self) -> bool {
        self.graph.initialized()
    }

    /// The full definition, as `sandgraph tools list --json` prints it:
    /// `{name, description, as_tool, as_graph_tool, timeout_ms,
    /// input_schema, output_schema, source}`.
    pub fn definition(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "description": self.description,
            "as_tool": self.as_tool,
            "as_graph_tool": self.as_graph_tool,
            "timeout_ms": self.timeout_ms(),
            "input_schema": self.input_schema(),
            "output_schema": self.output_schema(),
            "source": self.source.label(&self.name),
        })
    }

    /// The loaded graph: loaded at the first need and memoized; concurrent
    /// first callers wait for one load. From the compile cache when it has
    /// this component's artifact for this engine, else compiled once (and
    /// stored). A failed load is retried by the next call.
    ///
    /// # Errors
    ///
    /// A `load` error when the component cannot be compiled or linked.
    pub async fn graph(&self) -> Result<Arc<Graph>, RunError> {
        self.graph
            .get_or_try_init(|| self.load())
            .await
            .map(Arc::clone)
    }

    async fn load(&self) -> Result<Arc<Graph>, RunError> {
        let lazy = self.lazy.as_ref().ok_or_else(|| {
            RunError::new(
                ErrorCode::Load,
                format!("graph \"{}\" has no component", self.name),
            )
        })?;
        let bytes = lazy
            .bytes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                RunError::new(
                    ErrorCode::Load,
                    format!("graph \"{}\" has no component", self.name),
                )
            })?;
        let component = lazy
            .cache
            .component(&self.runtime, &lazy.digest, &bytes)
            .await?;
        let graph = self
            .runtime
            .load_described(component, self.spec.clone())
            .map_err(|e| {
                RunError::new(e.code, format!("graph \"{}\": {}", self.name, e.message))
            })?;
        *lazy.bytes.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(graph)
    }

    /// The one way every caller (MCP, the studio, the CLI, the routing
    /// agent, a graph's `tools` calls) starts a run of this tool, streaming
    /// one event per superstep to `on_step`:
    ///
    /// * [`Start::Input`]: a call with these *arguments*: checked against
    ///   the parameters, the graph's `validate` export (which sees
    ///   [`CallOptions::request`]), then the run. With
    ///   [`CallOptions::checked`] (what [`GraphTool::check`] returned for
    ///   these arguments) neither check runs again;
    /// * [`Start::Resume`]: the answer to the pending interrupt(s) of the
    ///   call's durable thread: the answer when one interrupt is pending,
    ///   else an object mapping interrupt ids to answers. Neither the
    ///   arguments nor `validate` run again: the thread was started by a
    ///   checked call;
    /// * [`Start::Continue`]: the pending superstep of the call's durable
    ///   thread, continued (after a crash or a failure).
    ///
    /// # Errors
    ///
    /// * `INVALID_ARGS`: `invalid arguments: <v1>; <v2>`, every violation,
    ///   paths rooted at `arguments`;
    /// * `validation`: the graph's `validate` refused, with its reason;
    /// * `invalid_input`: a [`Checked`] of other arguments or of another
    ///   graph, or given with a start that is not [`Start::Input`]; a
    ///   resume or a continue without [`CallOptions::threads`] and
    ///   [`CallOptions::thread_id`], or of a thread that does not exist;
    /// * the runtime's error when nothing is pending or an interrupt id is
    ///   unknown, and any error of loading or running the graph, unchanged.
    pub async fn run(
        &self,
        start: Start,
        mut opts: CallOptions,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<ToolOutput, RunError> {
        let threads = opts.threads.clone();
        match (start, opts.checked.take()) {
            (Start::Input(args), None) => {
                self.check_args(&args)?;
                let input = self.parameters.graph_input(args);
                let graph = self.graph().await?;
                // `validate` runs in the instance the run then starts on:
                // one instance per call (the runtime's DESIGN, "one
                // instance per call").
                let run = self.runtime.prepare(&graph, self.run_options(opts))?;
                if let Err(reason) = run.validate(&input).await? {
                    return Err(RunError::new(ErrorCode::Validation, reason));
                }
                self.run_prepared(run, Start::Input(input), threads.as_ref(), on_step)
                    .await
            }
            (Start::Input(args), Some(checked)) => {
                let graph = self.graph().await?;
                let input = checked.accept(&graph, &args)?;
                let run_opts = self.run_options(opts);
                self.run_graph(
                    &graph,
                    Start::Input(input),
                    run_opts,
                    threads.as_ref(),
                    on_step,
                )
                .await
            }
            (start, None) => {
                let graph = self.graph().await?;
                let run_opts = self.run_options(opts);
                self.run_graph(&graph, start, run_opts, threads.as_ref(), on_step)
                    .await
            }
            (_, Some(_)) => Err(RunError::new(
                ErrorCode::InvalidInput,
                "checked arguments start a call with its input, not a resume or a continue",
            )),
        }
    }

    /// The checks of a [`Start::Input`] run without the run: the arguments
    /// against the parameters, then the graph's `validate` export (which
    /// sees `opts.request`). A router checks a model's choice with this
    /// before its hooks, then runs it with [`GraphTool::run`], handing the
    /// proof back as [`CallOptions::checked`] so nothing is checked twice.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGS` and `validation` as [`GraphTool::run`], and errors
    /// of loading the graph or running `validate`.
    pub async fn check(&self, args: &Value, opts: &CallOptions) -> Result<Checked, RunError> {
        let (graph, input) = self.checked_input(args.clone(), opts).await?;
        Ok(Checked {
            graph,
            args: args.clone(),
            input,
        })
    }

    /// The loaded graph and the input `args` give it, once the arguments
    /// passed the parameters and the graph's `validate`.
    async fn checked_input(
        &self,
        args: Value,
        opts: &CallOptions,
    ) -> Result<(Arc<Graph>, Value), RunError> {
        self.check_args(&args)?;
        let input = self.parameters.graph_input(args);
        let graph = self.graph().await?;
        let run_opts = self.run_options(opts.clone());
        self.run_validate(&graph, &input, &run_opts).await?;
        Ok((graph, input))
    }

    fn check_args(&self, args: &Value) -> Result<(), RunError> {
        self.parameters
            .validate(args)
            .map_err(|e| RunError::new(ErrorCode::InvalidArgs, e.to_string()))
    }

    /// The brokered capabilities of one run: what `sandgraph.toml` grants
    /// the graph, served by the host's backends. Deny by default.
    pub fn capabilities(&self) -> Capabilities {
        self.grants.clone()
    }

    /// [`GraphTool::capabilities`] with the log of a call on `thread`:
    /// each row names this tool's component digest and the thread.
    fn capabilities_for(&self, thread: Option<&str>) -> Capabilities {
        self.capabilities().with_log(self.log.as_ref().map(|log| {
            Arc::new(crate::subrun::Tagged {
                log: log.clone(),
                digest: self.digest.clone(),
                thread: thread.map(str::to_owned),
            }) as Arc<dyn CapabilityLog>
        }))
    }

    fn run_options(&self, opts: CallOptions) -> RunOptions {
        let mut configurable = opts.configurable;
        configurable.remove("thread_id");
        let capabilities = self.capabilities_for(opts.thread_id.as_deref());
        RunOptions {
            limits: Some(self.limits.clone()),
            cancel: opts.cancel,
            context: NodeContext {
                tool: self.name.clone(),
                request: opts.request,
                thread_id: opts.thread_id,
                configurable,
                ..NodeContext::default()
            },
            capabilities,
            sub_run_of: opts.sub_run_of,
        }
    }

    async fn run_validate(
        &self,
        graph: &Arc<Graph>,
        input: &Value,
        run_opts: &RunOptions,
    ) -> Result<(), RunError> {
        match self
            .runtime
            .validate(graph, input, run_opts.clone())
            .await?
        {
            Ok(()) => Ok(()),
            Err(reason) => Err(RunError::new(ErrorCode::Validation, reason)),
        }
    }

    async fn run_graph(
        &self,
        graph: &Arc<Graph>,
        start: Start,
        run_opts: RunOptions,
        threads: Option<&sandgraph_store::ThreadStore>,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<ToolOutput, RunError> {
        let run = self.runtime.prepare(graph, run_opts)?;
        self.run_prepared(run, start, threads, on_step).await
    }

    /// Runs `run` from `start`: on its durable thread when the call has
    /// one and a thread store, else once from its input.
    async fn run_prepared(
        &self,
        run: PreparedRun,
        start: Start,
        threads: Option<&sandgraph_store::ThreadStore>,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<ToolOutput, RunError> {
        let thread_id = run.context().thread_id.clone();
        let outcome = match (threads, &thread_id, start) {
            (Some(threads), Some(thread), start) => {
                let writer = threads.begin(thread, run.graph().name(), Durability::Sync)?;
                let existing = threads.load(thread)?;
                if existing.is_none() && matches!(start, Start::Resume(_)) {
                    return Err(RunError::new(
                        ErrorCode::InvalidInput,
                        format!("thread \"{thread}\" does not exist: there is nothing to resume"),
                    ));
                }
                run.run_thread(existing, start, &writer, on_step).await?
            }
            (_, _, Start::Input(input)) => run.run_streaming(input, on_step).await?,
            (_, _, Start::Resume(_) | Start::Continue) => {
                return Err(RunError::new(
                    ErrorCode::InvalidInput,
                    "resuming needs a durable thread: give the call a thread id and a thread store",
                ));
            }
        };
        match outcome {
            RunOutcome::Completed(state) => {
                // Lossless by construction, so not walked again here: each
                // value is checked once where it enters a state, guest JSON
                // as the sandbox parses it (`sandbox.rs` `parse_bounded`),
                // arguments against the parameters (`check_args`), channel
                // defaults with the spec, state updates by the executor
                // (`update_state`); the built-in reducers keep it lossless.
                debug_assert!(
                    state.values().all(|v| json::check_lossless(v).is_ok()),
                    "a final state that is not lossless JSON"
                );
                ToolOutput::new(Value::Object(state), false)
            }
            RunOutcome::Interrupted { interrupts, .. } => ToolOutput::new(
                serde_json::json!({
                    "status": "interrupted",
                    "thread_id": thread_id,
                    "interrupts": interrupts,
                }),
                true,
            ),
        }
    }
}

/// The state keys of `spec`, each with whether it accumulates (its reducer
/// is not `last_value`).
fn state_keys(spec: &GraphSpec) -> Vec<(String, bool)> {
    spec.channels
        .iter()
        .map(|c| (c.name.clone(), c.reducer != Reducer::LastValue))
        .collect()
}

/// `topic, log (accumulated)`, or `none`.
fn key_list(spec: &GraphSpec, mark: bool) -> String {
    if spec.channels.is_empty() {
        return "none".to_owned();
    }
    state_keys(spec)
        .into_iter()
        .map(|(k, acc)| {
            if acc && mark {
                format!("{k} (accumulated)")
            } else {
                k
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The description of a graph that has none, from its structure:
/// `Graph "x" with nodes a, b; state keys: topic, log (accumulated).`
pub(crate) fn synthesize_description(spec: &GraphSpec) -> String {
    let nodes: Vec<&str> = spec.nodes.iter().map(|n| n.name.as_str()).collect();
    let nodes = match nodes.len() {
        0 => "no nodes".to_owned(),
        1 => format!("node {}", nodes[0]),
        _ => format!("nodes {}", nodes.join(", ")),
    };
    format!(
        "Graph \"{}\" with {nodes}; state keys: {}.",
        spec.name,
        key_list(spec, true)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_core::{ChannelSpec, NodeSpec};

    fn spec(nodes: &[&str], channels: &[(&str, Reducer)]) -> GraphSpec {
        GraphSpec {
            name: "x".into(),
            description: None,
            registration: Default::default(),
            parameters: None,
            timeout_ms: None,
            channels: channels
                .iter()
                .map(|(n, r)| ChannelSpec {
                    name: (*n).into(),
                    reducer: *r,
                    default: None,
                })
                .collect(),
            nodes: nodes
                .iter()
                .map(|n| NodeSpec {
                    name: (*n).into(),
                    description: None,
                })
                .collect(),
            edges: vec![],
            conditional_edges: vec![],
            entry_points: vec![],
            finish_points: vec![],
            strict: false,
        }
    }

    #[test]
    fn synthesized_descriptions_are_structural_and_deterministic() {
        let s = spec(
            &["a", "b"],
            &[("topic", Reducer::LastValue), ("log", Reducer::Append)],
        );
        assert_eq!(
            synthesize_description(&s),
            "Graph \"x\" with nodes a, b; state keys: topic, log (accumulated)."
        );
        assert_eq!(
            synthesize_description(&spec(&["a"], &[])),
            "Graph \"x\" with node a; state keys: none."
        );
    }
}
