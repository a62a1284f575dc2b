//! Where the store's synchronous and asynchronous code meet, in one place.
//!
//! Every transaction that leaves its caller's thread is written once, as
//! an async function whose future needs no runtime of the caller's: a redb
//! writer's commit is a request to the group committer's thread, answered
//! on a oneshot channel; a PostgreSQL transaction is a task on the `Pg`'s
//! own runtime. Async callers await that future; synchronous code waits
//! for it with [`block_on`], the one blocking bridge. The other way round,
//! [`unblock`] runs blocking redb work off an async caller's runtime.

use crate::StoreError;

/// Waits for `fut` on the calling thread. Works with and without a current
/// tokio runtime, also inside a runtime's worker or blocking-pool thread
/// (tokio's cooperative budget is lifted, and nothing here enters the
/// runtime, so it neither panics nor deadlocks there; it does stall that
/// worker, which is why async code awaits instead).
///
/// Only for futures whose work runs elsewhere (the committer's thread, the
/// `Pg`'s runtime): a future that needed the blocked thread's runtime to
/// make progress would never finish.
pub(crate) fn block_on<O>(fut: impl std::future::Future<Output = O>) -> O {
    futures::executor::block_on(tokio::task::unconstrained(fut))
}

/// Runs blocking database work off the async caller's runtime workers, on
/// its blocking pool (inline when there is no tokio runtime).
pub(crate) async fn unblock<T, F>(f: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => rt
            .spawn_blocking(f)
            .await
            .map_err(|e| StoreError::Db(format!("the storage task failed: {e}")))?,
        Err(_) => f(),
    }
}
