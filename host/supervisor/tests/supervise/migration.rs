//! PostgreSQL schema 3: a database of schema 2, with rows in the routing
//! journal, the capability journal and the supervised runs as their own
//! tables (`sg_journal`, `sg_capability_calls`, `sg_supervisor_runs`), is
//! migrated on connect; its rows read back through their owners' APIs, in
//! order, and the logs number on from their last row.

use sandgraph_core::audit::CapabilityCall;
use sandgraph_factors::journal::CapabilityJournal;
use sandgraph_router::{Journal, JournalEntry};
use sandgraph_store::{PG_SCHEMA_VERSION, Store};
use sandgraph_supervisor::{SupervisorRun, SupervisorRuns};
use sandgraph_tests::postgres::TestPostgres;

/// The three tables as schema 1 made them (schema 2 left them alone).
const SCHEMA_2_TABLES: &str = r#"
    CREATE TABLE sg_journal (seq bigint PRIMARY KEY, entry text NOT NULL);
    CREATE TABLE sg_capability_calls (seq bigint PRIMARY KEY, entry text NOT NULL);
    CREATE TABLE sg_supervisor_runs (
        graph_id text COLLATE "C" PRIMARY KEY,
        run text NOT NULL
    );
    UPDATE sandgraph_meta SET value = 2 WHERE key = 'schema_version';
"#;

fn journal_entry(seq: u64) -> JournalEntry {
    JournalEntry {
        seq,
        route_id: format!("r{}", seq % 3),
        attempt: 1,
        at_ms: 1_700_000_000_000 + seq,
        request: format!("request {seq}: é"),
        tool: None,
        args: None,
        decision: "accepted".into(),
        stage: None,
        reason: None,
        outcome: None,
        model_ms: 1,
        check_ms: 1,
        run_ms: None,
        graph_digest: None,
    }
}

fn capability_call(seq: u64) -> CapabilityCall {
    CapabilityCall {
        seq,
        graph: format!("g{}", seq % 2),
        capability: "http".into(),
        target: "GET https://example.com/ü".into(),
        decision: "allowed".into(),
        ..CapabilityCall::default()
    }
}

fn supervisor_run(graph_id: &str, turns: u64) -> SupervisorRun {
    SupervisorRun {
        graph_id: graph_id.into(),
        goal: format!("the goal of {graph_id}"),
        root_session_id: format!("supervisor_{graph_id}"),
        turns,
        model: "m".into(),
        created_at: 1,
        updated_at: 2,
    }
}

/// `INSERT` statements for `rows` of `(key, JSON)`.
fn inserts(table: &str, rows: impl IntoIterator<Item = (String, String)>) -> String {
    rows.into_iter()
        .map(|(key, json)| {
            let json = json.replace('\'', "''");
            format!("INSERT INTO {table} VALUES ({key}, '{json}');\n")
        })
        .collect()
}

/// A database at schema 2 holding 300 journal entries, 5 capability calls
/// and 2 supervised runs; its name.
fn schema_2_database(cluster: &TestPostgres) -> (String, String) {
    let url = cluster.fresh_db("schema_2");
    let db = url.rsplit('/').next().unwrap().to_owned();
    // Every other table as this build makes it, then the three as they were.
    drop(Store::connect(&url).unwrap());
    let mut sql = String::from(SCHEMA_2_TABLES);
    sql += &inserts(
        "sg_journal",
        (1..=300).map(|s| {
            (
                s.to_string(),
                serde_json::to_string(&journal_entry(s)).unwrap(),
            )
        }),
    );
    sql += &inserts(
        "sg_capability_calls",
        (1..=5).map(|s| {
            (
                s.to_string(),
                serde_json::to_string(&capability_call(s)).unwrap(),
            )
        }),
    );
    sql += &inserts(
        "sg_supervisor_runs",
        [supervisor_run("g_b", 3), supervisor_run("g_a", 7)].map(|r| {
            (
                format!("'{}'", r.graph_id),
                serde_json::to_string(&r).unwrap(),
            )
        }),
    );
    cluster.psql(&db, &sql).unwrap();
    (url, db)
}

#[test]
fn schema_2_rows_move_into_their_owners_tables() {
    let cluster = TestPostgres::shared();
    let (url, db) = schema_2_database(&cluster);
    let store = Store::connect(&url).unwrap();
    assert_eq!(store.schema_version().unwrap(), PG_SCHEMA_VERSION as u64);
    let tables = cluster
        .psql(&db, "SELECT count(*) FROM pg_tables WHERE tablename IN ('sg_journal', 'sg_capability_calls', 'sg_supervisor_runs')")
        .unwrap();
    assert_eq!(tables, "0", "the old tables are gone");

    let journal = Journal::open(&store);
    let all = journal.entries(None, None).unwrap();
    assert_eq!(all.len(), 300);
    assert!(all.iter().zip(1..).all(|(e, s)| *e == journal_entry(s)));
    let tail = journal.entries(Some("r1"), Some(2)).unwrap();
    assert_eq!(tail.iter().map(|e| e.seq).collect::<Vec<_>>(), [295, 298]);
    assert_eq!(journal.append(&journal_entry(0)).unwrap(), 301);

    let calls = CapabilityJournal::open(&store);
    let all = calls.entries(None, None).unwrap();
    assert_eq!(all, (1..=5).map(capability_call).collect::<Vec<_>>());
    assert_eq!(calls.entries(Some("g0"), None).unwrap().len(), 2);
    assert_eq!(calls.append(&capability_call(0)).unwrap(), 6);

    let runs = SupervisorRuns::open(&store);
    assert_eq!(
        runs.list().unwrap(),
        [supervisor_run("g_a", 7), supervisor_run("g_b", 3)]
    );
    assert_eq!(runs.next_turn("g_b", 10).unwrap(), 4);
    drop(store);
    // Migrated once: a later connect finds the rows as they are.
    let again = Store::connect(&url).unwrap();
    assert_eq!(
        Journal::open(&again).entries(None, Some(1)).unwrap()[0].seq,
        301
    );
    assert_eq!(
        SupervisorRuns::open(&again)
            .get("g_b")
            .unwrap()
            .unwrap()
            .turns,
        4
    );
}
