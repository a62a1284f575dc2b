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
    /// Appends `calls` in order in one transaction; the last number.
    fn append_all(&self, calls: &[CapabilityCall]) -> Result<Option<u64>, StoreError>;
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

    fn append_all(&self, calls: &[CapabilityCall]) -> Result<Option<u64>, StoreError> {
        log_table::append_all(&self.db, CAPABILITY_CALLS, TABLE, calls, |seq, call| {
            CapabilityCall {
                seq,
                ..call.clone()
            }
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

    /// Appends `calls` in order, durably, in one transaction (one commit
    /// for the batch), and returns the last one's sequence number (`None`
    /// when `calls` is empty).
    ///
    /// # Errors
    ///
    /// Database errors; then none of the batch is written.
    pub fn append_all(&self, calls: &[CapabilityCall]) -> Result<Option<u64>, StoreError> {
        self.backend.append_all(calls)
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

    #[test]
    fn a_batch_is_numbered_after_the_rows_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("data.redb")).unwrap();
        let j = store.capability_journal();
        let row = |target: &str, count: u64| CapabilityCall {
            graph: "a".into(),
            capability: "tools".into(),
            target: target.into(),
            decision: "denied".into(),
            count,
            ..CapabilityCall::default()
        };
        assert_eq!(j.append(&row("first", 1)).unwrap(), 1);
        assert_eq!(j.append_all(&[]).unwrap(), None);
        let last = j
            .append_all(&[row("x", 1), row("y", 1000), row("z", 1)])
            .unwrap();
        assert_eq!(last, Some(4));
        let all = j.entries(None, None).unwrap();
        assert_eq!(
            all.iter()
                .map(|c| (c.seq, c.target.as_str(), c.count))
                .collect::<Vec<_>>(),
            [(1, "first", 1), (2, "x", 1), (3, "y", 1000), (4, "z", 1)]
        );
    }

    #[test]
    fn rows_written_before_counts_read_as_one_call() {
        let old = r#"{"seq":7,"graph":"a","capability":"llm","target":"fast","decision":"allowed","request_bytes":3,"response_bytes":4,"latency_ms":5}"#;
        let call: CapabilityCall = serde_json::from_str(old).unwrap();
        assert_eq!((call.seq, call.count, call.chain.len()), (7, 1, 0));
        // A row of one call is written as before: no count, no chain.
        let text = serde_json::to_string(&call).unwrap();
        assert!(!text.contains("count") && !text.contains("chain"), "{text}");
    }
}
