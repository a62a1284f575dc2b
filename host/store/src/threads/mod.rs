//! Durable threads: a checkpoint per superstep, channel values stored once
//! per version, the pending writes of each task, and a lease so one run at a
//! time writes a thread.
//!
//! [`ThreadStore`] reads and administers threads; [`ThreadStore::begin`]
//! takes a thread's lease and hands out a [`ThreadWriter`], the
//! [`Checkpointer`] the executor saves through. See `DESIGN.md` for keys,
//! encodings, invariants and what each [`Durability`] guarantees.
//!
//! By job: `rows.rs` encodes the rows and reads and writes them in redb;
//! `redb_threads.rs` is the redb backend of the reads and the
//! administration (load, list, history, fork, update, delete, prune) and
//! the in-process lease; `committer.rs` is the group commit of redb
//! writers; `writer.rs` is [`ThreadWriter`] and its durability modes. The
//! PostgreSQL backend is `crate::postgres::threads`.

mod committer;
mod redb_threads;
mod rows;
mod writer;

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::Database;
use sandgraph_core::{Checkpoint, ThreadState};
// The documentation links the trait the writer implements.
#[cfg(doc)]
use sandgraph_core::Checkpointer;
use serde::Serialize;

use crate::StoreError;
use crate::postgres::threads::PgThreads;
use committer::Committer;
use redb_threads::RedbThreads;
use writer::WriterLease;

pub use writer::ThreadWriter;

pub(crate) use redb_threads::missing_head;
pub(crate) use rows::{
    CheckpointRow, Head, Op, PreparedCheckpoint, check_thread_id, decode, encode, now_ms,
    prepare_checkpoint, task_order,
};

/// The longest thread id accepted, in bytes.
pub const MAX_THREAD_ID_LEN: usize = 256;

/// When a [`ThreadWriter`] makes what it is given durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Durability {
    /// Every superstep is on disk before the next one starts: the
    /// checkpoint that ends a superstep is committed (fsynced) before its
    /// `put_checkpoint` future resolves, in one transaction with the task
    /// records of that superstep, which are held until then. A run's input
    /// checkpoint is held too and committed with its first superstep.
    /// [`Checkpointer::flush`] commits what is held when a run stops before
    /// its step settles (an interrupt, a failed task). Concurrent writers of
    /// one store share a transaction (group commit).
    ///
    /// A crash loses only the superstep that was running: its finished
    /// tasks run again when the thread continues; a crash before the first
    /// superstep settles loses the run's input (the thread is as it was
    /// before the run). The default.
    #[default]
    Sync,
    /// `put_*` queues and returns at once; one background writer commits the
    /// queue in order. [`Checkpointer::flush`] waits for the queue.
    Async,
    /// Everything is buffered in memory and written in one transaction by
    /// [`Checkpointer::flush`] when the run ends.
    Exit,
}

impl Durability {
    /// Every mode, in documentation order.
    pub const ALL: [Durability; 3] = [Durability::Sync, Durability::Async, Durability::Exit];

    /// `sync`, `async` or `exit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
            Durability::Exit => "exit",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Durability {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Durability::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| {
                StoreError::InvalidArgument(format!(
                    "unknown durability {s:?}: expected sync, async or exit"
                ))
            })
    }
}

/// A summary of a stored thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadInfo {
    /// The thread id.
    pub id: String,
    /// The graph the thread belongs to.
    pub graph: String,
    /// Id of the head (newest) checkpoint.
    pub head: String,
    /// The head's step (number of the next superstep).
    pub step: u32,
    /// When the thread's first checkpoint was written (ms since the epoch).
    pub created_at_ms: u64,
    /// When its head last moved (ms since the epoch).
    pub updated_at_ms: u64,
    /// Stored checkpoints.
    pub checkpoints: usize,
    /// Stored channel values.
    pub blobs: usize,
    /// Task records saved against the head.
    pub pending_writes: usize,
    /// Interrupts of the head's superstep waiting for an answer.
    pub pending_interrupts: usize,
}

/// Threads currently leased by a writer.
pub(super) type LeaseSet = Arc<Mutex<HashSet<String>>>;

/// What every handle of a [`crate::Store`] shares for durable threads: the
/// threads currently leased by a writer, and the group committer their
/// writers commit through.
#[derive(Clone, Default)]
pub(crate) struct Leases {
    taken: LeaseSet,
    committer: Committer,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------
// ThreadStore

/// Reads and administers durable threads; [`ThreadStore::begin`] starts a
/// run's writer. Cheap to clone. Backed by the redb file of a
/// [`crate::Store`] or by PostgreSQL (`Store::connect`): the same rows,
/// rules and errors either way (`DESIGN.md`).
#[derive(Clone)]
pub struct ThreadStore {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Redb(RedbThreads),
    Postgres(PgThreads),
}

impl fmt::Debug for ThreadStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match self.backend {
            Backend::Redb(_) => "redb",
            Backend::Postgres(_) => "postgres",
        };
        f.debug_struct("ThreadStore")
            .field("backend", &backend)
            .finish_non_exhaustive()
    }
}

/// Calls `$method` on whichever backend the store has.
macro_rules! dispatch {
    ($self:ident.$method:ident($($arg:expr),*)) => {
        match &$self.backend {
            Backend::Redb(b) => b.$method($($arg),*),
            Backend::Postgres(b) => b.$method($($arg),*),
        }
    };
}

impl ThreadStore {
    pub(crate) fn new(db: Arc<Database>, leases: Leases) -> Self {
        ThreadStore {
            backend: Backend::Redb(RedbThreads {
                db,
                leases: leases.taken,
                committer: leases.committer,
            }),
        }
    }

    pub(crate) fn postgres(threads: PgThreads) -> Self {
        ThreadStore {
            backend: Backend::Postgres(threads),
        }
    }

    /// Whether the threads are kept in PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// Durable transactions committed for this store's writers so far (a
    /// group commit of several writers counts once; 0 on PostgreSQL). For
    /// tests and benchmarks.
    #[doc(hidden)]
    pub fn commit_count(&self) -> u64 {
        match &self.backend {
            Backend::Redb(b) => b.committer.shared.stats.commits.load(Ordering::SeqCst),
            Backend::Postgres(_) => 0,
        }
    }

    /// Writers' commits sent to the group committer and not yet taken into
    /// a transaction (redb). For tests.
    #[doc(hidden)]
    pub fn queued_commits(&self) -> usize {
        match &self.backend {
            Backend::Redb(b) => b.committer.shared.stats.queued.load(Ordering::SeqCst),
            Backend::Postgres(_) => 0,
        }
    }

    /// Keeps the group committer (redb) from starting its next transaction
    /// until the guard is dropped, so a test can queue several writers'
    /// commits into one. For tests.
    #[doc(hidden)]
    pub fn pause_commits(&self) -> MutexGuard<'_, ()> {
        static NO_COMMITTER: Mutex<()> = Mutex::new(());
        match &self.backend {
            Backend::Redb(b) => lock(&b.committer.shared.stats.gate),
            Backend::Postgres(_) => lock(&NO_COMMITTER),
        }
    }

    /// The thread's state: its head checkpoint (values rebuilt from their
    /// blobs) and the task records saved against the head, in task order.
    /// `None` when the thread has no checkpoint.
    pub fn load(&self, thread: &str) -> Result<Option<ThreadState>, StoreError> {
        dispatch!(self.load(thread))
    }

    /// Takes the thread's lease and returns the writer a run saves through.
    /// Fails at once with [`StoreError::ThreadBusy`] while another writer of
    /// the thread is alive (on PostgreSQL: on any host, until its lease
    /// expires), and with [`StoreError::GraphMismatch`] when the thread
    /// exists for another graph. The thread itself is created by the
    /// writer's first checkpoint. Take the lease before loading the state
    /// the run continues from ([`ThreadWriter::load`]).
    pub fn begin(
        &self,
        thread: &str,
        graph: &str,
        durability: Durability,
    ) -> Result<ThreadWriter, StoreError> {
        let (lease, head) = match &self.backend {
            Backend::Redb(b) => {
                let (lease, head) = b.begin(thread, graph)?;
                (WriterLease::Redb(b.clone(), lease), head)
            }
            Backend::Postgres(b) => {
                let lease = b.acquire(thread)?;
                let head = b.head(thread, graph)?;
                (WriterLease::Postgres(b.clone(), Arc::new(lease)), head)
            }
        };
        Ok(ThreadWriter::new(
            self.clone(),
            thread,
            graph,
            durability,
            lease,
            head,
        ))
    }

    /// Every stored thread, by id.
    pub fn list(&self) -> Result<Vec<ThreadInfo>, StoreError> {
        dispatch!(self.list())
    }

    /// A summary of one thread; `None` when it does not exist.
    pub fn info(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        dispatch!(self.info(thread))
    }

    /// The thread's checkpoints with their values, newest first, at most
    /// `limit` of them. Every checkpoint of the thread is listed, whichever
    /// branch it is on. Fails for an unknown thread.
    pub fn history(
        &self,
        thread: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        dispatch!(self.history(thread, limit))
    }

    /// One checkpoint with its values; `None` when the thread has no
    /// checkpoint `id`.
    pub fn checkpoint(&self, thread: &str, id: &str) -> Result<Option<Checkpoint>, StoreError> {
        dispatch!(self.checkpoint(thread, id))
    }

    /// Makes a copy of checkpoint `from_id` the thread's head: source
    /// `fork`, parent `from_id`, a new id sorting after the current head,
    /// the same values (no value is stored again) and no pending writes, so
    /// a run continuing the thread re-runs the superstep after `from_id`.
    /// Takes the thread's lease for the duration.
    pub fn fork(&self, thread: &str, from_id: &str) -> Result<Checkpoint, StoreError> {
        dispatch!(self.fork(thread, from_id))
    }

    /// Writes a checkpoint computed outside a run (normally with source
    /// `update`, from [`ThreadStore::load`]'s head) as the thread's new head.
    /// Its id must sort after the current head; values whose channel
    /// version is unchanged from its parent are not stored again. Takes the
    /// thread's lease for the duration only, so a run may move the head
    /// between a `load` and this call (then an id made from the old head is
    /// refused as stale, or the update forks the history). To read, compute
    /// and write under one lease, use a [`ThreadWriter`]: its
    /// [`ThreadWriter::load`] then `put_checkpoint` and `flush`.
    pub fn put_update(&self, thread: &str, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        dispatch!(self.put_update(thread, checkpoint))
    }

    /// Deletes every row of the thread. `false` when it did not exist.
    /// Refuses a thread a run is writing.
    pub fn delete(&self, thread: &str) -> Result<bool, StoreError> {
        dispatch!(self.delete(thread))
    }

    /// Keeps the newest `keep` checkpoints of the thread (at least 1; the
    /// head is always kept) with their pending writes, deletes the older
    /// ones and every value no remaining checkpoint refers to. Returns how
    /// many checkpoints were deleted. Refuses a thread a run is writing.
    pub fn prune(&self, thread: &str, keep: usize) -> Result<usize, StoreError> {
        dispatch!(self.prune(thread, keep))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_names_round_trip_and_sync_is_the_default() {
        assert_eq!(Durability::default(), Durability::Sync);
        for d in Durability::ALL {
            assert_eq!(d.to_string().parse::<Durability>().unwrap(), d);
        }
        let err = "later".parse::<Durability>().unwrap_err();
        assert!(
            err.to_string().contains("expected sync, async or exit"),
            "{err}"
        );
    }
}
