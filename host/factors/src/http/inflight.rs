//! What `http` requests hold while they are in flight, and the caps on it:
//! a slot of the run's and one of the host's
//! ([`MAX_HTTP_REQUESTS_PER_RUN`], [`MAX_HTTP_REQUESTS_PER_HOST`]), taken
//! before the body is read and kept until the connection is closed and the
//! response body dropped; a bounded queue of requests waiting for one
//! ([`MAX_HTTP_WAITING_PER_RUN`]); resolution slots
//! ([`MAX_HTTP_RESOLUTIONS_PER_RUN`], [`MAX_HTTP_RESOLUTIONS_PER_HOST`]);
//! and the bytes the host buffers for a request (its head while it waits,
//! its body, its connection's buffers, the response frame the guest has
//! not read yet), charged to the run's host byte budget as a [`Charge`].
//!
//! The waits here are unbounded: every caller races them against the
//! run's soft deadline, as every other wait of a request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sandgraph_core::RunError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use sandgraph_runtime::caps::RunControl;

use super::{
    MAX_HTTP_REQUESTS_PER_HOST, MAX_HTTP_REQUESTS_PER_RUN, MAX_HTTP_RESOLUTIONS_PER_HOST,
    MAX_HTTP_RESOLUTIONS_PER_RUN, MAX_HTTP_WAITING_PER_RUN,
};

/// The host-wide accounts, held by the runtime and shared by every run.
pub(crate) struct HostHttp {
    requests: Arc<Semaphore>,
    resolutions: Arc<Semaphore>,
}

impl HostHttp {
    /// The host's accounts at the default caps.
    pub(crate) fn new() -> Arc<Self> {
        Self::with_caps(MAX_HTTP_REQUESTS_PER_HOST, MAX_HTTP_RESOLUTIONS_PER_HOST)
    }

    fn with_caps(requests: usize, resolutions: usize) -> Arc<Self> {
        Arc::new(HostHttp {
            requests: Arc::new(Semaphore::new(requests)),
            resolutions: Arc::new(Semaphore::new(resolutions)),
        })
    }
}

/// One run's accounts.
pub(crate) struct RunHttp {
    requests: Arc<Semaphore>,
    resolutions: Arc<Semaphore>,
    /// Requests waiting for a slot now.
    waiting: AtomicUsize,
    waiting_cap: usize,
}

impl RunHttp {
    fn with_caps(requests: usize, resolutions: usize, waiting: usize) -> Arc<Self> {
        Arc::new(RunHttp {
            requests: Arc::new(Semaphore::new(requests)),
            resolutions: Arc::new(Semaphore::new(resolutions)),
            waiting: AtomicUsize::new(0),
            waiting_cap: waiting,
        })
    }
}

/// The accounts a run's requests draw on: the host's and the run's.
#[derive(Clone)]
pub(crate) struct Accounts {
    host: Arc<HostHttp>,
    run: Arc<RunHttp>,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Accounts")
    }
}

/// The same accounts: a grant bound to a run equals only itself.
impl PartialEq for Accounts {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.host, &other.host) && Arc::ptr_eq(&self.run, &other.run)
    }
}

impl Eq for Accounts {}

/// Why a request got no slot at once and may not wait for one.
pub(crate) struct QueueFull {
    pub(crate) waiting: usize,
}

impl std::fmt::Display for QueueFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} http requests of this run already wait for one of its {} slots (at most {} \
             may wait)",
            self.waiting, MAX_HTTP_REQUESTS_PER_RUN, MAX_HTTP_WAITING_PER_RUN
        )
    }
}

/// A request's slots, run's and host's, held while it is in flight.
pub(crate) struct Slot {
    _run: OwnedSemaphorePermit,
    _host: OwnedSemaphorePermit,
}

/// Leaves the run's waiting count when dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Accounts {
    /// Accounts on `host`'s, and on `run`'s when given (a sub-run's
    /// caller's), else on fresh ones of the run.
    pub(crate) fn new(host: Arc<HostHttp>, run: Option<Arc<RunHttp>>) -> Self {
        let run = run.unwrap_or_else(|| {
            RunHttp::with_caps(
                MAX_HTTP_REQUESTS_PER_RUN,
                MAX_HTTP_RESOLUTIONS_PER_RUN,
                MAX_HTTP_WAITING_PER_RUN,
            )
        });
        Accounts { host, run }
    }

    /// The run's part, for its sub-runs.
    pub(crate) fn run(&self) -> &Arc<RunHttp> {
        &self.run
    }

    /// A slot of the run's, then one of the host's: at once when free,
    /// else after waiting for one, unless the run's queue is full.
    pub(crate) async fn slot(&self) -> Result<Slot, QueueFull> {
        if let Ok(run) = self.run.requests.clone().try_acquire_owned()
            && let Ok(host) = self.host.requests.clone().try_acquire_owned()
        {
            return Ok(Slot {
                _run: run,
                _host: host,
            });
        }
        let before = self.run.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.run.waiting);
        if before >= self.run.waiting_cap {
            return Err(QueueFull { waiting: before });
        }
        let run = acquire(&self.run.requests).await;
        let host = acquire(&self.host.requests).await;
        Ok(Slot {
            _run: run,
            _host: host,
        })
    }

    /// A resolution slot of the run's and one of the host's, to be held
    /// by the resolution itself until it returns.
    pub(crate) async fn resolution(&self) -> [OwnedSemaphorePermit; 2] {
        let run = acquire(&self.run.resolutions).await;
        let host = acquire(&self.host.resolutions).await;
        [run, host]
    }
}

/// A permit of `s`, which is never closed.
async fn acquire(s: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    match s.clone().acquire_owned().await {
        Ok(p) => p,
        // Never closed: a permit nobody could take would wait forever
        // (until the caller's deadline), as a full semaphore does.
        Err(_) => std::future::pending().await,
    }
}

/// Bytes charged to a run's host byte budget, given back when dropped.
pub(crate) struct Charge {
    control: Arc<RunControl>,
    bytes: usize,
}

impl Charge {
    /// Nothing charged yet.
    pub(crate) fn new(control: Arc<RunControl>) -> Self {
        Charge { control, bytes: 0 }
    }

    /// Charges `bytes` more for `what`, or fails naming it (nothing more
    /// charged then).
    pub(crate) fn add(&mut self, bytes: usize, what: &dyn Fn() -> String) -> Result<(), RunError> {
        self.control.bytes().charge(bytes, what)?;
        self.bytes += bytes;
        Ok(())
    }

    /// Gives back everything charged so far.
    pub(crate) fn clear(&mut self) {
        self.control
            .bytes()
            .release(std::mem::take(&mut self.bytes));
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn accounts(host: (usize, usize), run: (usize, usize, usize)) -> Accounts {
        Accounts {
            host: HostHttp::with_caps(host.0, host.1),
            run: RunHttp::with_caps(run.0, run.1, run.2),
        }
    }

    async fn pending<T>(f: impl Future<Output = T>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn a_run_waits_past_its_cap_and_is_refused_past_its_queue() {
        let a = accounts((8, 8), (2, 1, 1));
        let s1 = a.slot().await.ok().unwrap();
        let _s2 = a.slot().await.ok().unwrap();
        // The third waits; while it does, a fourth finds the queue full.
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.slot().await.ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let full = a.slot().await.err().unwrap();
        assert_eq!(full.waiting, 1);
        assert!(full.to_string().contains("at most 256 may wait"), "{full}");
        drop(s1);
        let _s3 = waiter
            .await
            .unwrap()
            .expect("the waiter gets the freed slot");
        // A dropped waiter leaves the queue.
        assert!(pending(a.slot()).await);
        assert_eq!(a.run.waiting.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn runs_share_the_host_cap_and_resolutions_are_capped_twice() {
        let host = HostHttp::with_caps(3, 2);
        let run = || Accounts {
            host: host.clone(),
            run: RunHttp::with_caps(2, 1, 8),
        };
        let (a, b, c) = (run(), run(), run());
        let _held = [
            a.slot().await.ok(),
            a.slot().await.ok(),
            b.slot().await.ok(),
        ];
        assert!(pending(b.slot()).await, "the host's three are taken");
        let r = a.resolution().await;
        assert!(pending(a.resolution()).await, "the run's one is taken");
        let _r2 = b.resolution().await;
        assert!(pending(c.resolution()).await, "the host's two are taken");
        drop(r);
        let _r3 = c.resolution().await;
        // Fresh accounts of a run are distinct; clones are the same.
        assert_eq!(a, a.clone());
        assert_ne!(a, b);
    }
}
