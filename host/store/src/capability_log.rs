//! The capability journal: one row per brokered capability call of a graph
//! (`llm`, `tools`, `http`), allowed or refused, in the order they were
//! written. Rows are only ever appended.

use std::sync::Arc;

use redb::Database;
use sandgraph_core::audit::CapabilityCall;

use crate::{StoreError, log_table};

const TABLE: &str = "capability_calls";
use crate::schema::CAPABILITY_CALLS;

/// Where the capability journal keeps its rows: redb
/// ([`RedbCapabilityJournal`]) or PostgreSQL (`postgres::journal`). Same
/// semantics: `append` numbers calls 1, 2, 3, ... without gaps, `entries`
/// returns them in that order.
pub(crate) trait CapabilityJournalBackend: Send + Sync {
    fn append(&self, call: &CapabilityCall) -> Result<u64, StoreError>;
    fn entries(
        &self,
        graph: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<CapabilityCall>, StoreError>;
}

/// The capability journal in the redb file.
struct RedbCapabilityJournal {
    db: Arc<Database>,
}

impl CapabilityJournalBackend for RedbCapabilityJournal {
    fn append(&self, call: &CapabilityCall) -> Result<u64, StoreError> {
        log_table::append(&self.db, CAPABILITY_CALLS, TABLE, |seq| CapabilityCall {
            seq,
            ..call.clone()
        })
    }

    fn entries(
        &self,
        graph: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<CapabilityCall>, StoreError> {
        log_table::rows(
            &self.db,
            CAPABILITY_CALLS,
            TABLE,
            |c: &CapabilityCall| graph.is_none_or(|g| c.graph == g),
            limit,
        )
    }
}

/// The capability journal of a [`crate::Store`]. Cheap to clone.
#[derive(Clone)]
pub struct CapabilityJournal {
    backend: Arc<dyn CapabilityJournalBackend>,
}

impl std::fmt::Debug for CapabilityJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityJournal").finish_non_exhaustive()
    }
}

impl CapabilityJournal {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        CapabilityJournal::with_backend(Arc::new(RedbCapabilityJournal { db }))
    }

    pub(crate) fn with_backend(backend: Arc<dyn CapabilityJournalBackend>) -> Self {
        CapabilityJournal { backend }
    }

    /// Appends `call` durably and returns its sequence number.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn append(&self, call: &CapabilityCall) -> Result<u64, StoreError> {
        self.backend.append(call)
    }

    /// The last `limit` calls (all without one), oldest first, optionally
    /// only those of `graph`.
    ///
    /// # Errors
    ///
    /// Database errors, and [`StoreError::Corrupt`] for a row that does not
    /// decode.
    pub fn entries(
        &self,
        graph: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<CapabilityCall>, StoreError> {
        self.backend.entries(graph, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    #[test]
    fn calls_are_appended_in_order_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.redb");
        {
            let store = Store::open(&path).unwrap();
            let j = store.capability_journal();
            for (graph, decision) in [("a", "allowed"), ("b", "denied"), ("a", "quota")] {
                let seq = j
                    .append(&CapabilityCall {
                        graph: graph.into(),
                        capability: "llm".into(),
                        target: "fast -> deepseek-chat".into(),
                        decision: decision.into(),
                        ..CapabilityCall::default()
                    })
                    .unwrap();
                assert!(seq >= 1);
            }
        }
        let store = Store::open(&path).unwrap();
        let j = store.capability_journal();
        let all = j.entries(None, None).unwrap();
        assert_eq!(
            all.iter()
                .map(|c| (c.seq, c.decision.as_str()))
                .collect::<Vec<_>>(),
            [(1, "allowed"), (2, "denied"), (3, "quota")]
        );
        let a = j.entries(Some("a"), Some(1)).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].decision, "quota");
    }
}
