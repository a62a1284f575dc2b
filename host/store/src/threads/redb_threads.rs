//! The redb backend of [`ThreadStore`](super::ThreadStore): reading,
//! listing, history, fork, update, delete and prune in the redb file, and
//! the in-process lease of a thread.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use redb::{Database, ReadableDatabase};
use sandgraph_core::{Checkpoint, CheckpointSource, TaskResult, ThreadState, new_checkpoint_id};

use super::committer::Committer;
use super::rows::{
    CheckpointRow, Head, ThreadRow, begin_write, check_thread_id, checkpoint_ids, count_blobs,
    decode, encode, now_ms, prepare_checkpoint, read_row, read_thread, read_writes, rebuild,
    successor, write_checkpoint,
};
use super::{LeaseSet, ThreadInfo, lock};
use crate::{StoreError, schema};

/// A thread's lease, given back on drop.
#[derive(Debug)]
pub(super) struct Lease {
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

/// The redb backend of [`ThreadStore`]: one redb file, an in-memory lease
/// set (redb locks the file to one process), and the group committer.
#[derive(Clone)]
pub(crate) struct RedbThreads {
    pub(super) db: Arc<Database>,
    pub(super) leases: LeaseSet,
    pub(super) committer: Committer,
}

impl RedbThreads {
    /// The thread's state: its head checkpoint (values rebuilt from their
    /// blobs) and the task records saved against the head, in task order.
    /// `None` when the thread has no checkpoint.
    pub(super) fn load(&self, thread: &str) -> Result<Option<ThreadState>, StoreError> {
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
    pub(super) fn begin(
        &self,
        thread: &str,
        graph: &str,
    ) -> Result<(Arc<Lease>, Option<Head>), StoreError> {
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
    pub(super) fn list(&self) -> Result<Vec<ThreadInfo>, StoreError> {
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
    pub(super) fn info(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        let tx = self.db.begin_read()?;
        match read_thread(&tx.open_table(schema::THREADS)?, thread)? {
            Some(row) => Ok(Some(self.info_of(&tx, thread, row)?)),
            None => Ok(None),
        }
    }

    pub(super) fn info_of(
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
    pub(super) fn history(
        &self,
        thread: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Checkpoint>, StoreError> {
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
    pub(super) fn checkpoint(
        &self,
        thread: &str,
        id: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
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
    pub(super) fn fork(&self, thread: &str, from_id: &str) -> Result<Checkpoint, StoreError> {
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
    pub(super) fn put_update(
        &self,
        thread: &str,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
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
    pub(super) fn delete(&self, thread: &str) -> Result<bool, StoreError> {
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
    pub(super) fn prune(&self, thread: &str, keep: usize) -> Result<usize, StoreError> {
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
