//! Run admission: the server's run slots, each principal's share of them,
//! the `busy` refusal past either, and the counters and cancellation of
//! every admitted run. Every front door (an MCP `tools/call`, a studio
//! run) takes a [`RunPermit`] here before it starts a run, so they share
//! one limit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, watch};
use tokio_util::sync::CancellationToken;

use crate::principal::Principal;

/// Default of [`AdmissionOptions::max_concurrent_runs`].
pub const DEFAULT_MAX_CONCURRENT_RUNS: usize = 64;

/// Default of [`AdmissionOptions::max_runs_per_principal`]: a quarter of
/// the server's, so one client cannot take every slot.
pub const DEFAULT_MAX_RUNS_PER_PRINCIPAL: usize = 16;

/// Error code of a call refused because the server is at its run limit or
/// shutting down: `[busy] ...`.
pub const BUSY: &str = "busy";

/// The run limits of a server.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionOptions {
    /// Runs in flight at once, over every caller; a run past it is
    /// refused with [`Busy`] at once instead of queueing. At least 1.
    pub max_concurrent_runs: usize,
    /// Runs in flight at once for one principal; past it [`Busy`]. At
    /// least 1. Runs without a principal (stdio) only meet the server's
    /// limit.
    pub max_runs_per_principal: usize,
}

impl Default for AdmissionOptions {
    fn default() -> Self {
        AdmissionOptions {
            max_concurrent_runs: DEFAULT_MAX_CONCURRENT_RUNS,
            max_runs_per_principal: DEFAULT_MAX_RUNS_PER_PRINCIPAL,
        }
    }
}

/// Counters of the server since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Runs in flight now (their runs and instances are alive).
    pub in_flight: usize,
    /// Runs admitted (past the run limits).
    pub calls: u64,
    /// Admitted runs that their caller cancelled before they ended.
    pub cancelled: u64,
    /// Runs refused with `[busy]`.
    pub busy: u64,
}

/// Why a run was not admitted: the message of a [`BUSY`] error (at a
/// limit, or the server is shutting down).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Busy(String);

struct Shared {
    runs: Arc<Semaphore>,
    max_runs: usize,
    /// Runs in flight per principal key (entries at zero are removed).
    principal_runs: Arc<Mutex<HashMap<String, usize>>>,
    max_principal_runs: usize,
    closing: AtomicBool,
    /// Cancels every run (the hard end of a shutdown).
    stop: CancellationToken,
    in_flight: watch::Sender<usize>,
    calls: AtomicU64,
    cancelled: AtomicU64,
    busy: AtomicU64,
}

/// The run limits of a server and the runs they admitted. Cheap to clone;
/// clones share the limits and the counters.
#[derive(Clone)]
pub struct Admission {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("max_runs", &self.shared.max_runs)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Admission {
    /// Limits of `options` (each at least 1), no run in flight.
    pub fn new(options: AdmissionOptions) -> Admission {
        let max_runs = options.max_concurrent_runs.max(1);
        Admission {
            shared: Arc::new(Shared {
                runs: Arc::new(Semaphore::new(max_runs)),
                max_runs,
                principal_runs: Arc::default(),
                max_principal_runs: options.max_runs_per_principal.max(1),
                closing: AtomicBool::new(false),
                stop: CancellationToken::new(),
                in_flight: watch::channel(0).0,
                calls: AtomicU64::new(0),
                cancelled: AtomicU64::new(0),
                busy: AtomicU64::new(0),
            }),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        Stats {
            in_flight: *s.in_flight.borrow(),
            calls: s.calls.load(Ordering::Relaxed),
            cancelled: s.cancelled.load(Ordering::Relaxed),
            busy: s.busy.load(Ordering::Relaxed),
        }
    }

    /// Counts an admitted run that its caller cancelled.
    pub fn count_cancelled(&self) {
        self.shared.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts a shutdown: runs from now on are refused with [`Busy`];
    /// running ones go on.
    pub fn begin_shutdown(&self) {
        self.shared.closing.store(true, Ordering::Release);
    }

    /// Cancels every running run (cooperative first, then the hard stop
    /// after each run's grace period): their permits' tokens.
    pub fn cancel_all(&self) {
        self.shared.stop.cancel();
    }

    /// Waits until no run is in flight, at most `timeout`; `true` when
    /// none is.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let mut rx = self.shared.in_flight.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The server's run slots: work started on behalf of a run (the waves
    /// an agent-graph update starts) takes one per run here, so it counts
    /// under [`AdmissionOptions::max_concurrent_runs`].
    pub fn run_slots(&self) -> Arc<Semaphore> {
        self.shared.runs.clone()
    }

    /// Admits a run of `principal` (`None`: the stdio caller, which only
    /// meets the server's limit). The run counts as in flight
    /// ([`Admission::stats`], a shutdown's wait) until the permit drops.
    ///
    /// # Errors
    ///
    /// At a limit, or shutting down.
    pub fn admit(&self, principal: Option<&Principal>) -> Result<RunPermit, Busy> {
        let slot = self.slot(principal)?;
        let s = &self.shared;
        s.calls.fetch_add(1, Ordering::Relaxed);
        s.in_flight.send_modify(|n| *n += 1);
        Ok(RunPermit {
            shared: self.shared.clone(),
            cancel: s.stop.child_token(),
            _slot: slot,
        })
    }

    /// A [`Busy`] refusal, counted.
    fn busy(&self, why: String) -> Busy {
        self.shared.busy.fetch_add(1, Ordering::Relaxed);
        Busy(why)
    }

    /// A run slot of the server and of the caller's principal, or why
    /// there is none.
    fn slot(&self, principal: Option<&Principal>) -> Result<RunSlot, Busy> {
        let s = &self.shared;
        if s.closing.load(Ordering::Acquire) {
            return Err(self.busy("the server is shutting down".to_owned()));
        }
        let principal = match principal {
            Some(p) => Some(self.principal_run(p)?),
            None => None,
        };
        match s.runs.clone().try_acquire_owned() {
            Ok(permit) => Ok(RunSlot {
                _permit: permit,
                _principal: principal,
            }),
            Err(TryAcquireError::NoPermits | TryAcquireError::Closed) => Err(self.busy(format!(
                "{} runs are already in flight (the server's limit); retry later",
                s.max_runs
            ))),
        }
    }

    /// One more run counted under `p`, or why not.
    fn principal_run(&self, p: &Principal) -> Result<PrincipalRun, Busy> {
        let s = &self.shared;
        let key = p.key();
        let mut runs = s
            .principal_runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = runs.entry(key.clone()).or_insert(0);
        if *n >= s.max_principal_runs {
            return Err(self.busy(format!(
                "{} runs of {p} are already in flight (the limit per client); retry later",
                s.max_principal_runs
            )));
        }
        *n += 1;
        Ok(PrincipalRun {
            runs: s.principal_runs.clone(),
            key,
        })
    }
}

/// A run admitted by [`Admission::admit`]: it holds a run slot of the
/// server and of its principal, and counts as in flight, until it drops.
pub struct RunPermit {
    shared: Arc<Shared>,
    cancel: CancellationToken,
    _slot: RunSlot,
}

impl std::fmt::Debug for RunPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunPermit").finish_non_exhaustive()
    }
}

impl RunPermit {
    /// The run's cancellation: cancelled when the server cancels every
    /// run ([`Admission::cancel_all`], the end of a shutdown's grace);
    /// the holder cancels it to stop the run.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }
}

impl Drop for RunPermit {
    fn drop(&mut self) {
        // The gauge first, then the slot (a field, dropped after this).
        self.shared
            .in_flight
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A run slot: released when the run ends, however it ends.
struct RunSlot {
    _permit: OwnedSemaphorePermit,
    _principal: Option<PrincipalRun>,
}

/// One run counted under a principal.
struct PrincipalRun {
    runs: Arc<Mutex<HashMap<String, usize>>>,
    key: String,
}

impl Drop for PrincipalRun {
    fn drop(&mut self) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = runs.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                runs.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admitted_runs_count_under_the_limits_until_dropped() {
        let admission = Admission::new(AdmissionOptions {
            max_concurrent_runs: 3,
            max_runs_per_principal: 2,
        });
        let alice = Principal::Named(Arc::from("alice"));
        let bob = Principal::Named(Arc::from("bob"));
        let a1 = admission.admit(Some(&alice)).unwrap();
        let _a2 = admission.admit(Some(&alice)).unwrap();
        let busy = admission.admit(Some(&alice)).unwrap_err().to_string();
        assert!(busy.contains("the limit per client"), "{busy}");
        let _b1 = admission.admit(Some(&bob)).unwrap();
        let busy = admission.admit(Some(&bob)).unwrap_err().to_string();
        assert!(busy.contains("the server's limit"), "{busy}");
        assert_eq!(admission.stats().in_flight, 3);
        assert_eq!(admission.stats().busy, 2);
        let cancel = a1.cancel_token().clone();
        admission.cancel_all();
        assert!(cancel.is_cancelled());
        drop(a1);
        assert_eq!(admission.stats().in_flight, 2);
        let _a3 = admission.admit(Some(&alice)).unwrap();
    }

    #[tokio::test]
    async fn a_closing_server_admits_nothing() {
        let admission = Admission::new(AdmissionOptions::default());
        let run = admission.admit(None).unwrap();
        admission.begin_shutdown();
        let busy = admission.admit(None).unwrap_err();
        assert_eq!(busy.to_string(), "the server is shutting down");
        assert!(!admission.wait_idle(Duration::from_millis(10)).await);
        drop(run);
        assert!(admission.wait_idle(Duration::from_millis(10)).await);
    }
}
