//! The host-side byte budget of one run: what the host keeps for a run
//! outside wasm memory (its state, parsed node outputs, `Send` payloads,
//! interrupt payloads, step events, checkpoint copies), counted as
//! [`json::value_cost`](crate::json::value_cost) counts it.
//!
//! Three parts: the committed `state` (set at every barrier to the cost of
//! the channels plus the pending sends), the `transient` bytes of the step
//! in progress (outputs as they are parsed, the step event, a checkpoint
//! copy while it is written), which the barrier settles, and the `held`
//! bytes of things that outlive a step until they are given back (journal
//! rows waiting to be written), which the barrier leaves alone. Every
//! byte is also reserved from the [`HostMemory`] budget shared by all runs,
//! so N concurrent runs cannot add up past it.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::{ErrorCode, RunError};

const MIB: usize = 1 << 20;

/// The host-wide budget the run's bytes are also charged to (in the
/// runtime: the budget wasm memories are charged to).
pub trait HostMemory: Send + Sync {
    /// Reserves `bytes`; `false` when the host budget cannot take them.
    fn try_reserve(&self, bytes: usize) -> bool;
    /// Gives back `bytes` reserved earlier.
    fn release(&self, bytes: usize);
}

/// One run's byte budget. Shared by the run's tasks (`&self` methods).
pub struct ByteBudget {
    limit: usize,
    host: Option<Arc<dyn HostMemory>>,
    inner: Mutex<Held>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Held {
    state: usize,
    transient: usize,
    held: usize,
    peak: usize,
}

impl Held {
    fn total(&self) -> usize {
        self.state
            .saturating_add(self.transient)
            .saturating_add(self.held)
    }
}

impl std::fmt::Debug for ByteBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = *self.held();
        f.debug_struct("ByteBudget")
            .field("limit", &self.limit)
            .field("state", &held.state)
            .field("transient", &held.transient)
            .field("held", &held.held)
            .finish()
    }
}

impl ByteBudget {
    /// A budget of `limit` bytes, also charged to `host` when given.
    pub fn new(limit: usize, host: Option<Arc<dyn HostMemory>>) -> Self {
        ByteBudget {
            limit,
            host,
            inner: Mutex::new(Held::default()),
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now (state plus transient).
    pub fn used(&self) -> usize {
        self.held().total()
    }

    /// The most bytes held at once so far.
    pub fn peak(&self) -> usize {
        self.held().peak
    }

    fn over(&self, what: &str, bytes: usize, held: &Held) -> RunError {
        RunError::new(
            ErrorCode::MemoryLimit,
            format!(
                "{what} needs {} more bytes of host memory but the run holds {} of its host byte budget of {} (raise it with --host-memory-mb)",
                bytes,
                human(held.total()),
                human(self.limit),
            ),
        )
    }

    fn host_spent(&self, what: &str) -> RunError {
        RunError::new(
            ErrorCode::MemoryLimit,
            format!("{what} could not be kept: the host-wide memory budget is spent"),
        )
    }

    /// Charges `bytes` of transient memory for `what` (e.g. `output of
    /// node "a"`), or fails with `memory_limit` naming it; nothing is
    /// charged on failure.
    pub fn charge(&self, bytes: usize, what: &dyn Fn() -> String) -> Result<(), RunError> {
        let mut held = self.held();
        let total = held.total().saturating_add(bytes);
        if total > self.limit {
            return Err(self.over(&what(), bytes, &held));
        }
        if let Some(host) = &self.host
            && !host.try_reserve(bytes)
        {
            return Err(self.host_spent(&what()));
        }
        held.transient += bytes;
        held.peak = held.peak.max(total);
        Ok(())
    }

    /// Charges `bytes` if they fit; `false` (and nothing charged) if not.
    pub fn try_charge(&self, bytes: usize) -> bool {
        self.charge(bytes, &String::new).is_ok()
    }

    /// Gives back `bytes` of transient memory charged earlier.
    pub fn release(&self, bytes: usize) {
        let mut held = self.held();
        let bytes = bytes.min(held.transient);
        held.transient -= bytes;
        if let Some(host) = &self.host {
            host.release(bytes);
        }
    }

    /// Holds `bytes` past the step's barrier, until [`ByteBudget::unhold`]
    /// gives them back; `false` (and nothing held) if they do not fit.
    pub fn hold(&self, bytes: usize) -> bool {
        let mut held = self.held();
        let total = held.total().saturating_add(bytes);
        if total > self.limit {
            return false;
        }
        if let Some(host) = &self.host
            && !host.try_reserve(bytes)
        {
            return false;
        }
        held.held += bytes;
        held.peak = held.peak.max(total);
        true
    }

    /// Gives back `bytes` held earlier with [`ByteBudget::hold`].
    pub fn unhold(&self, bytes: usize) {
        let mut held = self.held();
        let bytes = bytes.min(held.held);
        held.held -= bytes;
        if let Some(host) = &self.host {
            host.release(bytes);
        }
    }

    /// The barrier: the committed state now costs `state` bytes and the
    /// step's transient bytes are gone. Fails with `memory_limit` when the
    /// state alone is over the budget.
    pub fn settle(&self, state: usize, what: &dyn Fn() -> String) -> Result<(), RunError> {
        let mut held = self.held();
        let before = held.total();
        let after = state.saturating_add(held.held);
        if after > self.limit {
            return Err(self.over(&what(), after.saturating_sub(before), &held));
        }
        if after > before {
            if let Some(host) = &self.host
                && !host.try_reserve(after - before)
            {
                return Err(self.host_spent(&what()));
            }
        } else if let Some(host) = &self.host {
            host.release(before - after);
        }
        held.state = state;
        held.transient = 0;
        held.peak = held.peak.max(after);
        Ok(())
    }
}

impl Drop for ByteBudget {
    fn drop(&mut self) {
        let total = self.held().total();
        if let Some(host) = &self.host {
            host.release(total);
        }
    }
}

/// `bytes` for a message: MiB when large.
fn human(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Host(AtomicUsize, usize);
    impl HostMemory for Host {
        fn try_reserve(&self, bytes: usize) -> bool {
            self.0
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    u.checked_add(bytes).filter(|t| *t <= self.1)
                })
                .is_ok()
        }
        fn release(&self, bytes: usize) {
            self.0.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    #[test]
    fn charges_settle_and_release_against_both_budgets() {
        let host = Arc::new(Host(AtomicUsize::new(0), 10 * MIB));
        let b = ByteBudget::new(4 * MIB, Some(host.clone()));
        b.charge(3 * MIB, &|| "a".into()).unwrap();
        let e = b
            .charge(2 * MIB, &|| "output of node \"x\"".into())
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::MemoryLimit);
        assert!(
            e.message.starts_with("output of node \"x\" needs"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("host byte budget of 4.0 MiB"),
            "{}",
            e.message
        );
        assert_eq!(host.0.load(Ordering::Acquire), 3 * MIB);
        b.settle(MIB, &|| "state".into()).unwrap();
        assert_eq!(b.used(), MIB);
        assert_eq!(host.0.load(Ordering::Acquire), MIB);
        assert_eq!(b.peak(), 3 * MIB);
        assert!(b.settle(5 * MIB, &|| "state".into()).is_err());
        drop(b);
        assert_eq!(host.0.load(Ordering::Acquire), 0);
    }

    #[test]
    fn held_bytes_outlive_the_barrier_until_given_back() {
        let host = Arc::new(Host(AtomicUsize::new(0), 10 * MIB));
        let b = ByteBudget::new(4 * MIB, Some(host.clone()));
        assert!(b.hold(MIB));
        b.charge(MIB, &String::new).unwrap();
        b.settle(MIB, &|| "state".into()).unwrap();
        // The transient MiB is gone; the held one is not.
        assert_eq!(b.used(), 2 * MIB);
        assert_eq!(host.0.load(Ordering::Acquire), 2 * MIB);
        // Held bytes count against the budget, at a barrier too.
        assert!(!b.hold(3 * MIB));
        assert!(b.settle(3 * MIB + 1, &|| "state".into()).is_err());
        b.unhold(MIB);
        assert_eq!(b.used(), MIB);
        assert_eq!(host.0.load(Ordering::Acquire), MIB);
        b.settle(3 * MIB, &|| "state".into()).unwrap();
        drop(b);
        assert_eq!(host.0.load(Ordering::Acquire), 0);
    }

    #[test]
    fn the_host_budget_is_shared_between_runs() {
        let host = Arc::new(Host(AtomicUsize::new(0), 5 * MIB));
        let a = ByteBudget::new(4 * MIB, Some(host.clone()));
        let b = ByteBudget::new(4 * MIB, Some(host.clone()));
        a.charge(4 * MIB, &String::new).unwrap();
        let e = b.charge(2 * MIB, &|| "step event".into()).unwrap_err();
        assert!(
            e.message.contains("host-wide memory budget"),
            "{}",
            e.message
        );
        a.release(4 * MIB);
        b.charge(2 * MIB, &String::new).unwrap();
    }
}
