//! The process-wide [`Runtime`]: one `Engine`, one `Linker`, one epoch ticker
//! and one memory budget, shared by every graph and every run.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sandgraph_core::{
    Checkpoint, Checkpointer, ErrorCode, GraphSpec, NodeContext, RunConfig, RunError, RunOutcome,
    Start, StepEvent, ThreadState,
};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings::{add_host_to_linker, add_host_v2_to_linker};
use crate::caps::factor::AnyFactor;
use crate::caps::{Capabilities, Factor};
use crate::host_api::{HostApi, LogSink, TracingSink};
use crate::limits::{
    Limits, MAX_MEMORIES_PER_STORE, MAX_MEMORY_CAP, MAX_TABLE_ELEMENTS, MAX_TABLES_PER_STORE,
    MAX_WASM_STACK, MemoryBudget, RuntimeConfig,
};
use crate::loader::{self, Graph};
use crate::sandbox::{RunControl, Sandbox, StoreData, SubRun};
use crate::turns::Turns;

/// State shared by all runs.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreData>,
    pub(crate) budget: Arc<MemoryBudget>,
    pub(crate) slots: Arc<Semaphore>,
    /// Turns on the cores for long calls.
    pub(crate) turns: Arc<Turns>,
    pub(crate) sink: Arc<dyn LogSink>,
    /// The capabilities, in the order they were registered.
    pub(crate) factors: Vec<Arc<dyn AnyFactor>>,
    pub(crate) config: RuntimeConfig,
    /// Components compiled by this runtime (not loaded from an artifact).
    pub(crate) compiles: AtomicU64,
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Release);
    }
}

/// A component compiled by a [`Runtime`]: what [`Runtime::serialize`]
/// stores in the compile cache and [`Runtime::load_component`] or
/// [`Runtime::load_described`] turn into a [`Graph`]. Cheap to clone.
#[derive(Clone)]
pub struct Compiled(Component);

#[cfg(feature = "internals")]
impl Compiled {
    /// The wasmtime component, for the workspace's benchmarks (feature
    /// `internals`).
    pub fn component(&self) -> &Component {
        &self.0
    }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled").finish_non_exhaustive()
    }
}

/// The sandboxed graph host. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

/// Options of one run beyond its input.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Limits; `None` takes the runtime's defaults.
    pub limits: Option<Limits>,
    /// The caller's cancellation: cooperative first (`cancelled()`), then a
    /// hard stop after the grace period.
    pub cancel: CancellationToken,
    /// Base context handed to every node (tool, request, thread id,
    /// configurable keys).
    pub context: NodeContext,
    /// The brokered capabilities granted to the run; the default grants
    /// none.
    pub capabilities: Capabilities,
    /// Set when the run is a `tools` call of another run: it then shares
    /// that run's deadline, cancellation, fuel and byte budget.
    pub sub_run_of: Option<SubRun>,
}

fn engine_config(pooling: Option<&RuntimeConfig>) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true)
        .consume_fuel(true)
        .max_wasm_stack(MAX_WASM_STACK)
        .wasm_backtrace_max_frames(std::num::NonZeroUsize::new(20))
        // Cranelift, never Winch, for untrusted code.
        .strategy(wasmtime::Strategy::Cranelift)
        .cranelift_opt_level(wasmtime::OptLevel::Speed);
    if let Some(rc) = pooling {
        let n = rc.max_instances.max(1);
        let mut p = PoolingAllocationConfig::new();
        p.total_component_instances(n)
            .total_core_instances(n.saturating_mul(8))
            .total_memories(n.saturating_mul(2))
            .total_tables(n.saturating_mul(4))
            .total_stacks(n)
            .max_core_instances_per_component(16)
            .max_memories_per_component(MAX_MEMORIES_PER_STORE as u32)
            .max_tables_per_component(MAX_TABLES_PER_STORE as u32)
            .max_memory_size(MAX_MEMORY_CAP)
            .table_elements(MAX_TABLE_ELEMENTS)
            // Keeping a little of each slot resident avoids madvise storms:
            // measured 2-3x throughput with many concurrent short runs.
            .linear_memory_keep_resident(4 << 20)
            .table_keep_resident(4 << 20)
            .async_stack_keep_resident(4 << 20)
            // Reset only the pages a guest dirtied when a slot is reused
            // (Linux 6.7+; falls back elsewhere). Without it every teardown
            // re-zeroes up to the keep-resident size: measured as about half
            // of an echo run.
            .pagemap_scan(wasmtime::Enabled::Auto);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(p));
    }
    c
}

fn spawn_ticker(engine: Engine, tick: Duration, stop: Arc<AtomicBool>, turns: Arc<Turns>) {
    let weak = engine.weak();
    drop(engine);
    let spawned = std::thread::Builder::new()
        .name("sandgraph-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(e) => e.increment_epoch(),
                    None => return,
                }
                turns.reap(std::time::Instant::now());
            }
        });
    if let Err(e) = spawned {
        // Without a ticker hard deadlines still hold through the wall-clock
        // timeout around each call, only less precisely.
        tracing::error!("cannot start the epoch ticker thread: {e}");
    }
}

/// How a [`Runtime`] is built: its settings, where guest logs go, and its
/// capabilities, one [`RuntimeBuilder::factor`] each.
pub struct RuntimeBuilder {
    config: RuntimeConfig,
    sink: Arc<dyn LogSink>,
    factors: Vec<Arc<dyn AnyFactor>>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("config", &self.config)
            .field(
                "factors",
                &self
                    .factors
                    .iter()
                    .map(|f| f.capability())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// Guest logs go to `sink` (tests inject a recorder); by default to the
    /// host's `tracing` log.
    #[must_use]
    pub fn sink(mut self, sink: Arc<dyn LogSink>) -> Self {
        self.sink = sink;
        self
    }

    /// Registers a capability: its functions join the linker, and every
    /// store gets its state.
    #[must_use]
    pub fn factor<F: Factor>(mut self, factor: F) -> Self {
        self.factors.push(Arc::new(factor));
        self
    }

    /// The runtime.
    ///
    /// # Errors
    ///
    /// Limits that do not hold, or an engine or linker that cannot be set
    /// up (`load`).
    pub fn build(self) -> Result<Runtime, RunError> {
        Runtime::build(self)
    }
}

impl Runtime {
    /// A runtime with `config`, without capabilities until they are
    /// registered ([`RuntimeBuilder::factor`]).
    pub fn builder(config: RuntimeConfig) -> RuntimeBuilder {
        RuntimeBuilder {
            config,
            sink: Arc::new(TracingSink),
            factors: Vec::new(),
        }
    }

    fn build(builder: RuntimeBuilder) -> Result<Self, RunError> {
        let RuntimeBuilder {
            config,
            sink,
            factors,
        } = builder;
        config.default_limits.check()?;
        config.load_limits.check()?;
        let engine = if config.pooling {
            match Engine::new(&engine_config(Some(&config))) {
                Ok(e) => e,
                Err(e) => {
                    // The pool reserves address space up front; under a
                    // `ulimit -v` that fails. On-demand allocation still works.
                    tracing::warn!(
                        "pooling allocator unavailable ({e}); using on-demand allocation"
                    );
                    Engine::new(&engine_config(None))
                        .map_err(|e| RunError::new(ErrorCode::Load, e.to_string()))?
                }
            }
        } else {
            Engine::new(&engine_config(None))
                .map_err(|e| RunError::new(ErrorCode::Load, e.to_string()))?
        };
        let mut linker = Linker::<StoreData>::new(&engine);
        let host_err = |e: wasmtime::Error| {
            RunError::new(ErrorCode::Load, format!("linker setup failed: {e}"))
        };
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(host_err)?;
        add_host_to_linker::<StoreData, HasHost>(&mut linker, |s| &mut s.host).map_err(host_err)?;
        add_host_v2_to_linker::<StoreData, HasHost>(&mut linker, |s| &mut s.host)
            .map_err(host_err)?;
        for factor in &factors {
            factor.add_to_linker(&mut linker).map_err(host_err)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let turns = Turns::new(config.long_call_turns);
        spawn_ticker(
            engine.clone(),
            config.epoch_tick,
            stop.clone(),
            turns.clone(),
        );
        let shared = Shared {
            budget: MemoryBudget::new(config.memory_budget),
            slots: Arc::new(Semaphore::new(config.max_instances as usize)),
            turns,
            engine,
            linker,
            sink,
            factors,
            config,
            compiles: AtomicU64::new(0),
            ticker_stop: stop,
        };
        Ok(Runtime {
            shared: Arc::new(shared),
        })
    }

    /// The wasmtime engine, for the workspace's benchmarks that measure a
    /// bare instantiation against the sandbox's (feature `internals`).
    #[cfg(feature = "internals")]
    pub fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// Whether `graph` was loaded by this runtime (its engine): a graph runs
    /// only on the runtime that compiled it.
    pub fn loaded(&self, graph: &Graph) -> bool {
        Engine::same(graph.component.engine(), &self.shared.engine)
    }

    /// The runtime's settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    /// Compiles, checks and describes a component.
    pub async fn load(&self, bytes: &[u8]) -> Result<Arc<Graph>, RunError> {
        loader::load(&self.shared, bytes).await.map(Arc::new)
    }

    /// Reads and loads a component file; errors name the file.
    pub async fn load_file(&self, path: &Path) -> Result<Arc<Graph>, RunError> {
        let bytes = std::fs::read(path).map_err(|e| {
            RunError::new(
                ErrorCode::Load,
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        self.load(&bytes)
            .await
            .map_err(|e| RunError::new(e.code, format!("{}: {}", path.display(), e.message)))
    }

    /// Checks the header of `bytes` and compiles them.
    pub fn compile(&self, bytes: &[u8]) -> Result<Compiled, RunError> {
        loader::compile(&self.shared, bytes).map(Compiled)
    }

    /// How many components this runtime compiled from wasm bytes: the
    /// compile cache's tests and benchmark check that a warm load compiles
    /// nothing (feature `internals`).
    #[cfg(feature = "internals")]
    pub fn compile_count(&self) -> u64 {
        self.shared.compiles.load(Ordering::Relaxed)
    }

    /// A fingerprint of everything that makes a compiled artifact loadable
    /// into this engine (wasmtime version, target, settings): the compile
    /// cache keys artifacts on it.
    pub fn engine_fingerprint(&self) -> String {
        use sha2::Digest;
        struct ShaHasher(sha2::Sha256);
        impl std::hash::Hasher for ShaHasher {
            fn finish(&self) -> u64 {
                0
            }
            fn write(&mut self, bytes: &[u8]) {
                self.0.update(bytes);
            }
        }
        let mut h = ShaHasher(sha2::Sha256::new());
        std::hash::Hash::hash(&self.shared.engine.precompile_compatibility_hash(), &mut h);
        h.0.update(crate::loader::HOST_WORLD_VERSION.as_bytes());
        hex::encode(h.0.finalize())
    }

    /// Serializes a compiled component for the compile cache.
    pub fn serialize(&self, component: &Compiled) -> Result<Vec<u8>, RunError> {
        component
            .0
            .serialize()
            .map_err(|e| RunError::new(ErrorCode::Load, format!("cannot serialize component: {e}")))
    }

    /// Loads a component from bytes produced by [`Runtime::serialize`].
    ///
    /// # Safety
    ///
    /// Deserializing runs no verification of the machine code: `bytes` must
    /// be exactly what `serialize` produced on an engine with the same
    /// [`Runtime::engine_fingerprint`] (the compile cache authenticates the
    /// stored bytes with an HMAC under a key outside its database before
    /// calling this).
    pub unsafe fn deserialize(&self, bytes: &[u8]) -> Result<Compiled, RunError> {
        // SAFETY: forwarded to the caller's contract above.
        unsafe { Component::deserialize(&self.shared.engine, bytes) }
            .map(Compiled)
            .map_err(|e| {
                RunError::new(ErrorCode::Load, format!("cannot load cached artifact: {e}"))
            })
    }

    /// A graph from a compiled component and the spec it described earlier;
    /// calls no guest code.
    pub fn load_described(
        &self,
        component: Compiled,
        spec: GraphSpec,
    ) -> Result<Arc<Graph>, RunError> {
        loader::from_parts(&self.shared, component.0, spec).map(Arc::new)
    }

    /// Loads (describes and checks) a component compiled earlier by this
    /// runtime.
    pub async fn load_component(&self, component: Compiled) -> Result<Arc<Graph>, RunError> {
        loader::from_component(&self.shared, component.0)
            .await
            .map(Arc::new)
    }

    fn limits_for(&self, graph: &Graph, opts: &RunOptions) -> Result<Limits, RunError> {
        let mut limits = opts
            .limits
            .clone()
            .unwrap_or_else(|| self.shared.config.default_limits.clone());
        // The graph's own timeout applies under the operator's cap.
        if let Some(ms) = graph.spec.timeout_ms {
            limits.timeout = limits.timeout.min(Duration::from_millis(ms.max(1)));
        }
        limits.check()?;
        Ok(limits)
    }

    /// A run of `graph` made ready and not started: its sandbox (one
    /// `RunControl`, so one deadline, fuel pool, byte budget and capability
    /// account, shared by all of the run's instances), for a tool call to
    /// run `validate` in before the run ([`PreparedRun::validate`]).
    ///
    /// # Errors
    ///
    /// Limits that do not hold.
    pub fn prepare(&self, graph: &Arc<Graph>, opts: RunOptions) -> Result<PreparedRun, RunError> {
        let limits = self.limits_for(graph, &opts)?;
        let config = RunConfig {
            recursion_limit: limits.recursion_limit,
            context: opts.context.clone(),
        };
        let control = self.control(graph, limits, &opts);
        Ok(PreparedRun {
            graph: graph.clone(),
            config,
            backend: Arc::new(Sandbox::new(&self.shared, graph, control)),
        })
    }

    /// A run's control, its byte budget charged to the host-wide budget.
    fn control(&self, graph: &Graph, limits: Limits, opts: &RunOptions) -> Arc<RunControl> {
        RunControl::attached(
            limits,
            opts.cancel.clone(),
            self.shared.budget.clone(),
            Arc::new(self.bind(&opts.capabilities, opts.sub_run_of.as_ref())),
            opts.sub_run_of.clone(),
            graph.name.clone(),
        )
    }

    /// `caps` for one run: each grant bound to the run by its factor (a
    /// sub-run's to its caller's bound grant).
    fn bind(&self, caps: &Capabilities, caller: Option<&SubRun>) -> Capabilities {
        let mut caps = caps.clone();
        let caller = caller.map(|SubRun(c)| &*c.caps);
        for factor in &self.shared.factors {
            factor.bind(&mut caps, caller);
        }
        caps
    }

    /// Runs `graph` on `input` to completion (or interrupt), streaming one
    /// event per superstep to `on_step`.
    pub async fn run_streaming(
        &self,
        graph: &Arc<Graph>,
        input: Value,
        opts: RunOptions,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<RunOutcome, RunError> {
        self.prepare(graph, opts)?
            .run_streaming(input, on_step)
            .await
    }

    /// Runs `graph` on a durable thread: from `existing` (its stored state,
    /// `None` for a new thread) as `start` says, saving checkpoints and task
    /// records through `saver`.
    pub async fn run_thread(
        &self,
        graph: &Arc<Graph>,
        existing: Option<ThreadState>,
        start: Start,
        opts: RunOptions,
        saver: &dyn Checkpointer,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<RunOutcome, RunError> {
        self.prepare(graph, opts)?
            .run_thread(existing, start, saver, on_step)
            .await
    }

    /// A new head checkpoint for `thread` as if `as_node` had written `values`
    /// (its routers run in the sandbox); the caller stores it.
    pub async fn update_state(
        &self,
        graph: &Arc<Graph>,
        thread: ThreadState,
        values: Value,
        as_node: Option<&str>,
    ) -> Result<Checkpoint, RunError> {
        let limits = self.shared.config.default_limits.clone();
        let control = self.control(graph, limits, &RunOptions::default());
        let backend = Arc::new(Sandbox::new(&self.shared, graph, control));
        sandgraph_core::update_state(&graph.compiled, &backend, thread, values, as_node).await
    }

    /// Runs `graph` on `input`.
    pub async fn run(
        &self,
        graph: &Arc<Graph>,
        input: Value,
        opts: RunOptions,
    ) -> Result<RunOutcome, RunError> {
        self.run_streaming(graph, input, opts, &mut |_| {}).await
    }

    /// Runs the graph's `validate` export on a tool call's input, in an
    /// instance of its own: for a check whose run, if any, is another call
    /// (a router checks a model's choice before its hooks). A call that
    /// validates and then runs uses [`PreparedRun::validate`], which keeps
    /// the instance for the run.
    pub async fn validate(
        &self,
        graph: &Arc<Graph>,
        input: &Value,
        opts: RunOptions,
    ) -> Result<Result<(), String>, RunError> {
        self.prepare(graph, opts)?.validate(input).await
    }
}

/// A run made ready by [`Runtime::prepare`] and not started yet. Dropping
/// it drops its instance: nothing of it outlives the call.
pub struct PreparedRun {
    graph: Arc<Graph>,
    config: RunConfig,
    backend: Arc<Sandbox>,
}

impl std::fmt::Debug for PreparedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRun")
            .field("graph", &self.graph.name())
            .finish_non_exhaustive()
    }
}

impl PreparedRun {
    /// The graph the run runs.
    pub fn graph(&self) -> &Arc<Graph> {
        &self.graph
    }

    /// The base context of the run's nodes (tool, request, thread id).
    pub fn context(&self) -> &NodeContext {
        &self.config.context
    }

    /// Runs the graph's `validate` export on a tool call's input in the
    /// run's first instance; when it accepts, the run starts on that
    /// instance (its first node runs in it), so a call that validates and
    /// runs makes one instance, not two. `validate` spends the run's
    /// deadline, fuel, byte budget and quotas, as a node does; the
    /// refusals it counted are written at once (as a run's, when it ends).
    ///
    /// # Errors
    ///
    /// An error of instantiating or of the call (trap, timeout, fuel);
    /// `Ok(Err(reason))` when `validate` refuses the input.
    pub async fn validate(&self, input: &Value) -> Result<Result<(), String>, RunError> {
        let verdict = self.backend.validate(input, &self.config.context).await;
        self.backend.control.finish().await;
        verdict
    }

    /// Runs the graph on `input` to completion (or interrupt), streaming
    /// one event per superstep to `on_step`.
    pub async fn run_streaming(
        self,
        input: Value,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<RunOutcome, RunError> {
        let PreparedRun {
            graph,
            config,
            backend,
        } = self;
        let mut sink = StepSink::new(&backend.control, on_step);
        let outcome = sandgraph_core::run(&graph.compiled, &backend, input, &config, &mut |ev| {
            sink.emit(ev)
        })
        .await;
        sink.drain();
        backend.control.finish().await;
        tracing::debug!(
            graph = graph.name(),
            elapsed_us = backend.control.elapsed().as_micros() as u64,
            fuel = backend.control.fuel_used(),
            host_bytes_peak = backend.control.bytes().peak(),
            ok = outcome.is_ok(),
            "run finished"
        );
        outcome
    }

    /// Runs the graph on a durable thread, as [`Runtime::run_thread`].
    pub async fn run_thread(
        self,
        existing: Option<ThreadState>,
        start: Start,
        saver: &dyn Checkpointer,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<RunOutcome, RunError> {
        let PreparedRun {
            graph,
            config,
            backend,
        } = self;
        let mut sink = StepSink::new(&backend.control, on_step);
        let outcome = sandgraph_core::run_thread(
            &graph.compiled,
            &backend,
            existing,
            start,
            &config,
            &mut |ev| sink.emit(ev),
            Some(saver),
        )
        .await;
        sink.drain();
        backend.control.finish().await;
        outcome
    }
}

/// A run's step reports: its own go to `on_step` (and, for a sub-run, to
/// the outermost run too); an outermost run reports its sub-runs' steps
/// before each of its own, so they arrive before the step of the task that
/// called them.
struct StepSink<'a> {
    on_step: &'a mut (dyn FnMut(&StepEvent) + Send),
    /// The outermost run's end of the sub-run channel.
    from_sub_runs: Option<tokio::sync::mpsc::UnboundedReceiver<StepEvent>>,
    /// A sub-run's way up, and the chain below the outermost run.
    to_caller: Option<(tokio::sync::mpsc::UnboundedSender<StepEvent>, Vec<String>)>,
}

impl<'a> StepSink<'a> {
    fn new(control: &RunControl, on_step: &'a mut (dyn FnMut(&StepEvent) + Send)) -> Self {
        let from_sub_runs = control
            .sub_steps_rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let to_caller = from_sub_runs.is_none().then(|| {
            let below: Vec<String> = control
                .chain
                .iter()
                .skip(1)
                .map(|g| g.to_string())
                .collect();
            (control.sub_steps.clone(), below)
        });
        StepSink {
            on_step,
            from_sub_runs,
            to_caller,
        }
    }

    fn emit(&mut self, ev: &StepEvent) {
        self.drain();
        if let Some((up, below)) = &self.to_caller {
            let mut ev = ev.clone();
            ev.sub_run.clone_from(below);
            // The outermost run may have ended (and dropped its end).
            let _ = up.send(ev);
        }
        (self.on_step)(ev);
    }

    fn drain(&mut self) {
        if let Some(rx) = &mut self.from_sub_runs {
            while let Ok(ev) = rx.try_recv() {
                (self.on_step)(&ev);
            }
        }
    }
}

/// `HasData` marker for the host capability's per-store context.
struct HasHost;
impl wasmtime::component::HasData for HasHost {
    type Data<'a> = &'a mut HostApi;
}
