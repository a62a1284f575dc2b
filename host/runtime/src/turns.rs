//! Turns on the cores for long calls, so short calls are not queued behind
//! spinners.
//!
//! Every guest yields its tokio worker on each epoch tick, but a yielded
//! task goes straight back into the run queue: with 16 spinning instances
//! on 2 workers, each await of a short call (an echo over HTTP) waited
//! behind about 8 of them, ~1 ms each. A call that has run longer than
//! [`LONG_CALL`] therefore needs a turn to go on running: on each tick it
//! gives its turn back and queues (FIFO) for the next one, parked off the
//! run queue while it waits. At most [`Turns::new`]'s `n` long calls run at
//! once (the cores), so a short call only ever waits behind those.
//!
//! A turn is a lease renewed on every tick. A call that stops ticking
//! while it holds one (it is blocked in a host call: a sleep, a poll) loses
//! it after [`MAX_TURN_IDLE`], taken back by the epoch ticker thread, so a
//! sleeping guest cannot keep the cores from others.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a call runs before it needs turns. Graph nodes that do JSON
/// work finish in microseconds; a call past this is computing for real
/// (or spinning), and sharing the cores in turns costs it nothing.
pub(crate) const LONG_CALL: Duration = Duration::from_millis(5);

/// How long a turn survives without a tick (its call is blocked in the
/// host) before the ticker takes it back: a few ticks.
pub(crate) const MAX_TURN_IDLE: Duration = Duration::from_millis(5);

/// The turns of one runtime.
pub(crate) struct Turns {
    cores: Arc<Semaphore>,
    leases: Mutex<Vec<Weak<Lease>>>,
}

/// One call's hold on a turn, if it has one, and when it last renewed it.
#[derive(Default)]
pub(crate) struct Lease {
    held: Mutex<Option<(OwnedSemaphorePermit, Instant)>>,
}

impl Lease {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(OwnedSemaphorePermit, Instant)>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives the turn back, if held.
    pub(crate) fn release(&self) {
        self.slot().take();
    }
}

impl Turns {
    /// `n` long calls may run at once.
    pub(crate) fn new(n: usize) -> Arc<Self> {
        Arc::new(Turns {
            cores: Arc::new(Semaphore::new(n.max(1))),
            leases: Mutex::new(Vec::new()),
        })
    }

    /// A lease for a call that became long; the ticker watches it.
    pub(crate) fn lease(&self) -> Arc<Lease> {
        let lease = Arc::new(Lease::default());
        let mut all = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        all.push(Arc::downgrade(&lease));
        lease
    }

    /// On a tick of a long call: give the turn back and wait (parked, in
    /// arrival order) for the next one.
    pub(crate) fn next_turn(&self, lease: Arc<Lease>) -> impl Future<Output = ()> + Send + 'static {
        lease.release();
        let cores = self.cores.clone();
        async move {
            if let Ok(permit) = cores.acquire_owned().await {
                *lease.slot() = Some((permit, Instant::now()));
            }
            // The turn is handed over by waking this task, which tokio runs
            // next on the waker's worker (its LIFO slot), ahead of every
            // queued task: go to the back of the run queue first, so short
            // calls queued meanwhile run before the spinning resumes.
            tokio::task::yield_now().await;
        }
    }

    /// Takes back the turns of calls that stopped ticking (blocked in the
    /// host) and forgets finished calls. Run by the epoch ticker thread.
    pub(crate) fn reap(&self, now: Instant) {
        let mut all = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|weak| {
            let Some(lease) = weak.upgrade() else {
                return false;
            };
            let mut slot = lease.slot();
            if slot
                .as_ref()
                .is_some_and(|(_, since)| now.duration_since(*since) > MAX_TURN_IDLE)
            {
                slot.take();
            }
            true
        });
    }

    #[cfg(test)]
    fn free(&self) -> usize {
        self.cores.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_calls_take_turns_and_idle_turns_are_taken_back() {
        let turns = Turns::new(1);
        let (a, b) = (turns.lease(), turns.lease());
        turns.next_turn(a.clone()).await;
        assert_eq!(turns.free(), 0);
        // `b` waits while `a` holds the only turn.
        let waiting = tokio::spawn(turns.next_turn(b.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        // `a` is blocked in the host: the reaper takes its turn back and
        // `b` gets it.
        turns.reap(Instant::now() + MAX_TURN_IDLE * 2);
        waiting.await.unwrap();
        assert!(b.slot().is_some() && a.slot().is_none());
        drop((a, b));
        turns.reap(Instant::now());
        assert!(turns.leases.lock().unwrap().is_empty());
        assert_eq!(turns.free(), 1);
    }
}
