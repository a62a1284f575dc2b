//! Declared tables on PostgreSQL: every table an owner declares
//! (`crate::tables`) is a set of rows of `sg_agent_graph_rows` (its name in
//! `tbl`, key and value in the order-preserving encoding of
//! `tables::Field`), so an owner's rules run unchanged on both backends.
//! (The rows table is named for its first owner, the agent-graph
//! controller; renaming it would be a migration.)
//!
//! The rules are synchronous code that reads and writes row by row. Here
//! each statement blocks the calling thread (like every transaction of
//! `Tables`, which callers run off their async threads) while the
//! `Pg`'s own runtime does the I/O. A write transaction is `SERIALIZABLE`:
//! it commits only if running the transactions one after the other, as
//! redb does, would have given the same reads, so the uniqueness rules
//! hold across hosts. One that loses a conflict runs again from the start.

use std::cell::Cell;
use std::ops::Bound;

use tokio_postgres::types::ToSql;

use super::{Pg, Retries, retryable};
use crate::StoreError;
use crate::bridge::block_on;
use crate::tables::TableError;

/// Which rows of a range a scan returns.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scan {
    /// All, by key.
    All,
    /// The first, if any.
    First,
    /// The last `n`, last first.
    Last(usize),
}

/// An encoded key and value.
type RawRow = (Vec<u8>, Vec<u8>);

/// The rows of one transaction: statements run one at a time on its
/// connection.
pub(crate) struct PgRows {
    pg: Pg,
    conn: Option<deadpool_postgres::Object>,
    what: String,
    /// A statement lost a serialization conflict: run the transaction again.
    conflict: Cell<bool>,
    /// The connection may be mid-transaction: never reuse it.
    broken: Cell<bool>,
}

impl Drop for PgRows {
    fn drop(&mut self) {
        if self.broken.get()
            && let Some(conn) = self.conn.take()
        {
            drop(deadpool_postgres::Object::take(conn));
        }
    }
}

type Param<'a> = &'a (dyn ToSql + Sync);

impl PgRows {
    fn query(
        &self,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let conn = self
            .conn
            .as_ref()
            .expect("the connection lives as long as the rows");
        let run = async {
            let statement = conn.prepare_cached(sql).await?;
            conn.query(&statement, params).await
        };
        block_on(run).map_err(|e| {
            if retryable(&e) {
                self.conflict.set(true);
            }
            self.pg.db_error(&self.what, &e)
        })
    }

    fn execute(&self, sql: &str) -> Result<(), StoreError> {
        let conn = self
            .conn
            .as_ref()
            .expect("the connection lives as long as the rows");
        block_on(conn.batch_execute(sql)).map_err(|e| {
            if retryable(&e) {
                self.conflict.set(true);
            } else {
                self.broken.set(true);
            }
            self.pg.db_error(&self.what, &e)
        })
    }

    /// The value of `key` in `table`.
    pub(crate) fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let rows = self.query(
            "SELECT value FROM sg_agent_graph_rows WHERE tbl = $1 AND key = $2",
            &[&table, &key],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    /// Sets the value of `key` in `table`.
    pub(crate) fn put(&self, table: &str, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.query(
            "INSERT INTO sg_agent_graph_rows (tbl, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (tbl, key) DO UPDATE SET value = EXCLUDED.value",
            &[&table, &key, &value],
        )?;
        Ok(())
    }

    /// The rows of `table` whose key is in `range`: by key, or for
    /// [`Scan::Last`] last first.
    pub(crate) fn scan(
        &self,
        table: &str,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        scan: Scan,
    ) -> Result<Vec<RawRow>, StoreError> {
        let limit = match scan {
            Scan::Last(n) => i64::try_from(n).unwrap_or(i64::MAX),
            Scan::All | Scan::First => 0,
        };
        let mut sql = String::from("SELECT key, value FROM sg_agent_graph_rows WHERE tbl = $1");
        let mut params: Vec<Param<'_>> = vec![&table];
        for (bound, inclusive, exclusive) in [(&range.0, ">=", ">"), (&range.1, "<=", "<")] {
            let (op, key) = match bound {
                Bound::Included(k) => (inclusive, k),
                Bound::Excluded(k) => (exclusive, k),
                Bound::Unbounded => continue,
            };
            params.push(key);
            sql.push_str(&format!(" AND key {op} ${}", params.len()));
        }
        match scan {
            Scan::All => sql.push_str(" ORDER BY key"),
            Scan::First => sql.push_str(" ORDER BY key LIMIT 1"),
            Scan::Last(_) => {
                params.push(&limit);
                sql.push_str(&format!(" ORDER BY key DESC LIMIT ${}", params.len()));
            }
        }
        let rows = self.query(&sql, &params)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

impl Pg {
    /// Runs `f` in one transaction over the rows of declared tables, blocking the
    /// calling thread: `SERIALIZABLE` when `write`, else `REPEATABLE READ
    /// READ ONLY` (one snapshot). Commits when `f` returns `Ok`, rolls back
    /// otherwise. A transaction that lost a conflict runs again (calling
    /// `f` again), up to [`MAX_ATTEMPTS`](super::MAX_ATTEMPTS) times.
    pub(crate) fn rows_transaction<T, E: From<TableError>>(
        &self,
        what: &str,
        write: bool,
        mut f: impl FnMut(&PgRows) -> Result<T, E>,
    ) -> Result<T, E> {
        let begin = if write {
            "BEGIN ISOLATION LEVEL SERIALIZABLE"
        } else {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        };
        let mut retries = Retries::default();
        loop {
            let rows = PgRows {
                pg: self.clone(),
                conn: Some(block_on(self.connection(what)).map_err(TableError::from)?),
                what: what.to_owned(),
                conflict: Cell::new(false),
                broken: Cell::new(false),
            };
            rows.execute(begin).map_err(TableError::from)?;
            let out = f(&rows);
            let end = rows.execute(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
            if !rows.conflict.get() {
                return match (out, end) {
                    (Ok(v), Ok(())) => Ok(v),
                    (Ok(_), Err(e)) => Err(TableError::from(e).into()),
                    (Err(e), _) => Err(e),
                };
            }
            let pause = retries
                .after_conflict(self, what, None)
                .map_err(TableError::from)?;
            drop(rows);
            block_on(self.sleep(pause));
        }
    }
}
