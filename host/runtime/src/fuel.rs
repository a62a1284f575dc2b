//! A run's fuel budget, shared by its parallel calls and its sub-runs.
//!
//! A call holds a slice of the pool while it runs ([`FuelHold`], from
//! `arm` to `disarm` in the sandbox) and gives back what it did not spend.
//! A call that finds the pool empty while other calls still hold fuel
//! waits for them to give some back ([`FuelPool::take`] says
//! [`Take::Wait`]) instead of failing: a call is refused for fuel only
//! when nothing is left in the pool and no call holds any. (A running call
//! never waits: one that spends all it holds while the pool is empty traps
//! `out_of_fuel`.) A call waiting on a `tools` sub-run (which draws on the
//! same pool) or on a model first gives back what it holds and takes a new
//! slice when the wait ends (`caps::without_fuel`).
//!
//! Architecture Invariant: the fuel handed to calls never exceeds the
//! budget: every slice comes out of `free`, and only a hold puts any back.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Fuel a call takes from its run's budget at a time, topped up on every
/// epoch tick while the call runs. Parallel tasks of one run share one
/// budget this way: none is handed the whole remainder. 1e9 is about 50 ms
/// of pure compute on the reference machine, 50 epoch ticks: far more than
/// a call burns between two top-ups, so a call never runs dry while its
/// run still has fuel.
pub(crate) const FUEL_SLICE: u64 = 1_000_000_000;

/// The fuel of a run and of the sub-runs its `tools` calls start.
#[derive(Debug)]
pub(crate) struct FuelPool {
    /// What the pool started with: the outermost run's budget.
    budget: u64,
    state: Mutex<PoolState>,
    /// Woken whenever a hold ends.
    returned: Notify,
}

#[derive(Debug)]
struct PoolState {
    /// Fuel no call holds.
    free: u64,
    /// Live holds: calls that may still give fuel back.
    holds: usize,
}

/// What [`FuelPool::take`] found.
#[derive(Debug)]
pub(crate) enum Take {
    /// A slice, held until the hold ends.
    Got(FuelHold),
    /// The pool is empty but calls hold fuel they may give back.
    Wait,
    /// The pool is empty and no call holds any: the budget is spent.
    Spent,
}

impl FuelPool {
    /// A pool holding `budget`.
    pub(crate) fn new(budget: u64) -> Arc<FuelPool> {
        Arc::new(FuelPool {
            budget,
            state: Mutex::new(PoolState {
                free: budget,
                holds: 0,
            }),
            returned: Notify::new(),
        })
    }

    /// The budget the pool started with.
    pub(crate) fn budget(&self) -> u64 {
        self.budget
    }

    fn state(&self) -> MutexGuard<'_, PoolState> {
        // Nothing panics while holding the lock; a poisoned one is still
        // consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes up to [`FUEL_SLICE`] for a call that holds none.
    pub(crate) fn take(self: &Arc<Self>) -> Take {
        let mut state = self.state();
        if state.free > 0 {
            let given = state.free.min(FUEL_SLICE);
            state.free -= given;
            state.holds += 1;
            Take::Got(FuelHold {
                pool: Some(self.clone()),
                given,
            })
        } else if state.holds > 0 {
            Take::Wait
        } else {
            Take::Spent
        }
    }

    /// Takes a slice, waiting while the pool is empty and other calls hold
    /// fuel; `None` once the budget is spent. The caller bounds the wait
    /// (the run's deadline and cancellation).
    pub(crate) async fn take_or_wait(self: &Arc<Self>) -> Option<FuelHold> {
        loop {
            // Registered before looking, so a hold that ends in between
            // still wakes this call.
            let returned = self.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            match self.take() {
                Take::Got(hold) => return Some(hold),
                Take::Spent => return None,
                Take::Wait => returned.await,
            }
        }
    }

    /// True when the pool is empty and no call holds fuel.
    pub(crate) fn spent(&self) -> bool {
        let state = self.state();
        state.free == 0 && state.holds == 0
    }

    /// Fuel no call holds.
    #[cfg(test)]
    pub(crate) fn free(&self) -> u64 {
        self.state().free
    }

    fn give_back(&self, left: u64) {
        {
            let mut state = self.state();
            state.free = state.free.saturating_add(left);
            state.holds = state.holds.saturating_sub(1);
        }
        self.returned.notify_waiters();
    }
}

/// Fuel handed to one call. Counted among its pool's holds until it ends
/// ([`FuelHold::end`], or dropped: then what it held is lost to the run,
/// since only its store knew how much was left).
#[derive(Debug)]
pub(crate) struct FuelHold {
    pool: Option<Arc<FuelPool>>,
    given: u64,
}

impl FuelHold {
    /// Fuel handed to the call so far (its slice plus top-ups).
    pub(crate) fn given(&self) -> u64 {
        self.given
    }

    /// Takes up to another [`FUEL_SLICE`] from the pool; 0 when it is
    /// empty. A running call never waits here: it runs on with what it
    /// holds.
    pub(crate) fn top_up(&mut self) -> u64 {
        let Some(pool) = &self.pool else {
            return 0;
        };
        let mut state = pool.state();
        let more = state.free.min(FUEL_SLICE);
        state.free -= more;
        self.given += more;
        more
    }

    /// Ends the hold with `left` unspent, which goes back to the pool;
    /// returns the fuel spent.
    pub(crate) fn end(mut self, left: u64) -> u64 {
        let left = left.min(self.given);
        if let Some(pool) = self.pool.take() {
            pool.give_back(left);
        }
        self.given - left
    }
}

impl Drop for FuelHold {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give_back(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn got(take: Take) -> FuelHold {
        match take {
            Take::Got(hold) => hold,
            other => panic!("expected a slice, got {other:?}"),
        }
    }

    #[test]
    fn calls_share_the_budget_never_more() {
        let pool = FuelPool::new(2 * FUEL_SLICE + 7);
        let holds = [got(pool.take()), got(pool.take()), got(pool.take())];
        let given: Vec<u64> = holds.iter().map(FuelHold::given).collect();
        assert_eq!(given, [FUEL_SLICE, FUEL_SLICE, 7]);
        assert!(matches!(pool.take(), Take::Wait));
        let mut holds = holds.into_iter();
        let mut first = holds.next().unwrap();
        assert_eq!(first.top_up(), 0, "nothing is free");
        assert_eq!(first.end(FUEL_SLICE - 5), 5);
        assert_eq!(pool.free(), FUEL_SLICE - 5);
        let mut second = holds.next().unwrap();
        assert_eq!(second.top_up(), FUEL_SLICE - 5);
        assert_eq!(second.given(), 2 * FUEL_SLICE - 5);
        // Unspent fuel is capped at what was given.
        assert_eq!(second.end(u64::MAX), 0);
        assert_eq!(holds.next().unwrap().end(0), 7);
        assert_eq!(pool.free(), 2 * FUEL_SLICE - 5);
        assert!(!pool.spent());
    }

    #[test]
    fn the_budget_is_spent_only_when_no_call_holds_fuel() {
        let pool = FuelPool::new(10);
        let hold = got(pool.take());
        assert!(!pool.spent(), "a call still holds fuel");
        assert!(matches!(pool.take(), Take::Wait));
        assert_eq!(hold.end(0), 10);
        assert!(pool.spent());
        assert!(matches!(pool.take(), Take::Spent));
    }

    #[test]
    fn a_dropped_hold_stops_counting_and_its_fuel_is_lost() {
        let pool = FuelPool::new(10);
        drop(got(pool.take()));
        assert!(pool.spent());
    }

    /// A call waiting for a slice of `pool`, given time to start waiting;
    /// it yields the size of the slice it gets.
    async fn wait_for_a_slice(pool: &Arc<FuelPool>) -> tokio::task::JoinHandle<Option<u64>> {
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { pool.take_or_wait().await.map(|h| h.given()) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        waiter
    }

    #[tokio::test]
    async fn a_waiting_call_gets_what_a_finished_call_gives_back() {
        let pool = FuelPool::new(100);
        let hold = got(pool.take());
        let waiter = wait_for_a_slice(&pool).await;
        assert!(!waiter.is_finished(), "the pool is empty: it must wait");
        assert_eq!(hold.end(60), 40);
        assert_eq!(waiter.await.unwrap(), Some(60));
    }

    #[tokio::test]
    async fn a_waiting_call_ends_when_the_last_hold_ends_spent() {
        let pool = FuelPool::new(100);
        let hold = got(pool.take());
        let waiter = wait_for_a_slice(&pool).await;
        assert_eq!(hold.end(0), 100);
        assert_eq!(waiter.await.unwrap(), None);
    }
}
