//! [`ThreadWriter`]: one run's [`Checkpointer`], with its [`Durability`]
//! (sync buffer, async queue, or everything at exit).

use std::fmt;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use futures::FutureExt;
use futures::future::BoxFuture;
use redb::ReadableDatabase;
use sandgraph_core::{
    Checkpoint, CheckpointSource, Checkpointer, RunError, TaskRecord, ThreadState,
};

use super::committer::{log_saved, saved_tasks};
use super::redb_threads::{Lease, RedbThreads};
use super::rows::{Head, Op, prepare_checkpoint, prepare_task, read_row};
use super::{Durability, ThreadStore, lock};
use crate::bridge::block_on;
use crate::postgres::threads::{PgLease, PgThreads};
use crate::{StoreError, schema};

/// Most operations the async writer commits in one transaction.
const ASYNC_BATCH: usize = 256;

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
pub(super) enum WriterLease {
    Redb(RedbThreads, Arc<Lease>),
    Postgres(PgThreads, Arc<PgLease>),
}

impl WriterLease {
    /// Commits `ops` of `thread`, in order and all or nothing, resolves
    /// once they are durable (redb: fsynced, through the group committer;
    /// PostgreSQL: fenced by the lease, `synchronous_commit` on when
    /// `synchronous`), then logs the task records it saved. The one commit
    /// of every mode: the executor awaits it (sync, exit), the async
    /// writer's thread waits for it with [`block_on`].
    async fn commit(
        &self,
        thread: &str,
        graph: &str,
        ops: Vec<Op>,
        synchronous: bool,
    ) -> Result<(), StoreError> {
        let saved = saved_tasks(&ops);
        match self {
            WriterLease::Redb(b, lease) => {
                b.committer
                    .commit(&b.db, thread, graph, ops, lease.clone())
                    .await?;
            }
            WriterLease::Postgres(b, lease) => b.commit(lease, graph, ops, synchronous).await?,
        }
        log_saved(thread, &saved);
        Ok(())
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
    pub(super) fn new(
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

    /// Commits `ops` in one durable transaction (on redb through the
    /// store's group committer).
    async fn commit(&self, ops: Vec<Op>) -> Result<(), RunError> {
        self.lease
            .commit(&self.thread, &self.graph, ops, true)
            .await
            .map_err(|e| self.run_error(e))
    }

    /// Commits the step a sync writer held; a failure stops the writer.
    async fn commit_step(&self, buffer: &Mutex<SyncBuffer>, ops: Vec<Op>) -> Result<(), RunError> {
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
            let committed = block_on(lease.commit(thread, graph, ops, synchronous));
            unsynced = !synchronous && matches!(lease, WriterLease::Postgres(..));
            if let Err(e) = committed {
                tracing::error!(thread, "async checkpoint write failed: {e}");
                *lock(error) = Some(run_error(thread, e));
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
                self.commit_step(buffer, ops).await?;
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
                    self.commit_step(buffer, ops).await
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
