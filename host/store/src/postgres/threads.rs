//! Durable threads on PostgreSQL: the rows of the redb backend (same keys,
//! same JSON; see `DESIGN.md`), in `sg_threads`, `sg_checkpoints`,
//! `sg_blobs` and `sg_writes`, plus one lease row per thread in
//! `sg_thread_leases` so one writer at a time writes a thread across hosts.
//!
//! The lease carries a fencing token that grows by one at every take-over
//! and at every operation outside a run (fork, update, delete, prune).
//! Every write transaction of a run first renews the lease *if and only if*
//! the token is still its own, and writes nothing otherwise: a host that was
//! paused past its lease's expiry and lost the thread to another host can
//! never write to it again. Lease rows are never deleted (a deleted row
//! would restart the token at 1 and let a stale holder's token match).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use sandgraph_core::{
    Checkpoint, CheckpointSource, TaskRecord, TaskResult, ThreadState, new_checkpoint_id,
};
use serde_json::{Map, Value};
use tokio_postgres::Transaction;

use super::{Pg, PgTxError, TxBody};
use crate::StoreError;
use crate::threads::{
    CheckpointRow, Head, Op, PreparedCheckpoint, ThreadInfo, check_thread_id, decode, encode,
    missing_head, now_ms, prepare_checkpoint, task_order,
};

/// How long a thread's lease lasts without a write or a renewal, unless the
/// store says otherwise. A run renews it every third of this while it runs,
/// so only a dead or paused host loses it; another host may take the thread
/// over once it has expired.
pub(crate) const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

type TxResult<T> = Result<T, PgTxError>;

/// Durable threads in a PostgreSQL database. Cheap to clone.
#[derive(Clone)]
pub(crate) struct PgThreads {
    pg: Pg,
    /// Who takes leases: this host's name and process, for the lease rows.
    holder: Arc<str>,
    ttl: Duration,
}

/// A thread's lease held by a writer: its fencing token, renewed in the
/// background while the writer lives, released (expired at once) on drop.
pub(crate) struct PgLease {
    pg: Pg,
    thread: String,
    /// The lease is this writer's while the row has this token *and* this
    /// holder (see [`fence`]).
    token: i64,
    holder: Arc<str>,
    ttl: Duration,
    renewal: Option<tokio::task::AbortHandle>,
}

impl std::fmt::Debug for PgLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLease")
            .field("thread", &self.thread)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

fn ttl_secs(ttl: Duration) -> f64 {
    ttl.as_secs_f64()
}

/// A number that differs between the stores of one process (and, with
/// the hash keys std draws at random, between processes).
/// A new lease holder name: `hostname/pid/random`, so that an operator
/// reading a lease sees which host and process holds it.
pub(crate) fn new_holder() -> Arc<str> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".to_owned());
    format!("{host}/{}/{:08x}", std::process::id(), unique()).into()
}

fn unique() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.finish() as u32
}

/// The blob number of a checkpoint id, as the `bigint` it is stored as.
fn blob_key(thread: &str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| {
        StoreError::InvalidArgument(format!(
            "thread {thread:?}: checkpoint number {n:016x} does not fit PostgreSQL's bigint"
        ))
    })
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn unms(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl PgThreads {
    pub(crate) fn new(pg: Pg, ttl: Duration) -> Self {
        PgThreads {
            pg,
            holder: new_holder(),
            ttl,
        }
    }

    /// Takes the thread's lease: a new lease row, or a take-over of an
    /// expired one (its token then grows by one). `ThreadBusy` while another
    /// writer's lease is live, whichever host holds it.
    pub(crate) fn acquire(&self, thread: &str) -> Result<PgLease, StoreError> {
        check_thread_id(thread)?;
        let (t, holder, ttl) = (thread.to_owned(), self.holder.clone(), self.ttl);
        let token = self
            .pg
            .transaction_blocking("take a thread lease", false, move |tx| {
                let (t, holder) = (t.clone(), holder.clone());
                async move {
                    read_committed(tx).await?;
                    let row = tx
                        .query_opt(
                            "INSERT INTO sg_thread_leases (thread, holder, token, expires_at) \
                             VALUES ($1, $2, 1, now() + make_interval(secs => $3)) \
                             ON CONFLICT (thread) DO UPDATE \
                             SET holder = EXCLUDED.holder, token = sg_thread_leases.token + 1, \
                                 expires_at = EXCLUDED.expires_at \
                             WHERE sg_thread_leases.expires_at <= now() \
                             RETURNING token",
                            &[&t, &&*holder, &ttl_secs(ttl)],
                        )
                        .await?;
                    Ok(row.map(|r| r.get::<_, i64>(0)))
                }
                .boxed()
            })?;
        let Some(token) = token else {
            return Err(StoreError::ThreadBusy {
                thread: thread.to_owned(),
            });
        };
        let mut lease = PgLease {
            pg: self.pg.clone(),
            thread: thread.to_owned(),
            token,
            holder: self.holder.clone(),
            ttl: self.ttl,
            renewal: None,
        };
        lease.renewal = lease.spawn_renewal();
        Ok(lease)
    }

    /// The head a new writer deduplicates against, checking the graph.
    pub(crate) fn head(&self, thread: &str, graph: &str) -> Result<Option<Head>, StoreError> {
        let (t, g) = (thread.to_owned(), graph.to_owned());
        self.pg
            .transaction_blocking("read a thread head", true, move |tx| {
                let (t, g) = (t.clone(), g.clone());
                async move {
                    snapshot(tx).await?;
                    let Some(row) = tx
                        .query_opt(
                            "SELECT t.graph, t.head, c.row FROM sg_threads t \
                         LEFT JOIN sg_checkpoints c ON c.thread = t.thread AND c.id = t.head \
                         WHERE t.thread = $1",
                            &[&t],
                        )
                        .await?
                    else {
                        return Ok(None);
                    };
                    let (stored, head): (String, String) = (row.get(0), row.get(1));
                    if stored != g {
                        return Err(StoreError::GraphMismatch {
                            thread: t.clone(),
                            stored,
                            requested: g.clone(),
                        }
                        .into());
                    }
                    let Some(text) = row.get::<_, Option<String>>(2) else {
                        return Err(missing_head(&t, &head).into());
                    };
                    let parsed: CheckpointRow = decode("checkpoints", &text)?;
                    Ok(Some(Head {
                        id: head,
                        refs: parsed.refs(),
                    }))
                }
                .boxed()
            })
    }

    /// Commits `ops` in order in one transaction, fenced by `lease`:
    /// nothing is written when the lease's token is no longer current.
    pub(crate) async fn commit(
        &self,
        lease: &PgLease,
        graph: &str,
        ops: Vec<Op>,
        synchronous: bool,
    ) -> Result<(), StoreError> {
        let body = save(lease, graph, Arc::new(ops));
        self.pg
            .transaction("save a thread", synchronous, body)
            .await
    }

    /// Whether checkpoint `id` of `thread` is stored.
    pub(crate) fn has_checkpoint(&self, thread: &str, id: &str) -> Result<bool, StoreError> {
        let (t, id) = (thread.to_owned(), id.to_owned());
        self.pg
            .transaction_blocking("read a checkpoint", true, move |tx| {
                let (t, id) = (t.clone(), id.clone());
                async move {
                    snapshot(tx).await?;
                    Ok(tx
                        .query_opt(
                            "SELECT 1 FROM sg_checkpoints WHERE thread = $1 AND id = $2",
                            &[&t, &id],
                        )
                        .await?
                        .is_some())
                }
                .boxed()
            })
    }

    pub(crate) fn load(&self, thread: &str) -> Result<Option<ThreadState>, StoreError> {
        let t = thread.to_owned();
        self.pg
            .transaction_blocking("load a thread", true, move |tx| {
                let t = t.clone();
                async move {
                    snapshot(tx).await?;
                    let Some(row) = tx
                        .query_opt(
                            "SELECT t.head, c.row FROM sg_threads t \
                         LEFT JOIN sg_checkpoints c ON c.thread = t.thread AND c.id = t.head \
                         WHERE t.thread = $1",
                            &[&t],
                        )
                        .await?
                    else {
                        return Ok(None);
                    };
                    let head: String = row.get(0);
                    let Some(text) = row.get::<_, Option<String>>(1) else {
                        return Err(missing_head(&t, &head).into());
                    };
                    let parsed: CheckpointRow = decode("checkpoints", &text)?;
                    let mut rebuilt = rebuild_all(tx, &t, vec![(head.clone(), parsed)]).await?;
                    let checkpoint = rebuilt.pop().expect("one checkpoint in, one out");
                    let pending = read_writes(tx, &t, &head).await?;
                    Ok(Some(ThreadState {
                        checkpoint,
                        pending,
                    }))
                }
                .boxed()
            })
    }

    pub(crate) fn list(&self) -> Result<Vec<ThreadInfo>, StoreError> {
        self.infos(None)
    }

    pub(crate) fn info(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        Ok(self.infos(Some(thread))?.pop())
    }

    fn infos(&self, thread: Option<&str>) -> Result<Vec<ThreadInfo>, StoreError> {
        let t = thread.map(str::to_owned);
        self.pg.transaction_blocking("list threads", true, move |tx| {
            let t = t.clone();
            async move {
                snapshot(tx).await?;
                let rows = tx
                    .query(
                        "SELECT t.thread, t.graph, t.head, t.created_at_ms, t.updated_at_ms, c.row, \
                           (SELECT count(*) FROM sg_checkpoints k WHERE k.thread = t.thread), \
                           (SELECT count(*) FROM sg_blobs b WHERE b.thread = t.thread), \
                           ARRAY(SELECT w.record FROM sg_writes w \
                                 WHERE w.thread = t.thread AND w.checkpoint = t.head) \
                         FROM sg_threads t \
                         LEFT JOIN sg_checkpoints c ON c.thread = t.thread AND c.id = t.head \
                         WHERE $1::text IS NULL OR t.thread = $1 \
                         ORDER BY t.thread COLLATE \"C\"",
                        &[&t],
                    )
                    .await?;
                let mut out = Vec::with_capacity(rows.len());
                for row in rows {
                    let (id, graph, head): (String, String, String) =
                        (row.get(0), row.get(1), row.get(2));
                    let Some(text) = row.get::<_, Option<String>>(5) else {
                        return Err(missing_head(&id, &head).into());
                    };
                    let parsed: CheckpointRow = decode("checkpoints", &text)?;
                    let mut pending = Vec::new();
                    for record in row.get::<_, Vec<String>>(8) {
                        pending.push(decode::<TaskRecord>("writes", &record)?);
                    }
                    out.push(ThreadInfo {
                        step: parsed.step,
                        checkpoints: usize::try_from(row.get::<_, i64>(6)).unwrap_or(0),
                        blobs: usize::try_from(row.get::<_, i64>(7)).unwrap_or(0),
                        pending_writes: pending.len(),
                        pending_interrupts: pending
                            .iter()
                            .filter(|r| matches!(r.result, TaskResult::Interrupted { .. }))
                            .count(),
                        id,
                        graph,
                        head,
                        created_at_ms: unms(row.get(3)),
                        updated_at_ms: unms(row.get(4)),
                    });
                }
                Ok(out)
            }
            .boxed()
        })
    }

    pub(crate) fn history(
        &self,
        thread: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let t = thread.to_owned();
        let limit = limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
        self.pg
            .transaction_blocking("read a thread's history", true, move |tx| {
                let t = t.clone();
                async move {
                    snapshot(tx).await?;
                    if tx
                        .query_opt("SELECT 1 FROM sg_threads WHERE thread = $1", &[&t])
                        .await?
                        .is_none()
                    {
                        return Err(StoreError::UnknownThread { thread: t.clone() }.into());
                    }
                    let rows = tx
                        .query(
                            "SELECT id, row FROM sg_checkpoints WHERE thread = $1 \
                         ORDER BY id COLLATE \"C\" DESC LIMIT $2",
                            &[&t, &limit],
                        )
                        .await?;
                    let mut parsed = Vec::with_capacity(rows.len());
                    for row in rows {
                        let text: String = row.get(1);
                        parsed.push((row.get(0), decode("checkpoints", &text)?));
                    }
                    rebuild_all(tx, &t, parsed).await
                }
                .boxed()
            })
    }

    pub(crate) fn checkpoint(
        &self,
        thread: &str,
        id: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let (t, id) = (thread.to_owned(), id.to_owned());
        self.pg
            .transaction_blocking("read a checkpoint", true, move |tx| {
                let (t, id) = (t.clone(), id.clone());
                async move {
                    snapshot(tx).await?;
                    let Some(row) = read_row(tx, &t, &id).await? else {
                        return Ok(None);
                    };
                    Ok(rebuild_all(tx, &t, vec![(id, row)]).await?.pop())
                }
                .boxed()
            })
    }

    pub(crate) fn fork(&self, thread: &str, from_id: &str) -> Result<Checkpoint, StoreError> {
        let (t, from, holder) = (thread.to_owned(), from_id.to_owned(), self.holder.clone());
        self.pg
            .transaction_blocking("fork a thread", true, move |tx| {
                let (t, from, holder) = (t.clone(), from.clone(), holder.clone());
                async move {
                    read_committed(tx).await?;
                    exclusive(tx, &t, &holder).await?;
                    let Some(head) = read_head_for_update(tx, &t).await? else {
                        return Err(StoreError::UnknownThread { thread: t.clone() }.into());
                    };
                    let Some(mut row) = read_row(tx, &t, &from).await? else {
                        return Err(StoreError::UnknownCheckpoint {
                            thread: t.clone(),
                            id: from.clone(),
                        }
                        .into());
                    };
                    let id = new_checkpoint_id(Some(&head));
                    let now = now_ms();
                    row.parent = Some(from.clone());
                    row.source = CheckpointSource::Fork;
                    row.created_at_ms = now;
                    tx.execute(
                        "INSERT INTO sg_checkpoints (thread, id, row) VALUES ($1, $2, $3)",
                        &[&t, &id, &encode("checkpoints", &row)?],
                    )
                    .await?;
                    tx.execute(
                        "UPDATE sg_threads SET head = $2, updated_at_ms = $3 WHERE thread = $1",
                        &[&t, &id, &ms(now)],
                    )
                    .await?;
                    Ok(rebuild_all(tx, &t, vec![(id, row)])
                        .await?
                        .pop()
                        .expect("one checkpoint in, one out"))
                }
                .boxed()
            })
    }

    pub(crate) fn put_update(
        &self,
        thread: &str,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        let (t, holder) = (thread.to_owned(), self.holder.clone());
        let checkpoint = Arc::new(checkpoint.clone());
        self.pg
            .transaction_blocking("update a thread", true, move |tx| {
                let (t, holder, c) = (t.clone(), holder.clone(), checkpoint.clone());
                async move {
                    read_committed(tx).await?;
                    exclusive(tx, &t, &holder).await?;
                    let parent = match &c.parent {
                        Some(parent) => read_row(tx, &t, parent).await?.map(|row| Head {
                            id: parent.clone(),
                            refs: row.refs(),
                        }),
                        None => None,
                    };
                    let (prepared, _) = prepare_checkpoint(&t, &c, parent.as_ref())?;
                    write_checkpoint(tx, &t, None, &prepared).await
                }
                .boxed()
            })
    }

    pub(crate) fn delete(&self, thread: &str) -> Result<bool, StoreError> {
        let (t, holder) = (thread.to_owned(), self.holder.clone());
        self.pg
            .transaction_blocking("delete a thread", true, move |tx| {
                let (t, holder) = (t.clone(), holder.clone());
                async move {
                    read_committed(tx).await?;
                    exclusive(tx, &t, &holder).await?;
                    let existed = tx
                        .execute("DELETE FROM sg_threads WHERE thread = $1", &[&t])
                        .await?
                        > 0;
                    for table in ["sg_checkpoints", "sg_blobs", "sg_writes"] {
                        tx.execute(&format!("DELETE FROM {table} WHERE thread = $1"), &[&t])
                            .await?;
                    }
                    Ok(existed)
                }
                .boxed()
            })
    }

    pub(crate) fn prune(&self, thread: &str, keep: usize) -> Result<usize, StoreError> {
        if keep == 0 {
            return Err(StoreError::InvalidArgument(format!(
                "pruning thread {thread:?} must keep at least 1 checkpoint"
            )));
        }
        let (t, holder) = (thread.to_owned(), self.holder.clone());
        self.pg.transaction_blocking("prune a thread", true, move |tx| {
            let (t, holder) = (t.clone(), holder.clone());
            async move {
                read_committed(tx).await?;
                exclusive(tx, &t, &holder).await?;
                let Some(head) = read_head_for_update(tx, &t).await? else {
                    return Err(StoreError::UnknownThread { thread: t.clone() }.into());
                };
                let rows = tx
                    .query(
                        "SELECT id, row FROM sg_checkpoints WHERE thread = $1 ORDER BY id COLLATE \"C\"",
                        &[&t],
                    )
                    .await?;
                let cut = rows.len().saturating_sub(keep);
                let mut old = Vec::new();
                let mut referenced: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
                for (i, row) in rows.iter().enumerate() {
                    let id: String = row.get(0);
                    if i < cut && id != head {
                        old.push(id);
                        continue;
                    }
                    let parsed: CheckpointRow = decode("checkpoints", row.get(1))?;
                    for (channel, blob) in parsed.values {
                        referenced
                            .entry(channel)
                            .or_default()
                            .insert(blob_key(&t, blob)?);
                    }
                }
                tx.execute(
                    "DELETE FROM sg_checkpoints WHERE thread = $1 AND id = ANY($2)",
                    &[&t, &old],
                )
                .await?;
                tx.execute(
                    "DELETE FROM sg_writes WHERE thread = $1 AND checkpoint = ANY($2)",
                    &[&t, &old],
                )
                .await?;
                let blobs = tx
                    .query("SELECT channel, blob FROM sg_blobs WHERE thread = $1", &[&t])
                    .await?;
                let (mut channels, mut numbers) = (Vec::new(), Vec::new());
                for row in blobs {
                    let (channel, blob): (String, i64) = (row.get(0), row.get(1));
                    if !referenced.get(&channel).is_some_and(|b| b.contains(&blob)) {
                        channels.push(channel);
                        numbers.push(blob);
                    }
                }
                tx.execute(
                    "DELETE FROM sg_blobs b USING unnest($2::text[], $3::bigint[]) AS x(channel, blob) \
                     WHERE b.thread = $1 AND b.channel = x.channel AND b.blob = x.blob",
                    &[&t, &channels, &numbers],
                )
                .await?;
                Ok(old.len())
            }
            .boxed()
        })
    }
}

impl PgLease {
    /// Renews the lease every third of its lifetime while a tokio runtime
    /// runs, so a long node does not lose the thread.
    fn spawn_renewal(&self) -> Option<tokio::task::AbortHandle> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let (pg, t, token, ttl) = (self.pg.clone(), self.thread.clone(), self.token, self.ttl);
        let holder = self.holder.clone();
        let task = rt.spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                let renewed = pg
                    .transaction("renew a thread lease", true, {
                        let (t, holder) = (t.clone(), holder.clone());
                        move |tx| {
                            let (t, holder) = (t.clone(), holder.clone());
                            async move {
                                read_committed(tx).await?;
                                fence(tx, &t, token, &holder, ttl).await
                            }
                            .boxed()
                        }
                    })
                    .await;
                if let Err(e) = renewed {
                    tracing::warn!(thread = %t, "cannot renew the thread's lease: {e}");
                    if matches!(e, StoreError::LeaseLost { .. }) {
                        return;
                    }
                }
            }
        });
        Some(task.abort_handle())
    }
}

impl Drop for PgLease {
    fn drop(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        // Given back before the drop returns (one round trip), so the
        // caller's next run of the thread finds it free.
        let (t, token, holder) = (self.thread.clone(), self.token, self.holder.clone());
        let released = self
            .pg
            .transaction_blocking("release a thread lease", false, move |tx| {
                let (t, holder) = (t.clone(), holder.clone());
                async move {
                    read_committed(tx).await?;
                    tx.execute(
                        "UPDATE sg_thread_leases SET expires_at = '-infinity' \
                         WHERE thread = $1 AND token = $2 AND holder = $3",
                        &[&t, &token, &&*holder],
                    )
                    .await?;
                    Ok(())
                }
                .boxed()
            });
        if let Err(e) = released {
            // It expires on its own; until then the thread is busy.
            tracing::warn!(thread = %self.thread, "cannot release a thread lease: {e}");
        }
    }
}

/// The body of a writer's commit: the fence, then `ops` in order.
fn save(lease: &PgLease, graph: &str, ops: Arc<Vec<Op>>) -> impl TxBody<()> {
    let (t, g, token, ttl) = (
        lease.thread.clone(),
        graph.to_owned(),
        lease.token,
        lease.ttl,
    );
    let holder = lease.holder.clone();
    move |tx| {
        let (t, g, ops, holder) = (t.clone(), g.clone(), ops.clone(), holder.clone());
        async move {
            read_committed(tx).await?;
            fence(tx, &t, token, &holder, ttl).await?;
            for op in ops.iter() {
                match op {
                    Op::Task {
                        checkpoint_id,
                        path,
                        record,
                    } => write_task(tx, &t, checkpoint_id, path, record).await?,
                    Op::Checkpoint(p) => write_checkpoint(tx, &t, Some(&g), p).await?,
                }
            }
            Ok(())
        }
        .boxed()
    }
}

/// Renews the lease when `token` is still current; `LeaseLost` (and so a
/// rolled-back transaction) when another writer took the thread over.
///
/// The holder is checked with the token because leases are taken and given
/// back with `synchronous_commit = off` (they cost no WAL flush of their
/// own): after a server crash a lost take-over could be redone by another
/// host with the same token number, but never with the same holder, which
/// is unique per process and store.
async fn fence(
    tx: &Transaction<'_>,
    thread: &str,
    token: i64,
    holder: &str,
    ttl: Duration,
) -> TxResult<()> {
    let renewed = tx
        .execute(
            "UPDATE sg_thread_leases SET expires_at = now() + make_interval(secs => $3) \
             WHERE thread = $1 AND token = $2 AND holder = $4",
            &[&thread, &token, &ttl_secs(ttl), &holder],
        )
        .await?;
    if renewed == 0 {
        return Err(StoreError::LeaseLost {
            thread: thread.to_owned(),
        }
        .into());
    }
    Ok(())
}

/// For an operation outside a run (fork, update, delete, prune): refuses
/// while a run's lease is live, holds the lease row locked until the
/// transaction ends so no run starts meanwhile, and advances the fencing
/// token (the row names this holder, expired): a writer whose lease ran
/// out unnoticed (a paused host) and who still holds the old token finds
/// it gone at its next write (`LeaseLost`), and never writes over what
/// this operation did.
async fn exclusive(tx: &Transaction<'_>, thread: &str, holder: &str) -> TxResult<()> {
    tx.execute(
        "INSERT INTO sg_thread_leases (thread, holder, token, expires_at) \
         VALUES ($1, $2, 0, '-infinity') ON CONFLICT (thread) DO NOTHING",
        &[&thread, &holder],
    )
    .await?;
    let live: bool = tx
        .query_one(
            "SELECT expires_at > now() FROM sg_thread_leases WHERE thread = $1 FOR UPDATE",
            &[&thread],
        )
        .await?
        .get(0);
    if live {
        return Err(StoreError::ThreadBusy {
            thread: thread.to_owned(),
        }
        .into());
    }
    tx.execute(
        "UPDATE sg_thread_leases SET token = token + 1, holder = $2, expires_at = '-infinity' \
         WHERE thread = $1",
        &[&thread, &holder],
    )
    .await?;
    Ok(())
}

/// Writes run at `READ COMMITTED`, not the store's default `SERIALIZABLE`:
/// a thread's rows are written only under its lease (the fenced UPDATE
/// locks the lease row until commit, and operations outside a run lock it
/// too), so row locks already order every writer of a thread, and
/// serializable's predicate locks would only make writers of *different*
/// threads abort each other (seen: a dozen retries exhausted with 20
/// threads on 3 hosts).
async fn read_committed(tx: &Transaction<'_>) -> TxResult<()> {
    tx.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await?;
    Ok(())
}

/// Reads see one snapshot of the database, as redb's read transactions do.
async fn snapshot(tx: &Transaction<'_>) -> TxResult<()> {
    tx.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .await?;
    Ok(())
}

async fn read_head_for_update(tx: &Transaction<'_>, thread: &str) -> TxResult<Option<String>> {
    Ok(tx
        .query_opt(
            "SELECT head FROM sg_threads WHERE thread = $1 FOR UPDATE",
            &[&thread],
        )
        .await?
        .map(|r| r.get(0)))
}

async fn read_row(tx: &Transaction<'_>, thread: &str, id: &str) -> TxResult<Option<CheckpointRow>> {
    let row = tx
        .query_opt(
            "SELECT row FROM sg_checkpoints WHERE thread = $1 AND id = $2",
            &[&thread, &id],
        )
        .await?;
    match row {
        Some(r) => Ok(Some(decode("checkpoints", r.get(0))?)),
        None => Ok(None),
    }
}

/// The task records saved against checkpoint `id`, in task order.
async fn read_writes(tx: &Transaction<'_>, thread: &str, id: &str) -> TxResult<Vec<TaskRecord>> {
    let rows = tx
        .query(
            "SELECT record FROM sg_writes WHERE thread = $1 AND checkpoint = $2",
            &[&thread, &id],
        )
        .await?;
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        records.push(decode::<TaskRecord>("writes", row.get(0))?);
    }
    records.sort_by(|a, b| task_order(&a.path).cmp(&task_order(&b.path)));
    Ok(records)
}

/// Rebuilds checkpoints from their rows, reading every blob they refer to
/// in one query.
async fn rebuild_all(
    tx: &Transaction<'_>,
    thread: &str,
    rows: Vec<(String, CheckpointRow)>,
) -> TxResult<Vec<Checkpoint>> {
    let mut wanted: BTreeSet<(String, i64)> = BTreeSet::new();
    for (_, row) in &rows {
        for (channel, blob) in &row.values {
            wanted.insert((channel.clone(), blob_key(thread, *blob)?));
        }
    }
    let (channels, numbers): (Vec<String>, Vec<i64>) = wanted.into_iter().unzip();
    let found = tx
        .query(
            "SELECT b.channel, b.blob, b.value FROM sg_blobs b \
             JOIN unnest($2::text[], $3::bigint[]) AS x(channel, blob) \
               ON b.channel = x.channel AND b.blob = x.blob \
             WHERE b.thread = $1",
            &[&thread, &channels, &numbers],
        )
        .await?;
    let mut blobs: HashMap<(String, i64), String> = HashMap::with_capacity(found.len());
    for row in found {
        blobs.insert((row.get(0), row.get(1)), row.get(2));
    }
    let mut out = Vec::with_capacity(rows.len());
    for (id, row) in rows {
        let mut values = Map::with_capacity(row.values.len());
        for (channel, blob) in &row.values {
            let Some(text) = blobs.get(&(channel.clone(), blob_key(thread, *blob)?)) else {
                return Err(StoreError::corrupt(
                    "blobs",
                    format!(
                        "checkpoint {id:?} of thread {thread:?} refers to missing value {blob:016x} of channel {channel:?}"
                    ),
                )
                .into());
            };
            values.insert(channel.clone(), decode::<Value>("blobs", text)?);
        }
        out.push(row.into_checkpoint(id, values));
    }
    Ok(out)
}

/// Writes a prepared checkpoint as the thread's head (the rules of the redb
/// backend's `write_checkpoint`).
async fn write_checkpoint(
    tx: &Transaction<'_>,
    thread: &str,
    graph: Option<&str>,
    p: &PreparedCheckpoint,
) -> TxResult<()> {
    move_head(tx, thread, graph, &p.id).await?;
    tx.execute(
        "INSERT INTO sg_checkpoints (thread, id, row) VALUES ($1, $2, $3) \
         ON CONFLICT (thread, id) DO UPDATE SET row = EXCLUDED.row",
        &[&thread, &p.id, &p.row],
    )
    .await?;
    if !p.reused.is_empty() {
        check_reused_blobs(tx, thread, p).await?;
    }
    if !p.new_blobs.is_empty() {
        let blob = blob_key(thread, p.blob)?;
        let (channels, values): (Vec<&str>, Vec<&str>) = p
            .new_blobs
            .iter()
            .map(|(c, v)| (c.as_str(), v.as_str()))
            .unzip();
        tx.execute(
            "INSERT INTO sg_blobs (thread, channel, blob, value) \
             SELECT $1, x.channel, $3, x.value FROM unnest($2::text[], $4::text[]) AS x(channel, value) \
             ON CONFLICT (thread, channel, blob) DO UPDATE SET value = EXCLUDED.value",
            &[&thread, &channels, &blob, &values],
        )
        .await?;
    }
    Ok(())
}

/// Makes checkpoint `id` the thread's head: a new thread needs its graph,
/// a stored one the same graph (when given) and a head before `id`.
async fn move_head(
    tx: &Transaction<'_>,
    thread: &str,
    graph: Option<&str>,
    id: &str,
) -> TxResult<()> {
    let now = ms(now_ms());
    let stored = tx
        .query_opt(
            "SELECT graph, head FROM sg_threads WHERE thread = $1 FOR UPDATE",
            &[&thread],
        )
        .await?;
    let Some(row) = stored else {
        let Some(graph) = graph else {
            return Err(StoreError::UnknownThread {
                thread: thread.to_owned(),
            }
            .into());
        };
        tx.execute(
            "INSERT INTO sg_threads (thread, graph, head, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $4)",
            &[&thread, &graph, &id, &now],
        )
        .await?;
        return Ok(());
    };
    let (stored, head): (String, String) = (row.get(0), row.get(1));
    if let Some(graph) = graph.filter(|g| *g != stored) {
        return Err(StoreError::GraphMismatch {
            thread: thread.to_owned(),
            stored,
            requested: graph.to_owned(),
        }
        .into());
    }
    if id <= head.as_str() {
        return Err(StoreError::StaleCheckpoint {
            thread: thread.to_owned(),
            id: id.to_owned(),
            head,
        }
        .into());
    }
    tx.execute(
        "UPDATE sg_threads SET head = $2, updated_at_ms = $3 WHERE thread = $1",
        &[&thread, &id, &now],
    )
    .await?;
    Ok(())
}

/// Refuses a checkpoint whose reused values are not all stored.
async fn check_reused_blobs(
    tx: &Transaction<'_>,
    thread: &str,
    p: &PreparedCheckpoint,
) -> TxResult<()> {
    let mut channels = Vec::with_capacity(p.reused.len());
    let mut numbers = Vec::with_capacity(p.reused.len());
    for (channel, blob) in &p.reused {
        channels.push(channel.clone());
        numbers.push(blob_key(thread, *blob)?);
    }
    let missing = tx
        .query_opt(
            "SELECT x.channel, x.blob FROM unnest($2::text[], $3::bigint[]) AS x(channel, blob) \
             WHERE NOT EXISTS (SELECT 1 FROM sg_blobs b \
               WHERE b.thread = $1 AND b.channel = x.channel AND b.blob = x.blob) LIMIT 1",
            &[&thread, &channels, &numbers],
        )
        .await?;
    if let Some(row) = missing {
        let (channel, blob): (String, i64) = (row.get(0), row.get(1));
        return Err(StoreError::corrupt(
            "blobs",
            format!(
                "checkpoint {:?} of thread {thread:?} would refer to missing value {blob:016x} of channel {channel:?}",
                p.id
            ),
        )
        .into());
    }
    Ok(())
}

/// Saves a task record against an existing checkpoint.
async fn write_task(
    tx: &Transaction<'_>,
    thread: &str,
    checkpoint_id: &str,
    path: &str,
    record: &str,
) -> TxResult<()> {
    let written = tx
        .execute(
            "INSERT INTO sg_writes (thread, checkpoint, path, record) \
             SELECT $1, $2, $3, $4 WHERE EXISTS \
               (SELECT 1 FROM sg_checkpoints WHERE thread = $1 AND id = $2) \
             ON CONFLICT (thread, checkpoint, path) DO UPDATE SET record = EXCLUDED.record",
            &[&thread, &checkpoint_id, &path, &record],
        )
        .await?;
    if written == 0 {
        return Err(StoreError::UnknownCheckpoint {
            thread: thread.to_owned(),
            id: checkpoint_id.to_owned(),
        }
        .into());
    }
    Ok(())
}
