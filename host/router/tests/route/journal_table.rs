//! The routing journal's table (`sandgraph_router::Journal`): append-only,
//! numbered 1, 2, 3, ... without gaps, filtered, bounded, durable, on redb
//! and on PostgreSQL, and readable in files written before the journal
//! was this crate's table.

use std::path::Path;
use std::sync::Arc;

use sandgraph_router::{Journal, JournalEntry};
use sandgraph_store::Store;
use sandgraph_tests::postgres::TestPostgres;
use serde_json::json;

fn entry(route: &str, attempt: u32, decision: &str) -> JournalEntry {
    JournalEntry {
        seq: 999, // ignored: the journal numbers entries itself
        route_id: route.into(),
        attempt,
        at_ms: 1_700_000_000_000 + u64::from(attempt),
        request: format!("request of {route}"),
        tool: Some("echo_graph".into()),
        args: Some(json!({"input": {"topic": "x"}})),
        decision: decision.into(),
        stage: (decision == "rejected").then(|| "invalid_args".into()),
        reason: None,
        outcome: None,
        model_ms: 3,
        check_ms: 1,
        run_ms: None,
        graph_digest: Some("ab".repeat(32)),
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
    fn journal(&self) -> Journal {
        Journal::open(&(self.reopen)())
    }

    fn host(&self, open: &Store) -> Journal {
        if self.own_handles {
            self.journal()
        } else {
            Journal::open(open)
        }
    }
}

fn conformance(b: &Backend) {
    {
        let j = b.journal();
        assert!(j.entries(None, None).unwrap().is_empty());
        assert_eq!(j.append(&entry("r1", 1, "rejected")).unwrap(), 1);
        assert_eq!(j.append(&entry("r2", 1, "accepted")).unwrap(), 2);
        assert_eq!(j.append(&entry("r1", 2, "accepted")).unwrap(), 3);
    }
    let store = (b.reopen)();
    let j = Journal::open(&store);
    let all = j.entries(None, None).unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(
        all[0],
        JournalEntry {
            seq: 1,
            ..entry("r1", 1, "rejected")
        }
    );
    let r1 = j.entries(Some("r1"), None).unwrap();
    assert_eq!(
        r1.iter().map(|e| (e.seq, e.attempt)).collect::<Vec<_>>(),
        [(1, 1), (3, 2)]
    );
    let r1_last = j.entries(Some("r1"), Some(1)).unwrap();
    assert_eq!(r1_last.iter().map(|e| e.seq).collect::<Vec<_>>(), [3]);
    let last = j.entries(None, Some(2)).unwrap();
    assert_eq!(last.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(j.entries(None, Some(0)).unwrap(), []);
    assert!(j.entries(Some("none"), None).unwrap().is_empty());

    // Hosts (or threads) appending at once: numbers stay dense and unique.
    std::thread::scope(|s| {
        for t in 0..4 {
            let j = b.host(&store);
            s.spawn(move || {
                for i in 0..10 {
                    j.append(&entry(&format!("t{t}"), i, "accepted")).unwrap();
                }
            });
        }
    });
    let all = j.entries(None, None).unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=43).collect::<Vec<u64>>()
    );
    for t in 0..4 {
        let mine = j.entries(Some(&format!("t{t}")), None).unwrap();
        assert_eq!(
            mine.iter().map(|e| e.attempt).collect::<Vec<_>>(),
            (0..10).collect::<Vec<u32>>(),
            "one host's entries keep their order"
        );
    }
    assert_eq!(j.append(&entry("r3", 1, "fallback")).unwrap(), 44);
}

#[test]
fn the_journal_on_redb() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    conformance(&Backend {
        reopen: Box::new(move || Store::open(&path).unwrap()),
        own_handles: false,
    });
}

#[test]
fn the_journal_on_postgres() {
    let cluster: Arc<TestPostgres> = TestPostgres::shared();
    let url = cluster.fresh_db("journal");
    conformance(&Backend {
        reopen: Box::new(move || Store::connect(&url).unwrap()),
        own_handles: true,
    });
}

/// A file written before the journal was declared here: the redb table
/// `journal` of `u64` keys and `&str` JSON values, as the store made it.
#[test]
fn rows_written_in_the_old_format_read_back_and_numbering_continues() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let old = redb::TableDefinition::<u64, &str>::new("journal");
            let mut rows = tx.open_table(old).unwrap();
            for seq in 1..=2u64 {
                let row = JournalEntry {
                    seq,
                    ..entry("old", u32::try_from(seq).unwrap(), "accepted")
                };
                rows.insert(seq, serde_json::to_string(&row).unwrap().as_str())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let j = Journal::open(&store);
    let old = j.entries(Some("old"), None).unwrap();
    assert_eq!(old.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(
        old[1],
        JournalEntry {
            seq: 2,
            ..entry("old", 2, "accepted")
        }
    );
    assert_eq!(j.append(&entry("new", 1, "fallback")).unwrap(), 3);
}

/// The controller's schema-1 fixture holds the empty `journal` table the
/// store used to make: it opens as this crate's table.
#[test]
fn a_schema_1_file_opens_with_its_journal() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../controller/tests/fixtures/agent-graphs-schema1.db");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.redb");
    std::fs::copy(fixture, &path).unwrap();
    let store = Store::open(&path).unwrap();
    let j = Journal::open(&store);
    let before = j.entries(None, None).unwrap().len();
    let seq = j.append(&entry("r", 1, "accepted")).unwrap();
    assert_eq!(seq, u64::try_from(before).unwrap() + 1);
    assert_eq!(j.entries(None, Some(1)).unwrap()[0].route_id, "r");
}
