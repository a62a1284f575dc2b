//! The capability account of a chain of runs: the outermost run and every
//! sub-run its `tools` calls start, however deep, draw on one account.
//!
//! - Every capability call of any decision counts against
//!   [`MAX_CAPABILITY_CALLS_PER_RUN`]; past it a call is refused at once
//!   (`quota`) and adds nothing to the journal but a count.
//! - Quotas (`llm` calls and tokens, `tools` calls) are kept per graph
//!   for the whole chain: a graph's grant is spent once per outermost run,
//!   whether the graph runs once or is called twenty times as a tool.
//! - Refusals (`denied`, `quota`, `recursion`, `invalid`) are counted per
//!   kind (graph, capability, decision) and journaled as one row each with
//!   their count when the outermost run ends: a graph looping on a refused
//!   call costs the journal one row.
//! - Rows queued for the journal hold their bytes in the chain's allowance
//!   ([`MAX_QUEUED_JOURNAL_BYTES`]) and in their run's host byte budget
//!   until the journal has written them.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sandgraph_core::audit::{CapabilityCall, CapabilityLog};

use crate::limits::{MAX_CAPABILITY_CALLS_PER_RUN, MAX_QUEUED_JOURNAL_BYTES, MAX_REFUSAL_KINDS};

/// What one graph used of its grants in a chain of runs: one meter per
/// capability, by the meter's type ([`RunControl::usage`]).
///
/// [`RunControl::usage`]: crate::caps::RunControl::usage
#[derive(Default)]
pub(crate) struct GraphUsage(Mutex<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>);

impl std::fmt::Debug for GraphUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphUsage").finish_non_exhaustive()
    }
}

impl GraphUsage {
    /// The graph's meter of type `U`, made at first use.
    pub(crate) fn get<U: Default + Send + Sync + 'static>(&self) -> Arc<U> {
        let mut meters = lock(&self.0);
        let found = meters
            .iter()
            .find(|(id, _)| *id == TypeId::of::<U>())
            .map(|(_, m)| m.clone());
        let meter = found.unwrap_or_else(|| {
            let m: Arc<dyn Any + Send + Sync> = Arc::new(U::default());
            meters.push((TypeId::of::<U>(), m.clone()));
            m
        });
        match meter.downcast::<U>() {
            Ok(m) => m,
            // Keyed by its own type id: always a `U`.
            Err(_) => unreachable!("a usage meter is stored under its own type"),
        }
    }
}

/// A capability call past the run's cap ([`MAX_CAPABILITY_CALLS_PER_RUN`]):
/// refused at once (`quota`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the run made all of its {MAX_CAPABILITY_CALLS_PER_RUN} capability calls")]
pub struct CallCapReached;

/// Refusals of one kind: the first one's row, with the count so far.
struct Tally {
    row: CapabilityCall,
    log: Arc<dyn CapabilityLog>,
}

/// The account of one outermost run, shared by all its sub-runs.
#[derive(Default)]
pub(crate) struct Account {
    /// Capability calls made so far, of any decision.
    calls: AtomicU64,
    /// Each graph's usage, by graph name.
    usage: Mutex<HashMap<Arc<str>, Arc<GraphUsage>>>,
    /// Refusals counted per (graph, capability, decision), in first-seen
    /// order; written when the run ends.
    refusals: Mutex<Vec<Tally>>,
    /// Refusals of kinds past [`MAX_REFUSAL_KINDS`], only counted.
    untallied: AtomicU64,
    /// Bytes of the chain's journal rows queued and not yet written.
    queued_bytes: AtomicUsize,
    /// Signalled when queued rows are written.
    written: tokio::sync::Notify,
}

/// A queued row's bytes, given back to its account when the row is
/// written (dropped by the log).
pub(crate) struct RowBytes {
    account: Arc<Account>,
    bytes: usize,
}

impl Drop for RowBytes {
    fn drop(&mut self) {
        self.account
            .queued_bytes
            .fetch_sub(self.bytes, Ordering::AcqRel);
        self.account.written.notify_waiters();
    }
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("calls", &self.calls.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Account {
    /// The usage of `graph` in this chain (the same for every run of it).
    pub(crate) fn usage_of(&self, graph: &Arc<str>) -> Arc<GraphUsage> {
        lock(&self.usage).entry(graph.clone()).or_default().clone()
    }

    /// Counts one capability call; past [`MAX_CAPABILITY_CALLS_PER_RUN`]
    /// the refusal.
    pub(crate) fn enter(&self) -> Result<(), CallCapReached> {
        let n = self.calls.fetch_add(1, Ordering::AcqRel);
        if n < MAX_CAPABILITY_CALLS_PER_RUN {
            Ok(())
        } else {
            Err(CallCapReached)
        }
    }

    /// Holds `bytes` of the chain's journal allowance
    /// ([`MAX_QUEUED_JOURNAL_BYTES`]) for a queued row, waiting while rows
    /// already queued hold it (the caller bounds the wait).
    pub(crate) async fn hold_row_bytes(self: &Arc<Self>, bytes: usize) -> RowBytes {
        loop {
            let written = self.written.notified();
            let taken =
                self.queued_bytes
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                        // One row always fits, however large.
                        (held == 0 || held + bytes <= MAX_QUEUED_JOURNAL_BYTES)
                            .then_some(held + bytes)
                    });
            if taken.is_ok() {
                return RowBytes {
                    account: self.clone(),
                    bytes,
                };
            }
            written.await;
        }
    }

    /// Resolves once a queued row of the chain has been written (or its
    /// bytes otherwise given back); register before checking, as
    /// [`tokio::sync::Notify::notified`] says.
    pub(crate) fn row_written(&self) -> tokio::sync::futures::Notified<'_> {
        self.written.notified()
    }

    /// Wakes those waiting in [`Account::row_written`].
    pub(crate) fn notify_row_written(&self) {
        self.written.notify_waiters();
    }

    /// Counts a refusal under its kind; the first of a kind keeps its row.
    pub(crate) fn tally(&self, row: CapabilityCall, log: &Arc<dyn CapabilityLog>) {
        let mut refusals = lock(&self.refusals);
        if let Some(t) = refusals.iter_mut().find(|t| {
            t.row.graph == row.graph
                && t.row.capability == row.capability
                && t.row.decision == row.decision
        }) {
            t.row.count = t.row.count.saturating_add(1);
            t.row.request_bytes = t.row.request_bytes.saturating_add(row.request_bytes);
            return;
        }
        if refusals.len() >= MAX_REFUSAL_KINDS {
            self.untallied.fetch_add(1, Ordering::Relaxed);
            return;
        }
        refusals.push(Tally {
            row,
            log: log.clone(),
        });
    }

    /// Takes the counted refusals, each with the log it goes to.
    pub(crate) fn take_refusals(&self) -> Vec<(CapabilityCall, Arc<dyn CapabilityLog>)> {
        let untallied = self.untallied.swap(0, Ordering::AcqRel);
        if untallied > 0 {
            tracing::warn!(
                untallied,
                "refused capability calls of more than {MAX_REFUSAL_KINDS} kinds in one run: \
                 the rest are counted here only"
            );
        }
        std::mem::take(&mut *lock(&self.refusals))
            .into_iter()
            .map(|t| (t.row, t.log))
            .collect()
    }
}

/// True for the decisions the host makes before a call goes anywhere,
/// which are counted per kind rather than journaled one by one.
pub(crate) fn is_refusal(decision: &str) -> bool {
    matches!(decision, "denied" | "quota" | "recursion" | "invalid")
}

/// Whether a usage map entry exists (tests).
#[cfg(test)]
fn graphs(account: &Account) -> usize {
    lock(&account.usage).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;

    impl CapabilityLog for Nowhere {
        fn record(
            &self,
            _: CapabilityCall,
            _: sandgraph_core::audit::Written,
        ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            Box::pin(async {})
        }
    }

    fn refusal(graph: &str, decision: &str, target: &str) -> CapabilityCall {
        CapabilityCall {
            graph: graph.into(),
            capability: "tools".into(),
            target: target.into(),
            decision: decision.into(),
            request_bytes: 2,
            ..CapabilityCall::default()
        }
    }

    #[test]
    fn calls_past_the_cap_are_refused() {
        let account = Account::default();
        account
            .calls
            .store(MAX_CAPABILITY_CALLS_PER_RUN - 1, Ordering::Release);
        assert_eq!(account.enter(), Ok(()));
        let e = account.enter().unwrap_err().to_string();
        assert_eq!(
            e,
            format!("the run made all of its {MAX_CAPABILITY_CALLS_PER_RUN} capability calls")
        );
        assert!(account.enter().is_err());
    }

    #[test]
    fn refusals_of_one_kind_are_one_row_with_a_count() {
        let account = Account::default();
        let log: Arc<dyn CapabilityLog> = Arc::new(Nowhere);
        for i in 0..1000 {
            account.tally(refusal("a", "denied", &format!("t{i}")), &log);
        }
        account.tally(refusal("a", "quota", "x"), &log);
        account.tally(refusal("b", "denied", "y"), &log);
        let rows: Vec<_> = account
            .take_refusals()
            .into_iter()
            .map(|(r, _)| (r.graph, r.decision, r.target, r.count, r.request_bytes))
            .collect();
        assert_eq!(
            rows,
            [
                ("a".into(), "denied".into(), "t0".into(), 1000, 2000),
                ("a".into(), "quota".into(), "x".into(), 1, 2),
                ("b".into(), "denied".into(), "y".into(), 1, 2),
            ]
        );
        assert!(account.take_refusals().is_empty());
    }

    #[test]
    fn kinds_are_bounded() {
        let account = Account::default();
        let log: Arc<dyn CapabilityLog> = Arc::new(Nowhere);
        for i in 0..MAX_REFUSAL_KINDS + 10 {
            account.tally(refusal(&format!("g{i}"), "denied", "t"), &log);
        }
        assert_eq!(account.take_refusals().len(), MAX_REFUSAL_KINDS);
    }

    #[tokio::test]
    async fn queued_rows_wait_for_the_allowance() {
        let account = Arc::new(Account::default());
        let first = account.hold_row_bytes(MAX_QUEUED_JOURNAL_BYTES - 10).await;
        let second = account.clone();
        let waiting = tokio::spawn(async move { second.hold_row_bytes(100).await });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "the allowance is full: the row waits"
        );
        drop(first);
        let held = waiting.await.unwrap();
        assert_eq!(account.queued_bytes.load(Ordering::Acquire), 100);
        drop(held);
        assert_eq!(account.queued_bytes.load(Ordering::Acquire), 0);
    }

    #[test]
    fn usage_is_one_per_graph() {
        let account = Account::default();
        let a: Arc<str> = Arc::from("a");
        assert!(Arc::ptr_eq(
            &account.usage_of(&a),
            &account.usage_of(&Arc::from("a"))
        ));
        account.usage_of(&Arc::from("b"));
        assert_eq!(graphs(&account), 2);
    }
}
