//! One run's sandbox: the [`RunControl`] its instances share (deadlines,
//! cancellation, fuel) and the [`Instance`] workers the executor drives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sandgraph_core::{
    Backend, ErrorCode, NodeContext, NodeOutput, RouteTarget, RunError, SendPacket, Worker, json,
};
use serde_json::{Map, Value};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{self, GraphComponentPre};
use crate::host_api::HostApi;
use crate::limits::{CapHit, Limits, MIB, StoreLimiter};
use crate::loader::Graph;
use crate::runtime::Shared;
use crate::wasi::{GuestOutput, deny_by_default};

/// How much of a guest's stderr an error message quotes (a panic message).
const STDERR_TAIL_BYTES: usize = 600;
/// Frames of guest backtrace quoted in a trap message.
const BACKTRACE_FRAMES: usize = 6;
/// Slack on top of the hard deadline for the wall-clock timeout around each
/// call, so the epoch interrupt (which reports the precise cause) wins when
/// the guest is running wasm, and the wall clock only fires for a call stuck
/// in the host.
const WALL_CLOCK_SLACK: Duration = Duration::from_millis(250);

/// Deadlines, cancellation and fuel of one run, shared by all its instances.
#[derive(Debug)]
pub struct RunControl {
    limits: Limits,
    started: Instant,
    soft_deadline: Instant,
    cancel: CancellationToken,
    cancelled_at: OnceLock<Instant>,
    fuel_used: AtomicU64,
}

impl RunControl {
    pub(crate) fn new(limits: Limits, cancel: CancellationToken) -> Arc<Self> {
        let started = Instant::now();
        Arc::new(RunControl {
            soft_deadline: started + limits.timeout,
            limits,
            started,
            cancel,
            cancelled_at: OnceLock::new(),
            fuel_used: AtomicU64::new(0),
        })
    }

    /// The run's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Fuel spent so far by all of the run's instances.
    pub fn fuel_used(&self) -> u64 {
        self.fuel_used.load(Ordering::Acquire)
    }

    /// True once the guest should converge: the soft deadline passed or the
    /// caller cancelled.
    pub fn soft_stop_reached(&self) -> bool {
        self.cancel.is_cancelled() || Instant::now() >= self.soft_deadline
    }

    /// The instant after which guest code is stopped by force.
    fn hard_deadline(&self) -> Instant {
        let by_time = self.soft_deadline + self.limits.grace;
        if self.cancel.is_cancelled() {
            let at = *self.cancelled_at.get_or_init(Instant::now);
            by_time.min(at + self.limits.grace)
        } else {
            by_time
        }
    }

    fn hard_stop_reached(&self, now: Instant) -> bool {
        now >= self.hard_deadline()
    }

    fn fuel_remaining(&self) -> u64 {
        self.limits.fuel.saturating_sub(self.fuel_used())
    }

    fn stop_error(&self) -> RunError {
        if self.cancel.is_cancelled() {
            RunError::new(ErrorCode::Timeout, "run cancelled by the caller")
        } else {
            RunError::new(
                ErrorCode::Timeout,
                format!(
                    "run exceeded its timeout of {} ms",
                    self.limits.timeout.as_millis()
                ),
            )
        }
    }

    fn fuel_error(&self) -> RunError {
        RunError::new(
            ErrorCode::OutOfFuel,
            format!("run used up its fuel budget of {}", self.limits.fuel),
        )
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Everything a store holds. Lives exactly as long as one instance.
pub(crate) struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: StoreLimiter,
    pub(crate) host: HostApi,
    stdout: GuestOutput,
    stderr: GuestOutput,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl Drop for StoreState {
    fn drop(&mut self) {
        // Guest output goes to the host log, never to the host's stdout.
        for (stream, out) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let (text, dropped) = out.take();
            if !text.is_empty() {
                tracing::debug!(target: "sandgraph::guest", graph = &*self.host.graph, stream, dropped, "{}", text.trim_end());
            }
        }
    }
}

/// The per-run [`Backend`]: hands out fresh instances of one graph that all
/// share the run's [`RunControl`].
pub(crate) struct Sandbox {
    pub(crate) shared: Arc<Shared>,
    pub(crate) graph: Arc<Graph>,
    pub(crate) control: Arc<RunControl>,
}

impl Sandbox {
    /// A fresh store plus instance, charged to the host budget.
    pub(crate) async fn instantiate(
        shared: &Arc<Shared>,
        pre: &GraphComponentPre<StoreState>,
        graph_name: Arc<str>,
        control: &Arc<RunControl>,
    ) -> Result<Instance, RunError> {
        let permit = acquire_slot(shared, control).await?;
        let stdout = GuestOutput::default();
        let stderr = GuestOutput::default();
        let state = StoreState {
            wasi: deny_by_default(stdout.clone(), stderr.clone()),
            table: ResourceTable::new(),
            limiter: StoreLimiter::new(control.limits.memory, shared.budget.clone()),
            host: HostApi::new(graph_name, control.clone(), shared.sink.clone()),
            stdout,
            stderr,
        };
        let mut store = Store::new(&shared.engine, state);
        store.limiter(|s| &mut s.limiter);
        let ctl = control.clone();
        store.epoch_deadline_callback(move |_| {
            if ctl.hard_stop_reached(Instant::now()) {
                return Err(Trap::Interrupt.into());
            }
            // Yield to tokio on every tick so a spinning guest never pins a
            // worker thread (the plain `Yield` was measured unfair).
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        });
        store.set_epoch_deadline(1);
        let remaining = control.fuel_remaining();
        if remaining == 0 {
            return Err(control.fuel_error());
        }
        store.set_fuel(remaining).map_err(host_bug)?;
        let call = pre.instantiate_async(&mut store);
        let bindings = match with_wall_clock(control, call).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return Err(classify(e, &store, control, "instantiation")),
            Err(e) => return Err(e),
        };
        account_fuel(&store, control, remaining);
        Ok(Instance {
            store,
            bindings,
            control: control.clone(),
            _permit: permit,
        })
    }
}

async fn acquire_slot(
    shared: &Arc<Shared>,
    control: &Arc<RunControl>,
) -> Result<OwnedSemaphorePermit, RunError> {
    if let Ok(p) = shared.slots.clone().try_acquire_owned() {
        return Ok(p);
    }
    let wait = control
        .hard_deadline()
        .saturating_duration_since(Instant::now());
    match tokio::time::timeout(wait, shared.slots.clone().acquire_owned()).await {
        Ok(Ok(p)) => Ok(p),
        _ => Err(RunError::new(
            ErrorCode::Timeout,
            "host busy: no instance slot became free before the run's deadline",
        )),
    }
}

impl Backend for Sandbox {
    type Worker = Instance;

    async fn worker(&self) -> Result<Instance, RunError> {
        Sandbox::instantiate(
            &self.shared,
            &self.graph.pre,
            self.graph.name.clone(),
            &self.control,
        )
        .await
    }

    fn check_continue(&self) -> Result<(), RunError> {
        if self.control.soft_stop_reached() {
            return Err(self.control.stop_error());
        }
        if self.control.fuel_remaining() == 0 {
            return Err(self.control.fuel_error());
        }
        Ok(())
    }
}

/// One live instance in its own store.
pub(crate) struct Instance {
    store: Store<StoreState>,
    bindings: bindings::GraphComponent,
    control: Arc<RunControl>,
    _permit: OwnedSemaphorePermit,
}

/// Runs `fut` under the run's hard deadline plus slack. Epochs cannot
/// interrupt a call blocked in the host, so this is the last line.
async fn with_wall_clock<F: Future>(control: &RunControl, fut: F) -> Result<F::Output, RunError> {
    let wait = control
        .hard_deadline()
        .saturating_duration_since(Instant::now())
        + WALL_CLOCK_SLACK;
    tokio::time::timeout(wait, fut)
        .await
        .map_err(|_| control.stop_error())
}

fn account_fuel(store: &Store<StoreState>, control: &RunControl, given: u64) {
    let left = store.get_fuel().unwrap_or(0);
    control
        .fuel_used
        .fetch_add(given.saturating_sub(left), Ordering::AcqRel);
}

fn host_bug(e: wasmtime::Error) -> RunError {
    RunError::new(ErrorCode::Trap, format!("host error: {e}"))
}

/// Maps a wasmtime failure to a stable error code and a short message.
fn classify(
    err: wasmtime::Error,
    store: &Store<StoreState>,
    control: &RunControl,
    what: &str,
) -> RunError {
    let data = store.data();
    if let Some(hit) = data.limiter.cap_hit() {
        let msg = match hit {
            CapHit::Instance => format!(
                "{what} exceeded the memory cap of {} MiB per instance",
                control.limits.memory / MIB
            ),
            CapHit::Host => {
                format!("{what} could not grow memory: the host-wide memory budget is spent")
            }
        };
        return RunError::new(ErrorCode::MemoryLimit, msg);
    }
    if let Some(trap) = err.downcast_ref::<Trap>() {
        match trap {
            Trap::OutOfFuel => return control.fuel_error(),
            Trap::Interrupt => return control.stop_error(),
            _ => {}
        }
        let mut msg = format!("{what} trapped: {}", trap_text(*trap));
        let stderr = guest_stderr_summary(&data.stderr.tail(STDERR_TAIL_BYTES));
        if !stderr.is_empty() {
            msg.push_str(&format!("; guest stderr: {stderr}"));
        }
        if let Some(bt) = err.downcast_ref::<wasmtime::WasmBacktrace>() {
            let (frames, recursive) = backtrace_summary(bt);
            if recursive && matches!(trap, Trap::MemoryOutOfBounds) {
                msg.push_str(" (the guest ran out of stack: unbounded recursion?)");
            }
            if !frames.is_empty() {
                msg.push_str(&format!("; guest backtrace: {frames}"));
            }
        }
        return RunError::new(ErrorCode::Trap, msg);
    }
    RunError::new(
        ErrorCode::Trap,
        format!("{what} failed: {}", err.root_cause()),
    )
}

fn trap_text(trap: Trap) -> String {
    match trap {
        Trap::StackOverflow => "stack overflow (unbounded recursion?)".to_string(),
        Trap::UnreachableCodeReached => {
            "wasm `unreachable` executed (a guest panic or abort)".to_string()
        }
        other => other.to_string(),
    }
}

/// The guest's stderr without Rust's backtrace hint, on one line.
fn guest_stderr_summary(tail: &str) -> String {
    tail.lines()
        .filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first frames of a guest backtrace, demangled, with runs of the same
/// function folded (`dive ×5`); also whether the top frames repeat one
/// function, the mark of runaway recursion.
fn backtrace_summary(bt: &wasmtime::WasmBacktrace) -> (String, bool) {
    let names: Vec<String> = bt
        .frames()
        .iter()
        .map(|f| match f.func_name() {
            Some(n) => format!("{:#}", rustc_demangle::demangle(n)),
            None => format!("func[{}]", f.func_index()),
        })
        .collect();
    let mut folded: Vec<(String, usize)> = Vec::new();
    for n in names {
        match folded.last_mut() {
            Some((last, count)) if *last == n => *count += 1,
            _ => folded.push((n, 1)),
        }
    }
    let recursive = folded.first().is_some_and(|(_, c)| *c >= 4);
    // Panic and allocator machinery says nothing about where the guest failed.
    let is_runtime = |n: &str| {
        [
            "std::",
            "core::",
            "alloc::",
            "__rustc::",
            "dlmalloc::",
            "abort",
            "rust_panic",
        ]
        .iter()
        .any(|p| n.starts_with(p))
    };
    let own: Vec<&(String, usize)> = folded.iter().filter(|(n, _)| !is_runtime(n)).collect();
    let shown: Vec<&(String, usize)> = if own.is_empty() {
        folded.iter().collect()
    } else {
        own
    };
    let text = shown
        .into_iter()
        .take(BACKTRACE_FRAMES)
        .map(|(n, c)| {
            if *c > 1 {
                format!("{n} ×{c}")
            } else {
                n.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" <- ");
    (text, recursive)
}

fn guest_error(what: &str, e: bindings::GraphError) -> RunError {
    match e {
        bindings::GraphError::InvalidState(m) => RunError::new(
            ErrorCode::NodeError,
            format!("{what} could not decode its input: {m}"),
        ),
        bindings::GraphError::Unknown(m) => {
            RunError::new(ErrorCode::NodeError, format!("{what}: unknown name: {m}"))
        }
        bindings::GraphError::Failed(m) => {
            RunError::new(ErrorCode::NodeError, format!("{what} failed: {m}"))
        }
    }
}

fn parse_output(what: &str, text: &str) -> Result<Value, RunError> {
    json::parse_lossless(text, "output").map_err(|e| {
        RunError::new(
            ErrorCode::InvalidOutput,
            format!("{what} returned invalid JSON at {e}"),
        )
    })
}

fn parse_object(what: &str, text: &str) -> Result<Map<String, Value>, RunError> {
    match parse_output(what, text)? {
        Value::Object(m) => Ok(m),
        other => Err(RunError::new(
            ErrorCode::InvalidOutput,
            format!(
                "{what} returned {} where a JSON object of state writes was expected",
                kind(&other)
            ),
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn to_json(v: &Value) -> String {
    // Values reaching here were checked lossless, so this cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

impl Instance {
    /// Prepares the store for one call: fresh fuel from the run's remaining
    /// budget and a fresh epoch deadline.
    fn arm(&mut self) -> Result<u64, RunError> {
        let remaining = self.control.fuel_remaining();
        if remaining == 0 {
            return Err(self.control.fuel_error());
        }
        self.store.set_fuel(remaining).map_err(host_bug)?;
        self.store.set_epoch_deadline(1);
        Ok(remaining)
    }

    /// Runs one export call under the wall clock and classifies failures.
    async fn call<R>(
        &mut self,
        what: &str,
        f: impl AsyncFnOnce(&bindings::GraphComponent, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, RunError> {
        let given = self.arm()?;
        let control = self.control.clone();
        let out = with_wall_clock(&control, f(&self.bindings, &mut self.store)).await;
        account_fuel(&self.store, &control, given);
        match out? {
            Ok(r) => {
                if control.fuel_used() > control.limits.fuel {
                    return Err(control.fuel_error());
                }
                Ok(r)
            }
            Err(e) => Err(classify(e, &self.store, &control, what)),
        }
    }

    /// Calls `describe`.
    pub(crate) async fn describe(&mut self) -> Result<bindings::WitGraphSpec, RunError> {
        self.call("describe", async |b, s| {
            b.sandgraph_graph_graph().call_describe(s).await
        })
        .await
    }

    /// Calls `validate`.
    pub(crate) async fn validate(
        &mut self,
        input: &Value,
        ctx: &NodeContext,
    ) -> Result<Result<(), String>, RunError> {
        let input = to_json(input);
        let ctx = wit_context(ctx);
        self.call("validate", async |b, s| {
            b.sandgraph_graph_graph()
                .call_validate(s, &input, &ctx)
                .await
        })
        .await
    }
}

fn wit_context(ctx: &NodeContext) -> bindings::CallContext {
    bindings::CallContext {
        tool: ctx.tool.clone(),
        request: ctx.request.clone(),
        thread_id: ctx.thread_id.clone(),
        step: ctx.step,
        resume: ctx.resume.iter().map(to_json).collect(),
        configurable: to_json(&Value::Object(ctx.configurable.clone())),
    }
}

fn send_packet(what: &str, s: bindings::WitSend) -> Result<SendPacket, RunError> {
    Ok(SendPacket {
        payload: parse_output(&format!("{what} send to \"{}\"", s.node), &s.payload)?,
        node: s.node,
    })
}

impl Worker for Instance {
    async fn run_node(
        &mut self,
        node: &str,
        input: &Value,
        ctx: &NodeContext,
    ) -> Result<NodeOutput, RunError> {
        let what = format!("node \"{node}\"");
        let state = to_json(input);
        let wctx = wit_context(ctx);
        let res = self
            .call(&what, async |b, s| {
                b.sandgraph_graph_graph()
                    .call_run_node(s, node, &state, &wctx)
                    .await
            })
            .await?;
        match res.map_err(|e| guest_error(&what, e))? {
            bindings::NodeResult::Update(u) => Ok(NodeOutput::Update(parse_object(&what, &u)?)),
            bindings::NodeResult::Command(c) => Ok(NodeOutput::Command {
                update: parse_object(&what, &c.update)?,
                goto: c.goto,
                sends: c
                    .sends
                    .into_iter()
                    .map(|s| send_packet(&what, s))
                    .collect::<Result<_, _>>()?,
            }),
            bindings::NodeResult::Interrupt(p) => Ok(NodeOutput::Interrupt(parse_output(
                &format!("{what} interrupt"),
                &p,
            )?)),
        }
    }

    async fn route(&mut self, router: &str, state: &Value) -> Result<Vec<RouteTarget>, RunError> {
        let what = format!("router \"{router}\"");
        let state = to_json(state);
        let res = self
            .call(&what, async |b, s| {
                b.sandgraph_graph_graph()
                    .call_route(s, router, &state)
                    .await
            })
            .await?;
        res.map_err(|e| guest_error(&what, e))?
            .into_iter()
            .map(|t| match t {
                bindings::WitRouteTarget::Node(n) => Ok(RouteTarget::Node(n)),
                bindings::WitRouteTarget::Send(s) => Ok(RouteTarget::Send(send_packet(&what, s)?)),
            })
            .collect()
    }

    async fn reduce(
        &mut self,
        channel: &str,
        current: &Value,
        update: &Value,
    ) -> Result<Value, RunError> {
        let what = format!("reducer of channel \"{channel}\"");
        let (cur, upd) = (to_json(current), to_json(update));
        let res = self
            .call(&what, async |b, s| {
                b.sandgraph_graph_graph()
                    .call_reduce(s, channel, &cur, &upd)
                    .await
            })
            .await?;
        parse_output(&what, &res.map_err(|e| guest_error(&what, e))?)
    }
}
