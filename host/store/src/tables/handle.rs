//! [`Tables`]: the tables of one [`TableSet`] in a store, and the
//! transactions over them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redb::{Database, ReadableDatabase};

use super::kv::{Declared, TableError, Tx, TxOn};
use crate::postgres::Pg;

/// The tables an owner declares, as it hands them to
/// [`Store::tables`](crate::Store::tables): what they hold, in words for
/// messages ("cannot update {what}"), and their definitions.
pub struct TableSet {
    /// What the tables hold, e.g. `the agent graphs`.
    pub what: &'static str,
    /// Every table of the set; a write transaction makes the missing ones.
    pub tables: &'static [&'static dyn Declared],
}

impl fmt::Debug for TableSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.tables.iter().map(|t| t.table_name()).collect();
        f.debug_struct("TableSet")
            .field("what", &self.what)
            .field("tables", &names)
            .finish()
    }
}

/// Where the tables are.
#[derive(Clone)]
enum Backend {
    Redb(Arc<Database>),
    Postgres(Pg),
}

/// The tables of one [`TableSet`] in a store (see
/// [`crate::Store::tables`]), with the transactions that read and write
/// them. Cheap to clone; clones share the database.
///
/// A write is one durable transaction: when [`write`](Self::write) returns
/// `Ok`, its effect is on disk. On redb, write transactions run one at a
/// time; on PostgreSQL they are `SERIALIZABLE` (one that lost a conflict
/// runs again), which gives the same outcomes across hosts. A read sees one
/// consistent snapshot. Calls block (an fsync, or round trips to the
/// server): async callers should use `spawn_blocking`.
#[derive(Clone)]
pub struct Tables {
    backend: Backend,
    set: &'static TableSet,
    /// Who this store is in leases: `host/pid/random`.
    holder: Arc<str>,
    /// How long a lease of this store lasts unless renewed.
    lease_ttl: Duration,
}

impl fmt::Debug for Tables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tables")
            .field("what", &self.set.what)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl Tables {
    pub(crate) fn on_redb(
        db: Arc<Database>,
        set: &'static TableSet,
        holder: Arc<str>,
        lease_ttl: Duration,
    ) -> Self {
        Tables {
            backend: Backend::Redb(db),
            set,
            holder,
            lease_ttl,
        }
    }

    pub(crate) fn on_postgres(
        pg: Pg,
        set: &'static TableSet,
        holder: Arc<str>,
        lease_ttl: Duration,
    ) -> Self {
        Tables {
            backend: Backend::Postgres(pg),
            set,
            holder,
            lease_ttl,
        }
    }

    /// Who the store is in the leases it takes: `hostname/pid/random`, one
    /// per [`crate::Store`] (its clones share it).
    pub fn holder(&self) -> &Arc<str> {
        &self.holder
    }

    /// How long a lease of the store lasts unless renewed: its
    /// [thread lease](crate::Store::with_thread_lease).
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// Whether at most one process opens these tables (a redb file, which
    /// redb locks): a lease holder other than this store's is then a
    /// process that is gone.
    pub fn single_process(&self) -> bool {
        matches!(self.backend, Backend::Redb(_))
    }

    /// Runs `f` in one durable write transaction, which first makes the
    /// tables of the set that the redb file lacks. `f` returns its result and
    /// whether it wrote anything: on redb the transaction is committed
    /// (fsynced) only then, and aborted on an error or when nothing changed.
    /// On PostgreSQL it is a `SERIALIZABLE` transaction, committed when `f`
    /// returns `Ok`, and `f` runs again when it lost a conflict with another
    /// host's (up to a bound, then it is a [`TableError::Db`]).
    ///
    /// # Errors
    ///
    /// `f`'s, or the database's.
    pub fn write<T, E: From<TableError>>(
        &self,
        mut f: impl FnMut(&Tx<'_>) -> Result<(T, bool), E>,
    ) -> Result<T, E> {
        let db = match &self.backend {
            Backend::Redb(db) => db,
            Backend::Postgres(pg) => {
                let what = format!("cannot update {}", self.set.what);
                return pg.rows_transaction(&what, true, |rows| {
                    f(&Tx::new(TxOn::Pg(rows))).map(|(value, _)| value)
                });
            }
        };
        let mut tx = db.begin_write().map_err(TableError::from)?;
        tx.set_durability(redb::Durability::Immediate)
            .map_err(TableError::from)?;
        let made = self.set.tables.iter().try_for_each(|t| t.create(&tx));
        if let Err(e) = made {
            let _ = tx.abort();
            return Err(TableError::from(e).into());
        }
        match f(&Tx::new(TxOn::RedbWrite(&tx))) {
            Ok((value, true)) => {
                tx.commit().map_err(TableError::from)?;
                Ok(value)
            }
            Ok((value, false)) => {
                tx.abort().map_err(TableError::from)?;
                Ok(value)
            }
            Err(e) => {
                // Dropping aborts too; an abort failure must not hide `e`.
                let _ = tx.abort();
                Err(e)
            }
        }
    }

    /// Runs `f` on one consistent snapshot (on PostgreSQL a `REPEATABLE READ
    /// READ ONLY` transaction).
    ///
    /// # Errors
    ///
    /// `f`'s, or the database's.
    pub fn read<T, E: From<TableError>>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        match &self.backend {
            Backend::Redb(db) => {
                let tx = db.begin_read().map_err(TableError::from)?;
                f(&Tx::new(TxOn::RedbRead(&tx)))
            }
            Backend::Postgres(pg) => {
                let mut f = Some(f);
                let what = format!("cannot read {}", self.set.what);
                pg.rows_transaction(&what, false, |rows| match f.take() {
                    Some(f) => f(&Tx::new(TxOn::Pg(rows))),
                    None => Err(TableError::db("a read-only snapshot lost a conflict").into()),
                })
            }
        }
    }
}
