//! The group committer: one thread per store that commits the queued
//! writers' operations in one durable redb transaction.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use redb::Database;
use serde::Deserialize;

use super::lock;
use super::redb_threads::Lease;
use super::rows::{Op, apply_ops, begin_write, commit_ops};
use crate::StoreError;
use crate::bridge::unblock;

/// Most writers' requests the committer takes into one transaction.
const GROUP_BATCH: usize = 128;

/// One writer's operations, committed all or nothing, and where the
/// outcome goes.
struct CommitRequest {
    thread: String,
    graph: String,
    ops: Vec<Op>,
    reply: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
    /// In-flight work keeps the thread's lease even if the writer is gone
    /// (its future dropped): no other writer of the thread starts before
    /// this commit is done.
    _lease: Arc<Lease>,
}

/// The group committer of one [`crate::Store`]. Every [`ThreadWriter`]
/// commit goes through one thread, which takes all the requests queued
/// while it was busy and commits them in one durable transaction, so the
/// writers of concurrent threads share a single fsync. Cheap to clone; the
/// thread starts with the first request and stops (closing its handle on
/// the database) when the last clone is dropped.
#[derive(Clone, Default)]
pub(crate) struct Committer {
    pub(super) shared: Arc<CommitterShared>,
}

#[derive(Default)]
pub(super) struct CommitterShared {
    /// The committer thread's queue; `None` until it is started.
    queue: Mutex<Option<mpsc::Sender<CommitRequest>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    pub(super) stats: Arc<CommitStats>,
}

#[derive(Default)]
pub(super) struct CommitStats {
    /// Durable transactions committed for writers.
    pub(super) commits: AtomicU64,
    /// Requests sent and not yet taken into a batch.
    pub(super) queued: AtomicUsize,
    /// Taken by the committer before each batch; tests hold it to queue
    /// several requests into one batch.
    pub(super) gate: Mutex<()>,
}

impl CommitRequest {
    /// Gives the lease back, then answers the caller: once answered, the
    /// writer may be dropped and the thread begun again at once.
    fn answer(self, outcome: Result<(), StoreError>) {
        let CommitRequest { reply, _lease, .. } = self;
        drop(_lease);
        let _ = reply.send(outcome);
    }
}

fn committer_stopped() -> StoreError {
    StoreError::Db("the group committer stopped".into())
}

/// The same failure again, for each caller of a batch that failed as a
/// whole.
fn shared_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Db(message) => StoreError::Db(message.clone()),
        e => StoreError::Db(e.to_string()),
    }
}

impl Committer {
    /// Queues `request`, starting the committer thread on first use. Gives
    /// the request back when there is no committer thread to take it.
    fn send(&self, db: &Arc<Database>, request: CommitRequest) -> Result<(), CommitRequest> {
        let mut queue = lock(&self.shared.queue);
        if queue.is_none() {
            let (sender, receiver) = mpsc::channel();
            let db = db.clone();
            let stats = self.shared.stats.clone();
            let spawned = std::thread::Builder::new()
                .name("sandgraph-store-commit".into())
                .spawn(move || group_committer(&db, &receiver, &stats));
            match spawned {
                Ok(worker) => {
                    *lock(&self.shared.worker) = Some(worker);
                    *queue = Some(sender);
                }
                Err(e) => {
                    tracing::warn!("cannot start the group committer, committing alone: {e}");
                    return Err(request);
                }
            }
        }
        let Some(sender) = queue.as_ref() else {
            return Err(request);
        };
        match sender.send(request) {
            Ok(()) => {
                self.shared.stats.queued.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            // The thread is gone (it can only have panicked): start another
            // next time, commit this one alone.
            Err(mpsc::SendError(request)) => {
                *queue = None;
                Err(request)
            }
        }
    }

    /// Commits `ops` of `thread`, in order and all or nothing, in a durable
    /// transaction shared with whatever the store's other writers commit at
    /// the same time; resolves once it is on disk. The future needs no
    /// runtime (the committer thread does the work), so a thread outside
    /// any runtime waits for it with [`crate::bridge::block_on`].
    pub(super) async fn commit(
        &self,
        db: &Arc<Database>,
        thread: &str,
        graph: &str,
        ops: Vec<Op>,
        lease: Arc<Lease>,
    ) -> Result<(), StoreError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = CommitRequest {
            thread: thread.to_owned(),
            graph: graph.to_owned(),
            ops,
            reply,
            _lease: lease,
        };
        match self.send(db, request) {
            Ok(()) => answer.await.unwrap_or_else(|_| Err(committer_stopped())),
            Err(request) => {
                let db = db.clone();
                let stats = self.shared.stats.clone();
                unblock(move || commit_alone(&db, &request, &stats)).await
            }
        }
    }
}

impl Drop for CommitterShared {
    fn drop(&mut self) {
        // Closing the queue stops the thread once it has answered what it
        // holds; joining it closes its handle on the database before the
        // store's last handle is gone.
        drop(lock(&self.queue).take());
        if let Some(worker) = lock(&self.worker).take()
            && worker.join().is_err()
        {
            tracing::error!("the group committer panicked");
        }
    }
}

/// The committer thread's loop: waits for a request, takes every other
/// request already queued (up to [`GROUP_BATCH`]) and commits them together.
/// Requests that arrive during a commit make the next batch.
fn group_committer(db: &Database, receiver: &mpsc::Receiver<CommitRequest>, stats: &CommitStats) {
    while let Ok(first) = receiver.recv() {
        drop(lock(&stats.gate));
        let mut batch = vec![first];
        while batch.len() < GROUP_BATCH
            && let Ok(request) = receiver.try_recv()
        {
            batch.push(request);
        }
        stats.queued.fetch_sub(batch.len(), Ordering::SeqCst);
        commit_group(db, batch, stats);
    }
}

/// Commits a batch of requests in one durable transaction and answers each
/// caller with its own outcome.
///
/// A request whose operations fail (a stale or unknown checkpoint, a graph
/// mismatch, a missing value) gets its error and the transaction is redone
/// from scratch without it, so one writer's bad operation never fails
/// another's. Savepoints cannot do this in redb: a savepoint can only be
/// taken in a transaction that has not written yet. Redoing is cheap since
/// such failures are rare and nothing is fsynced until the commit. A
/// writer waits for its commit before it sends more, and a lease allows one
/// writer per thread, so the requests of a batch are of different threads
/// and leaving one out does not change whether the others apply. Only a
/// failure of the transaction itself (beginning or committing it: I/O)
/// fails every request of the batch.
fn commit_group(db: &Database, mut batch: Vec<CommitRequest>, stats: &CommitStats) {
    while !batch.is_empty() {
        match apply_group(db, &batch) {
            Ok(()) => {
                stats.commits.fetch_add(1, Ordering::SeqCst);
                for request in batch {
                    request.answer(Ok(()));
                }
                return;
            }
            Err((Some(i), e)) => {
                batch.remove(i).answer(Err(e));
            }
            Err((None, e)) => {
                for request in batch {
                    request.answer(Err(shared_error(&e)));
                }
                return;
            }
        }
    }
}

/// Applies every request of `batch` in one transaction and commits it; on
/// failure, the index of the request that failed (`None`: the transaction).
fn apply_group(db: &Database, batch: &[CommitRequest]) -> Result<(), (Option<usize>, StoreError)> {
    let tx = begin_write(db).map_err(|e| (None, e))?;
    for (i, r) in batch.iter().enumerate() {
        apply_ops(&tx, &r.thread, &r.graph, &r.ops).map_err(|e| (Some(i), e))?;
    }
    tx.commit().map_err(|e| (None, e.into()))
}

/// Commits one request in its own transaction (no committer thread).
fn commit_alone(db: &Database, r: &CommitRequest, stats: &CommitStats) -> Result<(), StoreError> {
    commit_ops(db, &r.thread, &r.graph, &r.ops)?;
    stats.commits.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// The (path, node) of each task record in `ops`, decoded only when the
/// debug log of `sandgraph::checkpoint` is on (else none).
pub(super) fn saved_tasks(ops: &[Op]) -> Vec<(String, String)> {
    if !tracing::enabled!(target: "sandgraph::checkpoint", tracing::Level::DEBUG) {
        return Vec::new();
    }
    #[derive(Deserialize)]
    struct Node {
        node: String,
    }
    ops.iter()
        .filter_map(|op| match op {
            Op::Task { path, record, .. } => {
                let node =
                    serde_json::from_str::<Node>(record).map_or_else(|_| String::new(), |n| n.node);
                Some((path.clone(), node))
            }
            Op::Checkpoint(_) => None,
        })
        .collect()
}

/// Logs the task records a commit has just made durable. The crash test
/// relies on it: a node logged here must never run again.
pub(super) fn log_saved(thread: &str, saved: &[(String, String)]) {
    for (path, node) in saved {
        tracing::debug!(target: "sandgraph::checkpoint", thread, task = %path, node = %node, "task record saved");
    }
}
