//! Declared tables as a storage API (`sandgraph_store::tables`), on both
//! backends: rows by key and by range in the key's order, transactions that
//! write all of their rows or none, and tables the store makes when their
//! owner first writes. The controller's rules over its tables are tested in
//! `host/controller/tests/all`.

use std::ops::Bound;
use std::sync::Arc;

use sandgraph_store::Store;
use sandgraph_store::tables::{TableDef, TableError, TableSet, Tables};

use crate::fixture;

/// A schedule-like table: rows by `(graph, revision)`.
const SCHEDULE: TableDef<(&str, u64), &str> = TableDef::new("test_schedule");
/// A claims-like table: rows by `(graph, intent)`.
const CLAIMS: TableDef<(&str, &str), &str> = TableDef::new("test_claims");
/// A table no test writes.
const UNUSED: TableDef<&str, (&str, u64)> = TableDef::new("test_unused");
/// A journal-like log: rows numbered 1, 2, 3, ...
const LOG: TableDef<u64, &str> = TableDef::new("test_log");

/// The tables these tests declare, as an owner would.
static SET: TableSet = TableSet {
    what: "the test tables",
    tables: &[&SCHEDULE, &CLAIMS, &UNUSED, &LOG],
};

/// A store on one backend; the cluster (for PostgreSQL) outlives it.
struct Db {
    store: Store,
    /// The database's URL on PostgreSQL, where each host connects itself.
    url: Option<String>,
    _dir: Option<tempfile::TempDir>,
    _pg: Option<Arc<fixture::TestPostgres>>,
}

impl Db {
    fn redb() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("sandgraph.redb")).unwrap();
        Db {
            store,
            url: None,
            _dir: Some(dir),
            _pg: None,
        }
    }

    fn postgres(test: &str) -> Self {
        let pg = fixture::TestPostgres::shared();
        let url = pg.fresh_db(test);
        let store = Store::connect(&url).unwrap();
        Db {
            store,
            url: Some(url),
            _dir: None,
            _pg: Some(pg),
        }
    }

    fn tables(&self) -> Tables {
        self.store.tables(&SET)
    }

    /// The tables as another host sees them: its own connection on
    /// PostgreSQL; on redb (one process per file) this store's.
    fn host(&self) -> Tables {
        match &self.url {
            Some(url) => Store::connect(url).unwrap().tables(&SET),
            None => self.tables(),
        }
    }
}

/// The revisions of `graph` in the schedule table, read back in order.
fn revisions(tables: &Tables, graph: &str) -> Vec<u64> {
    tables
        .read(|tx| {
            let rows = tx
                .open_table(SCHEDULE)?
                .between((graph, 0), (graph, u64::MAX))?;
            Ok::<_, TableError>(rows.into_iter().map(|((_, r), _)| r).collect())
        })
        .unwrap()
}

fn rows_come_back_in_key_order_by_key_and_by_range(db: Db) {
    let tables = db.tables();
    tables
        .write(|tx| {
            let mut schedule = tx.open_table(SCHEDULE)?;
            for (graph, revision) in [("g", 10), ("g", 2), ("h", 1), ("g", 1), ("g\0", 3)] {
                schedule.insert((graph, revision), format!("{graph}@{revision}").as_str())?;
            }
            Ok::<_, TableError>(((), true))
        })
        .unwrap();
    assert_eq!(revisions(&tables, "g"), [1, 2, 10], "numbers, not bytes");
    tables
        .read(|tx| {
            let schedule = tx.open_table(SCHEDULE)?;
            assert_eq!(schedule.get(("g", 2))?.as_deref(), Some("g@2"));
            assert_eq!(schedule.get(("g", 3))?, None);
            let g = (Bound::Included(("g", 0)), Bound::Included(("g", u64::MAX)));
            assert_eq!(schedule.first(g)?, Some((("g".into(), 1), "g@1".into())));
            assert_eq!(schedule.last(g)?, Some((("g".into(), 10), "g@10".into())));
            let after_g = (Bound::Excluded(("g", u64::MAX)), Bound::Unbounded);
            assert_eq!(schedule.first(after_g)?.unwrap().0, ("g\0".into(), 3));
            let keys: Vec<(String, u64)> = schedule.all()?.into_iter().map(|r| r.0).collect();
            let want = [("g", 1), ("g", 2), ("g", 10), ("g\0", 3), ("h", 1)];
            assert_eq!(keys, want.map(|(g, r)| (g.to_owned(), r)));
            Ok::<_, TableError>(())
        })
        .unwrap();
}

fn a_failed_write_writes_nothing_and_a_later_one_sees_the_last_commit(db: Db) {
    let tables = db.tables();
    let failed = tables.write(|tx| {
        tx.open_table(CLAIMS)?.insert(("g", "i1"), "one")?;
        Err::<((), bool), _>(TableError::Db("refused".into()))
    });
    assert_eq!(failed, Err(TableError::Db("refused".into())));
    let seen = tables.write(|tx| {
        let mut claims = tx.open_table(CLAIMS)?;
        let before = claims.get(("g", "i1"))?;
        claims.insert(("g", "i1"), "two")?;
        Ok::<_, TableError>((before, true))
    });
    assert_eq!(seen, Ok(None), "the failed write left no row");
    let now = tables.read(|tx| tx.open_table(CLAIMS)?.get(("g", "i1")));
    assert_eq!(now, Ok(Some("two".to_owned())));
}

/// Appends one row under the log's next key; its number.
fn append(tables: &Tables, text: &str) -> u64 {
    tables
        .write(|tx| {
            let mut log = tx.open_table(LOG)?;
            let seq = log.next_key()?;
            log.insert(seq, format!("{seq}:{text}").as_str())?;
            Ok::<_, TableError>((seq, true))
        })
        .unwrap()
}

fn a_log_is_numbered_without_gaps_and_read_back_from_its_end(db: Db) {
    let tables = db.tables();
    let keys = |range, n| {
        tables
            .read(|tx| tx.open_table(LOG)?.last_n(range, n))
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect::<Vec<_>>()
    };
    assert_eq!(keys((Bound::Unbounded, Bound::Unbounded), 3), [0u64; 0]);
    for i in 1..=5 {
        assert_eq!(append(&tables, "a"), i);
    }
    assert_eq!(keys((Bound::Unbounded, Bound::Unbounded), 2), [5, 4]);
    assert_eq!(keys((Bound::Unbounded, Bound::Excluded(4)), 2), [3, 2]);
    assert_eq!(
        keys((Bound::Included(2), Bound::Unbounded), 9),
        [5, 4, 3, 2]
    );
    assert_eq!(keys((Bound::Unbounded, Bound::Unbounded), 0), [0u64; 0]);
    // The tail of a log, filtered, over more than one page of rows.
    tables
        .write(|tx| {
            let mut log = tx.open_table(LOG)?;
            for _ in 0..600 {
                let seq = log.next_key()?;
                log.insert(seq, format!("{seq}:b").as_str())?;
            }
            Ok::<_, TableError>(((), true))
        })
        .unwrap();
    let pick = |n, every: u64| {
        tables
            .read(|tx| {
                tx.open_table(LOG)?.pick_last(n, |k, v| {
                    Ok::<_, TableError>((k % every == 0).then_some((k, v)))
                })
            })
            .unwrap()
    };
    let tail: Vec<u64> = pick(Some(3), 100).into_iter().map(|r| r.0).collect();
    assert_eq!(tail, [400, 500, 600]);
    assert_eq!(pick(Some(1), 1), [(605, "605:b".to_owned())]);
    assert_eq!(pick(None, 100).len(), 6);
    assert_eq!(pick(Some(100), 100).len(), 6, "fewer than asked: all");
    assert_eq!(pick(Some(0), 1), []);
    assert_eq!(pick(Some(2), 1000), []);
    // Hosts appending at once: every number once, none skipped, each
    // host's rows in its order.
    std::thread::scope(|s| {
        for t in 0..4 {
            let host = db.host();
            s.spawn(move || {
                for i in 0..10 {
                    append(&host, &format!("t{t}-{i:02}"));
                }
            });
        }
    });
    let rows = tables.read(|tx| tx.open_table(LOG)?.all()).unwrap();
    let numbers: Vec<u64> = rows.iter().map(|(k, _)| *k).collect();
    assert_eq!(numbers, (1..=645).collect::<Vec<_>>());
    for (seq, text) in &rows {
        assert!(text.starts_with(&format!("{seq}:")), "{seq}: {text}");
    }
    for t in 0..4 {
        let mine: Vec<&str> = rows
            .iter()
            .filter_map(|(_, v)| v.split_once(&format!(":t{t}-")).map(|(_, i)| i))
            .collect();
        let want: Vec<String> = (0..10).map(|i| format!("{i:02}")).collect();
        assert_eq!(mine, want, "host {t} in its order");
    }
}

/// redb only: a write that reports no change is aborted; a read-only table
/// refuses an insert.
fn an_unchanged_write_is_aborted_and_reads_cannot_write() {
    let db = Db::redb();
    let tables = db.tables();
    tables
        .write(|tx| {
            tx.open_table(CLAIMS)?.insert(("g", "i1"), "kept out")?;
            Ok::<_, TableError>(((), false))
        })
        .unwrap();
    let found = tables.read(|tx| tx.open_table(CLAIMS)?.get(("g", "i1")));
    assert_eq!(found, Ok(None));
    let refused = tables.read(|tx| tx.open_table(CLAIMS)?.insert(("g", "i1"), "x"));
    assert_eq!(
        refused,
        Err(TableError::Db(
            "table test_claims was opened read-only".into()
        ))
    );
    assert!(tables.single_process());
}

/// redb only: the store makes a set's tables with the first write that
/// commits, every table of the set at once; before, reads see them empty.
fn a_set_is_made_by_its_first_committed_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandgraph.redb");
    // Which of the set's tables the closed file holds, as typed redb
    // tables of their declared types.
    let made = |path: &std::path::Path| {
        use redb::{ReadableDatabase, TableDefinition};
        let db = redb::Database::open(path).unwrap();
        let tx = db.begin_read().unwrap();
        [
            tx.open_table(TableDefinition::<(&str, u64), &str>::new("test_schedule"))
                .is_ok(),
            tx.open_table(TableDefinition::<(&str, &str), &str>::new("test_claims"))
                .is_ok(),
            tx.open_table(TableDefinition::<&str, (&str, u64)>::new("test_unused"))
                .is_ok(),
            tx.open_table(TableDefinition::<u64, &str>::new("test_log"))
                .is_ok(),
        ]
    };
    let store = Store::open(&path).unwrap();
    let tables = store.tables(&SET);
    let read = tables.read(|tx| {
        let claims = tx.open_table(CLAIMS)?;
        Ok::<_, TableError>((claims.get(("g", "i"))?, claims.all()?.len()))
    });
    assert_eq!(read, Ok((None, 0)));
    drop((tables, store));
    assert_eq!(made(&path), [false; 4], "opening and reading make nothing");
    let store = Store::open(&path).unwrap();
    store
        .tables(&SET)
        .write(|tx| {
            tx.open_table(CLAIMS)?.insert(("g", "i"), "c")?;
            Ok::<_, TableError>(((), true))
        })
        .unwrap();
    drop(store);
    assert_eq!(made(&path), [true; 4], "the write made every table");
    let store = Store::open(&path).unwrap();
    let found = store
        .tables(&SET)
        .read(|tx| tx.open_table(CLAIMS)?.get(("g", "i")));
    assert_eq!(found, Ok(Some("c".to_owned())));
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod on_redb {
            $(
                #[test]
                fn $name() {
                    super::$name(super::Db::redb());
                }
            )*

            #[test]
            fn an_unchanged_write_is_aborted_and_reads_cannot_write() {
                super::an_unchanged_write_is_aborted_and_reads_cannot_write();
            }

            #[test]
            fn a_set_is_made_by_its_first_committed_write() {
                super::a_set_is_made_by_its_first_committed_write();
            }
        }
        mod on_postgres {
            $(
                #[test]
                fn $name() {
                    let db = super::Db::postgres(concat!("kv_", stringify!($name)));
                    assert!(!db.tables().single_process());
                    super::$name(db);
                }
            )*
        }
    };
}

both!(
    rows_come_back_in_key_order_by_key_and_by_range,
    a_log_is_numbered_without_gaps_and_read_back_from_its_end,
    a_failed_write_writes_nothing_and_a_later_one_sees_the_last_commit,
);
