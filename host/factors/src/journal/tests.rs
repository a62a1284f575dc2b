//! The capability journal on redb and on PostgreSQL (`fixture`'s
//! throwaway cluster), and in files written before it was this crate's
//! table.

use std::path::Path;

use sandgraph_core::audit::CapabilityCall;
use sandgraph_store::Store;

use super::CapabilityJournal;
use crate::fixture::TestPostgres;

fn call(graph: &str, decision: &str) -> CapabilityCall {
    CapabilityCall {
        graph: graph.into(),
        capability: "llm".into(),
        target: "fast -> deepseek-chat".into(),
        decision: decision.into(),
        ..CapabilityCall::default()
    }
}

/// The journal's database: opened again as the same file, or as another
/// host's connection to the same PostgreSQL database.
struct Backend {
    reopen: Box<dyn Fn() -> Store + Sync>,
    /// Whether concurrent users each open their own (PostgreSQL: hosts)
    /// or share one handle (redb: one process owns the file).
    own_handles: bool,
}

impl Backend {
    fn journal(&self) -> CapabilityJournal {
        CapabilityJournal::open(&(self.reopen)())
    }
}

fn conformance(b: &Backend) {
    {
        let j = b.journal();
        for (graph, decision) in [("a", "allowed"), ("b", "denied"), ("a", "quota"), ("", "x")] {
            j.append(&call(graph, decision)).unwrap();
        }
    }
    let store = (b.reopen)();
    let j = CapabilityJournal::open(&store);
    let all = j.entries(None, None).unwrap();
    assert_eq!(
        all.iter()
            .map(|c| (c.seq, c.decision.as_str()))
            .collect::<Vec<_>>(),
        [(1, "allowed"), (2, "denied"), (3, "quota"), (4, "x")]
    );
    assert_eq!(
        all[1],
        CapabilityCall {
            seq: 2,
            ..call("b", "denied")
        }
    );
    let a = j.entries(Some("a"), Some(1)).unwrap();
    assert_eq!(a.iter().map(|c| c.seq).collect::<Vec<_>>(), [3]);
    assert_eq!(j.entries(Some("a"), None).unwrap().len(), 2);
    assert_eq!(j.entries(Some(""), None).unwrap().len(), 1);
    assert_eq!(j.entries(None, Some(2)).unwrap().len(), 2);
    // A batch follows the rows before it, in order, counts kept.
    assert_eq!(j.append_all(&[]).unwrap(), None);
    let counted = CapabilityCall {
        count: 1000,
        chain: vec!["a".into(), "b".into()],
        ..call("b", "denied")
    };
    let last = j
        .append_all(&[call("c", "allowed"), counted.clone()])
        .unwrap();
    assert_eq!(last, Some(6));
    let all = j.entries(None, None).unwrap();
    assert_eq!(all.len(), 6);
    assert_eq!(
        all[4],
        CapabilityCall {
            seq: 5,
            ..call("c", "allowed")
        }
    );
    assert_eq!(all[5], CapabilityCall { seq: 6, ..counted });
    // Hosts (or threads) appending batches at once: numbers stay dense.
    std::thread::scope(|s| {
        for t in 0..3 {
            let j = if b.own_handles {
                b.journal()
            } else {
                j.clone()
            };
            s.spawn(move || {
                for _ in 0..5 {
                    let graph = format!("t{t}");
                    j.append_all(&[call(&graph, "allowed"), call(&graph, "denied")])
                        .unwrap();
                }
            });
        }
    });
    let all = j.entries(None, None).unwrap();
    assert_eq!(
        all.iter().map(|c| c.seq).collect::<Vec<_>>(),
        (1..=36).collect::<Vec<u64>>()
    );
    for pair in all[6..].chunks(2) {
        assert_eq!(pair[0].graph, pair[1].graph, "a batch is written together");
    }
}

#[test]
fn the_capability_journal_on_redb() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.redb");
    conformance(&Backend {
        reopen: Box::new(move || Store::open(&path).unwrap()),
        own_handles: false,
    });
}

#[test]
fn the_capability_journal_on_postgres() {
    let cluster = TestPostgres::shared();
    let url = cluster.fresh_db("capability");
    conformance(&Backend {
        reopen: Box::new(move || Store::connect(&url).unwrap()),
        own_handles: true,
    });
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

/// A file written before the journal was declared here: the redb table
/// `capability_calls` of `u64` keys and `&str` JSON values, as the store
/// made it.
#[test]
fn rows_written_in_the_old_format_read_back_and_numbering_continues() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let old = redb::TableDefinition::<u64, &str>::new("capability_calls");
            let mut rows = tx.open_table(old).unwrap();
            for seq in 1..=2u64 {
                let row = CapabilityCall {
                    seq,
                    ..call("old", "allowed")
                };
                rows.insert(seq, serde_json::to_string(&row).unwrap().as_str())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let j = CapabilityJournal::open(&store);
    let old = j.entries(Some("old"), None).unwrap();
    assert_eq!(old.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(j.append(&call("new", "denied")).unwrap(), 3);
}

/// The controller's schema-1 fixture holds the empty `capability_calls`
/// table the store used to make: it opens as this crate's table.
#[test]
fn a_schema_1_file_opens_with_its_capability_journal() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../controller/tests/fixtures/agent-graphs-schema1.db");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.redb");
    std::fs::copy(fixture, &path).unwrap();
    let store = Store::open(&path).unwrap();
    let j = CapabilityJournal::open(&store);
    let before = j.entries(None, None).unwrap().len() as u64;
    assert_eq!(j.append(&call("g", "allowed")).unwrap(), before + 1);
}
