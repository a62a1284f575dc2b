//! The capability journal on PostgreSQL (`sg_capability_calls`): one row
//! `(seq, entry)` per entry, `entry` the same JSON as in redb.
//!
//! Sequence numbers are dense, 1, 2, 3, ... as in redb: an append takes the
//! table's `SHARE ROW EXCLUSIVE` lock (appends of all hosts queue on it;
//! readers do not), then writes `max(seq) + 1`. The lock is the first
//! statement of the transaction, before it takes its snapshot, so the
//! serializable transaction reads the latest `max(seq)` and appends never
//! lose a serialization conflict to each other. A rolled-back append leaves
//! no gap (an identity column would).

use std::marker::PhantomData;
use std::sync::Arc;

use futures::FutureExt;
use sandgraph_core::audit::CapabilityCall;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Pg, PgTxError};
use crate::StoreError;
use crate::capability_log::CapabilityJournalBackend;

/// An append-only table of JSON rows numbered from 1.
pub(crate) struct PgLog<T> {
    pg: Pg,
    /// The PostgreSQL table.
    table: &'static str,
    /// The redb table's name, for [`StoreError::Corrupt`].
    name: &'static str,
    /// The JSON field `entries` filters on.
    field: &'static str,
    rows: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned + Send + 'static> PgLog<T> {
    /// Appends the row `make(seq)` under the next sequence number, durably
    /// (synchronous commit), and returns that number.
    fn append(&self, make: impl Fn(u64) -> T + Send + Sync + 'static) -> Result<u64, StoreError> {
        self.append_n(1, move |seq, _| make(seq))
            .map(|last| last.unwrap_or_default())
    }

    /// Appends the rows `make(seq, i)` for `i` in `0..n`, in order, under
    /// the next sequence numbers, in one transaction; the last number.
    fn append_n(
        &self,
        n: usize,
        make: impl Fn(u64, usize) -> T + Send + Sync + 'static,
    ) -> Result<Option<u64>, StoreError> {
        if n == 0 {
            return Ok(None);
        }
        let make = Arc::new(make);
        let (table, name) = (self.table, self.name);
        let what = format!("cannot append to {name}");
        self.pg.transaction_blocking(&what, true, move |tx| {
            let make = make.clone();
            async move {
                tx.batch_execute(&format!("LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"))
                    .await?;
                let first: i64 = tx
                    .query_one(
                        &format!("SELECT coalesce(max(seq), 0) + 1 FROM {table}"),
                        &[],
                    )
                    .await?
                    .get(0);
                let insert = tx
                    .prepare(&format!("INSERT INTO {table} (seq, entry) VALUES ($1, $2)"))
                    .await?;
                let mut seq = first;
                for i in 0..n {
                    let seq_u = u64::try_from(seq).unwrap_or(0);
                    let text = serde_json::to_string(&make(seq_u, i)).map_err(|e| {
                        StoreError::Corrupt {
                            table: name,
                            message: format!("cannot encode row {seq}: {e}"),
                        }
                    })?;
                    tx.execute(&insert, &[&seq, &text]).await?;
                    seq += 1;
                }
                Ok::<_, PgTxError>(Some(u64::try_from(seq - 1).unwrap_or(0)))
            }
            .boxed()
        })
    }

    /// The rows whose `field` equals `filter` (all without one), oldest
    /// first, only the last `limit` when one is given.
    fn rows(&self, filter: Option<&str>, limit: Option<usize>) -> Result<Vec<T>, StoreError> {
        let (table, name, field) = (self.table, self.name, self.field);
        let filter = filter.map(str::to_owned);
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let what = format!("cannot read {name}");
        let rows: Vec<(i64, String)> = self.pg.transaction_blocking(&what, true, move |tx| {
            let filter = filter.clone();
            async move {
                // A missing field reads as "" (serde's default), as redb.
                let sql = format!(
                    "SELECT seq, entry FROM (
                         SELECT seq, entry FROM {table}
                         WHERE $1::text IS NULL OR coalesce(entry::jsonb ->> '{field}', '') = $1
                         ORDER BY seq DESC LIMIT $2
                     ) last ORDER BY seq"
                );
                let rows = tx.query(&sql, &[&filter, &limit]).await?;
                Ok::<_, PgTxError>(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
            }
            .boxed()
        })?;
        rows.into_iter()
            .map(|(seq, text)| {
                serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                    table: name,
                    message: format!("row {seq}: {e}"),
                })
            })
            .collect()
    }
}

/// The capability journal on PostgreSQL.
pub(crate) fn capability_calls(pg: Pg) -> PgLog<CapabilityCall> {
    PgLog {
        pg,
        table: "sg_capability_calls",
        name: "capability_calls",
        field: "graph",
        rows: PhantomData,
    }
}

impl CapabilityJournalBackend for PgLog<CapabilityCall> {
    fn append(&self, call: &CapabilityCall) -> Result<u64, StoreError> {
        let call = call.clone();
        PgLog::append(self, move |seq| CapabilityCall {
            seq,
            ..call.clone()
        })
    }

    fn append_all(&self, calls: &[CapabilityCall]) -> Result<Option<u64>, StoreError> {
        let calls = calls.to_vec();
        PgLog::append_n(self, calls.len(), move |seq, i| CapabilityCall {
            seq,
            ..calls[i].clone()
        })
    }

    fn entries(
        &self,
        graph: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<CapabilityCall>, StoreError> {
        self.rows(graph, limit)
    }
}
