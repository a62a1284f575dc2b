//! Append-only tables keyed by a sequence number (1, 2, ...) with one JSON
//! row each: the routing journal and the capability journal.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::StoreError;

type Log = TableDefinition<'static, u64, &'static str>;

fn corrupt(table: &'static str, message: String) -> StoreError {
    StoreError::Corrupt { table, message }
}

/// Appends the row `make(seq)` under the next sequence number, durably,
/// and returns that number.
pub(crate) fn append<T: Serialize>(
    db: &Database,
    log: Log,
    table: &'static str,
    make: impl FnOnce(u64) -> T,
) -> Result<u64, StoreError> {
    let tx = db.begin_write()?;
    let seq = {
        let mut rows = tx.open_table(log)?;
        let seq = rows.last()?.map_or(0, |(k, _)| k.value()) + 1;
        let text = serde_json::to_string(&make(seq))
            .map_err(|e| corrupt(table, format!("cannot encode row {seq}: {e}")))?;
        rows.insert(seq, text.as_str())?;
        seq
    };
    tx.commit()?;
    Ok(seq)
}

/// Appends `rows` in order under the next sequence numbers, in one durable
/// transaction (one commit for the batch), each row made by `make(seq, row)`;
/// returns the last number (`None` for no rows).
pub(crate) fn append_all<R, T: Serialize>(
    db: &Database,
    log: Log,
    table: &'static str,
    rows: &[R],
    make: impl Fn(u64, &R) -> T,
) -> Result<Option<u64>, StoreError> {
    if rows.is_empty() {
        return Ok(None);
    }
    let tx = db.begin_write()?;
    let last = {
        let mut table_rows = tx.open_table(log)?;
        let mut seq = table_rows.last()?.map_or(0, |(k, _)| k.value());
        for row in rows {
            seq += 1;
            let text = serde_json::to_string(&make(seq, row))
                .map_err(|e| corrupt(table, format!("cannot encode row {seq}: {e}")))?;
            table_rows.insert(seq, text.as_str())?;
        }
        seq
    };
    tx.commit()?;
    Ok(Some(last))
}

/// The rows `keep` accepts, oldest first, only the last `limit` when one
/// is given.
pub(crate) fn rows<T: DeserializeOwned>(
    db: &Database,
    log: Log,
    table: &'static str,
    keep: impl Fn(&T) -> bool,
    limit: Option<usize>,
) -> Result<Vec<T>, StoreError> {
    let tx = db.begin_read()?;
    let rows = tx.open_table(log)?;
    let mut out = Vec::new();
    for row in rows.iter()? {
        let (k, v) = row?;
        let value: T = serde_json::from_str(v.value())
            .map_err(|e| corrupt(table, format!("row {}: {e}", k.value())))?;
        if keep(&value) {
            out.push(value);
        }
    }
    if let Some(limit) = limit {
        let skip = out.len().saturating_sub(limit);
        out.drain(..skip);
    }
    Ok(out)
}
