//! Durable threads: a checkpoint per superstep, channel values stored once
//! per version, the pending writes of each task, and a lease so one run at a
//! time writes a thread.
//!
//! [`ThreadStore`] reads and administers threads; [`ThreadStore::begin`]
//! takes a thread's lease and hands out a [`ThreadWriter`], the
//! [`Checkpointer`] the executor saves through. See `DESIGN.md` for keys,
//! encodings, invariants and what each [`Durability`] guarantees.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use futures::future::BoxFuture;
use redb::{Database, ReadableDatabase, ReadableTable, WriteTransaction};
use sandgraph_core::{
    Checkpoint, CheckpointSource, Checkpointer, RunError, SendPacket, TaskRecord, TaskResult,
    ThreadState, new_checkpoint_id,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::postgres::threads::{PgLease, PgThreads};
use crate::{StoreError, schema};

/// The longest thread id accepted, in bytes.
pub const MAX_THREAD_ID_LEN: usize = 256;

/// Most operations the async writer commits in one transaction.
const ASYNC_BATCH: usize = 256;

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
type LeaseSet = Arc<Mutex<HashSet<String>>>;

/// What every handle of a [`crate::Store`] shares for durable threads: the
/// threads currently leased by a writer, and the group committer their
/// writers commit through.
#[derive(Clone, Default)]
pub(crate) struct Leases {
    taken: LeaseSet,
    committer: Committer,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A thread's lease, given back on drop.
#[derive(Debug)]
struct Lease {
    leases: LeaseSet,
    thread: String,
}

impl Lease {
    fn take(leases: &LeaseSet, thread: &str) -> Result<Lease, StoreError> {
        if !lock(leases).insert(thread.to_owned()) {
            return Err(StoreError::ThreadBusy {
                thread: thread.to_owned(),
            });
        }
        Ok(Lease {
            leases: leases.clone(),
            thread: thread.to_owned(),
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        lock(&self.leases).remove(&self.thread);
    }
}

// ---------------------------------------------------------------------------
// Row encodings

/// `THREADS` value.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ThreadRow {
    graph: String,
    head: String,
    created_at_ms: u64,
    updated_at_ms: u64,
}

/// `CHECKPOINTS` value: a [`Checkpoint`] without its id (the key has it) and
/// with `values` as `[[channel, blob], ...]` references into `BLOBS`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CheckpointRow {
    pub(crate) parent: Option<String>,
    pub(crate) source: CheckpointSource,
    pub(crate) step: u32,
    pub(crate) created_at_ms: u64,
    pub(crate) channel_versions: BTreeMap<String, u64>,
    pub(crate) versions_seen: BTreeMap<String, BTreeMap<String, u64>>,
    pub(crate) values: Vec<(String, u64)>,
    pub(crate) pull: BTreeSet<String>,
    pub(crate) joins_seen: BTreeMap<String, BTreeSet<String>>,
    pub(crate) sends: Vec<SendPacket>,
}

/// The same encoding as [`CheckpointRow`], borrowed from a [`Checkpoint`].
#[derive(Serialize)]
struct CheckpointRowRef<'a> {
    parent: &'a Option<String>,
    source: CheckpointSource,
    step: u32,
    created_at_ms: u64,
    channel_versions: &'a BTreeMap<String, u64>,
    versions_seen: &'a BTreeMap<String, BTreeMap<String, u64>>,
    values: &'a [(String, u64)],
    pull: &'a BTreeSet<String>,
    joins_seen: &'a BTreeMap<String, BTreeSet<String>>,
    sends: &'a [SendPacket],
}

impl CheckpointRow {
    /// The checkpoint `id` this row describes, with its `values` read back.
    pub(crate) fn into_checkpoint(self, id: String, values: Map<String, Value>) -> Checkpoint {
        Checkpoint {
            id,
            parent: self.parent,
            source: self.source,
            step: self.step,
            created_at_ms: self.created_at_ms,
            channel_versions: self.channel_versions,
            versions_seen: self.versions_seen,
            values,
            pull: self.pull,
            joins_seen: self.joins_seen,
            sends: self.sends,
        }
    }

    /// The blob of each channel that has a value, with its version.
    pub(crate) fn refs(&self) -> BTreeMap<String, BlobRef> {
        self.values
            .iter()
            .map(|(channel, blob)| {
                let version = self.channel_versions.get(channel).copied();
                (
                    channel.clone(),
                    BlobRef {
                        version,
                        blob: *blob,
                    },
                )
            })
            .collect()
    }
}

/// Where a channel's value is stored, and the version it had there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlobRef {
    version: Option<u64>,
    blob: u64,
}

/// A stored checkpoint's id and blob references: what a following
/// checkpoint deduplicates against.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) id: String,
    pub(crate) refs: BTreeMap<String, BlobRef>,
}

pub(crate) fn encode<T: Serialize + ?Sized>(
    table: &'static str,
    value: &T,
) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Db(format!("cannot encode a {table} record: {e}")))
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(
    table: &'static str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::corrupt(table, e))
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The string right after `s` in byte order: `s + "\0"`. So the tuple range
/// `(s, "")..(successor(s), "")` holds exactly the keys whose first element
/// is `s`, whatever the later elements are.
fn successor(s: &str) -> String {
    format!("{s}\0")
}

pub(crate) fn check_thread_id(thread: &str) -> Result<(), StoreError> {
    let reason = if thread.is_empty() {
        "it is empty"
    } else if thread.len() > MAX_THREAD_ID_LEN {
        "it is longer than 256 bytes"
    } else if thread.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidThreadId {
        thread: thread.to_owned(),
        reason,
    })
}

/// A checkpoint id's number: ids are 16 lowercase hex digits.
fn id_number(thread: &str, id: &str) -> Result<u64, StoreError> {
    let valid = id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    valid
        .then(|| u64::from_str_radix(id, 16).ok())
        .flatten()
        .ok_or_else(|| StoreError::InvalidCheckpointId {
            thread: thread.to_owned(),
            id: id.to_owned(),
        })
}

/// Task order within a step: PULL tasks by node, then PUSH tasks by index.
pub(crate) fn task_order(path: &str) -> (u8, u64, &str) {
    if let Some(node) = path.strip_prefix("pull:") {
        (0, 0, node)
    } else if let Some(i) = path.strip_prefix("push:").and_then(|i| i.parse().ok()) {
        (1, i, "")
    } else {
        (2, 0, path)
    }
}

// ---------------------------------------------------------------------------
// Reading (generic over read and write transactions' tables)

type CheckpointKey = (&'static str, &'static str);

fn read_thread(
    t: &impl ReadableTable<&'static str, &'static str>,
    thread: &str,
) -> Result<Option<ThreadRow>, StoreError> {
    t.get(thread)?
        .map(|v| decode("threads", v.value()))
        .transpose()
}

fn read_row(
    t: &impl ReadableTable<CheckpointKey, &'static str>,
    thread: &str,
    id: &str,
) -> Result<Option<CheckpointRow>, StoreError> {
    t.get((thread, id))?
        .map(|v| decode("checkpoints", v.value()))
        .transpose()
}

/// Rebuilds a checkpoint from its row and blobs.
fn rebuild(
    blobs: &impl ReadableTable<(&'static str, &'static str, u64), &'static str>,
    thread: &str,
    id: &str,
    row: CheckpointRow,
) -> Result<Checkpoint, StoreError> {
    let mut values = Map::with_capacity(row.values.len());
    for (channel, blob) in &row.values {
        let Some(text) = blobs.get((thread, channel.as_str(), *blob))? else {
            return Err(StoreError::corrupt(
                "blobs",
                format!(
                    "checkpoint {id:?} of thread {thread:?} refers to missing value {blob:016x} of channel {channel:?}"
                ),
            ));
        };
        values.insert(channel.clone(), decode("blobs", text.value())?);
    }
    Ok(row.into_checkpoint(id.to_owned(), values))
}

/// The task records saved against checkpoint `id`, in task order.
fn read_writes(
    t: &impl ReadableTable<(&'static str, &'static str, &'static str), &'static str>,
    thread: &str,
    id: &str,
) -> Result<Vec<TaskRecord>, StoreError> {
    let end = successor(id);
    let mut records = Vec::new();
    for entry in t.range((thread, id, "")..(thread, end.as_str(), ""))? {
        let (_, v) = entry?;
        records.push(decode::<TaskRecord>("writes", v.value())?);
    }
    records.sort_by(|a, b| task_order(&a.path).cmp(&task_order(&b.path)));
    Ok(records)
}

/// Ids of a thread's checkpoints, oldest first.
fn checkpoint_ids(
    t: &impl ReadableTable<CheckpointKey, &'static str>,
    thread: &str,
) -> Result<Vec<String>, StoreError> {
    let end = successor(thread);
    let mut ids = Vec::new();
    for entry in t.range((thread, "")..(end.as_str(), ""))? {
        ids.push(entry?.0.value().1.to_owned());
    }
    Ok(ids)
}

fn count_blobs(
    t: &impl ReadableTable<(&'static str, &'static str, u64), &'static str>,
    thread: &str,
) -> Result<usize, StoreError> {
    let end = successor(thread);
    let mut n = 0;
    for entry in t.range((thread, "", 0)..(end.as_str(), "", 0))? {
        entry?;
        n += 1;
    }
    Ok(n)
}

// ---------------------------------------------------------------------------
// Writing

/// A checkpoint encoded for storage.
#[derive(Debug)]
pub(crate) struct PreparedCheckpoint {
    pub(crate) id: String,
    /// The checkpoint id's number: the blob key of values stored with it.
    pub(crate) blob: u64,
    pub(crate) row: String,
    /// Values stored with this checkpoint: (channel, JSON).
    pub(crate) new_blobs: Vec<(String, String)>,
    /// Values taken over from the parent: (channel, blob).
    pub(crate) reused: Vec<(String, u64)>,
}

/// Encodes `c`, storing a channel's value only when the channel's version
/// differs from its version in `parent` (when `parent` is `c`'s parent).
pub(crate) fn prepare_checkpoint(
    thread: &str,
    c: &Checkpoint,
    parent: Option<&Head>,
) -> Result<(PreparedCheckpoint, Head), StoreError> {
    let blob = id_number(thread, &c.id)?;
    let parent = parent.filter(|p| c.parent.as_deref() == Some(p.id.as_str()));
    let mut values = Vec::with_capacity(c.values.len());
    let mut refs = BTreeMap::new();
    let mut new_blobs = Vec::new();
    let mut reused = Vec::new();
    for (channel, value) in &c.values {
        let version = c.channel_versions.get(channel).copied();
        let same = parent
            .and_then(|p| p.refs.get(channel))
            .filter(|r| r.version.is_some() && r.version == version);
        let at = match same {
            Some(r) => {
                reused.push((channel.clone(), r.blob));
                r.blob
            }
            None => {
                new_blobs.push((channel.clone(), encode("blobs", value)?));
                blob
            }
        };
        values.push((channel.clone(), at));
        refs.insert(channel.clone(), BlobRef { version, blob: at });
    }
    let row = encode(
        "checkpoints",
        &CheckpointRowRef {
            parent: &c.parent,
            source: c.source,
            step: c.step,
            created_at_ms: c.created_at_ms,
            channel_versions: &c.channel_versions,
            versions_seen: &c.versions_seen,
            values: &values,
            pull: &c.pull,
            joins_seen: &c.joins_seen,
            sends: &c.sends,
        },
    )?;
    let head = Head {
        id: c.id.clone(),
        refs,
    };
    let prepared = PreparedCheckpoint {
        id: c.id.clone(),
        blob,
        row,
        new_blobs,
        reused,
    };
    Ok((prepared, head))
}

/// One thing a writer saves.
#[derive(Debug)]
pub(crate) enum Op {
    Task {
        checkpoint_id: String,
        path: String,
        record: String,
    },
    Checkpoint(PreparedCheckpoint),
}

fn prepare_task(checkpoint_id: &str, record: &TaskRecord) -> Result<Op, StoreError> {
    Ok(Op::Task {
        checkpoint_id: checkpoint_id.to_owned(),
        path: record.path.clone(),
        record: encode("writes", record)?,
    })
}

/// Writes a prepared checkpoint as the thread's head. `graph` creates the
/// thread if missing and must match an existing thread's graph; `None`
/// requires the thread to exist.
fn write_checkpoint(
    tx: &WriteTransaction,
    thread: &str,
    graph: Option<&str>,
    p: &PreparedCheckpoint,
) -> Result<(), StoreError> {
    let now = now_ms();
    let mut threads = tx.open_table(schema::THREADS)?;
    let row = match read_thread(&threads, thread)? {
        Some(mut row) => {
            if let Some(graph) = graph.filter(|g| *g != row.graph) {
                return Err(StoreError::GraphMismatch {
                    thread: thread.to_owned(),
                    stored: row.graph,
                    requested: graph.to_owned(),
                });
            }
            if p.id <= row.head {
                return Err(StoreError::StaleCheckpoint {
                    thread: thread.to_owned(),
                    id: p.id.clone(),
                    head: row.head,
                });
            }
            row.head = p.id.clone();
            row.updated_at_ms = now;
            row
        }
        None => {
            let Some(graph) = graph else {
                return Err(StoreError::UnknownThread {
                    thread: thread.to_owned(),
                });
            };
            ThreadRow {
                graph: graph.to_owned(),
                head: p.id.clone(),
                created_at_ms: now,
                updated_at_ms: now,
            }
        }
    };
    threads.insert(thread, encode("threads", &row)?.as_str())?;
    tx.open_table(schema::CHECKPOINTS)?
        .insert((thread, p.id.as_str()), p.row.as_str())?;
    let mut blobs = tx.open_table(schema::BLOBS)?;
    for (channel, blob) in &p.reused {
        if blobs.get((thread, channel.as_str(), *blob))?.is_none() {
            return Err(StoreError::corrupt(
                "blobs",
                format!(
                    "checkpoint {:?} of thread {thread:?} would refer to missing value {blob:016x} of channel {channel:?}",
                    p.id
                ),
            ));
        }
    }
    for (channel, value) in &p.new_blobs {
        blobs.insert((thread, channel.as_str(), p.blob), value.as_str())?;
    }
    Ok(())
}

fn write_task(
    tx: &WriteTransaction,
    thread: &str,
    checkpoint_id: &str,
    path: &str,
    record: &str,
) -> Result<(), StoreError> {
    if tx
        .open_table(schema::CHECKPOINTS)?
        .get((thread, checkpoint_id))?
        .is_none()
    {
        return Err(StoreError::UnknownCheckpoint {
            thread: thread.to_owned(),
            id: checkpoint_id.to_owned(),
        });
    }
    tx.open_table(schema::WRITES)?
        .insert((thread, checkpoint_id, path), record)?;
    Ok(())
}

fn begin_write(db: &Database) -> Result<WriteTransaction, StoreError> {
    let mut tx = db.begin_write()?;
    tx.set_durability(redb::Durability::Immediate)?;
    Ok(tx)
}

/// Applies `ops`, in order, in `tx`.
fn apply_ops(
    tx: &WriteTransaction,
    thread: &str,
    graph: &str,
    ops: &[Op],
) -> Result<(), StoreError> {
    for op in ops {
        match op {
            Op::Task {
                checkpoint_id,
                path,
                record,
            } => write_task(tx, thread, checkpoint_id, path, record)?,
            Op::Checkpoint(p) => write_checkpoint(tx, thread, Some(graph), p)?,
        }
    }
    Ok(())
}

/// Commits `ops`, in order, in one durable transaction: all or nothing.
fn commit_ops(db: &Database, thread: &str, graph: &str, ops: &[Op]) -> Result<(), StoreError> {
    let tx = begin_write(db)?;
    apply_ops(&tx, thread, graph, ops)?;
    tx.commit()?;
    Ok(())
}

/// Runs blocking database work off the async executor's threads (inline
/// when there is no tokio runtime).
async fn blocking<T, F>(f: F) -> Result<T, StoreError>
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

/// The redb backend of [`ThreadStore`]: one redb file, an in-memory lease
/// set (redb locks the file to one process), and the group committer.
#[derive(Clone)]
pub(crate) struct RedbThreads {
    db: Arc<Database>,
    leases: LeaseSet,
    committer: Committer,
}

impl RedbThreads {
    /// The thread's state: its head checkpoint (values rebuilt from their
    /// blobs) and the task records saved against the head, in task order.
    /// `None` when the thread has no checkpoint.
    fn load(&self, thread: &str) -> Result<Option<ThreadState>, StoreError> {
        let tx = self.db.begin_read()?;
        let Some(row) = read_thread(&tx.open_table(schema::THREADS)?, thread)? else {
            return Ok(None);
        };
        let checkpoints = tx.open_table(schema::CHECKPOINTS)?;
        let Some(head) = read_row(&checkpoints, thread, &row.head)? else {
            return Err(missing_head(thread, &row.head));
        };
        let checkpoint = rebuild(&tx.open_table(schema::BLOBS)?, thread, &row.head, head)?;
        let pending = read_writes(&tx.open_table(schema::WRITES)?, thread, &row.head)?;
        Ok(Some(ThreadState {
            checkpoint,
            pending,
        }))
    }

    /// Takes the thread's lease and reads the head a new writer
    /// deduplicates against.
    fn begin(&self, thread: &str, graph: &str) -> Result<(Arc<Lease>, Option<Head>), StoreError> {
        check_thread_id(thread)?;
        let lease = Lease::take(&self.leases, thread)?;
        let head = {
            let tx = self.db.begin_read()?;
            match read_thread(&tx.open_table(schema::THREADS)?, thread)? {
                Some(row) if row.graph != graph => {
                    return Err(StoreError::GraphMismatch {
                        thread: thread.to_owned(),
                        stored: row.graph,
                        requested: graph.to_owned(),
                    });
                }
                Some(row) => {
                    let checkpoints = tx.open_table(schema::CHECKPOINTS)?;
                    let Some(head) = read_row(&checkpoints, thread, &row.head)? else {
                        return Err(missing_head(thread, &row.head));
                    };
                    Some(Head {
                        id: row.head,
                        refs: head.refs(),
                    })
                }
                None => None,
            }
        };
        Ok((Arc::new(lease), head))
    }

    /// Every stored thread, by id.
    fn list(&self) -> Result<Vec<ThreadInfo>, StoreError> {
        let tx = self.db.begin_read()?;
        let threads = tx.open_table(schema::THREADS)?;
        let mut out = Vec::new();
        for entry in threads.range::<&str>(..)? {
            let (k, v) = entry?;
            let row: ThreadRow = decode("threads", v.value())?;
            out.push(self.info_of(&tx, k.value(), row)?);
        }
        Ok(out)
    }

    /// A summary of one thread; `None` when it does not exist.
    fn info(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        let tx = self.db.begin_read()?;
        match read_thread(&tx.open_table(schema::THREADS)?, thread)? {
            Some(row) => Ok(Some(self.info_of(&tx, thread, row)?)),
            None => Ok(None),
        }
    }

    fn info_of(
        &self,
        tx: &redb::ReadTransaction,
        thread: &str,
        row: ThreadRow,
    ) -> Result<ThreadInfo, StoreError> {
        let checkpoints = tx.open_table(schema::CHECKPOINTS)?;
        let Some(head) = read_row(&checkpoints, thread, &row.head)? else {
            return Err(missing_head(thread, &row.head));
        };
        let pending = read_writes(&tx.open_table(schema::WRITES)?, thread, &row.head)?;
        Ok(ThreadInfo {
            id: thread.to_owned(),
            step: head.step,
            checkpoints: checkpoint_ids(&checkpoints, thread)?.len(),
            blobs: count_blobs(&tx.open_table(schema::BLOBS)?, thread)?,
            pending_writes: pending.len(),
            pending_interrupts: pending
                .iter()
                .filter(|r| matches!(r.result, TaskResult::Interrupted { .. }))
                .count(),
            graph: row.graph,
            head: row.head,
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
        })
    }

    /// The thread's checkpoints with their values, newest first, at most
    /// `limit` of them. Every checkpoint of the thread is listed, whichever
    /// branch it is on. Fails for an unknown thread.
    fn history(&self, thread: &str, limit: Option<usize>) -> Result<Vec<Checkpoint>, StoreError> {
        let tx = self.db.begin_read()?;
        if read_thread(&tx.open_table(schema::THREADS)?, thread)?.is_none() {
            return Err(StoreError::UnknownThread {
                thread: thread.to_owned(),
            });
        }
        let checkpoints = tx.open_table(schema::CHECKPOINTS)?;
        let blobs = tx.open_table(schema::BLOBS)?;
        let end = successor(thread);
        let mut out = Vec::new();
        let rows = checkpoints.range((thread, "")..(end.as_str(), ""))?.rev();
        for entry in rows.take(limit.unwrap_or(usize::MAX)) {
            let (k, v) = entry?;
            let row: CheckpointRow = decode("checkpoints", v.value())?;
            out.push(rebuild(&blobs, thread, k.value().1, row)?);
        }
        Ok(out)
    }

    /// One checkpoint with its values; `None` when the thread has no
    /// checkpoint `id`.
    fn checkpoint(&self, thread: &str, id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let tx = self.db.begin_read()?;
        let Some(row) = read_row(&tx.open_table(schema::CHECKPOINTS)?, thread, id)? else {
            return Ok(None);
        };
        Ok(Some(rebuild(
            &tx.open_table(schema::BLOBS)?,
            thread,
            id,
            row,
        )?))
    }

    /// Makes a copy of checkpoint `from_id` the thread's head: source
    /// `fork`, parent `from_id`, a new id sorting after the current head,
    /// the same values (no value is stored again) and no pending writes, so
    /// a run continuing the thread re-runs the superstep after `from_id`.
    /// Takes the thread's lease for the duration.
    fn fork(&self, thread: &str, from_id: &str) -> Result<Checkpoint, StoreError> {
        let _lease = Lease::take(&self.leases, thread)?;
        let tx = begin_write(&self.db)?;
        let checkpoint = {
            let mut threads = tx.open_table(schema::THREADS)?;
            let Some(mut trow) = read_thread(&threads, thread)? else {
                return Err(StoreError::UnknownThread {
                    thread: thread.to_owned(),
                });
            };
            let mut checkpoints = tx.open_table(schema::CHECKPOINTS)?;
            let Some(mut row) = read_row(&checkpoints, thread, from_id)? else {
                return Err(StoreError::UnknownCheckpoint {
                    thread: thread.to_owned(),
                    id: from_id.to_owned(),
                });
            };
            let id = new_checkpoint_id(Some(&trow.head));
            let now = now_ms();
            row.parent = Some(from_id.to_owned());
            row.source = CheckpointSource::Fork;
            row.created_at_ms = now;
            checkpoints.insert((thread, id.as_str()), encode("checkpoints", &row)?.as_str())?;
            trow.head = id.clone();
            trow.updated_at_ms = now;
            threads.insert(thread, encode("threads", &trow)?.as_str())?;
            rebuild(&tx.open_table(schema::BLOBS)?, thread, &id, row)?
        };
        tx.commit()?;
        Ok(checkpoint)
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
    fn put_update(&self, thread: &str, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let _lease = Lease::take(&self.leases, thread)?;
        let tx = begin_write(&self.db)?;
        let parent = match &checkpoint.parent {
            Some(parent) => {
                read_row(&tx.open_table(schema::CHECKPOINTS)?, thread, parent)?.map(|row| Head {
                    id: parent.clone(),
                    refs: row.refs(),
                })
            }
            None => None,
        };
        let (prepared, _) = prepare_checkpoint(thread, checkpoint, parent.as_ref())?;
        write_checkpoint(&tx, thread, None, &prepared)?;
        tx.commit()?;
        Ok(())
    }

    /// Deletes every row of the thread. `false` when it did not exist.
    /// Refuses a thread a run is writing.
    fn delete(&self, thread: &str) -> Result<bool, StoreError> {
        let _lease = Lease::take(&self.leases, thread)?;
        let tx = begin_write(&self.db)?;
        let existed = tx.open_table(schema::THREADS)?.remove(thread)?.is_some();
        let end = successor(thread);
        tx.open_table(schema::CHECKPOINTS)?
            .retain_in((thread, "")..(end.as_str(), ""), |_, _| false)?;
        tx.open_table(schema::BLOBS)?
            .retain_in((thread, "", 0)..(end.as_str(), "", 0), |_, _| false)?;
        tx.open_table(schema::WRITES)?
            .retain_in((thread, "", "")..(end.as_str(), "", ""), |_, _| false)?;
        tx.commit()?;
        Ok(existed)
    }

    /// Keeps the newest `keep` checkpoints of the thread (at least 1; the
    /// head is always kept) with their pending writes, deletes the older
    /// ones and every value no remaining checkpoint refers to. Returns how
    /// many checkpoints were deleted. Refuses a thread a run is writing.
    fn prune(&self, thread: &str, keep: usize) -> Result<usize, StoreError> {
        if keep == 0 {
            return Err(StoreError::InvalidArgument(format!(
                "pruning thread {thread:?} must keep at least 1 checkpoint"
            )));
        }
        let _lease = Lease::take(&self.leases, thread)?;
        let tx = begin_write(&self.db)?;
        let Some(trow) = read_thread(&tx.open_table(schema::THREADS)?, thread)? else {
            return Err(StoreError::UnknownThread {
                thread: thread.to_owned(),
            });
        };
        let mut checkpoints = tx.open_table(schema::CHECKPOINTS)?;
        let ids = checkpoint_ids(&checkpoints, thread)?;
        let cut = ids.len().saturating_sub(keep);
        let (old, kept) = ids.split_at(cut);
        let old: Vec<&String> = old.iter().filter(|id| **id != trow.head).collect();
        let mut writes = tx.open_table(schema::WRITES)?;
        for id in &old {
            checkpoints.remove((thread, id.as_str()))?;
            let end = successor(id);
            writes.retain_in(
                (thread, id.as_str(), "")..(thread, end.as_str(), ""),
                |_, _| false,
            )?;
        }
        let mut referenced: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for id in kept {
            let Some(row) = read_row(&checkpoints, thread, id)? else {
                continue;
            };
            for (channel, blob) in row.values {
                referenced.entry(channel).or_default().insert(blob);
            }
        }
        if !kept.contains(&trow.head) {
            // Only with a broken head invariant; keep its values anyway.
            if let Some(row) = read_row(&checkpoints, thread, &trow.head)? {
                for (channel, blob) in row.values {
                    referenced.entry(channel).or_default().insert(blob);
                }
            }
        }
        let end = successor(thread);
        let mut blobs = tx.open_table(schema::BLOBS)?;
        blobs.retain_in(
            (thread, "", 0)..(end.as_str(), "", 0),
            |(_, channel, blob), _| referenced.get(channel).is_some_and(|b| b.contains(&blob)),
        )?;
        drop((checkpoints, writes, blobs));
        tx.commit()?;
        Ok(old.len())
    }
}

pub(crate) fn missing_head(thread: &str, head: &str) -> StoreError {
    StoreError::corrupt(
        "threads",
        format!("the head {head:?} of thread {thread:?} is not a stored checkpoint"),
    )
}

// ---------------------------------------------------------------------------
// Group commit

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
    shared: Arc<CommitterShared>,
}

#[derive(Default)]
struct CommitterShared {
    /// The committer thread's queue; `None` until it is started.
    queue: Mutex<Option<mpsc::Sender<CommitRequest>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<CommitStats>,
}

#[derive(Default)]
struct CommitStats {
    /// Durable transactions committed for writers.
    commits: AtomicU64,
    /// Requests sent and not yet taken into a batch.
    queued: AtomicUsize,
    /// Taken by the committer before each batch; tests hold it to queue
    /// several requests into one batch.
    gate: Mutex<()>,
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

    fn request(
        thread: &str,
        graph: &str,
        ops: Vec<Op>,
        lease: Arc<Lease>,
    ) -> (
        CommitRequest,
        tokio::sync::oneshot::Receiver<Result<(), StoreError>>,
    ) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = CommitRequest {
            thread: thread.to_owned(),
            graph: graph.to_owned(),
            ops,
            reply,
            _lease: lease,
        };
        (request, answer)
    }

    /// Commits `ops` of `thread`, in order and all or nothing, in a durable
    /// transaction shared with whatever the store's other writers commit at
    /// the same time; resolves once it is on disk.
    async fn commit(
        &self,
        db: &Arc<Database>,
        thread: &str,
        graph: &str,
        ops: Vec<Op>,
        lease: Arc<Lease>,
    ) -> Result<(), StoreError> {
        let (request, answer) = Self::request(thread, graph, ops, lease);
        match self.send(db, request) {
            Ok(()) => answer.await.unwrap_or_else(|_| Err(committer_stopped())),
            Err(request) => {
                let db = db.clone();
                let stats = self.shared.stats.clone();
                blocking(move || commit_alone(&db, &request, &stats)).await
            }
        }
    }

    /// [`Committer::commit`] from a thread outside any async runtime.
    fn commit_blocking(
        &self,
        db: &Arc<Database>,
        thread: &str,
        graph: &str,
        ops: Vec<Op>,
        lease: Arc<Lease>,
    ) -> Result<(), StoreError> {
        let (request, answer) = Self::request(thread, graph, ops, lease);
        match self.send(db, request) {
            Ok(()) => answer
                .blocking_recv()
                .unwrap_or_else(|_| Err(committer_stopped())),
            Err(request) => commit_alone(db, &request, &self.shared.stats),
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
fn saved_tasks(ops: &[Op]) -> Vec<(String, String)> {
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
fn log_saved(thread: &str, saved: &[(String, String)]) {
    for (path, node) in saved {
        tracing::debug!(target: "sandgraph::checkpoint", thread, task = %path, node = %node, "task record saved");
    }
}

// ---------------------------------------------------------------------------
// ThreadWriter

/// Saves one run of a thread; holds the thread's lease until dropped.
/// Implements [`Checkpointer`] with the [`Durability`] it was begun with.
pub struct ThreadWriter {
    store: ThreadStore,
    thread: String,
    graph: String,
    durability: Durability,
    lease: WriterLease,
    /// The newest checkpoint saved (or buffered, or queued), which the next
    /// one deduplicates its values against.
    last: Mutex<Option<Head>>,
    mode: Mode,
}

/// A writer's lease and the backend it commits through.
#[derive(Clone)]
enum WriterLease {
    Redb(RedbThreads, Arc<Lease>),
    Postgres(PgThreads, Arc<PgLease>),
}

impl WriterLease {
    /// Commits `ops` of `thread`, in order and all or nothing, and resolves
    /// once they are durable (redb: fsynced, through the group committer;
    /// PostgreSQL: fenced by the lease, `synchronous_commit` on when
    /// `synchronous`).
    async fn commit(
        &self,
        thread: &str,
        graph: &str,
        ops: Vec<Op>,
        synchronous: bool,
    ) -> Result<(), StoreError> {
        match self {
            WriterLease::Redb(b, lease) => {
                b.committer
                    .commit(&b.db, thread, graph, ops, lease.clone())
                    .await
            }
            WriterLease::Postgres(b, lease) => {
                b.commit(lease, graph, Arc::new(ops), synchronous).await
            }
        }
    }

    /// [`WriterLease::commit`] from a thread outside any async runtime.
    fn commit_blocking(
        &self,
        thread: &str,
        graph: &str,
        ops: Vec<Op>,
        synchronous: bool,
    ) -> Result<(), StoreError> {
        match self {
            WriterLease::Redb(b, lease) => {
                b.committer
                    .commit_blocking(&b.db, thread, graph, ops, lease.clone())
            }
            WriterLease::Postgres(b, lease) => {
                b.commit_blocking(lease, graph, Arc::new(ops), synchronous)
            }
        }
    }

    /// Whether checkpoint `id` of `thread` is stored.
    fn has_checkpoint(&self, thread: &str, id: &str) -> Result<bool, StoreError> {
        match self {
            WriterLease::Redb(b, _) => {
                let tx = b.db.begin_read()?;
                Ok(read_row(&tx.open_table(schema::CHECKPOINTS)?, thread, id)?.is_some())
            }
            WriterLease::Postgres(b, _) => b.has_checkpoint(thread, id),
        }
    }
}

enum Mode {
    /// Task records and the input checkpoint wait for the checkpoint that
    /// settles their superstep, and commit with it.
    Sync(Mutex<SyncBuffer>),
    Async(AsyncQueue),
    Exit(Mutex<Vec<Op>>),
}

/// What a sync writer holds until its superstep settles.
#[derive(Default)]
struct SyncBuffer {
    ops: Vec<Op>,
    /// The first failed commit. Its operations are gone, so nothing more is
    /// accepted (a later checkpoint could refer to values never written).
    failed: Option<RunError>,
}

/// The async writer's queue and its background thread.
struct AsyncQueue {
    sender: Mutex<Option<mpsc::Sender<Msg>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// The first failure; everything queued after it is dropped.
    error: Arc<Mutex<Option<RunError>>>,
}

enum Msg {
    Op(Op),
    Flush(tokio::sync::oneshot::Sender<Result<(), RunError>>),
}

impl fmt::Debug for ThreadWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadWriter")
            .field("thread", &self.thread)
            .field("graph", &self.graph)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl ThreadWriter {
    fn new(
        store: ThreadStore,
        thread: &str,
        graph: &str,
        durability: Durability,
        lease: WriterLease,
        head: Option<Head>,
    ) -> Self {
        let mode = match durability {
            Durability::Sync => Mode::Sync(Mutex::default()),
            Durability::Exit => Mode::Exit(Mutex::new(Vec::new())),
            Durability::Async => {
                let (sender, receiver) = mpsc::channel();
                let error = Arc::new(Mutex::new(None));
                let worker = {
                    let thread = thread.to_owned();
                    let graph = graph.to_owned();
                    let lease = lease.clone();
                    let error = error.clone();
                    std::thread::Builder::new()
                        .name("sandgraph-store-async".into())
                        .spawn(move || async_worker(&thread, &graph, &lease, &receiver, &error))
                };
                match worker {
                    Ok(worker) => Mode::Async(AsyncQueue {
                        sender: Mutex::new(Some(sender)),
                        worker: Mutex::new(Some(worker)),
                        error,
                    }),
                    Err(e) => {
                        *lock(&error) = Some(RunError::from(StoreError::Db(format!(
                            "cannot start the async writer of thread {thread:?}: {e}"
                        ))));
                        Mode::Async(AsyncQueue {
                            sender: Mutex::new(None),
                            worker: Mutex::new(None),
                            error,
                        })
                    }
                }
            }
        };
        ThreadWriter {
            store,
            thread: thread.to_owned(),
            graph: graph.to_owned(),
            durability,
            lease,
            last: Mutex::new(head),
            mode,
        }
    }

    /// The thread this writer saves.
    pub fn thread(&self) -> &str {
        &self.thread
    }

    /// The graph the thread belongs to.
    pub fn graph(&self) -> &str {
        &self.graph
    }

    /// When saved data becomes durable.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The thread's committed state, read under this writer's lease: call it
    /// before the run starts to get the state the run continues from. What
    /// a `sync` writer holds for an unsettled superstep is not in it.
    pub fn load(&self) -> Result<Option<ThreadState>, StoreError> {
        self.store.load(&self.thread)
    }

    fn run_error(&self, e: StoreError) -> RunError {
        run_error(&self.thread, e)
    }

    /// Commits `ops` in one durable transaction through the store's group
    /// committer, then logs the task records it saved.
    async fn commit(&self, ops: Vec<Op>) -> Result<(), RunError> {
        let saved = saved_tasks(&ops);
        self.lease
            .commit(&self.thread, &self.graph, ops, true)
            .await
            .map_err(|e| self.run_error(e))?;
        log_saved(&self.thread, &saved);
        Ok(())
    }

    /// Commits what a sync writer held; a failure stops the writer.
    async fn commit_sync(&self, buffer: &Mutex<SyncBuffer>, ops: Vec<Op>) -> Result<(), RunError> {
        let committed = self.commit(ops).await;
        if let Err(e) = &committed {
            lock(buffer).failed = Some(e.clone());
        }
        committed
    }

    /// Refuses at once a task record against a checkpoint that is neither
    /// the one this writer saved last nor a stored one (sync mode, where
    /// the record is committed only later).
    fn check_parent(&self, checkpoint_id: &str) -> Result<(), StoreError> {
        if lock(&self.last)
            .as_ref()
            .is_some_and(|h| h.id == checkpoint_id)
        {
            return Ok(());
        }
        if !self.lease.has_checkpoint(&self.thread, checkpoint_id)? {
            return Err(StoreError::UnknownCheckpoint {
                thread: self.thread.clone(),
                id: checkpoint_id.to_owned(),
            });
        }
        Ok(())
    }

    /// Queues `op` (async mode) or buffers it (exit mode).
    fn enqueue(&self, op: Op) -> Result<(), RunError> {
        match &self.mode {
            Mode::Sync(_) => unreachable!("sync mode buffers by step"),
            Mode::Async(queue) => {
                if let Some(e) = lock(&queue.error).clone() {
                    return Err(e);
                }
                let sent = lock(&queue.sender)
                    .as_ref()
                    .is_some_and(|s| s.send(Msg::Op(op)).is_ok());
                if !sent {
                    return Err(
                        self.run_error(StoreError::Db("the async writer has stopped".into()))
                    );
                }
                Ok(())
            }
            Mode::Exit(buffer) => {
                lock(buffer).push(op);
                Ok(())
            }
        }
    }
}

fn run_error(thread: &str, e: StoreError) -> RunError {
    match e {
        StoreError::Db(_) | StoreError::Corrupt { .. } => {
            RunError::new(e.code(), format!("cannot save thread {thread:?}: {e}"))
        }
        e => e.into(),
    }
}

/// The async writer's loop: commits queued operations in order, a batch
/// per transaction (through the store's group committer), and answers
/// flushes once everything before them is committed. After the first
/// failure it commits nothing more.
fn async_worker(
    thread: &str,
    graph: &str,
    lease: &WriterLease,
    receiver: &mpsc::Receiver<Msg>,
    error: &Mutex<Option<RunError>>,
) {
    let mut batch = Vec::new();
    let mut waiters = Vec::new();
    // On PostgreSQL, batches nobody waits for commit with
    // synchronous_commit off; a flush then needs a synchronous commit,
    // which makes every earlier one durable too.
    let mut unsynced = false;
    while let Ok(first) = receiver.recv() {
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Op(op) => batch.push(op),
                Msg::Flush(reply) => waiters.push(reply),
            }
            if batch.len() < ASYNC_BATCH {
                next = receiver.try_recv().ok();
            }
        }
        let sync_point = !waiters.is_empty() && unsynced;
        if lock(error).is_some() {
            batch.clear();
        } else if !batch.is_empty() || sync_point {
            let ops = std::mem::take(&mut batch);
            let synchronous = !waiters.is_empty();
            let saved = saved_tasks(&ops);
            let committed = lease.commit_blocking(thread, graph, ops, synchronous);
            unsynced = !synchronous && matches!(lease, WriterLease::Postgres(..));
            match committed {
                Ok(()) => log_saved(thread, &saved),
                Err(e) => {
                    tracing::error!(thread, "async checkpoint write failed: {e}");
                    *lock(error) = Some(run_error(thread, e));
                }
            }
        }
        let outcome = lock(error).clone().map_or(Ok(()), Err);
        for reply in waiters.drain(..) {
            let _ = reply.send(outcome.clone());
        }
    }
}

impl Checkpointer for ThreadWriter {
    fn put_task<'a>(
        &'a self,
        checkpoint_id: &'a str,
        record: &'a TaskRecord,
    ) -> BoxFuture<'a, Result<(), RunError>> {
        async move {
            let op = prepare_task(checkpoint_id, record).map_err(|e| self.run_error(e))?;
            match &self.mode {
                // Held until the checkpoint that settles the step (or flush).
                Mode::Sync(buffer) => {
                    if let Some(e) = lock(buffer).failed.clone() {
                        return Err(e);
                    }
                    self.check_parent(checkpoint_id)
                        .map_err(|e| self.run_error(e))?;
                    lock(buffer).ops.push(op);
                    Ok(())
                }
                _ => self.enqueue(op),
            }
        }
        .boxed()
    }

    fn put_checkpoint<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<(), RunError>> {
        async move {
            if let Mode::Sync(buffer) = &self.mode {
                let (prepared, head) = {
                    let last = lock(&self.last);
                    prepare_checkpoint(&self.thread, checkpoint, last.as_ref())
                }
                .map_err(|e| self.run_error(e))?;
                let ops = {
                    let mut buffer = lock(buffer);
                    if let Some(e) = buffer.failed.clone() {
                        return Err(e);
                    }
                    buffer.ops.push(Op::Checkpoint(prepared));
                    if checkpoint.source == CheckpointSource::Input {
                        // The input is committed with the first superstep
                        // (or by flush if the run stops before it settles).
                        *lock(&self.last) = Some(head);
                        return Ok(());
                    }
                    std::mem::take(&mut buffer.ops)
                };
                self.commit_sync(buffer, ops).await?;
                *lock(&self.last) = Some(head);
                return Ok(());
            }
            // Queued modes: the checkpoint counts as saved once queued (the
            // queue is committed in order, and nothing after a failure), so
            // the next one deduplicates against it.
            let mut last = lock(&self.last);
            let (prepared, head) = prepare_checkpoint(&self.thread, checkpoint, last.as_ref())
                .map_err(|e| self.run_error(e))?;
            self.enqueue(Op::Checkpoint(prepared))?;
            *last = Some(head);
            Ok(())
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), RunError>> {
        async move {
            match &self.mode {
                Mode::Sync(buffer) => {
                    let ops = std::mem::take(&mut lock(buffer).ops);
                    if ops.is_empty() {
                        return Ok(());
                    }
                    self.commit_sync(buffer, ops).await
                }
                Mode::Async(queue) => {
                    let (reply, answer) = tokio::sync::oneshot::channel();
                    let sent = lock(&queue.sender)
                        .as_ref()
                        .is_some_and(|s| s.send(Msg::Flush(reply)).is_ok());
                    if !sent {
                        return Err(lock(&queue.error).clone().unwrap_or_else(|| {
                            self.run_error(StoreError::Db("the async writer has stopped".into()))
                        }));
                    }
                    answer.await.unwrap_or_else(|_| {
                        Err(self.run_error(StoreError::Db("the async writer stopped".into())))
                    })
                }
                Mode::Exit(buffer) => {
                    let ops = std::mem::take(&mut *lock(buffer));
                    if ops.is_empty() {
                        return Ok(());
                    }
                    self.commit(ops).await
                }
            }
        }
        .boxed()
    }
}

impl Drop for ThreadWriter {
    fn drop(&mut self) {
        match &self.mode {
            Mode::Sync(buffer) => {
                let left = lock(buffer).ops.len();
                if left > 0 {
                    tracing::warn!(
                        thread = %self.thread,
                        "{left} checkpoint operations of an unsettled step dropped: the writer was not flushed"
                    );
                }
            }
            Mode::Async(queue) => {
                // Closing the queue lets the worker commit what is left and
                // stop; the lease is given back only after that.
                drop(lock(&queue.sender).take());
                if let Some(worker) = lock(&queue.worker).take()
                    && worker.join().is_err()
                {
                    tracing::error!(thread = %self.thread, "the async checkpoint writer panicked");
                }
            }
            Mode::Exit(buffer) => {
                let left = lock(buffer).len();
                if left > 0 {
                    tracing::warn!(
                        thread = %self.thread,
                        "{left} checkpoint operations dropped: the writer was not flushed"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn checkpoint(id: &str, parent: Option<&str>) -> Checkpoint {
        Checkpoint {
            id: id.into(),
            parent: parent.map(Into::into),
            source: CheckpointSource::Loop,
            step: 3,
            created_at_ms: 17,
            channel_versions: [("a".to_string(), 2), ("b".to_string(), 1)].into(),
            versions_seen: [("n".to_string(), [("a".to_string(), 1)].into())].into(),
            values: serde_json::from_str(r#"{"b": [1, 2], "a": {"z": 1, "y": 2}}"#).unwrap(),
            pull: ["n".to_string()].into(),
            joins_seen: [("j".to_string(), ["x".to_string()].into())].into(),
            sends: vec![SendPacket {
                node: "n".into(),
                payload: Value::from(5),
            }],
        }
    }

    #[test]
    fn a_row_encodes_everything_but_values_and_decodes_back() {
        let c = checkpoint("0000000000000010", Some("000000000000000f"));
        let (p, head) = prepare_checkpoint("t", &c, None).unwrap();
        assert_eq!(p.blob, 16);
        assert_eq!(p.new_blobs.len(), 2, "no parent: every value is new");
        assert!(
            !p.row.contains(r#""z""#),
            "values stay out of the row: {}",
            p.row
        );
        let row: CheckpointRow = serde_json::from_str(&p.row).unwrap();
        assert_eq!(
            row.values,
            vec![("b".to_string(), 16), ("a".to_string(), 16)]
        );
        assert_eq!(row.refs(), head.refs);
        let again = encode("checkpoints", &row).unwrap();
        assert_eq!(again, p.row, "owned and borrowed encodings agree");
    }

    #[test]
    fn only_channels_whose_version_changed_get_a_new_blob() {
        let first = checkpoint("0000000000000010", None);
        let (_, head) = prepare_checkpoint("t", &first, None).unwrap();
        let mut second = checkpoint("0000000000000020", Some("0000000000000010"));
        second.channel_versions.insert("a".into(), 3);
        let (p, _) = prepare_checkpoint("t", &second, Some(&head)).unwrap();
        let new: Vec<&str> = p.new_blobs.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(new, ["a"]);
        assert_eq!(p.reused, vec![("b".to_string(), 16)]);
        // A checkpoint whose parent is not the known head stores everything.
        let mut other = checkpoint("0000000000000030", Some("0000000000000001"));
        other.channel_versions.insert("a".into(), 3);
        let (p, _) = prepare_checkpoint("t", &other, Some(&head)).unwrap();
        assert_eq!(p.new_blobs.len(), 2);
    }

    #[test]
    fn ids_and_thread_ids_are_checked() {
        for bad in [
            "",
            "00000000000000",
            "000000000000000G",
            "000000000000000A",
            "0000000000000000x",
        ] {
            assert!(id_number("t", bad).is_err(), "{bad:?}");
        }
        assert_eq!(id_number("t", "00000000000000ff").unwrap(), 255);
        for bad in ["", "a\nb", &"x".repeat(MAX_THREAD_ID_LEN + 1)] {
            let err = check_thread_id(bad).unwrap_err();
            assert!(err.to_string().contains("invalid thread id"), "{err}");
        }
        check_thread_id("user-42/session 7").unwrap();
    }

    #[test]
    fn pending_writes_come_back_in_task_order() {
        let mut paths = vec!["push:10", "pull:b", "push:2", "other", "pull:a"];
        paths.sort_by_key(|p| task_order(p));
        assert_eq!(paths, ["pull:a", "pull:b", "push:2", "push:10", "other"]);
    }

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

    #[test]
    fn errors_map_to_run_error_codes() {
        use sandgraph_core::ErrorCode;
        let busy = RunError::from(StoreError::ThreadBusy {
            thread: "t1".into(),
        });
        assert_eq!(busy.code, ErrorCode::ThreadBusy);
        assert_eq!(
            busy.message,
            "thread \"t1\" is busy: another run is writing it"
        );
        let db = run_error("t1", StoreError::Db("disk full".into()));
        assert_eq!(db.code, ErrorCode::Storage);
        assert!(
            db.message.contains("thread \"t1\"") && db.message.contains("disk full"),
            "{db}"
        );
        let unknown = RunError::from(StoreError::UnknownThread { thread: "t".into() });
        assert_eq!(unknown.code, ErrorCode::InvalidInput);
    }
}
