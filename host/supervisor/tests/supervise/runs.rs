//! Supervised runs (`sandgraph_supervisor::SupervisorRuns`): created once,
//! turns counted durably and handed out once each, on redb and on
//! PostgreSQL, and readable in files written before they were this
//! crate's table.

use std::path::Path;

use sandgraph_store::Store;
use sandgraph_supervisor::{SupervisorRun, SupervisorRuns};
use sandgraph_tests::postgres::TestPostgres;

fn run() -> SupervisorRun {
    SupervisorRun {
        graph_id: "g1".into(),
        goal: "do it".into(),
        root_session_id: "root".into(),
        turns: 0,
        model: "m".into(),
        created_at: 1,
        updated_at: 1,
    }
}

/// The runs' database: opened again as the same file, or as another
/// host's connection to the same PostgreSQL database.
struct Backend {
    reopen: Box<dyn Fn() -> Store + Sync>,
    /// Whether concurrent users each open their own (PostgreSQL: hosts)
    /// or share one handle (redb: one process owns the file).
    own_handles: bool,
}

impl Backend {
    fn runs(&self) -> SupervisorRuns {
        SupervisorRuns::open(&(self.reopen)())
    }

    fn host(&self, open: &Store) -> SupervisorRuns {
        if self.own_handles {
            self.runs()
        } else {
            SupervisorRuns::open(open)
        }
    }
}

fn created_once_with_turns_counted(b: &Backend) {
    let run = run();
    {
        let runs = b.runs();
        assert_eq!(runs.create(&run).unwrap(), (run.clone(), true));
        let other = SupervisorRun {
            goal: "other".into(),
            ..run.clone()
        };
        assert_eq!(runs.create(&other).unwrap(), (run.clone(), false));
        assert_eq!(runs.next_turn("g1", 5).unwrap(), 1);
        assert_eq!(runs.next_turn("g1", 6).unwrap(), 2);
        let err = runs.next_turn("nope", 7).unwrap_err();
        assert_eq!(err.to_string(), "no supervised agent graph \"nope\"");
        let b_run = SupervisorRun {
            graph_id: "B".into(),
            ..run.clone()
        };
        assert!(runs.create(&b_run).unwrap().1);
    }
    let runs = b.runs();
    let got = runs.get("g1").unwrap().unwrap();
    assert_eq!(
        (got.turns, got.updated_at, got.goal.as_str()),
        (2, 6, "do it")
    );
    assert_eq!(runs.root_session("g1").unwrap().as_deref(), Some("root"));
    assert_eq!(runs.root_session("nope").unwrap(), None);
    // By graph id, bytewise.
    let ids: Vec<String> = runs
        .list()
        .unwrap()
        .into_iter()
        .map(|r| r.graph_id)
        .collect();
    assert_eq!(ids, ["B", "g1"]);
    assert_eq!(runs.get("nope").unwrap(), None);
}

fn conformance(b: &Backend) {
    created_once_with_turns_counted(b);
    let store = (b.reopen)();
    let runs = SupervisorRuns::open(&store);
    // Turns are handed out once each, whoever asks.
    let mut turns: Vec<u64> = std::thread::scope(|s| {
        let hosts: Vec<_> = (0..3)
            .map(|_| {
                let runs = b.host(&store);
                s.spawn(move || {
                    (0..8)
                        .map(|i| runs.next_turn("g1", 10 + i).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hosts.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    turns.sort();
    assert_eq!(turns, (3..=26).collect::<Vec<u64>>());
    // Created once, whoever creates it.
    let results: Vec<(SupervisorRun, bool)> = std::thread::scope(|s| {
        let hosts: Vec<_> = (0..3)
            .map(|i| {
                let runs = b.host(&store);
                let mine = SupervisorRun {
                    graph_id: "race".into(),
                    goal: format!("goal {i}"),
                    ..run()
                };
                s.spawn(move || runs.create(&mine).unwrap())
            })
            .collect();
        hosts.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|r| r.1).count(), 1, "{results:?}");
    assert!(results.iter().all(|r| r.0 == results[0].0), "{results:?}");
    assert_eq!(runs.get("race").unwrap().as_ref(), Some(&results[0].0));
}

#[test]
fn supervisor_runs_on_redb() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    conformance(&Backend {
        reopen: Box::new(move || Store::open(&path).unwrap()),
        own_handles: false,
    });
}

#[test]
fn supervisor_runs_on_postgres() {
    let cluster = TestPostgres::shared();
    let url = cluster.fresh_db("supervisor");
    conformance(&Backend {
        reopen: Box::new(move || Store::connect(&url).unwrap()),
        own_handles: true,
    });
}

/// A file written before supervised runs were declared here: the redb
/// table `supervisor_runs` of `&str` keys and `&str` JSON values, as the
/// store made it.
#[test]
fn a_run_written_in_the_old_format_reads_back_and_counts_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let old = redb::TableDefinition::<&str, &str>::new("supervisor_runs");
            let mut rows = tx.open_table(old).unwrap();
            let row = SupervisorRun { turns: 4, ..run() };
            rows.insert("g1", serde_json::to_string(&row).unwrap().as_str())
                .unwrap();
        }
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let runs = SupervisorRuns::open(&store);
    assert_eq!(
        runs.get("g1").unwrap(),
        Some(SupervisorRun { turns: 4, ..run() })
    );
    assert_eq!(runs.next_turn("g1", 9).unwrap(), 5);
}

/// The controller's schema-1 fixture holds the `supervisor_runs` table the
/// store used to make: it opens as this crate's table.
#[test]
fn a_schema_1_file_opens_with_its_supervisor_runs() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../controller/tests/fixtures/agent-graphs-schema1.db");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.redb");
    std::fs::copy(fixture, &path).unwrap();
    let store = Store::open(&path).unwrap();
    let runs = SupervisorRuns::open(&store);
    let before = runs.list().unwrap().len();
    let fresh = SupervisorRun {
        graph_id: "fresh_graph".into(),
        ..run()
    };
    assert!(runs.create(&fresh).unwrap().1);
    assert_eq!(runs.list().unwrap().len(), before + 1);
}
