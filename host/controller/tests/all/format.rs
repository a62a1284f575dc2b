//! The controller's tables on disk: a redb file and the PostgreSQL rows
//! written by an earlier build (committed under `tests/fixtures/`) read the
//! same with this build, and this build writes the same rows. With
//! `SANDGRAPH_WRITE_FIXTURES=1` the tests regenerate the fixtures instead.

use std::path::{Path, PathBuf};

use sandgraph_controller::{
    AgentGraphStore, AttemptStatus, GraphRecord, IntentClaimRequest, OpenAgentGraphs, OperatorEdge,
    ProvisionRequest, RecordFacet, RecordOutcome, RecordSource, ScheduleUpdateRequest, TargetKind,
    WorkTarget,
};
use sandgraph_store::Store;

use crate::fixture;

/// A redb file holding every controller table, written at schema 1.
const REDB_FIXTURE: &str = "tests/fixtures/agent-graphs-schema1.db";
/// The rows of `sg_agent_graph_rows` the same content makes on PostgreSQL:
/// `tbl|key hex|value hex`, one a line, by table and key.
const PG_FIXTURE: &str = "tests/fixtures/agent-graphs-pg-rows.txt";

const G: &str = "graph_f";

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

fn regenerate() -> bool {
    std::env::var_os("SANDGRAPH_WRITE_FIXTURES").is_some()
}

/// Update `seq` of the graph, as its JSON: one work item, or the finish.
fn update(seq: u32, finish: bool) -> ScheduleUpdateRequest {
    let mut update = serde_json::json!({
        "schemaVersion": 1,
        "updateId": format!("graph_update_{seq}"),
        "updateFingerprint": format!("sha256:fp-{seq}"),
        "graphId": G,
        "source": {
            "sessionId": "root-1",
            "runId": "graph_run_1",
            "turnId": "graph_turn_1",
            "toolCallId": format!("call-{seq}"),
            "orchestrationMode": "graph",
        },
        "addWork": [],
        "stop": [],
    });
    if finish {
        update["finish"] = serde_json::json!({
            "resultIds": ["graph_record_1"],
            "reason": "done",
        });
    } else {
        update["addWork"] = serde_json::json!([{
            "workId": format!("{G}:work-{seq}"),
            "target": {"kind": "agent", "id": "researcher"},
            "instruction": format!("do work {seq}"),
            "inputIds": [],
        }]);
    }
    serde_json::from_value(update).unwrap()
}

/// Writes a graph that leaves rows in every controller table, at fixed
/// times.
fn write_content(ag: &AgentGraphStore) {
    ag.commit_schedule_update(update(1, false)).unwrap();
    ag.claim_intent(IntentClaimRequest {
        schema_version: 1,
        claim_id: "graph_claim_1".to_owned(),
        graph_id: G.to_owned(),
        intent_id: "graph_intent_1".to_owned(),
        intent_fingerprint: "intent-fp-1".to_owned(),
        readiness_context_fingerprint: "ctx-fp-1".to_owned(),
        target_operator_id: "graph_operator_1".to_owned(),
        target_session_id: "child-1".to_owned(),
        target_turn_id: "turn-1".to_owned(),
        target_run_id: "run-1".to_owned(),
    })
    .unwrap();
    ag.begin_intent_execution(G, "graph_intent_1").unwrap();
    ag.provision_operator(ProvisionRequest {
        provision_id: "graph_provision_1".to_owned(),
        graph_id: G.to_owned(),
        work_id: format!("{G}:work-1"),
        operator_id: "graph_operator_1".to_owned(),
        target: WorkTarget {
            kind: TargetKind::Preset,
            id: "summarize".to_owned(),
        },
        target_session_id: "child-1".to_owned(),
        initial_turn_id: "turn-1".to_owned(),
        initial_run_id: "run-1".to_owned(),
        provision_fingerprint: "provision-fp-1".to_owned(),
        edges: vec![OperatorEdge {
            edge_id: "graph_edge_1".to_owned(),
            from_operator_id: "graph_operator_0".to_owned(),
            to_operator_id: "graph_operator_1".to_owned(),
        }],
        expected_schedule_revision: 1,
    })
    .unwrap();
    ag.append_record(GraphRecord {
        record_id: "graph_record_1".to_owned(),
        graph_id: G.to_owned(),
        operator_id: "graph_operator_1".to_owned(),
        work_id: Some(format!("{G}:work-1")),
        source: RecordSource {
            session_id: "child-1".to_owned(),
            run_id: "run-1".to_owned(),
            turn_id: Some("turn-1".to_owned()),
            runtime_event_id: None,
            seq: 1,
        },
        summary: "the summary".to_owned(),
        facets: vec![RecordFacet::Terminal],
        outcome: Some(RecordOutcome::Completed),
        evidence_refs: vec![],
        emitted_at: 7,
    })
    .unwrap();
    ag.claim_supervisor_wake(G, "wake-1", "snapshot-1", "root-1")
        .unwrap();
    ag.begin_supervisor_wake_attempt(G, "wake-1", "attempt-1", "turn-w", Some(3))
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "wake-1", "attempt-1", AttemptStatus::Delivered, None)
        .unwrap();
    ag.commit_schedule_update(update(2, true)).unwrap();
}

/// Everything the controller reads back of [`write_content`]'s graph.
fn read_back(ag: &AgentGraphStore) -> String {
    let mut out = Vec::new();
    out.push(format!("graphs {:?}", ag.list_graphs().unwrap()));
    out.push(format!("revision {}", ag.current_revision(G).unwrap()));
    out.push(format!("closed {}", ag.is_closed(G).unwrap()));
    out.push(format!("{:?}", ag.list_schedule_updates(G).unwrap()));
    out.push(format!(
        "{:?}",
        ag.read_schedule_update(G, "graph_update_2")
    ));
    out.push(format!("{:?}", ag.list_claims(G).unwrap()));
    out.push(format!("{:?}", ag.list_provisions(G).unwrap()));
    out.push(format!(
        "{:?}",
        ag.read_provision_by_operator(G, "graph_operator_1")
    ));
    out.push(format!(
        "{:?}",
        ag.read_provision_by_work(G, &format!("{G}:work-1"))
    ));
    out.push(format!("{:?}", ag.list_records(G).unwrap()));
    out.push(format!("{:?}", ag.list_supervisor_wakes(G).unwrap()));
    out.push(format!(
        "{:?}",
        ag.list_supervisor_wake_attempts(G, "wake-1").unwrap()
    ));
    out.join("\n")
}

fn at_fixed_times(store: &Store) -> AgentGraphStore {
    store.agent_graphs().with_clock(|| 1_000)
}

/// The committed redb fixture reads back as what this build writes, and
/// holds exactly the controller's tables.
#[test]
fn a_redb_file_of_an_earlier_build_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh.redb");
    let store = Store::open(&fresh).unwrap();
    write_content(&at_fixed_times(&store));
    let written = read_back(&at_fixed_times(&store));
    drop(store);
    let committed = fixture_path(REDB_FIXTURE);
    if regenerate() {
        let _ = std::fs::remove_file(&committed);
        std::fs::copy(&fresh, &committed).unwrap();
        redb::Database::open(&committed).unwrap().compact().unwrap();
    }
    let copy = dir.path().join("copy.redb");
    std::fs::copy(&committed, &copy).unwrap();
    assert_eq!(table_names(&copy), table_names(&fresh));
    let store = Store::open(&copy).unwrap();
    assert_eq!(store.schema_version().unwrap(), 1);
    let read = read_back(&at_fixed_times(&store));
    assert_eq!(read, written);
    assert!(read.contains("revision 2"), "{read}");
    assert!(read.contains("closed true"), "{read}");
}

/// The `agent_graph_*` tables of a closed redb file.
fn table_names(path: &Path) -> Vec<String> {
    use redb::{ReadableDatabase, TableHandle};
    let db = redb::Database::open(path).unwrap();
    let tx = db.begin_read().unwrap();
    let mut names: Vec<String> = tx
        .list_tables()
        .unwrap()
        .map(|t| t.name().to_owned())
        .filter(|n| n.starts_with("agent_graph_"))
        .collect();
    names.sort();
    names
}

/// This build writes, byte for byte, the PostgreSQL rows an earlier build
/// wrote for the same content.
#[test]
fn postgres_rows_are_those_of_an_earlier_build() {
    let pg = fixture::TestPostgres::shared();
    let url = pg.fresh_db("format_postgres_rows");
    let store = Store::connect(&url).unwrap();
    write_content(&at_fixed_times(&store));
    drop(store);
    let db = url.rsplit('/').next().unwrap();
    let rows = pg
        .psql(
            db,
            "SELECT tbl || '|' || encode(key, 'hex') || '|' || encode(value, 'hex') \
             FROM sg_agent_graph_rows ORDER BY tbl, key",
        )
        .unwrap();
    let committed = fixture_path(PG_FIXTURE);
    if regenerate() {
        std::fs::write(&committed, format!("{rows}\n")).unwrap();
    }
    let want = std::fs::read_to_string(&committed).unwrap();
    assert_eq!(rows, want.trim_end());
    let tables: std::collections::BTreeSet<&str> =
        rows.lines().filter_map(|l| l.split('|').next()).collect();
    assert_eq!(tables.len(), 13, "every table has a row: {tables:?}");
}
