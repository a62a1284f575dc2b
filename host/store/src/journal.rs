//! The routing audit journal: one row per attempt of a routed request
//! (request, tool, arguments, decision, reason, outcome, timings), in the
//! order they were written. Rows are only ever appended.

use std::sync::Arc;

use redb::Database;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schema::JOURNAL;
use crate::{StoreError, log_table};

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

/// Where a journal keeps its rows: redb ([`RedbJournal`]) or PostgreSQL
/// (`postgres::journal`). Same semantics: `append` numbers entries 1, 2,
/// 3, ... without gaps, `entries` returns them in that order.
pub(crate) trait JournalBackend: Send + Sync {
    fn append(&self, entry: &JournalEntry) -> Result<u64, StoreError>;
    fn entries(
        &self,
        route_id: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, StoreError>;
}

/// The journal in the redb file.
struct RedbJournal {
    db: Arc<Database>,
}

impl JournalBackend for RedbJournal {
    fn append(&self, entry: &JournalEntry) -> Result<u64, StoreError> {
        log_table::append(&self.db, JOURNAL, "journal", |seq| JournalEntry {
            seq,
            ..entry.clone()
        })
    }

    fn entries(
        &self,
        route_id: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        log_table::rows(
            &self.db,
            JOURNAL,
            "journal",
            |e: &JournalEntry| route_id.is_none_or(|id| e.route_id == id),
            limit,
        )
    }
}

/// The journal of a [`crate::Store`]. Cheap to clone.
#[derive(Clone)]
pub struct Journal {
    backend: Arc<dyn JournalBackend>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").finish_non_exhaustive()
    }
}

impl Journal {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        Journal::with_backend(Arc::new(RedbJournal { db }))
    }

    pub(crate) fn with_backend(backend: Arc<dyn JournalBackend>) -> Self {
        Journal { backend }
    }

    /// Appends `entry` durably and returns its sequence number.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn append(&self, entry: &JournalEntry) -> Result<u64, StoreError> {
        self.backend.append(entry)
    }

    /// Entries in order, optionally only those of `route_id`, keeping the
    /// last `limit` when one is given.
    ///
    /// # Errors
    ///
    /// Database errors, and [`StoreError::Corrupt`] for a row that does not
    /// decode.
    pub fn entries(
        &self,
        route_id: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        self.backend.entries(route_id, limit)
    }
}
