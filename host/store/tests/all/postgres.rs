//! The store on PostgreSQL against a real server (a throwaway cluster from
//! `tests/src/postgres.rs`): connecting, migrating, refusing a newer
//! schema, and errors that never show a password. Threads and declared
//! tables are tested on both backends in their own modules; the tables
//! other crates declare, in their owners' tests.

use sandgraph_store::tables::TableSet;
use sandgraph_store::{PG_SCHEMA_VERSION, Store, StoreLocation};

use crate::fixture::TestPostgres;

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
        "sandgraph_meta,sg_agent_graph_rows,sg_blobs,sg_checkpoints,sg_thread_leases,\
         sg_threads,sg_writes"
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
