//! The store on PostgreSQL against a real server (a throwaway cluster from
//! `tests/src/postgres.rs`), and the conformance of its roles: one test
//! function per role, run for redb and for PostgreSQL.

use std::sync::Arc;

use sandgraph_store::tables::TableSet;
use sandgraph_store::{PG_SCHEMA_VERSION, Store, StoreLocation, SupervisorRun};

use crate::fixture::TestPostgres;

/// The store under test.
struct Backend {
    /// Opens it again: the same file, or the same database from a new
    /// connection (another host).
    reopen: Box<dyn Fn() -> Store + Sync>,
    /// Whether concurrent users each open their own (PostgreSQL: hosts)
    /// or share one handle (redb: one process owns the file).
    own_handles: bool,
}

impl Backend {
    fn reopen(&self) -> Store {
        (self.reopen)()
    }

    /// A store for one of several concurrent users of `open`.
    fn host(&self, open: &Store) -> Store {
        if self.own_handles {
            self.reopen()
        } else {
            open.clone()
        }
    }
}

fn redb() -> (tempfile::TempDir, Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let reopen = Box::new(move || Store::open(&path).unwrap());
    (
        dir,
        Backend {
            reopen,
            own_handles: false,
        },
    )
}

fn postgres(name: &str) -> (Arc<TestPostgres>, Backend) {
    let cluster = TestPostgres::shared();
    let url = cluster.fresh_db(name);
    let reopen = Box::new(move || Store::connect(&url).unwrap());
    (
        cluster,
        Backend {
            reopen,
            own_handles: true,
        },
    )
}

fn supervisor_conformance(b: &Backend) {
    let run = SupervisorRun {
        graph_id: "g1".into(),
        goal: "do it".into(),
        root_session_id: "root".into(),
        turns: 0,
        model: "m".into(),
        created_at: 1,
        updated_at: 1,
    };
    {
        let runs = b.reopen().supervisor_runs();
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
        let b = SupervisorRun {
            graph_id: "B".into(),
            ..run.clone()
        };
        assert!(runs.create(&b).unwrap().1);
    }
    let store = b.reopen();
    let runs = store.supervisor_runs();
    let got = runs.get("g1").unwrap().unwrap();
    assert_eq!(
        (got.turns, got.updated_at, got.goal.as_str()),
        (2, 6, "do it")
    );
    // By graph id, bytewise.
    assert_eq!(
        runs.list()
            .unwrap()
            .iter()
            .map(|r| r.graph_id.as_str())
            .collect::<Vec<_>>(),
        ["B", "g1"]
    );
    assert_eq!(runs.get("nope").unwrap(), None);

    // Turns are handed out once each, whoever asks.
    let mut turns: Vec<u64> = std::thread::scope(|s| {
        let hosts: Vec<_> = (0..3)
            .map(|_| {
                let runs = b.host(&store).supervisor_runs();
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
                let runs = b.host(&store).supervisor_runs();
                let mine = SupervisorRun {
                    graph_id: "race".into(),
                    goal: format!("goal {i}"),
                    ..run.clone()
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
    let (_dir, b) = redb();
    supervisor_conformance(&b);
}

#[test]
fn supervisor_runs_on_postgres() {
    let (_pg, b) = postgres("supervisor");
    supervisor_conformance(&b);
}

#[test]
fn connect_migrates_and_a_reconnect_sees_the_same_version() {
    let cluster = TestPostgres::shared();
    let url = cluster.fresh_db("migrate");
    let db = url.rsplit('/').next().unwrap().to_owned();
    let store = Store::connect(&url).unwrap();
    assert!(store.is_postgres());
    assert_eq!(store.schema_version().unwrap(), PG_SCHEMA_VERSION as u64);
    let tables = cluster
        .psql(&db, "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'")
        .unwrap();
    assert_eq!(
        tables,
        "sandgraph_meta,sg_agent_graph_rows,sg_blobs,sg_capability_calls,sg_checkpoints,\
         sg_journal,sg_supervisor_runs,sg_thread_leases,sg_threads,sg_writes"
    );
    drop(store);
    let again = StoreLocation::new(&url).open(None).unwrap();
    assert_eq!(again.schema_version().unwrap(), PG_SCHEMA_VERSION as u64);
    drop(again);
    static NO_TABLES: TableSet = TableSet {
        what: "nothing",
        tables: &[],
    };
    let lease = std::time::Duration::from_millis(500);
    let leased = StoreLocation::new(&url).open(Some(lease)).unwrap();
    assert_eq!(leased.tables(&NO_TABLES).lease_ttl(), lease);
    // A redb path still opens a file.
    let dir = tempfile::tempdir().unwrap();
    let file = StoreLocation::new(dir.path().join("x.redb"))
        .open(None)
        .unwrap();
    assert!(!file.is_postgres());
}

#[test]
fn a_newer_schema_is_refused() {
    let cluster = TestPostgres::shared();
    let url = cluster.fresh_db("newer");
    let db = url.rsplit('/').next().unwrap().to_owned();
    drop(Store::connect(&url).unwrap());
    cluster
        .psql(
            &db,
            &format!(
                "UPDATE sandgraph_meta SET value = {} WHERE key = 'schema_version'",
                PG_SCHEMA_VERSION + 1
            ),
        )
        .unwrap();
    let err = Store::connect(&url).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "database 127.0.0.1:{}/{db} was written by a newer sandgraph (schema {}); upgrade sandgraph",
            cluster.port(),
            PG_SCHEMA_VERSION + 1
        )
    );
}

#[test]
fn hosts_connecting_at_once_migrate_once() {
    let cluster = TestPostgres::shared();
    let url = cluster.fresh_db("three_hosts");
    let db = url.rsplit('/').next().unwrap().to_owned();
    let barrier = std::sync::Barrier::new(3);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                barrier.wait();
                let store = Store::connect(&url).unwrap();
                assert_eq!(store.schema_version().unwrap(), PG_SCHEMA_VERSION as u64);
            });
        }
    });
    assert_eq!(
        cluster
            .psql(&db, "SELECT count(*) FROM sandgraph_meta")
            .unwrap(),
        "1"
    );
}

#[test]
fn errors_name_the_server_but_never_the_password() {
    const SECRET: &str = "Hunter2-Secret";
    // Nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = Store::connect(&format!(
        "postgres://sandgraph:{SECRET}@127.0.0.1:{port}/db?connect_timeout=5"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with(&format!("postgres 127.0.0.1:{port}/db: ")),
        "{err}"
    );
    assert!(!err.contains(SECRET) && !err.contains("Hunter2"), "{err}");
    // A database that does not exist.
    let cluster = TestPostgres::shared();
    let err = Store::connect(&format!(
        "postgres://sandgraph:{SECRET}@127.0.0.1:{}/no_such_db",
        cluster.port()
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("does not exist") && err.contains("/no_such_db"),
        "{err}"
    );
    assert!(!err.contains(SECRET), "{err}");
    // A wrong password.
    let guarded = TestPostgres::start_with_password("right-horse-battery").unwrap();
    let good = guarded.url();
    Store::connect(&good).expect("the right password connects");
    let bad = good.replace("right-horse-battery", SECRET);
    let err = Store::connect(&bad).unwrap_err().to_string();
    assert!(err.contains("authentication failed"), "{err}");
    assert!(
        err.contains(&format!("127.0.0.1:{}/postgres", guarded.port())),
        "{err}"
    );
    assert!(
        !err.contains(SECRET) && !err.contains("right-horse"),
        "{err}"
    );
    // TLS is refused rather than ignored.
    let err = Store::connect(&format!("{good}?sslmode=require"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sslmode=require is not supported"), "{err}");
    assert!(!err.contains("right-horse"), "{err}");
}
