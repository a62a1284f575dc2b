//! Every limit the sandbox enforces, with its default and the reason for it.
//! This is the one place defaults are documented; the README links here.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sandgraph_core::{DEFAULT_RECURSION_LIMIT, ErrorCode, RunError};

/// Bytes in a MiB.
pub(crate) const MIB: usize = 1 << 20;

/// Largest component file the loader accepts. Real graphs are a few hundred
/// KiB; this only stops a hostile file from making the compiler chew on
/// gigabytes.
pub const MAX_COMPONENT_BYTES: usize = 64 * MIB;

/// Largest per-instance memory cap an operator may configure. The pooling
/// allocator reserves address space for each slot up front, so the cap must
/// fit a slot.
pub const MAX_MEMORY_CAP: usize = 4096 * MIB;

/// Longest timeout (and grace period) a run may ask for: a week. Deadlines
/// are `Instant` additions, which panic on overflow; bounding the inputs
/// keeps every deadline computation far from that edge.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Core instances, tables and memories one store may create. A Rust guest
/// component needs a handful of each (its module, the WASI adapter and shims);
/// the wasmtime default of 10,000 would let a hostile component exhaust the
/// pool from one call.
pub(crate) const MAX_INSTANCES_PER_STORE: usize = 32;
pub(crate) const MAX_TABLES_PER_STORE: usize = 32;
pub(crate) const MAX_MEMORIES_PER_STORE: usize = 8;

/// Largest table a guest may grow to (elements). Function tables of real
/// guests hold a few thousand entries.
pub(crate) const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Wasm stack per call. Explicit so recursion stops with a clean
/// `stack overflow` trap and the host keeps its own stack headroom.
pub(crate) const MAX_WASM_STACK: usize = 512 * 1024;

/// Longest log message a guest may send through `host.log`; longer ones are
/// truncated so a guest cannot flood the host log with one call.
pub(crate) const MAX_LOG_MESSAGE_BYTES: usize = 4 * 1024;

/// Log lines (via `host.log`) one instance may emit; the rest are dropped
/// with one notice.
pub(crate) const MAX_LOG_LINES_PER_INSTANCE: usize = 256;

/// Guest stdout and stderr kept per instance (each); the rest is dropped.
/// They go to the host log, never to the host's stdout.
pub(crate) const MAX_GUEST_OUTPUT_BYTES: usize = 64 * 1024;

/// Capability calls (`llm`, `tools`, `http`) one outermost run may make,
/// of any decision, its sub-runs included. Each call costs host work and a
/// journal row or count even when it is refused, so a graph looping on a
/// call must run out of calls long before it runs out of time: real agent
/// runs make tens to hundreds of calls. Past it every call is refused at
/// once (`quota`).
pub const MAX_CAPABILITY_CALLS_PER_RUN: u64 = 10_000;

/// Kinds (graph, capability, decision) of refused calls one run counts for
/// the journal; refusals of further kinds are only logged. A run's chain
/// has at most a few graphs and each capability a handful of refusal
/// decisions, so this is far above what a run can honestly produce.
pub(crate) const MAX_REFUSAL_KINDS: usize = 256;

/// Bytes of journal rows one outermost run may have queued and not yet
/// written (a row is at most about 2 KiB: its target and reason are
/// capped). A run whose rows outpace the journal's disk waits, within its
/// deadline, rather than growing the queue. Each queued row is also held
/// in its run's host byte budget until written.
pub(crate) const MAX_QUEUED_JOURNAL_BYTES: usize = 256 * 1024;

/// Per-run limits. Everything a caller can set on one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock budget of the whole run. At the deadline the guest sees
    /// `cancelled() == true` and no new superstep starts (soft stop).
    /// Default 30 s: a tool call an LLM client waits on; common MCP clients
    /// give up after 60 s.
    pub timeout: Duration,
    /// Time after the soft deadline (or a cancellation) before the guest is
    /// stopped by force with an epoch interrupt. Default 500 ms: enough for a
    /// cooperative graph to return, short enough that a runaway is gone fast.
    pub grace: Duration,
    /// Fuel (roughly wasm instructions) for the whole run, across all its
    /// instances. Default 2e11: about ten seconds of pure compute on the
    /// reference machine (a spin burns ~2e10 per second), a deterministic
    /// CPU budget below the default wall-clock timeout.
    pub fuel: u64,
    /// Linear memory plus tables per instance, in bytes. Default 128 MiB:
    /// ample for JSON state machines, small enough that dozens of concurrent
    /// runs fit the host budget. Guests with a language runtime inside fit
    /// too, with no special case: measured for echo, a Rust or a QuickJS
    /// (JavaScript) component runs in 2 MiB, a CPython component needs 12
    /// MiB (its pre-initialised heap) and fails to instantiate in 8.
    pub memory: usize,
    /// Superstep budget per invocation (LangGraph's `recursion_limit`).
    /// Default 25, LangGraph.js's value: graphs that loop longer must say so.
    pub recursion_limit: u32,
    /// Bytes the host may keep for the run outside wasm memory: the state,
    /// parsed node outputs, `Send` payloads, interrupt payloads, step events
    /// and checkpoint copies, counted as their in-memory size (a JSON text
    /// grows up to ~30x when parsed, so outputs are counted while they are
    /// parsed and refused before the excess is allocated). Default 64 MiB:
    /// LangGraph states are kilobytes to a few megabytes, and 32 such runs
    /// fit the default 2 GiB host budget, which these bytes are also charged
    /// to.
    pub host_bytes: usize,
    /// Instances (pool slots) the run may hold at once. Its parallel tasks
    /// beyond this queue within the run, not against other runs. Default 8:
    /// four times the cores of the reference machine, so a fan-out keeps
    /// every core busy, while one run can take at most 1/32 of the default
    /// 256-slot pool.
    pub instances: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(30),
            grace: Duration::from_millis(500),
            fuel: 200_000_000_000,
            memory: 128 * MIB,
            recursion_limit: DEFAULT_RECURSION_LIMIT,
            host_bytes: 64 * MIB,
            instances: 8,
        }
    }
}

impl Limits {
    /// The limits `describe` (and the instantiation before it) run under
    /// when a graph is loaded: a spec is a few kilobytes computed in
    /// microseconds, so a graph that needs more is broken or hostile, and a
    /// folder must not wait on it. 500 ms and 5e9 fuel (about 0.25 s of
    /// compute) stop a spinning `describe` well under a second. The 64 MiB
    /// memory leaves room for a CPython component's 12 MiB heap; its
    /// `describe` takes well under 2e7 fuel (measured: an echo run under a
    /// 2e7 budget completes in Python and JavaScript).
    pub fn for_load() -> Self {
        Limits {
            timeout: Duration::from_millis(500),
            grace: Duration::from_millis(100),
            fuel: 5_000_000_000,
            memory: 64 * MIB,
            recursion_limit: 1,
            host_bytes: 16 * MIB,
            instances: 1,
        }
    }
}

impl Limits {
    /// Rejects limits that cannot work, naming the field.
    pub fn check(&self) -> Result<(), RunError> {
        let bad = |m: String| Err(RunError::new(ErrorCode::InvalidInput, m));
        if self.timeout.is_zero() {
            return bad("timeout must be greater than zero".into());
        }
        if self.fuel == 0 {
            return bad("fuel must be greater than zero".into());
        }
        if self.memory < MIB {
            return bad(format!(
                "memory cap must be at least 1 MiB, got {} bytes",
                self.memory
            ));
        }
        if self.memory > MAX_MEMORY_CAP {
            return bad(format!(
                "memory cap must be at most {} MiB, got {} MiB",
                MAX_MEMORY_CAP / MIB,
                self.memory / MIB
            ));
        }
        if self.recursion_limit == 0 {
            return bad("recursion limit must be at least 1".into());
        }
        if self.timeout > MAX_TIMEOUT {
            return bad(format!(
                "timeout must be at most {} s, got {} ms",
                MAX_TIMEOUT.as_secs(),
                self.timeout.as_millis()
            ));
        }
        if self.grace > MAX_TIMEOUT {
            return bad(format!(
                "grace must be at most {} s, got {} ms",
                MAX_TIMEOUT.as_secs(),
                self.grace.as_millis()
            ));
        }
        if self.host_bytes < MIB {
            return bad(format!(
                "host byte budget must be at least 1 MiB, got {} bytes",
                self.host_bytes
            ));
        }
        if self.instances == 0 {
            return bad("instances per run must be at least 1".into());
        }
        Ok(())
    }
}

/// Host-wide settings, fixed when the [`crate::Runtime`] is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Memory all live instances together may use. Default 2 GiB, so a burst
    /// of runs that each stay under their own cap still cannot exhaust the
    /// machine.
    pub memory_budget: usize,
    /// Instances alive at once (pool slots). Default 256; a run needs one per
    /// task of its widest superstep. Further instances wait for a slot until
    /// their run's deadline.
    pub max_instances: u32,
    /// Epoch tick. Default 1 ms: a runaway yields its worker thread at least
    /// this often and a hard stop lands within about one tick.
    pub epoch_tick: Duration,
    /// Use the pooling allocator (falls back to on-demand allocation when the
    /// address-space reservation fails).
    pub pooling: bool,
    /// Calls that ran longer than a few milliseconds (computing, or
    /// spinning) that may run at once; the others wait their turn, parked,
    /// so short calls only queue behind these. Default: the machine's
    /// cores.
    pub long_call_turns: usize,
    /// Limits applied when a run does not set its own.
    pub default_limits: Limits,
    /// Limits of `describe` and the instantiation before it when a graph
    /// is loaded ([`Limits::for_load`]).
    pub load_limits: Limits,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            memory_budget: 2048 * MIB,
            max_instances: 256,
            epoch_tick: Duration::from_millis(1),
            pooling: true,
            long_call_turns: std::thread::available_parallelism().map_or(2, |n| n.get()),
            default_limits: Limits::default(),
            load_limits: Limits::for_load(),
        }
    }
}

/// The host-wide memory budget shared by every store.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
}

impl MemoryBudget {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    fn try_reserve(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

impl sandgraph_core::budget::HostMemory for MemoryBudget {
    fn try_reserve(&self, bytes: usize) -> bool {
        MemoryBudget::try_reserve(self, bytes)
    }

    fn release(&self, bytes: usize) {
        MemoryBudget::release(self, bytes)
    }
}

/// Which cap a store hit, recorded so a guest abort after a refused
/// allocation is reported as `memory_limit` instead of a plain trap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CapHit {
    Instance,
    Host,
}

/// The per-store `ResourceLimiter`: sums every memory and table of the store
/// against the instance cap (wasmtime's own limit applies per memory) and
/// reserves the same bytes from the host-wide budget.
pub(crate) struct StoreLimiter {
    cap: usize,
    reserved: usize,
    budget: Arc<MemoryBudget>,
    hit: Option<CapHit>,
}

impl StoreLimiter {
    pub(crate) fn new(cap: usize, budget: Arc<MemoryBudget>) -> Self {
        StoreLimiter {
            cap,
            reserved: 0,
            budget,
            hit: None,
        }
    }

    pub(crate) fn cap_hit(&self) -> Option<CapHit> {
        self.hit
    }

    fn grow(&mut self, delta: usize) -> bool {
        let Some(total) = self.reserved.checked_add(delta) else {
            self.hit = Some(CapHit::Instance);
            return false;
        };
        if total > self.cap {
            self.hit = Some(CapHit::Instance);
            return false;
        }
        if !self.budget.try_reserve(delta) {
            self.hit = Some(CapHit::Host);
            return false;
        }
        self.reserved = total;
        true
    }
}

impl Drop for StoreLimiter {
    fn drop(&mut self) {
        self.budget.release(self.reserved);
    }
}

impl wasmtime::ResourceLimiter for StoreLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(desired.saturating_sub(current)))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            self.hit = Some(CapHit::Instance);
            return Ok(false);
        }
        // A table element is a pointer-sized slot.
        let bytes = desired
            .saturating_sub(current)
            .saturating_mul(std::mem::size_of::<usize>());
        Ok(self.grow(bytes))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES_PER_STORE
    }

    fn tables(&self) -> usize {
        MAX_TABLES_PER_STORE
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES_PER_STORE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn instance_cap_sums_all_memories_and_records_the_hit() {
        let budget = MemoryBudget::new(100 * MIB);
        let mut l = StoreLimiter::new(10 * MIB, budget.clone());
        assert!(l.memory_growing(0, 6 * MIB, None).unwrap());
        // A second memory of the same store counts against the same cap.
        assert!(!l.memory_growing(0, 6 * MIB, None).unwrap());
        assert_eq!(l.cap_hit(), Some(CapHit::Instance));
        assert_eq!(budget.used(), 6 * MIB);
        drop(l);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn host_budget_is_shared_across_stores() {
        let budget = MemoryBudget::new(10 * MIB);
        let mut a = StoreLimiter::new(8 * MIB, budget.clone());
        let mut b = StoreLimiter::new(8 * MIB, budget.clone());
        assert!(a.memory_growing(0, 8 * MIB, None).unwrap());
        assert!(!b.memory_growing(0, 4 * MIB, None).unwrap());
        assert_eq!(b.cap_hit(), Some(CapHit::Host));
        drop(a);
        assert!(b.memory_growing(0, 4 * MIB, None).unwrap());
    }

    #[test]
    fn limits_check_names_the_field() {
        let l = Limits {
            recursion_limit: 0,
            ..Limits::default()
        };
        assert!(l.check().unwrap_err().message.contains("recursion limit"));
        let l = Limits {
            memory: MAX_MEMORY_CAP + MIB,
            ..Limits::default()
        };
        assert!(l.check().unwrap_err().message.contains("at most 4096 MiB"));
        assert!(Limits::default().check().is_ok());
    }
}
