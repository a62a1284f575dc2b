//! The routing journal's table in the sandgraph database, declared on the
//! store's table API (`sandgraph_store::tables`): one row per attempt of a
//! routed request (request, tool, arguments, decision, reason, outcome,
//! timings), numbered 1, 2, 3, ... in the order they were written. Rows
//! are only ever appended.
//!
//! The format: table `journal`, key the entry's sequence number (`u64`),
//! value the [`JournalEntry`] as JSON text (`&str`): the redb table that
//! files have always held, or on PostgreSQL the rows of
//! `sg_agent_graph_rows` named `journal`.

use sandgraph_store::Store;
use sandgraph_store::tables::{TableDef, TableError, TableSet, Tables};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The routing journal: key the entry's sequence number (1, 2, ...),
/// value the [`JournalEntry`] as JSON. Append-only.
const JOURNAL: TableDef<u64, &str> = TableDef::new("journal");

/// The routing journal's one table.
static JOURNAL_TABLES: TableSet = TableSet {
    what: "the routing journal",
    tables: &[&JOURNAL],
};

/// One attempt of a routed request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Position in the journal, from 1; set by [`Journal::append`].
    #[serde(default)]
    pub seq: u64,
    /// The routed request this attempt belongs to.
    pub route_id: String,
    /// 1 for the first model answer, 2 after the first re-ask, ...
    pub attempt: u32,
    /// Unix milliseconds when the attempt began.
    pub at_ms: u64,
    /// The request text.
    pub request: String,
    /// The tool the model chose, if it chose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The arguments: JSON, or the raw text when it was not JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// `accepted`, `rejected`, `failed` (the graph's error propagated),
    /// `fallback` or `error` (the model call failed).
    pub decision: String,
    /// Which step decided the attempt (`unknown_tool`, `invalid_json`,
    /// `invalid_args`, `validate`, `pre_execute`, `post_execute`, or `model`
    /// for a failed model call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The reason fed back to the model, or the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The value returned, or `{"error": {"code", "message"}}`; bounded by
    /// the writer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Value>,
    /// Time waiting for the model, in milliseconds.
    pub model_ms: u64,
    /// Time in the checks and hooks before the run, in milliseconds.
    pub check_ms: u64,
    /// Time running the graph, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_ms: Option<u64>,
    /// The sha256 (hex) of the component that ran: which version of the
    /// graph produced the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_digest: Option<String>,
}

/// A failure of the routing journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The database failed.
    #[error(transparent)]
    Table(#[from] TableError),
    /// A stored row that is not a [`JournalEntry`], or an entry that cannot
    /// be encoded.
    #[error("corrupt journal row {seq}: {message}")]
    Corrupt {
        /// The row's sequence number.
        seq: u64,
        /// What is wrong with it.
        message: String,
    },
}

/// The routing journal of a store's database (a redb file, or PostgreSQL
/// shared with other hosts). Cheap to clone; clones share the database.
///
/// Calls block (an fsync, or round trips to the server): async callers
/// should use `spawn_blocking`.
#[derive(Clone)]
pub struct Journal {
    tables: Tables,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").finish_non_exhaustive()
    }
}

impl Journal {
    /// The routing journal in `store`'s database.
    pub fn open(store: &Store) -> Self {
        Journal {
            tables: store.tables(&JOURNAL_TABLES),
        }
    }

    /// Appends `entry` durably under the next sequence number and returns
    /// that number. Numbers are 1, 2, 3, ... without gaps, also when hosts
    /// sharing a PostgreSQL database append at once.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn append(&self, entry: &JournalEntry) -> Result<u64, JournalError> {
        self.tables.write(|tx| {
            let mut rows = tx.open_table(JOURNAL)?;
            let seq = rows.next_key()?;
            let row = JournalEntry {
                seq,
                ..entry.clone()
            };
            let text = serde_json::to_string(&row).map_err(|e| JournalError::Corrupt {
                seq,
                message: format!("cannot encode the entry: {e}"),
            })?;
            rows.insert(seq, text.as_str())?;
            Ok((seq, true))
        })
    }

    /// Entries in order, optionally only those of `route_id`, keeping the
    /// last `limit` when one is given (read from the journal's end).
    ///
    /// # Errors
    ///
    /// Database errors, and [`JournalError::Corrupt`] for a row that does
    /// not decode.
    pub fn entries(
        &self,
        route_id: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        self.tables.read(|tx| {
            tx.open_table(JOURNAL)?
                .pick_last(limit, |seq, text| -> Result<_, JournalError> {
                    let entry: JournalEntry =
                        serde_json::from_str(&text).map_err(|e| JournalError::Corrupt {
                            seq,
                            message: e.to_string(),
                        })?;
                    Ok(route_id
                        .is_none_or(|id| entry.route_id == id)
                        .then_some(entry))
                })
        })
    }
}
