//! The capability journal: one row per brokered capability call of a graph
//! (`llm`, `tools`, `http`), allowed or refused, numbered 1, 2, 3, ... in
//! the order they were written. Rows are only ever appended. The journal
//! is a table of this crate's in the sandgraph database, declared on the
//! store's table API (`sandgraph_store::tables`).
//!
//! The format: table `capability_calls`, key the call's sequence number
//! (`u64`), value the [`CapabilityCall`] as JSON text (`&str`): the redb
//! table that files have always held, or on PostgreSQL the rows of
//! `sg_agent_graph_rows` named `capability_calls`.

use sandgraph_core::audit::CapabilityCall;
use sandgraph_store::Store;
use sandgraph_store::tables::{TableDef, TableError, TableSet, Tables, Tx};

/// The capability journal: key the call's sequence number (1, 2, ...),
/// value the [`CapabilityCall`] as JSON. Append-only.
const CAPABILITY_CALLS: TableDef<u64, &str> = TableDef::new("capability_calls");

/// The capability journal's one table.
static JOURNAL_TABLES: TableSet = TableSet {
    what: "the capability journal",
    tables: &[&CAPABILITY_CALLS],
};

/// A failure of the capability journal.
#[derive(Debug, thiserror::Error)]
pub enum CapabilityJournalError {
    /// The database failed.
    #[error(transparent)]
    Table(#[from] TableError),
    /// A stored row that is not a [`CapabilityCall`], or a call that
    /// cannot be encoded.
    #[error("corrupt capability journal row {seq}: {message}")]
    Corrupt {
        /// The row's sequence number.
        seq: u64,
        /// What is wrong with it.
        message: String,
    },
}

/// The capability journal of a store's database (a redb file, or
/// PostgreSQL shared with other hosts). Cheap to clone; clones share the
/// database.
///
/// Calls block (an fsync, or round trips to the server): async callers
/// should use `spawn_blocking`.
#[derive(Clone)]
pub struct CapabilityJournal {
    tables: Tables,
}

impl std::fmt::Debug for CapabilityJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityJournal").finish_non_exhaustive()
    }
}

/// Appends `calls` in `tx` under the next numbers; the last one.
fn append_in(tx: &Tx<'_>, calls: &[CapabilityCall]) -> Result<u64, CapabilityJournalError> {
    let mut rows = tx.open_table(CAPABILITY_CALLS)?;
    let mut seq = rows.next_key()?;
    for call in calls {
        let row = CapabilityCall {
            seq,
            ..call.clone()
        };
        let text = serde_json::to_string(&row).map_err(|e| CapabilityJournalError::Corrupt {
            seq,
            message: format!("cannot encode the call: {e}"),
        })?;
        rows.insert(seq, text.as_str())?;
        seq += 1;
    }
    Ok(seq - 1)
}

impl CapabilityJournal {
    /// The capability journal in `store`'s database.
    pub fn open(store: &Store) -> Self {
        CapabilityJournal {
            tables: store.tables(&JOURNAL_TABLES),
        }
    }

    /// Appends `call` durably under the next sequence number and returns
    /// that number. Numbers are 1, 2, 3, ... without gaps, also when hosts
    /// sharing a PostgreSQL database append at once.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn append(&self, call: &CapabilityCall) -> Result<u64, CapabilityJournalError> {
        self.tables
            .write(|tx| Ok((append_in(tx, std::slice::from_ref(call))?, true)))
    }

    /// Appends `calls` in order, durably, in one transaction (one commit
    /// for the batch), and returns the last one's sequence number (`None`
    /// when `calls` is empty).
    ///
    /// # Errors
    ///
    /// Database errors; then none of the batch is written.
    pub fn append_all(
        &self,
        calls: &[CapabilityCall],
    ) -> Result<Option<u64>, CapabilityJournalError> {
        if calls.is_empty() {
            return Ok(None);
        }
        self.tables
            .write(|tx| Ok((Some(append_in(tx, calls)?), true)))
    }

    /// The last `limit` calls (all without one), oldest first, optionally
    /// only those of `graph`.
    ///
    /// # Errors
    ///
    /// Database errors, and [`CapabilityJournalError::Corrupt`] for a row
    /// that does not decode.
    pub fn entries(
        &self,
        graph: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<CapabilityCall>, CapabilityJournalError> {
        self.tables.read(|tx| {
            tx.open_table(CAPABILITY_CALLS)?.pick_last(
                limit,
                |seq, text| -> Result<_, CapabilityJournalError> {
                    let call: CapabilityCall = serde_json::from_str(&text).map_err(|e| {
                        CapabilityJournalError::Corrupt {
                            seq,
                            message: e.to_string(),
                        }
                    })?;
                    Ok(graph.is_none_or(|g| call.graph == g).then_some(call))
                },
            )
        })
    }
}

#[cfg(test)]
mod tests;
