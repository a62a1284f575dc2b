//! One run's sandbox: the [`RunControl`] its instances share (deadlines,
//! cancellation, fuel) and the [`Instance`] workers the executor drives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sandgraph_core::budget::{ByteBudget, HostMemory};
use sandgraph_core::text::{MAX_GUEST_NAME_BYTES, guest_message, guest_name, guest_text};
use sandgraph_core::{
    Backend, ErrorCode, MAX_TARGETS_PER_RESULT, NodeContext, NodeOutput, RouteTarget, RunError,
    SendPacket, SharedJson, StepEvent, TextHold, Worker, json,
};
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{self, GraphComponentPre};
use crate::caps::account::{Account, CallCapReached, GraphUsage};
use crate::caps::factor::FactorStates;
use crate::caps::{Call, Capabilities, Grant};
use crate::fuel::{FUEL_SLICE, FuelHold, FuelPool, Take};
use crate::host_api::HostApi;
use crate::limits::{CapHit, Limits, MIB, StoreLimiter};
use crate::loader::Graph;
use crate::runtime::Shared;
use crate::turns::{LONG_CALL, Lease};
use crate::wasi::{GuestOutput, deny_by_default};

/// How much of a guest's stderr an error message quotes (a panic message).
const STDERR_TAIL_BYTES: usize = 600;
/// Guest stdout or stderr written to the host's debug log, per stream and
/// instance: escaped (one inert record) and capped below the 64 KiB kept.
const MAX_GUEST_OUTPUT_LOG_BYTES: usize = 16 * 1024;
/// Frames of guest backtrace quoted in a trap message.
const BACKTRACE_FRAMES: usize = 6;
/// Slack on top of the hard deadline for the wall-clock timeout around each
/// call, so the epoch interrupt (which reports the precise cause) wins when
/// the guest is running wasm, and the wall clock only fires for a call stuck
/// in the host.
const WALL_CLOCK_SLACK: Duration = Duration::from_millis(250);
/// Fuel wasmtime injects into running code at a time; the rest of a call's
/// fuel waits in the store's reserve. Compiled code keeps its fuel counter
/// in a register and writes it back over the store's, so a top-up made
/// from the epoch callback only survives in the reserve: this interval
/// (about half a millisecond of compute) bounds what a top-up can lose.
const FUEL_INJECT_INTERVAL: u64 = 10_000_000;

/// Deadlines, cancellation and fuel of one run, shared by all its
/// instances; what a [`Factor`](crate::caps::Factor) reaches of the run
/// it serves.
#[derive(Debug)]
pub struct RunControl {
    limits: Limits,
    started: Instant,
    soft_deadline: Instant,
    pub(crate) cancel: CancellationToken,
    cancelled_at: OnceLock<Instant>,
    /// Fuel spent by calls that ended (and by running calls, up to their
    /// last top-up).
    fuel_used: AtomicU64,
    /// The run's fuel (for a sub-run, a `tools` call, its caller's pool
    /// itself).
    fuel: Arc<FuelPool>,
    /// The instance slots of the outermost run ([`Limits::instances`],
    /// shared by its sub-runs): its tasks queue here before they queue for
    /// the host's pool. A task waiting on a `tools` call lends its slot to
    /// the sub-run meanwhile.
    pub(crate) slots: Arc<Semaphore>,
    /// What the host keeps for the run outside wasm memory.
    bytes: ByteBudget,
    /// The brokered capabilities the run was granted.
    pub(crate) caps: Arc<Capabilities>,
    /// The graphs of the call chain, from the outermost caller to this run
    /// (`tools` calls nest runs).
    pub(crate) chain: Vec<Arc<str>>,
    /// The outermost run's capability account, shared by its sub-runs:
    /// the call cap, every graph's quotas, the counted refusals.
    pub(crate) account: Arc<Account>,
    /// What this run's graph used of its quotas in the whole chain (its
    /// entry in `account`).
    pub(crate) usage: Arc<GraphUsage>,
    /// Where the steps of sub-runs go: the outermost run's channel, which
    /// it drains before reporting each of its own steps.
    pub(crate) sub_steps: mpsc::UnboundedSender<StepEvent>,
    /// The outermost run's end of that channel (`None` in a sub-run).
    pub(crate) sub_steps_rx: std::sync::Mutex<Option<mpsc::UnboundedReceiver<StepEvent>>>,
}

/// A sub-run's bytes, charged to its caller's budget (and through it to
/// the host's).
struct CallerBytes(Arc<RunControl>);

impl HostMemory for CallerBytes {
    fn try_reserve(&self, bytes: usize) -> bool {
        self.0.bytes.try_charge(bytes)
    }

    fn release(&self, bytes: usize) {
        self.0.bytes.release(bytes);
    }
}

impl RunControl {
    /// A run's control whose byte budget is not charged to a host budget
    /// (loading a graph).
    pub(crate) fn new(limits: Limits, cancel: CancellationToken) -> Arc<Self> {
        Self::build(
            limits,
            cancel,
            None,
            Arc::default(),
            None,
            Arc::from("<loading>"),
        )
    }

    /// A run's control whose bytes are also charged to `host`.
    /// A run's control. A sub-run (`caller` set: a `tools` call) shares
    /// its caller's deadline (the earlier of the two), cancellation, fuel
    /// pool and byte budget.
    pub(crate) fn attached(
        limits: Limits,
        cancel: CancellationToken,
        host: Arc<dyn HostMemory>,
        caps: Arc<Capabilities>,
        caller: Option<SubRun>,
        graph: Arc<str>,
    ) -> Arc<Self> {
        Self::build(limits, cancel, Some(host), caps, caller, graph)
    }

    pub(crate) fn build(
        limits: Limits,
        cancel: CancellationToken,
        host: Option<Arc<dyn HostMemory>>,
        caps: Arc<Capabilities>,
        caller: Option<SubRun>,
        graph: Arc<str>,
    ) -> Arc<Self> {
        let started = Instant::now();
        let own_deadline = started + limits.timeout;
        let caller_steps = caller.as_ref().map(|c| c.0.sub_steps.clone());
        let (soft_deadline, cancel, fuel, host, mut chain, account, slots) = match caller {
            None => (
                own_deadline,
                cancel,
                FuelPool::new(limits.fuel),
                host,
                Vec::new(),
                Arc::default(),
                Arc::new(Semaphore::new(limits.instances.max(1) as usize)),
            ),
            Some(SubRun(c)) => (
                own_deadline.min(c.soft_deadline),
                c.cancel.child_token(),
                c.fuel.clone(),
                Some(Arc::new(CallerBytes(c.clone())) as Arc<dyn HostMemory>),
                c.chain.clone(),
                c.account.clone(),
                c.slots.clone(),
            ),
        };
        let usage = account.usage_of(&graph);
        chain.push(graph);
        let (sub_steps, sub_steps_rx) = match &caller_steps {
            Some(tx) => (tx.clone(), None),
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                (tx, Some(rx))
            }
        };
        Arc::new(RunControl {
            sub_steps,
            sub_steps_rx: std::sync::Mutex::new(sub_steps_rx),
            soft_deadline,
            fuel,
            chain,
            account,
            usage,
            slots,
            bytes: ByteBudget::new(limits.host_bytes, host),
            limits,
            started,
            cancel,
            cancelled_at: OnceLock::new(),
            fuel_used: AtomicU64::new(0),
            caps,
        })
    }

    /// The run's grant of type `G`, if it has one (bound to the run, see
    /// [`Factor::bind`](crate::caps::Factor::bind)).
    pub fn grant<G: Grant>(&self) -> Option<&G> {
        self.caps.get::<G>()
    }

    /// The usage meter of type `U` of this run's graph, shared by every run
    /// of the graph in the chain (a graph's quota is spent once per
    /// outermost run, however often it is called as a tool).
    pub fn usage<U: Default + Send + Sync + 'static>(&self) -> Arc<U> {
        self.usage.get::<U>()
    }

    /// Counts one capability call against the chain's cap
    /// ([`MAX_CAPABILITY_CALLS_PER_RUN`](crate::MAX_CAPABILITY_CALLS_PER_RUN)).
    ///
    /// # Errors
    ///
    /// Past the cap: the call is refused (`quota`).
    pub fn enter(&self) -> Result<(), CallCapReached> {
        self.account.enter()
    }

    /// Reports one call to the run's capability journal, if it has one
    /// (the graph is the run's own; `reason` is escaped and bounded
    /// here). A refusal is counted, one row per kind when the outermost
    /// run ends; any other row is queued, waiting while the journal's
    /// queue is full, up to the run's hard deadline.
    pub async fn record(self: &Arc<Self>, call: Call<'_>) {
        crate::caps::record(self, call).await;
    }

    /// The graphs of the call chain, from the outermost caller to this
    /// run.
    pub fn chain(&self) -> impl Iterator<Item = &str> {
        self.chain.iter().map(|g| &**g)
    }

    /// This run's graph.
    pub fn graph(&self) -> &str {
        self.chain.last().map_or("", |g| g)
    }

    /// Whether the caller cancelled the run.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the caller cancels the run.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// This run as the caller of a sub-run.
    pub fn sub_run(self: &Arc<Self>) -> SubRun {
        SubRun(self.clone())
    }

    /// A run's control outside any runtime, for the tests of factors
    /// (feature `internals`): not charged to a host budget, a sub-run of
    /// `caller` when given.
    #[cfg(feature = "internals")]
    pub fn detached(
        limits: Limits,
        caps: Capabilities,
        caller: Option<SubRun>,
        graph: &str,
    ) -> Arc<Self> {
        Self::build(
            limits,
            CancellationToken::new(),
            None,
            Arc::new(caps),
            caller,
            Arc::from(graph),
        )
    }

    /// True for the outermost run of a chain (not a `tools` sub-run).
    pub(crate) fn is_outermost(&self) -> bool {
        self.chain.len() == 1
    }

    /// The run ended: the outermost run writes the refusals its chain
    /// counted, one journal row per kind.
    pub(crate) async fn finish(&self) {
        if self.is_outermost() {
            crate::caps::write_refusals(self).await;
        }
    }

    /// The run's host byte budget.
    pub fn bytes(&self) -> &ByteBudget {
        &self.bytes
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

    /// Resolves at the soft deadline, or at once when the caller cancels:
    /// where a host call waiting on the outside world (a model) gives up.
    pub async fn soft_stopped(&self) {
        let deadline = tokio::time::Instant::from_std(self.soft_deadline);
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = self.cancel.cancelled() => {}
        }
    }

    /// The instant after which guest code is stopped by force.
    pub(crate) fn hard_deadline(&self) -> Instant {
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

    /// A slice of the run's fuel for a call, waiting while other calls
    /// hold all that is left: a fuel error once the budget is spent, a
    /// stop error at the run's deadline or cancellation.
    async fn take_fuel(&self) -> Result<FuelHold, RunError> {
        match self.fuel.take() {
            Take::Got(hold) => return Ok(hold),
            Take::Spent => return Err(self.fuel_error()),
            Take::Wait => {}
        }
        let deadline = tokio::time::Instant::from_std(self.hard_deadline());
        tokio::select! {
            biased;
            hold = self.fuel.take_or_wait() => hold.ok_or_else(|| self.fuel_error()),
            () = tokio::time::sleep_until(deadline) => Err(self.stop_error()),
            () = self.cancel.cancelled() => Err(self.stop_error()),
        }
    }

    /// A call's hold ended with `left` unspent.
    fn settle_fuel(&self, hold: FuelHold, left: u64) {
        let spent = hold.end(left);
        self.fuel_used.fetch_add(spent, Ordering::AcqRel);
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
            format!("run used up its fuel budget of {}", self.fuel.budget()),
        )
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// The caller of a sub-run, handed to a `tools` backend with each call
/// and put in the sub-run's [`RunOptions::sub_run_of`](crate::RunOptions):
/// the sub-run shares its caller's deadline (the earlier of the two),
/// cancellation, fuel pool, byte budget and account.
#[derive(Clone)]
pub struct SubRun(pub(crate) Arc<RunControl>);

impl std::fmt::Debug for SubRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubRun")
            .field("chain", &self.0.chain)
            .finish()
    }
}

impl SubRun {
    /// The graphs of the chain, outermost first, ending with the caller.
    pub fn chain(&self) -> impl Iterator<Item = &str> {
        self.0.chain.iter().map(|g| &**g)
    }
}

/// Everything a store holds (the `T` of its `Store<T>`): the sandbox's own
/// state and each registered factor's
/// [`InstanceState`](crate::caps::Factor::InstanceState). Lives exactly as
/// long as one instance.
pub struct StoreData {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    limiter: StoreLimiter,
    pub(crate) host: HostApi,
    /// Each registered factor's state in this store.
    pub(crate) factors: FactorStates,
    stdout: GuestOutput,
    stderr: GuestOutput,
    /// The fuel of the call in progress (its slice plus top-ups).
    fuel: Option<FuelHold>,
    /// When the call in progress started.
    call_started: Instant,
    /// Its turn on the cores once it became long.
    lease: Option<Arc<Lease>>,
    /// The instance's slot of its run (`None` while lent to a sub-run).
    run_slot: Option<OwnedSemaphorePermit>,
}

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl Drop for StoreData {
    fn drop(&mut self) {
        // Guest output goes to the host log, never to the host's stdout.
        for (stream, out) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let (text, dropped) = out.take();
            if !text.is_empty() {
                tracing::debug!(target: "sandgraph::guest", graph = &*self.host.graph, stream, dropped, "{}", guest_text(text.trim_end(), MAX_GUEST_OUTPUT_LOG_BYTES));
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
    /// The instance the run's `validate` ran in, handed out as the run's
    /// first worker (its main worker): one instance for a tool call's
    /// `validate` and its first node. Made with this run's control, so it
    /// can never serve another run.
    pub(crate) first: std::sync::Mutex<Option<Instance>>,
}

impl Sandbox {
    /// A sandbox of `graph` for the run `control` controls.
    pub(crate) fn new(shared: &Arc<Shared>, graph: &Arc<Graph>, control: Arc<RunControl>) -> Self {
        Sandbox {
            shared: shared.clone(),
            graph: graph.clone(),
            control,
            first: std::sync::Mutex::new(None),
        }
    }

    /// Runs the graph's `validate` export on `input`, in the instance the
    /// run then starts on (kept only when `validate` accepts).
    pub(crate) async fn validate(
        &self,
        input: &Value,
        ctx: &NodeContext,
    ) -> Result<Result<(), String>, RunError> {
        let kept = self.take_first();
        let mut instance = match kept {
            Some(instance) => instance,
            None => self.worker().await?,
        };
        let verdict = instance.validate(input, ctx).await?;
        if verdict.is_ok() {
            *self.first.lock().unwrap_or_else(|e| e.into_inner()) = Some(instance);
        }
        Ok(verdict)
    }

    fn take_first(&self) -> Option<Instance> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// A fresh store plus instance, charged to the host budget.
    pub(crate) async fn instantiate(
        shared: &Arc<Shared>,
        pre: &GraphComponentPre<StoreData>,
        graph_name: Arc<str>,
        control: &Arc<RunControl>,
    ) -> Result<Instance, RunError> {
        let (run_slot, host_slot) = acquire_slot(shared, control).await?;
        let stdout = GuestOutput::default();
        let stderr = GuestOutput::default();
        let state = StoreData {
            wasi: deny_by_default(stdout.clone(), stderr.clone()),
            table: ResourceTable::new(),
            limiter: StoreLimiter::new(control.limits.memory, shared.budget.clone()),
            host: HostApi::new(graph_name, control.clone(), shared.sink.clone()),
            factors: FactorStates::new(&shared.factors, control),
            stdout,
            stderr,
            fuel: None,
            call_started: Instant::now(),
            lease: None,
            run_slot: Some(run_slot),
        };
        let mut store = Store::new(&shared.engine, state);
        store.limiter(|s| &mut s.limiter);
        store
            .fuel_async_yield_interval(Some(FUEL_INJECT_INTERVAL))
            .map_err(host_bug)?;
        let ctl = control.clone();
        let turns = shared.turns.clone();
        store.epoch_deadline_callback(move |mut cx| {
            let now = Instant::now();
            if ctl.hard_stop_reached(now) {
                return Err(Trap::Interrupt.into());
            }
            top_up_fuel(&mut cx)?;
            // A long call waits, parked, for its next turn on the cores.
            if now.duration_since(cx.data().call_started) > LONG_CALL {
                let lease = cx
                    .data_mut()
                    .lease
                    .get_or_insert_with(|| turns.lease())
                    .clone();
                return Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(turns.next_turn(lease)),
                ));
            }
            // Yield to tokio on every tick so a spinning guest never pins a
            // worker thread (the plain `Yield` was measured unfair).
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        });
        arm(&mut store, control).await?;
        let call = pre.instantiate_async(&mut store);
        let out = with_wall_clock(control, call).await;
        disarm(&mut store, control);
        let bindings = match out {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return Err(classify(e, &store, control, "instantiation")),
            Err(e) => return Err(e),
        };
        Ok(Instance {
            store,
            bindings,
            control: control.clone(),
            _host_slot: host_slot,
        })
    }
}

/// Hands a call a slice of its run's fuel (waiting while other calls hold
/// all that is left) and a fresh epoch deadline.
async fn arm(store: &mut Store<StoreData>, control: &RunControl) -> Result<(), RunError> {
    let hold = control.take_fuel().await?;
    store.set_fuel(hold.given()).map_err(host_bug)?;
    store.data_mut().fuel = Some(hold);
    store.data_mut().call_started = Instant::now();
    store.set_epoch_deadline(1);
    Ok(())
}

/// Gives the fuel a call did not spend back to its run.
fn disarm(store: &mut Store<StoreData>, control: &RunControl) {
    let left = store.get_fuel().unwrap_or(0);
    if let Some(hold) = store.data_mut().fuel.take() {
        control.settle_fuel(hold, left);
    }
    if let Some(lease) = &store.data().lease {
        lease.release();
    }
    // Nothing runs in this store until the next `arm`.
    let _ = store.set_fuel(0);
}

/// On an epoch tick: a call that spent half its slice takes another from
/// the run's pool (none left: it runs on with what it holds, and traps
/// `out_of_fuel` if that runs out).
fn top_up_fuel(cx: &mut wasmtime::StoreContextMut<'_, StoreData>) -> wasmtime::Result<()> {
    let left = cx.get_fuel()?;
    if left >= FUEL_SLICE / 2 {
        return Ok(());
    }
    let more = cx.data_mut().fuel.as_mut().map_or(0, FuelHold::top_up);
    if more > 0 {
        cx.set_fuel(left.saturating_add(more))?;
    }
    Ok(())
}

/// Gives the fuel the call in progress holds back to the run's pool, so
/// the run's other calls (and a sub-run, which draws on the same pool) can
/// use it while a host call waits on something other than the calling
/// call's own code (a model, a `tools` sub-run). Inside a host call the
/// store's fuel counter is exact: compiled code saves it before every
/// call. The run's control.
pub(crate) fn give_back_fuel(
    store: &mut wasmtime::StoreContextMut<'_, StoreData>,
) -> wasmtime::Result<Arc<RunControl>> {
    let left = store.get_fuel()?;
    store.set_fuel(0)?;
    let control = store.data().host.control.clone();
    if let Some(hold) = store.data_mut().fuel.take() {
        control.settle_fuel(hold, left);
    }
    Ok(control)
}

/// A new slice of fuel for a call coming back from a host wait (as
/// [`arm`] does): traps `out_of_fuel` when the budget is spent by then,
/// and is interrupted at the run's deadline or cancellation.
pub(crate) async fn rearm_fuel(
    store: &mut wasmtime::StoreContextMut<'_, StoreData>,
    control: &RunControl,
) -> wasmtime::Result<()> {
    let hold = match control.take_fuel().await {
        Ok(hold) => hold,
        Err(e) if e.code == ErrorCode::OutOfFuel => return Err(Trap::OutOfFuel.into()),
        Err(_) => return Err(Trap::Interrupt.into()),
    };
    store.set_fuel(hold.given())?;
    store.data_mut().fuel = Some(hold);
    Ok(())
}

/// A slot of the run (its tasks queue here first, so one run's fan-out
/// never queues against other runs), then a slot of the host's pool, which
/// admits runs in arrival order. Both waits end at the run's deadline or
/// its cancellation.
async fn acquire_slot(
    shared: &Arc<Shared>,
    control: &Arc<RunControl>,
) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), RunError> {
    let run = wait_for_slot(control, control.slots.clone()).await?;
    let host = wait_for_slot(control, shared.slots.clone()).await?;
    Ok((run, host))
}

/// [`give_back_fuel`] around a wait on a sub-run (a `tools` call): the calling
/// instance also lends its slot of the run to the sub-run, whose tasks
/// draw on the same slots (a chain of runs holds the outermost run's
/// [`Limits::instances`] running instances, not a fresh allotment per
/// level), and takes one back before its guest runs again. Interrupted at
/// the run's deadline or cancellation.
pub(crate) async fn lending_slot<R>(
    store: &mut wasmtime::StoreContextMut<'_, StoreData>,
    wait: impl AsyncFnOnce(&mut StoreData) -> R,
) -> wasmtime::Result<R> {
    let control = give_back_fuel(store)?;
    drop(store.data_mut().run_slot.take());
    let out = wait(store.data_mut()).await;
    let slot = wait_for_slot(&control, control.slots.clone())
        .await
        .map_err(|_| Trap::Interrupt)?;
    store.data_mut().run_slot = Some(slot);
    rearm_fuel(store, &control).await?;
    Ok(out)
}

async fn wait_for_slot(
    control: &RunControl,
    slots: Arc<Semaphore>,
) -> Result<OwnedSemaphorePermit, RunError> {
    if let Ok(p) = slots.clone().try_acquire_owned() {
        return Ok(p);
    }
    let busy = || {
        RunError::new(
            ErrorCode::Timeout,
            "host busy: no instance slot became free before the run's deadline",
        )
    };
    let deadline = tokio::time::Instant::from_std(control.hard_deadline());
    tokio::select! {
        permit = slots.acquire_owned() => permit.map_err(|_| busy()),
        () = tokio::time::sleep_until(deadline) => Err(busy()),
        () = control.cancel.cancelled() => Err(control.stop_error()),
    }
}

impl Backend for Sandbox {
    type Worker = Instance;

    async fn worker(&self) -> Result<Instance, RunError> {
        if let Some(instance) = self.take_first() {
            return Ok(instance);
        }
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
        if self.control.fuel.spent() {
            return Err(self.control.fuel_error());
        }
        Ok(())
    }

    fn bytes(&self) -> Option<&ByteBudget> {
        Some(&self.control.bytes)
    }
}

/// One live instance in its own store.
pub(crate) struct Instance {
    store: Store<StoreData>,
    bindings: bindings::GraphComponent,
    control: Arc<RunControl>,
    /// The host pool's slot, held while the instance lives (the run's
    /// slot is in the store: a `tools` call lends it).
    _host_slot: OwnedSemaphorePermit,
}

/// Runs `fut` under the run's hard deadline plus slack, and ends it a grace
/// period after the caller cancels. Epochs cannot interrupt a call blocked
/// in the host (a guest sleeping or polling), so this is the last line; the
/// future is dropped and the instance is not used again.
async fn with_wall_clock<F: Future>(control: &RunControl, fut: F) -> Result<F::Output, RunError> {
    let deadline = tokio::time::Instant::from_std(control.hard_deadline() + WALL_CLOCK_SLACK);
    let after_cancel = async {
        control.cancel.cancelled().await;
        tokio::time::sleep(control.limits.grace + WALL_CLOCK_SLACK).await;
    };
    tokio::select! {
        out = fut => Ok(out),
        () = tokio::time::sleep_until(deadline) => Err(control.stop_error()),
        () = after_cancel => Err(control.stop_error()),
    }
}

fn host_bug(e: wasmtime::Error) -> RunError {
    RunError::new(ErrorCode::Trap, format!("host error: {e}"))
}

/// Maps a wasmtime failure to a stable error code and a short message.
fn classify(
    err: wasmtime::Error,
    store: &Store<StoreData>,
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
        let stderr = guest_text(
            &guest_stderr_summary(&data.stderr.tail(STDERR_TAIL_BYTES)),
            STDERR_TAIL_BYTES,
        );
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
            Some(n) => guest_text(
                &format!("{:#}", rustc_demangle::demangle(n)),
                MAX_GUEST_NAME_BYTES,
            ),
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
            format!("{what} could not decode its input: {}", guest_message(&m)),
        ),
        bindings::GraphError::Unknown(m) => RunError::new(
            ErrorCode::NodeError,
            format!("{what}: unknown name: {}", guest_name(&m)),
        ),
        bindings::GraphError::Failed(m) => RunError::new(
            ErrorCode::NodeError,
            format!("{what} failed: {}", guest_message(&m)),
        ),
    }
}

/// Transient bytes charged to a run's byte budget, given back on drop.
pub struct Charged<'a> {
    budget: &'a ByteBudget,
    bytes: usize,
}

impl<'a> Charged<'a> {
    /// Charges `bytes` to `budget` for `what`.
    ///
    /// # Errors
    ///
    /// `memory_limit`, naming `what`, when the budget cannot take them.
    pub fn new(
        budget: &'a ByteBudget,
        bytes: usize,
        what: &dyn Fn() -> String,
    ) -> Result<Self, RunError> {
        budget.charge(bytes, what)?;
        Ok(Charged { budget, bytes })
    }
}

impl Drop for Charged<'_> {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

/// The bytes of a [`SharedJson`]'s text, charged to its run's byte budget
/// for as long as the text lives (its [`TextHold`]).
struct TextBytes {
    control: Arc<RunControl>,
    bytes: usize,
}

impl Drop for TextBytes {
    fn drop(&mut self) {
        self.control.bytes.release(self.bytes);
    }
}

/// Parses a guest's JSON text within the run's byte budget: the text itself
/// is charged while it is parsed, the parsed value for as long as the
/// executor holds it (until the barrier settles the step). A value that
/// would not fit is refused as `memory_limit` before it is allocated.
fn parse_output(control: &RunControl, what: &str, text: &str) -> Result<Value, RunError> {
    parse_bounded(control, what, text).map(|b| b.value)
}

/// [`parse_output`] that also says how many bytes stay charged for the
/// value.
fn parse_bounded(control: &RunControl, what: &str, text: &str) -> Result<json::Bounded, RunError> {
    let budget = &control.bytes;
    let _text = Charged::new(budget, text.len(), &|| {
        format!("{what} returned {} bytes of JSON, which", text.len())
    })?;
    let mut granted = 0usize;
    let mut grant = |n: usize| {
        let ok = budget.try_charge(n);
        if ok {
            granted += n;
        }
        ok
    };
    let parsed = json::parse_lossless_within(text, "output", &mut grant);
    match parsed {
        Ok(b) => Ok(b),
        Err(e) => {
            budget.release(granted);
            Err(match e {
                json::BoundedError::Json(e) => RunError::new(
                    ErrorCode::InvalidOutput,
                    format!(
                        "{what} returned invalid JSON at {}",
                        guest_message(&e.to_string())
                    ),
                ),
                json::BoundedError::OverBudget { granted } => RunError::new(
                    ErrorCode::MemoryLimit,
                    format!(
                        "{what} returned JSON ({} bytes of text) that would not fit the run's host byte budget of {} MiB: refused after {} MiB parsed, with {} MiB held by the rest of the run (raise it with --host-memory-mb)",
                        text.len(),
                        control.limits.host_bytes >> 20,
                        granted >> 20,
                        budget.used() >> 20,
                    ),
                ),
            })
        }
    }
}

fn parse_object(
    control: &RunControl,
    what: &str,
    text: &str,
) -> Result<Map<String, Value>, RunError> {
    match parse_output(control, what, text)? {
        Value::Object(m) => Ok(m),
        other => Err(RunError::new(
            ErrorCode::InvalidOutput,
            format!(
                "{what} returned {} where a JSON object of state writes was expected",
                json::kind(&other)
            ),
        )),
    }
}

fn to_json(v: &Value) -> String {
    // Values reaching here were checked lossless, so this cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

impl Instance {
    /// Runs one export call under the wall clock and classifies failures.
    async fn call<R>(
        &mut self,
        what: &str,
        f: impl AsyncFnOnce(&bindings::GraphComponent, &mut Store<StoreData>) -> wasmtime::Result<R>,
    ) -> Result<R, RunError> {
        let control = self.control.clone();
        arm(&mut self.store, &control).await?;
        let out = with_wall_clock(&control, f(&self.bindings, &mut self.store)).await;
        disarm(&mut self.store, &control);
        match out? {
            Ok(r) => Ok(r),
            Err(e) => Err(classify(e, &self.store, &control, what)),
        }
    }

    /// The JSON text of `input` for a call, charged to the run's byte
    /// budget while the call holds it.
    fn input_text<'c>(
        control: &'c RunControl,
        what: &str,
        input: &Value,
    ) -> Result<(String, Charged<'c>), RunError> {
        let text = to_json(input);
        let charged = Charged::new(&control.bytes, text.len(), &|| {
            format!("the input of {what}")
        })?;
        Ok((text, charged))
    }

    /// The JSON text of a shared input (a superstep's snapshot, a payload,
    /// a node's fresh state): made by the first call that needs it and
    /// charged to the run's byte budget once, for as long as it lives.
    fn shared_text<'i>(
        control: &Arc<RunControl>,
        what: &str,
        input: &'i SharedJson,
    ) -> Result<&'i str, RunError> {
        input.text(|value| {
            let text = to_json(value);
            control
                .bytes
                .charge(text.len(), &|| format!("the input of {what}"))?;
            let held = TextBytes {
                control: control.clone(),
                bytes: text.len(),
            };
            Ok((text, Box::new(held) as TextHold))
        })
    }

    /// Calls `describe`.
    pub(crate) async fn describe(&mut self) -> Result<bindings::WitGraphSpec, RunError> {
        self.call("describe", async |b, s| b.call_describe(s).await)
            .await
    }

    /// Calls `validate`.
    pub(crate) async fn validate(
        &mut self,
        input: &Value,
        ctx: &NodeContext,
    ) -> Result<Result<(), String>, RunError> {
        let control = self.control.clone();
        let (input, _held) = Self::input_text(&control, "validate", input)?;
        let ctx = wit_context(ctx);
        let verdict = self
            .call("validate", async |b, s| {
                b.call_validate(s, &input, &ctx).await
            })
            .await?;
        // The reason reaches a person or a model: bounded and inert.
        Ok(verdict.map_err(|reason| guest_message(&reason)))
    }
}

fn wit_context(ctx: &NodeContext) -> bindings::CallContext {
    bindings::CallContext {
        tool: ctx.tool.clone(),
        request: ctx.request.clone(),
        thread_id: ctx.thread_id.clone(),
        step: ctx.step,
        resume: ctx.resume.iter().map(to_json).collect(),
        configurable: serde_json::to_string(&ctx.configurable).unwrap_or_else(|_| "{}".into()),
    }
}

fn send_packet(
    control: &RunControl,
    what: &str,
    s: bindings::WitSend,
) -> Result<SendPacket, RunError> {
    Ok(SendPacket {
        payload: parse_output(
            control,
            &format!("{what} send to {}", guest_name(&s.node)),
            &s.payload,
        )?,
        node: s.node,
    })
}

/// Refuses a result naming more targets than a node result may, before
/// any payload is parsed: the one check of a guest result's count (the
/// executor only debug-asserts it, and bounds the total of a node's result
/// and its routers' answers, which no single call returns).
fn check_target_count(what: &str, count: usize) -> Result<(), RunError> {
    if count > MAX_TARGETS_PER_RESULT {
        return Err(RunError::new(
            ErrorCode::InvalidUpdate,
            format!(
                "{what} returned {count} goto targets and sends; a node result may name at most {MAX_TARGETS_PER_RESULT}"
            ),
        ));
    }
    Ok(())
}

impl Worker for Instance {
    async fn run_node(
        &mut self,
        node: &str,
        input: &SharedJson,
        ctx: &NodeContext,
    ) -> Result<NodeOutput, RunError> {
        let what = format!("node \"{node}\"");
        let control = self.control.clone();
        let state = Self::shared_text(&control, &what, input)?;
        let wctx = wit_context(ctx);
        let res = self
            .call(&what, async |b, s| {
                b.call_run_node(s, node, state, &wctx).await
            })
            .await?;
        match res.map_err(|e| guest_error(&what, e))? {
            bindings::NodeResult::Update(u) => {
                Ok(NodeOutput::Update(parse_object(&control, &what, &u)?))
            }
            bindings::NodeResult::Command(c) => {
                check_target_count(&what, c.goto.len().saturating_add(c.sends.len()))?;
                Ok(NodeOutput::Command {
                    update: parse_object(&control, &what, &c.update)?,
                    goto: c.goto,
                    sends: c
                        .sends
                        .into_iter()
                        .map(|s| send_packet(&control, &what, s))
                        .collect::<Result<_, _>>()?,
                })
            }
            bindings::NodeResult::Interrupt(p) => Ok(NodeOutput::Interrupt(parse_output(
                &control,
                &format!("{what} interrupt"),
                &p,
            )?)),
        }
    }

    async fn route(
        &mut self,
        router: &str,
        state: &SharedJson,
    ) -> Result<Vec<RouteTarget>, RunError> {
        let what = format!("router \"{router}\"");
        let control = self.control.clone();
        let state = Self::shared_text(&control, &what, state)?;
        let res = self
            .call(&what, async |b, s| b.call_route(s, router, state).await)
            .await?;
        let targets = res.map_err(|e| guest_error(&what, e))?;
        check_target_count(&what, targets.len())?;
        targets
            .into_iter()
            .map(|t| match t {
                bindings::WitRouteTarget::Node(n) => Ok(RouteTarget::Node(n)),
                bindings::WitRouteTarget::Send(s) => {
                    Ok(RouteTarget::Send(send_packet(&control, &what, s)?))
                }
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
        let control = self.control.clone();
        let (cur, held_cur) = Self::input_text(&control, &what, current)?;
        let (upd, held_upd) = Self::input_text(&control, &what, update)?;
        let res = self
            .call(&what, async |b, s| {
                b.call_reduce(s, channel, &cur, &upd).await
            })
            .await?;
        drop((held_cur, held_upd, cur, upd));
        // The value replaces the channel's: the barrier counts it with the
        // state, so only its parse is bounded here.
        let text = res.map_err(|e| guest_error(&what, e))?;
        let parsed = parse_bounded(&control, &what, &text)?;
        control.bytes.release(parsed.granted);
        Ok(parsed.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_runs_fuel_is_spent_when_no_call_holds_any() {
        let limits = Limits {
            fuel: 2 * FUEL_SLICE + 7,
            ..Limits::default()
        };
        let control = RunControl::new(limits, CancellationToken::new());
        let holds = [
            control.take_fuel().await.unwrap(),
            control.take_fuel().await.unwrap(),
            control.take_fuel().await.unwrap(),
        ];
        assert!(!control.fuel.spent(), "calls hold fuel");
        // Spent fuel is counted, unspent fuel goes back.
        let [a, b, c] = holds;
        control.settle_fuel(a, FUEL_SLICE - 100);
        control.settle_fuel(b, 0);
        control.settle_fuel(c, 0);
        assert_eq!(control.fuel_used(), 100 + FUEL_SLICE + 7);
        let last = control.take_fuel().await.unwrap();
        assert_eq!(last.given(), FUEL_SLICE - 100);
        control.settle_fuel(last, 0);
        let e = control.take_fuel().await.unwrap_err();
        assert_eq!(e.code, ErrorCode::OutOfFuel);
        assert_eq!(
            e.message,
            format!("run used up its fuel budget of {}", 2 * FUEL_SLICE + 7)
        );
        assert!(control.fuel.spent());
    }

    #[test]
    fn a_sub_run_draws_on_its_callers_fuel_and_names_its_budget() {
        let caller = RunControl::new(
            Limits {
                fuel: 300_000_000,
                ..Limits::default()
            },
            CancellationToken::new(),
        );
        let sub = RunControl::build(
            Limits::default(),
            CancellationToken::new(),
            None,
            Arc::default(),
            Some(SubRun(caller.clone())),
            Arc::from("tool"),
        );
        assert!(Arc::ptr_eq(&sub.fuel, &caller.fuel));
        assert_eq!(
            sub.fuel_error().message,
            "run used up its fuel budget of 300000000"
        );
    }
}
