//! The conformance battery of the agent-graph control store
//! (seed-contracts §3 item 12, plus this store's fixes, plus claim leases).
//! Every test that takes a [`Db`] runs on both backends, as
//! `on_redb::<name>` (a real redb file) and `on_postgres::<name>` (a fresh
//! database on the test binary's throwaway PostgreSQL cluster); see
//! `conformance!` at the end for the list, and for the tests that only make
//! sense on one backend.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
use sandgraph_controller::ids::scheduled_work_intent_id;
use sandgraph_controller::{
    AdmissionChange, AdmissionStatus, AgentGraphStore, AttemptStatus, ClaimLease, ControlError,
    ControlErrorCode, GraphFinish, GraphRecord, IntentClaimRequest, LeaseOutcome, OpenAgentGraphs,
    OperatorEdge, ProvisionRequest, RecordFacet, RecordOutcome, RecordSource,
    ScheduleUpdateRequest, ScheduledWork, TargetKind, UpdateSource, WakeStatus, WorkStop,
    WorkTarget,
};
use sandgraph_store::Store;

use crate::fixture;

const G: &str = "graph_a";
const ROOT: &str = "root-1";

/// The tables of the store, as `raw_counts` names them on both backends.
const TABLES: [&str; 13] = [
    "agent_graph_claim_runs",
    "agent_graph_claim_turns",
    "agent_graph_claims",
    "agent_graph_provision_operators",
    "agent_graph_provision_work",
    "agent_graph_provisions",
    "agent_graph_records",
    "agent_graph_schedule",
    "agent_graph_update_ids",
    "agent_graph_update_sources",
    "agent_graph_wake_attempts",
    "agent_graph_wakes",
    "agent_graph_work_ids",
];

/// Where a [`Db`]'s rows live.
enum Backend {
    /// A redb file in a temp dir.
    Redb {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
    /// A database of its own on the shared test cluster.
    Postgres {
        pg: Arc<fixture::TestPostgres>,
        url: String,
    },
}

/// A store on one backend, reopenable, with a settable clock.
struct Db {
    /// Declared first: dropped before the cluster or the temp dir.
    store: Option<Store>,
    backend: Backend,
    time: Arc<AtomicU64>,
}

impl Db {
    fn redb() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandgraph.redb");
        let store = Store::open(&path).unwrap();
        Db {
            store: Some(store),
            backend: Backend::Redb { _dir: dir, path },
            time: Arc::new(AtomicU64::new(1_000)),
        }
    }

    /// A fresh database named after `test`.
    fn postgres(test: &str) -> Self {
        let pg = fixture::TestPostgres::shared();
        let url = pg.fresh_db(test);
        let store = Store::connect(&url).unwrap();
        Db {
            store: Some(store),
            backend: Backend::Postgres { pg, url },
            time: Arc::new(AtomicU64::new(1_000)),
        }
    }

    fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres { .. })
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("the store is open")
    }

    /// A second host on the same PostgreSQL database.
    fn connect_again(&self) -> Store {
        match &self.backend {
            Backend::Postgres { url, .. } => Store::connect(url).unwrap(),
            Backend::Redb { .. } => panic!("a redb file has one host"),
        }
    }

    fn ag(&self) -> AgentGraphStore {
        self.ag_of(self.store())
    }

    /// The agent graphs of `store`, on this test's clock.
    fn ag_of(&self, store: &Store) -> AgentGraphStore {
        let time = self.time.clone();
        store
            .agent_graphs()
            .with_clock(move || time.load(Ordering::SeqCst))
    }

    fn set_time(&self, ms: u64) {
        self.time.store(ms, Ordering::SeqCst);
    }

    /// Drops the store and opens (connects) it again.
    fn reopen(&mut self) {
        self.store = None;
        self.store = Some(match &self.backend {
            Backend::Redb { path, .. } => Store::open(path).unwrap(),
            Backend::Postgres { url, .. } => Store::connect(url).unwrap(),
        });
    }

    /// Rows per non-empty `agent_graph_*` table, read past the store: from
    /// the file itself (the store is closed for the count and reopened; the
    /// caller must have dropped its `AgentGraphStore`s), or from
    /// `sg_agent_graph_rows` with psql.
    fn raw_counts(&mut self) -> BTreeMap<String, u64> {
        let counts = match &self.backend {
            Backend::Redb { path, .. } => {
                self.store = None;
                let counts = raw_counts(path);
                self.reopen();
                counts
            }
            Backend::Postgres { .. } => self
                .psql("SELECT tbl, count(*) FROM sg_agent_graph_rows GROUP BY tbl")
                .lines()
                .map(|line| {
                    let (table, n) = line.split_once('|').unwrap();
                    (table.to_owned(), n.parse().unwrap())
                })
                .collect(),
        };
        assert!(
            counts.keys().all(|t| TABLES.contains(&t.as_str())),
            "{counts:?}"
        );
        counts
    }

    /// Runs `sql` in the PostgreSQL database (named by the last segment of
    /// its URL) and returns what psql printed.
    fn psql(&self, sql: &str) -> String {
        let Backend::Postgres { pg, url } = &self.backend else {
            panic!("psql on a redb store");
        };
        let db = url.rsplit('/').next().unwrap();
        pg.psql(db, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Replaces the stored JSON of the claim of `intent` with `text`, past
    /// the store: in the redb file, or in `sg_agent_graph_rows`.
    fn overwrite_claim(&mut self, graph: &str, intent: &str, text: &str) {
        let Backend::Redb { path, .. } = &self.backend else {
            return self.overwrite_claim_bytes(graph, intent, &kv_str(text));
        };
        self.store = None;
        {
            let raw = redb::Database::open(path).unwrap();
            let tx = redb::Database::begin_write(&raw).unwrap();
            let claims: TableDefinition<(&str, &str), &str> =
                TableDefinition::new("agent_graph_claims");
            let old = tx
                .open_table(claims)
                .unwrap()
                .insert((graph, intent), text)
                .unwrap()
                .is_some();
            assert!(old, "the claim was there");
            tx.commit().unwrap();
        }
        self.reopen();
    }

    /// Sets the raw `value` bytes of a claim row in PostgreSQL.
    fn overwrite_claim_bytes(&self, graph: &str, intent: &str, value: &[u8]) {
        let mut key = kv_str(graph);
        key.extend(kv_str(intent));
        let sql = format!(
            "UPDATE sg_agent_graph_rows SET value = '\\x{}'::bytea \
             WHERE tbl = 'agent_graph_claims' AND key = '\\x{}'::bytea RETURNING tbl",
            hex(value),
            hex(&key)
        );
        assert_eq!(self.psql(&sql), "agent_graph_claims", "one row updated");
    }
}

/// A string in the PostgreSQL rows' key and value encoding: its bytes with
/// `00` written `00 ff`, ended by `00 01`.
fn kv_str(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in s.as_bytes() {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend([0, 1]);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The non-empty `agent_graph_*` tables of a closed redb file (the first
/// write of the controller makes them all, empty).
fn raw_counts(path: &Path) -> BTreeMap<String, u64> {
    let db = redb::Database::open(path).unwrap();
    let tx = db.begin_read().unwrap();
    let mut out = BTreeMap::new();
    let mut seen = 0;
    for handle in tx.list_tables().unwrap() {
        let name = redb::TableHandle::name(&handle).to_owned();
        if name.starts_with("agent_graph_") {
            seen += 1;
            let len = tx.open_untyped_table(handle).unwrap().len().unwrap();
            if len > 0 {
                out.insert(name, len);
            }
        }
    }
    assert_eq!(seen, TABLES.len(), "every table is made by the first write");
    out
}

fn code<T: std::fmt::Debug>(r: Result<T, ControlError>) -> (ControlErrorCode, String) {
    let e = r.expect_err("expected an error");
    assert_eq!(e.to_string(), e.message);
    (e.code, e.message)
}

fn work(id: &str) -> ScheduledWork {
    ScheduledWork {
        work_id: id.to_owned(),
        target: WorkTarget {
            kind: TargetKind::Agent,
            id: "researcher".to_owned(),
        },
        instruction: format!("do {id}"),
        input_ids: vec![],
        selected_result_inputs: vec![],
        replaces: None,
    }
}

/// Update `seq` of `graph`: its own update id, fingerprint, tool call and
/// one work item `graph:work-<seq>`.
fn update(graph: &str, seq: u32) -> ScheduleUpdateRequest {
    ScheduleUpdateRequest {
        schema_version: 1,
        update_id: format!("graph_update_{graph}_{seq}"),
        update_fingerprint: format!("sha256:fp-{seq}"),
        graph_id: graph.to_owned(),
        source: UpdateSource {
            session_id: ROOT.to_owned(),
            run_id: "graph_run_1".to_owned(),
            turn_id: "graph_turn_1".to_owned(),
            tool_call_id: format!("call-{seq}"),
            orchestration_mode: Some("graph".to_owned()),
        },
        add_work: vec![work(&format!("{graph}:work-{seq}"))],
        stop: vec![],
        finish: None,
    }
}

fn finish(graph: &str, seq: u32) -> ScheduleUpdateRequest {
    ScheduleUpdateRequest {
        add_work: vec![],
        finish: Some(GraphFinish {
            result_ids: vec!["graph_record_1".to_owned()],
            reason: "done".to_owned(),
        }),
        ..update(graph, seq)
    }
}

fn claim(graph: &str, seq: u32) -> IntentClaimRequest {
    IntentClaimRequest {
        schema_version: 1,
        claim_id: format!("graph_claim_{seq}"),
        graph_id: graph.to_owned(),
        intent_id: format!("graph_intent_{seq}"),
        intent_fingerprint: format!("intent-fp-{seq}"),
        readiness_context_fingerprint: format!("ctx-fp-{seq}"),
        target_operator_id: format!("graph_operator_{seq}"),
        target_session_id: format!("child-{seq}"),
        target_turn_id: format!("turn-{seq}"),
        target_run_id: format!("run-{seq}"),
    }
}

fn provision(graph: &str, seq: u32, revision: u64) -> ProvisionRequest {
    ProvisionRequest {
        provision_id: format!("graph_provision_{seq}"),
        graph_id: graph.to_owned(),
        work_id: format!("{graph}:work-{seq}"),
        operator_id: format!("graph_operator_{seq}"),
        target: WorkTarget {
            kind: TargetKind::Preset,
            id: "summarize".to_owned(),
        },
        target_session_id: format!("child-{seq}"),
        initial_turn_id: format!("turn-{seq}"),
        initial_run_id: format!("run-{seq}"),
        provision_fingerprint: format!("provision-fp-{seq}"),
        edges: vec![OperatorEdge {
            edge_id: format!("graph_edge_{seq}"),
            from_operator_id: "graph_operator_0".to_owned(),
            to_operator_id: format!("graph_operator_{seq}"),
        }],
        expected_schedule_revision: revision,
    }
}

fn record(
    graph: &str,
    id: &str,
    emitted_at: u64,
    operator: &str,
    run: &str,
    seq: u64,
) -> GraphRecord {
    GraphRecord {
        record_id: id.to_owned(),
        graph_id: graph.to_owned(),
        operator_id: operator.to_owned(),
        work_id: Some("work-1".to_owned()),
        source: RecordSource {
            session_id: "child-1".to_owned(),
            run_id: run.to_owned(),
            turn_id: Some("turn-1".to_owned()),
            runtime_event_id: None,
            seq,
        },
        summary: format!("summary of {id}"),
        facets: vec![RecordFacet::Terminal],
        outcome: Some(RecordOutcome::Completed),
        evidence_refs: vec![],
        emitted_at,
    }
}

fn revisions(ag: &AgentGraphStore, graph: &str) -> Vec<u64> {
    ag.list_schedule_updates(graph)
        .unwrap()
        .iter()
        .map(|u| u.revision)
        .collect()
}

fn change(state: AdmissionStatus, previous: AdmissionStatus, changed: bool) -> AdmissionChange {
    AdmissionChange {
        state,
        previous_state: previous,
        changed,
    }
}

// ---------------------------------------------------------------------------
// Schedule

fn revisions_are_monotonic_from_one_per_graph_without_gaps(db: Db) {
    let ag = db.ag();
    assert_eq!(ag.current_revision(G).unwrap(), 0);
    assert!(ag.list_graphs().unwrap().is_empty());
    // Interleaved graphs, one id a prefix of the other.
    let mut got = Vec::new();
    for (graph, seq) in [(G, 1), ("graph_ab", 1), (G, 2), (G, 3), ("graph_ab", 2)] {
        db.set_time(5_000 + u64::from(seq));
        let out = ag.commit_schedule_update(update(graph, seq)).unwrap();
        assert!(out.created);
        assert_eq!(out.update.committed_at, 5_000 + u64::from(seq));
        got.push((graph, out.update.revision));
    }
    assert_eq!(
        got,
        vec![(G, 1), ("graph_ab", 1), (G, 2), (G, 3), ("graph_ab", 2)]
    );
    assert_eq!(revisions(&ag, G), vec![1, 2, 3]);
    assert_eq!(revisions(&ag, "graph_ab"), vec![1, 2]);
    assert_eq!(ag.current_revision(G).unwrap(), 3);
    assert_eq!(ag.current_revision("graph_ab").unwrap(), 2);
    assert_eq!(ag.current_revision("graph").unwrap(), 0);
    assert_eq!(ag.list_graphs().unwrap(), vec![G, "graph_ab"]);
    let listed = ag.list_schedule_updates(G).unwrap();
    assert_eq!(listed[1].request, update(G, 2));
    assert_eq!(
        ag.read_schedule_update(G, &update(G, 2).update_id).unwrap(),
        Some(listed[1].clone())
    );
    // An update is read only through its own graph.
    assert_eq!(
        ag.read_schedule_update("graph_ab", &update(G, 2).update_id)
            .unwrap(),
        None
    );
    assert_eq!(
        ag.read_schedule_update(G, "graph_update_none").unwrap(),
        None
    );
}

fn a_replayed_update_with_the_same_payload_returns_the_stored_row(db: Db) {
    let ag = db.ag();
    let first = ag.commit_schedule_update(update(G, 1)).unwrap();
    db.set_time(9_999);
    let second = ag.commit_schedule_update(update(G, 1)).unwrap();
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(second.update, first.update);
    assert_eq!(second.update.committed_at, 1_000);
    assert_eq!(revisions(&ag, G), vec![1]);
    // The replay did not consume a revision.
    let third = ag.commit_schedule_update(update(G, 2)).unwrap();
    assert_eq!(third.update.revision, 2);
}

fn the_same_update_id_with_another_payload_conflicts(db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    let mut other = update(G, 1);
    other.update_fingerprint = "sha256:other".to_owned();
    other.add_work = vec![work("w-other")];
    let (c, m) = code(ag.commit_schedule_update(other));
    assert_eq!(c, ControlErrorCode::ScheduleUpdateConflict);
    assert!(m.contains("replayed with a different payload"), "{m}");
    assert!(m.contains(&update(G, 1).update_id), "{m}");
    assert_eq!(
        ag.list_schedule_updates(G).unwrap()[0].request,
        update(G, 1)
    );
    // The same id in another graph is refused too: update ids are global.
    let mut elsewhere = update(G, 1);
    elsewhere.graph_id = "graph_b".to_owned();
    let (c, m) = code(ag.commit_schedule_update(elsewhere));
    assert_eq!(c, ControlErrorCode::ScheduleUpdateConflict);
    assert!(m.contains("already used by agent graph graph_a"), "{m}");
    assert_eq!(ag.current_revision("graph_b").unwrap(), 0);
}

fn the_same_source_with_another_update_conflicts_whatever_the_turn(db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    // Another update id from the same session, run and tool call, but
    // another turn: the source key leaves the turn out (§3 item 1).
    let mut other = update(G, 2);
    other.source = update(G, 1).source;
    other.source.turn_id = "graph_turn_2".to_owned();
    let (c, m) = code(ag.commit_schedule_update(other.clone()));
    assert_eq!(c, ControlErrorCode::ScheduleUpdateConflict);
    assert!(m.contains("already committed update"), "{m}");
    assert_eq!(revisions(&ag, G), vec![1]);
    // Another session, or another tool call, is another source.
    other.source.session_id = "root-2".to_owned();
    assert!(ag.commit_schedule_update(other).unwrap().created);
    let mut call = update(G, 3);
    call.source.tool_call_id = "call-99".to_owned();
    assert!(ag.commit_schedule_update(call).unwrap().created);
    // And the same source in another graph is another source.
    let mut graph_b = update("graph_b", 1);
    graph_b.source = update(G, 1).source;
    assert!(ag.commit_schedule_update(graph_b).unwrap().created);
}

fn finish_with_add_work_is_rejected(db: Db) {
    let ag = db.ag();
    let mut both = finish(G, 1);
    both.add_work = vec![work("w1")];
    let (c, m) = code(ag.commit_schedule_update(both));
    assert_eq!(c, ControlErrorCode::ScheduleUpdateConflict);
    assert!(
        m.contains("cannot both finish the graph and add work"),
        "{m}"
    );
    assert_eq!(ag.current_revision(G).unwrap(), 0);
    assert!(!ag.is_closed(G).unwrap());
    // Finish alone commits and closes the graph.
    assert!(ag.commit_schedule_update(finish(G, 1)).unwrap().created);
    assert!(ag.is_closed(G).unwrap());
}

fn an_update_after_finish_is_refused_and_writes_nothing(mut db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    let fin = ag.commit_schedule_update(finish(G, 2)).unwrap();
    assert_eq!(fin.update.revision, 2);
    assert!(ag.is_closed(G).unwrap());
    drop(ag);
    let before = db.raw_counts();
    let ag = db.ag();
    let mut stop = update(G, 3);
    stop.add_work = vec![];
    stop.stop = vec![WorkStop {
        target_id: format!("{G}:work-1"),
        reason: "late".to_owned(),
    }];
    for late in [update(G, 3), stop, finish(G, 4)] {
        let id = late.update_id.clone();
        let (c, m) = code(ag.commit_schedule_update(late));
        assert_eq!(c, ControlErrorCode::ScheduleClosed);
        assert_eq!(
            m,
            format!("agent graph {G} is finished; update {id} was not committed")
        );
    }
    assert_eq!(revisions(&ag, G), vec![1, 2]);
    // Replays of committed updates still answer, before the closure check.
    assert!(!ag.commit_schedule_update(finish(G, 2)).unwrap().created);
    assert!(!ag.commit_schedule_update(update(G, 1)).unwrap().created);
    // Other graphs are not affected.
    assert!(
        ag.commit_schedule_update(update("graph_b", 1))
            .unwrap()
            .created
    );
    drop(ag);
    let mut after = db.raw_counts();
    after.insert(
        "agent_graph_schedule".to_owned(),
        after["agent_graph_schedule"] - 1,
    );
    for table in [
        "agent_graph_update_ids",
        "agent_graph_update_sources",
        "agent_graph_work_ids",
    ] {
        *after.get_mut(table).unwrap() -= 1;
    }
    assert_eq!(after, before);
}

fn a_repeated_work_id_is_rejected_across_updates_and_within_one(db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    // Repeats a work id of revision 1.
    let mut again = update(G, 2);
    again.add_work = vec![work("fresh"), work(&format!("{G}:work-1"))];
    let (c, m) = code(ag.commit_schedule_update(again));
    assert_eq!(c, ControlErrorCode::ScheduleUpdateConflict);
    assert!(
        m.contains(&format!(
            "adds work {G}:work-1, which revision 1 already added"
        )),
        "{m}"
    );
    // Repeats a work id inside the update.
    let mut twice = update(G, 3);
    twice.add_work = vec![work("dup"), work("other"), work("dup")];
    let (c, m) = code(ag.commit_schedule_update(twice));
    assert_eq!(c, ControlErrorCode::ScheduleUpdateConflict);
    assert!(m.contains("adds work dup twice"), "{m}");
    // Nothing of either was written: "fresh" and "dup" are still free.
    assert_eq!(revisions(&ag, G), vec![1]);
    let mut ok = update(G, 4);
    ok.add_work = vec![work("fresh"), work("dup")];
    assert_eq!(ag.commit_schedule_update(ok).unwrap().update.revision, 2);
    // The same work id in another graph is another work item.
    let mut b = update("graph_b", 1);
    b.add_work = vec![work("fresh")];
    assert!(ag.commit_schedule_update(b).unwrap().created);
}

// ---------------------------------------------------------------------------
// Claims

fn an_intent_is_claimed_exactly_once(db: Db) {
    let ag = db.ag();
    let rev = ag
        .commit_schedule_update(update(G, 1))
        .unwrap()
        .update
        .revision;
    let first = ag.claim_intent_at_revision(claim(G, 1), rev).unwrap();
    assert!(first.created);
    assert_eq!(first.claim.admission_status, AdmissionStatus::Claimed);
    assert_eq!(first.claim.request, claim(G, 1));
    assert_eq!(first.claim.claimed_at, 1_000);
    db.set_time(2_000);
    let second = ag.claim_intent_at_revision(claim(G, 1), rev).unwrap();
    assert!(!second.created);
    assert_eq!(second.claim, first.claim);
    let third = ag.claim_intent(claim(G, 1)).unwrap();
    assert!(!third.created);
    assert_eq!(ag.list_claims(G).unwrap(), vec![first.claim.clone()]);
    assert_eq!(
        ag.read_claim(G, "graph_intent_1").unwrap(),
        Some(first.claim)
    );
    assert_eq!(ag.read_claim("graph_b", "graph_intent_1").unwrap(), None);
}

fn a_claim_of_the_same_intent_by_another_activation_conflicts(db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    let stored = ag.claim_intent(claim(G, 1)).unwrap().claim;
    let variants: Vec<fn(&mut IntentClaimRequest)> = vec![
        |c| c.claim_id = "graph_claim_other".to_owned(),
        |c| c.intent_fingerprint = "intent-fp-other".to_owned(),
        |c| c.readiness_context_fingerprint = "ctx-other".to_owned(),
        |c| c.target_session_id = "child-other".to_owned(),
        |c| c.target_run_id = "run-other".to_owned(),
    ];
    for vary in variants {
        let mut req = claim(G, 1);
        vary(&mut req);
        let (c, m) = code(ag.claim_intent(req));
        assert_eq!(c, ControlErrorCode::IntentClaimConflict);
        assert!(
            m.contains("already claimed by a different activation"),
            "{m}"
        );
    }
    assert_eq!(ag.list_claims(G).unwrap(), vec![stored]);
}

fn a_claim_reusing_an_activation_identity_conflicts(db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    ag.claim_intent(claim(G, 1)).unwrap();
    // Another intent on the same session and turn.
    let mut turn = claim(G, 2);
    turn.target_session_id = "child-1".to_owned();
    turn.target_turn_id = "turn-1".to_owned();
    let (c, m) = code(ag.claim_intent(turn));
    assert_eq!(c, ControlErrorCode::IntentClaimConflict);
    assert!(m.contains("reuses turn turn-1 of session child-1"), "{m}");
    assert!(m.contains("held by intent graph_intent_1"), "{m}");
    // Another intent on the same session and run.
    let mut run = claim(G, 3);
    run.target_session_id = "child-1".to_owned();
    run.target_run_id = "run-1".to_owned();
    let (c, m) = code(ag.claim_intent(run));
    assert_eq!(c, ControlErrorCode::IntentClaimConflict);
    assert!(m.contains("reuses run run-1 of session child-1"), "{m}");
    // Identities are global: another graph cannot take them either.
    let mut other_graph = claim("graph_b", 4);
    other_graph.target_session_id = "child-1".to_owned();
    other_graph.target_run_id = "run-1".to_owned();
    let (c, _) = code(ag.claim_intent(other_graph));
    assert_eq!(c, ControlErrorCode::IntentClaimConflict);
    assert_eq!(ag.list_claims(G).unwrap().len(), 1);
    assert!(ag.list_claims("graph_b").unwrap().is_empty());
    // The same turn and run ids in another session are another identity.
    let mut fine = claim(G, 5);
    fine.target_turn_id = "turn-1".to_owned();
    fine.target_run_id = "run-1".to_owned();
    assert!(ag.claim_intent(fine).unwrap().created);
}

fn a_stale_revision_writes_nothing(mut db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    ag.claim_intent_at_revision(claim(G, 1), 1).unwrap();
    ag.commit_schedule_update(update(G, 2)).unwrap();
    drop(ag);
    let before = db.raw_counts();
    let ag = db.ag();
    let (c, m) = code(ag.claim_intent_at_revision(claim(G, 2), 1));
    assert_eq!(c, ControlErrorCode::ScheduleRevisionConflict);
    assert_eq!(
        m,
        format!("agent graph schedule {G} revision changed from 1 to 2")
    );
    // Even a replay of an existing claim checks the revision first.
    let (c, _) = code(ag.claim_intent_at_revision(claim(G, 1), 1));
    assert_eq!(c, ControlErrorCode::ScheduleRevisionConflict);
    let (c, _) = code(ag.claim_intent_at_revision(claim(G, 2), 3));
    assert_eq!(c, ControlErrorCode::ScheduleRevisionConflict);
    let (c, _) = code(ag.begin_intent_execution_at_revision(G, "graph_intent_1", 1));
    assert_eq!(c, ControlErrorCode::ScheduleRevisionConflict);
    let (c, m) = code(ag.provision_operator(provision(G, 1, 1)));
    assert_eq!(c, ControlErrorCode::ScheduleRevisionConflict);
    assert!(m.contains("changed from 1 to 2"), "{m}");
    assert_eq!(ag.read_claim(G, "graph_intent_2").unwrap(), None);
    assert_eq!(
        ag.read_claim(G, "graph_intent_1")
            .unwrap()
            .unwrap()
            .admission_status,
        AdmissionStatus::Claimed
    );
    assert!(ag.list_provisions(G).unwrap().is_empty());
    drop(ag);
    assert_eq!(db.raw_counts(), before);
    // At the current revision it goes through.
    assert!(
        db.ag()
            .claim_intent_at_revision(claim(G, 2), 2)
            .unwrap()
            .created
    );
}

fn a_claim_on_a_finished_graph_is_refused_but_an_existing_claim_answers(db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    let stored = ag.claim_intent(claim(G, 1)).unwrap().claim;
    ag.commit_schedule_update(finish(G, 2)).unwrap();
    let (c, m) = code(ag.claim_intent_at_revision(claim(G, 2), 2));
    assert_eq!(c, ControlErrorCode::ScheduleClosed);
    assert_eq!(
        m,
        format!("agent graph {G} is finished; intent graph_intent_2 was not claimed")
    );
    let (c, _) = code(ag.claim_intent(claim(G, 2)));
    assert_eq!(c, ControlErrorCode::ScheduleClosed);
    assert_eq!(ag.read_claim(G, "graph_intent_2").unwrap(), None);
    // The claim made before the finish is still recoverable.
    let replay = ag.claim_intent(claim(G, 1)).unwrap();
    assert!(!replay.created);
    assert_eq!(replay.claim, stored);
    // And it can still be started and cancelled.
    assert!(
        ag.begin_intent_execution(G, "graph_intent_1")
            .unwrap()
            .changed
    );
    assert!(
        ag.cancel_intent_execution(G, "graph_intent_1", "graph finished")
            .unwrap()
            .changed
    );
}

fn admission_goes_claimed_executing_cancelled(db: Db) {
    use AdmissionStatus::{Cancelled, Claimed, Executing};
    let ag = db.ag();
    let rev = ag
        .commit_schedule_update(update(G, 1))
        .unwrap()
        .update
        .revision;
    ag.claim_intent(claim(G, 1)).unwrap();
    let i = "graph_intent_1";
    assert_eq!(
        ag.begin_intent_execution_at_revision(G, i, rev).unwrap(),
        change(Executing, Claimed, true)
    );
    assert_eq!(
        ag.begin_intent_execution_at_revision(G, i, rev).unwrap(),
        change(Executing, Executing, false)
    );
    assert_eq!(
        ag.begin_intent_execution(G, i).unwrap(),
        change(Executing, Executing, false)
    );
    assert_eq!(
        ag.cancel_intent_execution(G, i, "superseded").unwrap(),
        change(Cancelled, Executing, true)
    );
    // Idempotent: the first reason stays.
    assert_eq!(
        ag.cancel_intent_execution(G, i, "again").unwrap(),
        change(Cancelled, Cancelled, false)
    );
    assert_eq!(
        ag.begin_intent_execution(G, i).unwrap(),
        change(Cancelled, Cancelled, false)
    );
    let stored = ag.read_claim(G, i).unwrap().unwrap();
    assert_eq!(stored.admission_status, Cancelled);
    assert_eq!(stored.cancellation_reason.as_deref(), Some("superseded"));
    // A claimed intent can be cancelled directly.
    ag.claim_intent(claim(G, 2)).unwrap();
    assert_eq!(
        ag.cancel_intent_execution(G, "graph_intent_2", "stopped")
            .unwrap(),
        change(Cancelled, Claimed, true)
    );
    // Missing claims.
    for r in [
        ag.begin_intent_execution(G, "graph_intent_9"),
        ag.begin_intent_execution_at_revision(G, "graph_intent_9", rev),
        ag.cancel_intent_execution(G, "graph_intent_9", "x"),
        ag.rearm_intent_for_replay(G, "graph_intent_9"),
        ag.begin_intent_execution("graph_b", i),
    ] {
        let (c, m) = code(r);
        assert_eq!(c, ControlErrorCode::IntentNotFound);
        assert!(m.contains("has no durable claim"), "{m}");
    }
}

fn rearm_moves_executing_back_to_claimed_only(db: Db) {
    use AdmissionStatus::{Cancelled, Claimed, Executing};
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    ag.claim_intent(claim(G, 1)).unwrap();
    let i = "graph_intent_1";
    assert_eq!(
        ag.rearm_intent_for_replay(G, i).unwrap(),
        change(Claimed, Claimed, false)
    );
    ag.begin_intent_execution(G, i).unwrap();
    assert_eq!(
        ag.rearm_intent_for_replay(G, i).unwrap(),
        change(Claimed, Executing, true)
    );
    assert_eq!(
        ag.read_claim(G, i).unwrap().unwrap().admission_status,
        Claimed
    );
    // Re-armed work can begin again.
    assert!(ag.begin_intent_execution(G, i).unwrap().changed);
    ag.cancel_intent_execution(G, i, "stopped by supervisor")
        .unwrap();
    assert_eq!(
        ag.rearm_intent_for_replay(G, i).unwrap(),
        change(Cancelled, Cancelled, false)
    );
    assert_eq!(
        ag.read_claim(G, i).unwrap().unwrap().admission_status,
        Cancelled
    );
}

fn claims_are_listed_by_intent_id_in_byte_order(db: Db) {
    let ag = db.ag();
    for (n, intent) in ["b", "a", "B", "a\u{e9}", "ab"].iter().enumerate() {
        let mut req = claim(G, n as u32);
        req.intent_id = (*intent).to_owned();
        ag.claim_intent(req).unwrap();
    }
    // A graph whose id extends G's must not leak into G's range.
    ag.claim_intent(claim(&format!("{G}x"), 10)).unwrap();
    let ids: Vec<String> = ag
        .list_claims(G)
        .unwrap()
        .into_iter()
        .map(|c| c.request.intent_id)
        .collect();
    assert_eq!(ids, vec!["B", "a", "ab", "a\u{e9}", "b"]);
}

/// The claim of `work` (of `graph`), as the coordinator's intent id names
/// it; `seq` keeps its activation identity apart.
fn claim_of_work(graph: &str, work: &str, seq: u32) -> IntentClaimRequest {
    IntentClaimRequest {
        intent_id: scheduled_work_intent_id(graph, work),
        ..claim(graph, seq)
    }
}

fn a_stop_or_a_replacement_cancels_the_claims_of_its_targets(db: Db) {
    let ag = db.ag();
    let w = |seq: u32| format!("{G}:work-{seq}");
    for seq in 1..=4 {
        ag.commit_schedule_update(update(G, seq)).unwrap();
    }
    for seq in 1..=3 {
        ag.claim_intent(claim_of_work(G, &w(seq), seq)).unwrap();
    }
    ag.begin_intent_execution(G, &scheduled_work_intent_id(G, &w(1)))
        .unwrap();
    ag.cancel_intent_execution(G, &scheduled_work_intent_id(G, &w(3)), "earlier")
        .unwrap();
    let status = |seq: u32| {
        let claim = ag
            .read_claim(G, &scheduled_work_intent_id(G, &w(seq)))
            .unwrap()
            .unwrap();
        (claim.admission_status, claim.cancellation_reason)
    };
    // Stop work 1 (executing), 3 (already cancelled) and 4 (no claim);
    // replace work 2 (claimed).
    let mut stop = update(G, 5);
    stop.add_work = vec![ScheduledWork {
        replaces: Some(w(2)),
        ..work("replacement")
    }];
    stop.stop = [1, 3, 4]
        .map(|seq| WorkStop {
            target_id: w(seq),
            reason: "enough".to_owned(),
        })
        .to_vec();
    ag.commit_schedule_update(stop).unwrap();
    let cancelled = |reason: &str| (AdmissionStatus::Cancelled, Some(reason.to_owned()));
    assert_eq!(status(1), cancelled("stopped: enough"));
    assert_eq!(status(2), cancelled("replaced by replacement"));
    assert_eq!(status(3), cancelled("earlier"), "the first reason stays");
    assert!(
        ag.read_claim(G, &scheduled_work_intent_id(G, &w(4)))
            .unwrap()
            .is_none()
    );
    // A cancelled claim is leased to nobody: no host runs it again.
    assert_eq!(
        ag.lease_intent(G, &scheduled_work_intent_id(G, &w(1)), "graph_record_x")
            .unwrap(),
        LeaseOutcome::Cancelled
    );
}

// ---------------------------------------------------------------------------
// Provisions

fn a_provision_is_adopted_on_retry_and_conflicts_on_a_mismatch(db: Db) {
    let ag = db.ag();
    let rev = ag
        .commit_schedule_update(update(G, 1))
        .unwrap()
        .update
        .revision;
    let first = ag.provision_operator(provision(G, 1, rev)).unwrap();
    assert!(first.created);
    assert_eq!(first.provision.provisioned_at, 1_000);
    assert_eq!(first.provision.work_id, format!("{G}:work-1"));
    assert_eq!(first.provision.edges, provision(G, 1, rev).edges);
    db.set_time(3_000);
    let second = ag.provision_operator(provision(G, 1, rev)).unwrap();
    assert!(!second.created);
    assert_eq!(second.provision, first.provision);
    // Edges are not part of the binding: a retry that finds other edges
    // adopts the stored provision, edges included.
    let mut other_edges = provision(G, 1, rev);
    other_edges.edges.clear();
    let adopted = ag.provision_operator(other_edges).unwrap();
    assert!(!adopted.created);
    assert_eq!(adopted.provision, first.provision);
    let variants: Vec<fn(&mut ProvisionRequest)> = vec![
        |p| p.provision_fingerprint = "different".to_owned(),
        |p| p.operator_id = "graph_operator_other".to_owned(),
        |p| p.target_session_id = "child-other".to_owned(),
    ];
    for vary in variants {
        let mut req = provision(G, 1, rev);
        vary(&mut req);
        let (c, m) = code(ag.provision_operator(req));
        assert_eq!(c, ControlErrorCode::ProvisionConflict);
        assert!(m.contains("replayed with a different binding"), "{m}");
    }
    // The same work under another provision id.
    let mut same_work = provision(G, 2, rev);
    same_work.work_id = format!("{G}:work-1");
    let (c, m) = code(ag.provision_operator(same_work));
    assert_eq!(c, ControlErrorCode::ProvisionConflict);
    assert!(
        m.contains(&format!(
            "work {G}:work-1 already provisioned as graph_provision_1"
        )),
        "{m}"
    );
    // The same operator under another provision id.
    let mut same_operator = provision(G, 3, rev);
    same_operator.operator_id = "graph_operator_1".to_owned();
    let (c, m) = code(ag.provision_operator(same_operator));
    assert_eq!(c, ControlErrorCode::ProvisionConflict);
    assert!(
        m.contains("operator graph_operator_1 already provisioned as graph_provision_1"),
        "{m}"
    );
    assert_eq!(
        ag.list_provisions(G).unwrap(),
        vec![first.provision.clone()]
    );
    assert_eq!(
        ag.read_provision_by_operator(G, "graph_operator_1")
            .unwrap(),
        Some(first.provision.clone())
    );
    assert_eq!(
        ag.read_provision_by_work(G, &format!("{G}:work-1"))
            .unwrap(),
        Some(first.provision.clone())
    );
    assert_eq!(
        ag.read_provision_by_operator(G, "graph_operator_2")
            .unwrap(),
        None
    );
    assert_eq!(
        ag.read_provision_by_work("graph_b", &format!("{G}:work-1"))
            .unwrap(),
        None
    );
    // Another work item gets its own operator.
    assert!(ag.provision_operator(provision(G, 4, rev)).unwrap().created);
    assert_eq!(ag.list_provisions(G).unwrap().len(), 2);
}

fn provisions_are_blocked_after_closure(db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    let before = ag.provision_operator(provision(G, 1, 1)).unwrap().provision;
    let rev = ag
        .commit_schedule_update(finish(G, 2))
        .unwrap()
        .update
        .revision;
    let (c, m) = code(ag.provision_operator(provision(G, 2, rev)));
    assert_eq!(c, ControlErrorCode::ScheduleClosed);
    assert_eq!(
        m,
        format!("agent graph {G} is finished; operator graph_operator_2 was not provisioned")
    );
    assert_eq!(ag.list_provisions(G).unwrap(), vec![before.clone()]);
    // The existing operator is still adopted (a retry after a crash).
    let retry = ag.provision_operator(provision(G, 1, rev)).unwrap();
    assert!(!retry.created);
    assert_eq!(retry.provision, before);
}

// ---------------------------------------------------------------------------
// Records

fn records_append_once_conflict_on_other_content_and_list_in_order(db: Db) {
    let ag = db.ag();
    let rows = [
        record(G, "r5", 20, "op_a", "run-1", 0),
        record(G, "r3", 10, "op_b", "run-1", 0),
        record(G, "r2", 10, "op_a", "run-2", 0),
        record(G, "r4", 10, "op_a", "run-1", 10),
        record(G, "r1", 10, "op_a", "run-1", 9),
        record(G, "r0", 10, "op_a", "run-1", 9),
    ];
    for r in &rows {
        assert!(ag.append_record(r.clone()).unwrap());
    }
    ag.append_record(record(&format!("{G}x"), "r9", 0, "op_a", "run-1", 0))
        .unwrap();
    assert!(!ag.append_record(rows[0].clone()).unwrap());
    let mut changed = rows[0].clone();
    changed.summary = "another summary".to_owned();
    let (c, m) = code(ag.append_record(changed));
    assert_eq!(c, ControlErrorCode::RecordConflict);
    assert!(
        m.contains("record r5 was already appended with different content"),
        "{m}"
    );
    let ids: Vec<String> = ag
        .list_records(G)
        .unwrap()
        .into_iter()
        .map(|r| r.record_id)
        .collect();
    assert_eq!(ids, vec!["r0", "r1", "r4", "r2", "r3", "r5"]);
    assert_eq!(ag.read_record(G, "r5").unwrap(), Some(rows[0].clone()));
    assert_eq!(ag.read_record(G, "r9").unwrap(), None);
}

fn records_of_a_finished_graph_are_accepted(db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    ag.commit_schedule_update(finish(G, 2)).unwrap();
    let late = record(G, "late", 50, "op_a", "run-1", 3);
    assert!(ag.append_record(late.clone()).unwrap());
    assert_eq!(ag.list_records(G).unwrap(), vec![late]);
}

fn records_persist_across_reopening(mut db: Db) {
    let rows = vec![
        record(G, "r1", 10, "op_a", "run-1", 1),
        record(G, "r2", 11, "op_a", "run-1", 2),
    ];
    for r in &rows {
        db.ag().append_record(r.clone()).unwrap();
    }
    db.reopen();
    let ag = db.ag();
    assert_eq!(ag.list_records(G).unwrap(), rows);
    assert!(!ag.append_record(rows[1].clone()).unwrap());
}

// ---------------------------------------------------------------------------
// Supervisor wakes

fn a_wake_is_claimed_once_and_returned_unchanged_afterwards(db: Db) {
    let ag = db.ag();
    let first = ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    assert!(first.created);
    assert_eq!(first.wake.status, WakeStatus::Pending);
    assert_eq!(first.wake.attempt_count, 0);
    assert_eq!(
        (first.wake.created_at, first.wake.updated_at),
        (1_000, 1_000)
    );
    db.set_time(2_000);
    let second = ag.claim_supervisor_wake(G, "w1", "v2", "root-2").unwrap();
    assert!(!second.created);
    assert_eq!(second.wake, first.wake);
    // Even once delivered, a claim returns the stored row unchanged.
    ag.begin_supervisor_wake_attempt(G, "w1", "a1", "t1", None)
        .unwrap();
    let delivered = ag
        .complete_supervisor_wake_attempt(G, "w1", "a1", AttemptStatus::Delivered, None)
        .unwrap();
    let third = ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    assert!(!third.created);
    assert_eq!(third.wake, delivered);
    assert_eq!(third.wake.status, WakeStatus::Delivered);
    assert_eq!(ag.list_supervisor_wakes(G).unwrap(), vec![delivered]);
}

fn an_attempt_runs_then_delivers_and_nothing_follows_a_terminal_wake(db: Db) {
    let ag = db.ag();
    ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    db.set_time(1_100);
    let begun = ag
        .begin_supervisor_wake_attempt(G, "w1", "a1", "t1", Some(3))
        .unwrap();
    assert!(begun.acquired);
    assert_eq!(begun.wake.status, WakeStatus::Running);
    assert_eq!(begun.wake.attempt_count, 1);
    assert_eq!(begun.wake.current_attempt_id.as_deref(), Some("a1"));
    assert_eq!(begun.wake.current_turn_id.as_deref(), Some("t1"));
    assert_eq!(begun.wake.updated_at, 1_100);
    let attempt = begun.attempt.clone().unwrap();
    assert_eq!(attempt.status, AttemptStatus::Running);
    assert_eq!((attempt.started_at, attempt.completed_at), (1_100, None));
    // The same attempt again: not acquired, the existing attempt returned.
    db.set_time(1_200);
    let again = ag
        .begin_supervisor_wake_attempt(G, "w1", "a1", "t1", Some(3))
        .unwrap();
    assert!(!again.acquired);
    assert_eq!(again.attempt, Some(attempt));
    assert_eq!(again.wake, begun.wake);
    db.set_time(1_300);
    let wake = ag
        .complete_supervisor_wake_attempt(G, "w1", "a1", AttemptStatus::Delivered, None)
        .unwrap();
    assert_eq!(wake.status, WakeStatus::Delivered);
    assert!(wake.status.is_terminal());
    assert_eq!(wake.updated_at, 1_300);
    assert_eq!(
        ag.read_supervisor_wake(G, "w1").unwrap(),
        Some(wake.clone())
    );
    let attempts = ag.list_supervisor_wake_attempts(G, "w1").unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].status, AttemptStatus::Delivered);
    assert_eq!(attempts[0].completed_at, Some(1_300));
    // After the terminal status: no new attempt, nothing written.
    let refused = ag
        .begin_supervisor_wake_attempt(G, "w1", "a2", "t2", None)
        .unwrap();
    assert!(!refused.acquired);
    assert_eq!(refused.attempt, None);
    assert_eq!(refused.wake, wake);
    assert_eq!(ag.list_supervisor_wake_attempts(G, "w1").unwrap().len(), 1);
}

fn max_attempts_is_a_ceiling_on_begun_attempts(db: Db) {
    let ag = db.ag();
    ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    for (n, attempt) in ["a1", "a2"].iter().enumerate() {
        let out = ag
            .begin_supervisor_wake_attempt(G, "w1", attempt, attempt, Some(2))
            .unwrap();
        assert!(out.acquired, "{attempt}");
        assert_eq!(out.wake.attempt_count, n as u32 + 1);
        let wake = ag
            .complete_supervisor_wake_attempt(
                G,
                "w1",
                attempt,
                AttemptStatus::RetryableFailed,
                Some("context overflow"),
            )
            .unwrap();
        assert_eq!(wake.status, WakeStatus::RetryableFailed);
        assert_eq!(wake.failure_reason.as_deref(), Some("context overflow"));
    }
    let capped = ag
        .begin_supervisor_wake_attempt(G, "w1", "a3", "a3", Some(2))
        .unwrap();
    assert!(!capped.acquired);
    assert_eq!(capped.attempt, None);
    assert_eq!(capped.wake.attempt_count, 2);
    assert_eq!(capped.wake.status, WakeStatus::RetryableFailed);
    assert_eq!(ag.list_supervisor_wake_attempts(G, "w1").unwrap().len(), 2);
    // A higher ceiling, or none, lets the next attempt begin.
    assert!(
        ag.begin_supervisor_wake_attempt(G, "w1", "a3", "a3", Some(3))
            .unwrap()
            .acquired
    );
    let (c, m) = code(ag.begin_supervisor_wake_attempt(G, "w1", "a4", "a4", Some(0)));
    assert_eq!(c, ControlErrorCode::MalformedState);
    assert!(m.contains("max attempts must be at least 1"), "{m}");
    assert!(
        ag.begin_supervisor_wake_attempt(G, "w1", "a4", "a4", None)
            .unwrap()
            .acquired
    );
}

fn unknown_wakes_and_attempts_are_errors(db: Db) {
    let ag = db.ag();
    let (c, m) = code(ag.begin_supervisor_wake_attempt(G, "w0", "a1", "t1", None));
    assert_eq!(c, ControlErrorCode::WakeNotFound);
    assert_eq!(m, format!("agent graph {G}: wake w0 not found"));
    let (c, _) =
        code(ag.complete_supervisor_wake_attempt(G, "w0", "a1", AttemptStatus::Delivered, None));
    assert_eq!(c, ControlErrorCode::WakeNotFound);
    let (c, _) = code(ag.exhaust_supervisor_wake(G, "w0", "gave up"));
    assert_eq!(c, ControlErrorCode::WakeNotFound);
    ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    // A wake is found only in its own graph.
    let (c, _) = code(ag.begin_supervisor_wake_attempt("graph_b", "w1", "a1", "t1", None));
    assert_eq!(c, ControlErrorCode::WakeNotFound);
    let (c, m) =
        code(ag.complete_supervisor_wake_attempt(G, "w1", "a9", AttemptStatus::Delivered, None));
    assert_eq!(c, ControlErrorCode::WakeAttemptNotFound);
    assert_eq!(
        m,
        format!("agent graph {G}: attempt a9 of wake w1 not found")
    );
    assert_eq!(
        ag.read_supervisor_wake(G, "w1").unwrap().unwrap().status,
        WakeStatus::Pending
    );
    assert_eq!(ag.read_supervisor_wake(G, "w0").unwrap(), None);
}

fn completing_after_delivery_is_refused_unless_it_repeats_the_delivery(db: Db) {
    let ag = db.ag();
    ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    ag.begin_supervisor_wake_attempt(G, "w1", "a1", "t1", None)
        .unwrap();
    let delivered = ag
        .complete_supervisor_wake_attempt(G, "w1", "a1", AttemptStatus::Delivered, None)
        .unwrap();
    // The same completion again (a retry after a crash) answers unchanged.
    db.set_time(5_000);
    assert_eq!(
        ag.complete_supervisor_wake_attempt(G, "w1", "a1", AttemptStatus::Delivered, None)
            .unwrap(),
        delivered
    );
    let (c, m) = code(ag.complete_supervisor_wake_attempt(
        G,
        "w1",
        "a1",
        AttemptStatus::RetryableFailed,
        Some("late failure"),
    ));
    assert_eq!(c, ControlErrorCode::WakeAlreadyDelivered);
    assert!(m.contains("wake w1 is already delivered"), "{m}");
    assert_eq!(ag.read_supervisor_wake(G, "w1").unwrap(), Some(delivered));
    assert_eq!(
        ag.list_supervisor_wake_attempts(G, "w1").unwrap()[0].status,
        AttemptStatus::Delivered
    );
}

fn a_superseded_wake_stays_superseded_when_its_attempt_completes(db: Db) {
    let ag = db.ag();
    ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    ag.begin_supervisor_wake_attempt(G, "w1", "a1", "t1", None)
        .unwrap();
    assert_eq!(
        ag.supersede_supervisor_wakes(&[ROOT], None, "finished")
            .unwrap(),
        1
    );
    db.set_time(7_000);
    let wake = ag
        .complete_supervisor_wake_attempt(G, "w1", "a1", AttemptStatus::Delivered, None)
        .unwrap();
    assert_eq!(wake.status, WakeStatus::Superseded);
    assert_eq!(wake.superseded_reason.as_deref(), Some("finished"));
    let attempt = &ag.list_supervisor_wake_attempts(G, "w1").unwrap()[0];
    assert_eq!(attempt.status, AttemptStatus::Delivered);
    assert_eq!(attempt.completed_at, Some(7_000));
}

fn a_finish_supersedes_the_graphs_wakes_still_due(db: Db) {
    let ag = db.ag();
    for w in ["pending", "retry", "running", "delivered"] {
        ag.claim_supervisor_wake(G, w, "v", ROOT).unwrap();
    }
    ag.claim_supervisor_wake("graph_b", "other", "v", ROOT)
        .unwrap();
    for w in ["retry", "running", "delivered"] {
        ag.begin_supervisor_wake_attempt(G, w, "a1", "t1", None)
            .unwrap();
    }
    ag.complete_supervisor_wake_attempt(G, "retry", "a1", AttemptStatus::RetryableFailed, None)
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "delivered", "a1", AttemptStatus::Delivered, None)
        .unwrap();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    let status = |g: &str, w: &str| ag.read_supervisor_wake(g, w).unwrap().unwrap();
    // Adding work leaves the wakes alone.
    assert_eq!(status(G, "pending").status, WakeStatus::Pending);
    db.set_time(5_000);
    ag.commit_schedule_update(finish(G, 2)).unwrap();
    for w in ["pending", "retry"] {
        let wake = status(G, w);
        assert_eq!(wake.status, WakeStatus::Superseded, "{w}");
        assert_eq!(wake.superseded_reason.as_deref(), Some("graph finished"));
        assert_eq!(wake.updated_at, 5_000);
    }
    // A wake under delivery is settled by its attempt; a delivered one,
    // and the wakes of other graphs, stay as they are.
    assert_eq!(status(G, "running").status, WakeStatus::Running);
    assert_eq!(status(G, "delivered").status, WakeStatus::Delivered);
    assert_eq!(status("graph_b", "other").status, WakeStatus::Pending);
    let settled = ag
        .complete_supervisor_wake_attempt(G, "running", "a1", AttemptStatus::Delivered, None)
        .unwrap();
    assert_eq!(settled.status, WakeStatus::Delivered);
    // A replayed finish changes nothing.
    db.set_time(6_000);
    assert!(!ag.commit_schedule_update(finish(G, 2)).unwrap().created);
    assert_eq!(status(G, "pending").updated_at, 5_000);
}

fn only_the_current_attempt_moves_the_wake(db: Db) {
    let ag = db.ag();
    ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    ag.begin_supervisor_wake_attempt(G, "w1", "a1", "t1", None)
        .unwrap();
    // a1 is left running (a lost process); a2 takes over.
    let a2 = ag
        .begin_supervisor_wake_attempt(G, "w1", "a2", "t2", None)
        .unwrap();
    assert!(a2.acquired);
    let wake = ag
        .complete_supervisor_wake_attempt(
            G,
            "w1",
            "a1",
            AttemptStatus::RetryableFailed,
            Some("stale"),
        )
        .unwrap();
    assert_eq!(wake, a2.wake);
    assert_eq!(wake.status, WakeStatus::Running);
    let attempts = ag.list_supervisor_wake_attempts(G, "w1").unwrap();
    assert_eq!(attempts[0].attempt_id, "a1");
    assert_eq!(attempts[0].status, AttemptStatus::RetryableFailed);
    assert_eq!(attempts[0].failure_reason.as_deref(), Some("stale"));
    // waiting_permission is not settled: no completedAt.
    let waiting = ag
        .complete_supervisor_wake_attempt(G, "w1", "a2", AttemptStatus::WaitingPermission, None)
        .unwrap();
    assert_eq!(waiting.status, WakeStatus::WaitingPermission);
    assert_eq!(
        ag.list_supervisor_wake_attempts(G, "w1").unwrap()[1].completed_at,
        None
    );
}

fn supersede_counts_only_non_terminal_wakes_of_the_given_roots_and_graphs(db: Db) {
    let ag = db.ag();
    // pending, running, waiting_permission, retryable_failed in G.
    for w in ["pending", "running", "waiting", "retry"] {
        ag.claim_supervisor_wake(G, w, "v", ROOT).unwrap();
    }
    ag.begin_supervisor_wake_attempt(G, "running", "a", "t", None)
        .unwrap();
    ag.begin_supervisor_wake_attempt(G, "waiting", "a", "t", None)
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "waiting", "a", AttemptStatus::WaitingPermission, None)
        .unwrap();
    ag.begin_supervisor_wake_attempt(G, "retry", "a", "t", None)
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "retry", "a", AttemptStatus::RetryableFailed, None)
        .unwrap();
    // delivered and exhausted in G: terminal.
    for w in ["delivered", "exhausted"] {
        ag.claim_supervisor_wake(G, w, "v", ROOT).unwrap();
        ag.begin_supervisor_wake_attempt(G, w, "a", "t", None)
            .unwrap();
    }
    ag.complete_supervisor_wake_attempt(G, "delivered", "a", AttemptStatus::Delivered, None)
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "exhausted", "a", AttemptStatus::RetryableFailed, None)
        .unwrap();
    ag.exhaust_supervisor_wake(G, "exhausted", "three failures")
        .unwrap();
    // Another root, and another graph.
    ag.claim_supervisor_wake(G, "other-root", "v", "root-2")
        .unwrap();
    ag.claim_supervisor_wake("graph_b", "b1", "v", ROOT)
        .unwrap();

    // Only graph_b: one wake.
    assert_eq!(
        ag.supersede_supervisor_wakes(&[ROOT], Some(&["graph_b", "graph_c"]), "stop")
            .unwrap(),
        1
    );
    db.set_time(4_000);
    assert_eq!(
        ag.supersede_supervisor_wakes(&[ROOT, "root-9"], None, "finish")
            .unwrap(),
        4
    );
    // Nothing left to supersede for ROOT.
    assert_eq!(
        ag.supersede_supervisor_wakes(&[ROOT], None, "again")
            .unwrap(),
        0
    );
    let status: BTreeMap<String, (WakeStatus, Option<String>)> = ag
        .list_supervisor_wakes(G)
        .unwrap()
        .into_iter()
        .map(|w| (w.wake_id, (w.status, w.superseded_reason)))
        .collect();
    let superseded = |r: &str| (WakeStatus::Superseded, Some(r.to_owned()));
    assert_eq!(status["pending"], superseded("finish"));
    assert_eq!(status["running"], superseded("finish"));
    assert_eq!(status["waiting"], superseded("finish"));
    assert_eq!(status["retry"], superseded("finish"));
    assert_eq!(status["delivered"], (WakeStatus::Delivered, None));
    assert_eq!(status["exhausted"], (WakeStatus::Exhausted, None));
    assert_eq!(status["other-root"], (WakeStatus::Pending, None));
    let b1 = ag.read_supervisor_wake("graph_b", "b1").unwrap().unwrap();
    assert_eq!(b1.status, WakeStatus::Superseded);
    assert_eq!(b1.superseded_reason.as_deref(), Some("stop"));
    assert_eq!(
        ag.read_supervisor_wake(G, "pending")
            .unwrap()
            .unwrap()
            .updated_at,
        4_000
    );
}

fn exhaust_only_from_retryable_failed_and_idempotent_once_exhausted(db: Db) {
    let ag = db.ag();
    ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    let (c, m) = code(ag.exhaust_supervisor_wake(G, "w1", "gave up"));
    assert_eq!(c, ControlErrorCode::WakeConflict);
    assert!(
        m.contains("wake w1 is pending, not retryable_failed"),
        "{m}"
    );
    ag.begin_supervisor_wake_attempt(G, "w1", "a1", "t1", None)
        .unwrap();
    let (c, m) = code(ag.exhaust_supervisor_wake(G, "w1", "gave up"));
    assert_eq!(c, ControlErrorCode::WakeConflict);
    assert!(m.contains("is running"), "{m}");
    ag.complete_supervisor_wake_attempt(
        G,
        "w1",
        "a1",
        AttemptStatus::RetryableFailed,
        Some("boom"),
    )
    .unwrap();
    for bad in [
        String::new(),
        "   ".to_owned(),
        "x".repeat(4001),
        "\u{1F600}".repeat(2001),
    ] {
        let (c, m) = code(ag.exhaust_supervisor_wake(G, "w1", &bad));
        assert_eq!(c, ControlErrorCode::MalformedState);
        assert!(m.contains("exhaustion reason must be non-empty"), "{m}");
    }
    assert_eq!(
        ag.read_supervisor_wake(G, "w1").unwrap().unwrap().status,
        WakeStatus::RetryableFailed
    );
    db.set_time(8_000);
    let reason = "y".repeat(4000);
    let exhausted = ag.exhaust_supervisor_wake(G, "w1", &reason).unwrap();
    assert_eq!(exhausted.status, WakeStatus::Exhausted);
    assert_eq!(exhausted.failure_reason.as_deref(), Some(reason.as_str()));
    assert_eq!(exhausted.updated_at, 8_000);
    db.set_time(9_000);
    assert_eq!(
        ag.exhaust_supervisor_wake(G, "w1", "another reason")
            .unwrap(),
        exhausted
    );
    // Terminal: no new attempt.
    assert!(
        !ag.begin_supervisor_wake_attempt(G, "w1", "a2", "t2", None)
            .unwrap()
            .acquired
    );
    // A delivered wake cannot be exhausted either.
    ag.claim_supervisor_wake(G, "w2", "v2", ROOT).unwrap();
    ag.begin_supervisor_wake_attempt(G, "w2", "a1", "t1", None)
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "w2", "a1", AttemptStatus::Delivered, None)
        .unwrap();
    let (c, _) = code(ag.exhaust_supervisor_wake(G, "w2", "gave up"));
    assert_eq!(c, ControlErrorCode::WakeConflict);
}

fn wakes_and_attempts_are_listed_in_time_order(db: Db) {
    let ag = db.ag();
    for (t, graph, w) in [
        (30, G, "w-a"),
        (10, G, "w-c"),
        (10, G, "w-b"),
        (20, "graph_b", "w-z"),
        (5, "graph_b", "w-y"),
    ] {
        db.set_time(t);
        ag.claim_supervisor_wake(graph, w, "v", ROOT).unwrap();
    }
    let ids = |ws: Vec<sandgraph_controller::SupervisorWake>| -> Vec<String> {
        ws.into_iter().map(|w| w.wake_id).collect()
    };
    assert_eq!(
        ids(ag.list_supervisor_wakes(G).unwrap()),
        vec!["w-b", "w-c", "w-a"]
    );
    assert_eq!(
        ids(ag.list_unsettled_supervisor_wakes(None).unwrap()),
        vec!["w-y", "w-b", "w-c", "w-z", "w-a"]
    );
    // Settled wakes are left out.
    db.set_time(40);
    ag.begin_supervisor_wake_attempt(G, "w-c", "a", "t", None)
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "w-c", "a", AttemptStatus::Delivered, None)
        .unwrap();
    ag.supersede_supervisor_wakes(&[ROOT], Some(&["graph_b"]), "x")
        .unwrap();
    assert_eq!(
        ids(ag.list_unsettled_supervisor_wakes(Some(G)).unwrap()),
        vec!["w-b", "w-a"]
    );
    assert_eq!(
        ids(ag.list_unsettled_supervisor_wakes(None).unwrap()),
        vec!["w-b", "w-a"]
    );
    assert!(
        ag.list_unsettled_supervisor_wakes(Some("graph_b"))
            .unwrap()
            .is_empty()
    );
    // Attempts: by startedAt, then attempt id.
    for (t, a) in [(50, "a-1"), (45, "a-3"), (45, "a-2")] {
        db.set_time(t);
        ag.begin_supervisor_wake_attempt(G, "w-a", a, a, None)
            .unwrap();
    }
    // Attempts of a wake whose id extends "w-a" stay out of its range.
    db.set_time(1);
    ag.claim_supervisor_wake(G, "w-a2", "v", ROOT).unwrap();
    ag.begin_supervisor_wake_attempt(G, "w-a2", "a-0", "t", None)
        .unwrap();
    let attempts: Vec<String> = ag
        .list_supervisor_wake_attempts(G, "w-a")
        .unwrap()
        .into_iter()
        .map(|a| a.attempt_id)
        .collect();
    assert_eq!(attempts, vec!["a-2", "a-3", "a-1"]);
}

// ---------------------------------------------------------------------------
// The whole store

fn everything_survives_closing_and_reopening_the_file(mut db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    ag.commit_schedule_update(update(G, 2)).unwrap();
    ag.commit_schedule_update(update("graph_b", 1)).unwrap();
    ag.claim_intent(claim(G, 1)).unwrap();
    ag.claim_intent(claim(G, 2)).unwrap();
    ag.begin_intent_execution(G, "graph_intent_1").unwrap();
    ag.cancel_intent_execution(G, "graph_intent_2", "stopped")
        .unwrap();
    ag.provision_operator(provision(G, 1, 2)).unwrap();
    ag.append_record(record(G, "r1", 10, "op", "run", 1))
        .unwrap();
    ag.commit_schedule_update(finish(G, 3)).unwrap();
    // A wake claimed after the finish (one before it would be superseded).
    ag.claim_supervisor_wake(G, "w1", "v1", ROOT).unwrap();
    ag.begin_supervisor_wake_attempt(G, "w1", "a1", "t1", None)
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "w1", "a1", AttemptStatus::RetryableFailed, Some("x"))
        .unwrap();

    type Snapshot = (
        Vec<String>,
        Vec<sandgraph_controller::ScheduleUpdate>,
        Vec<sandgraph_controller::IntentClaim>,
        Vec<sandgraph_controller::Provision>,
        Vec<GraphRecord>,
        Vec<sandgraph_controller::SupervisorWake>,
        Vec<sandgraph_controller::WakeAttempt>,
        (u64, bool),
    );
    let snapshot = |ag: &AgentGraphStore| -> Snapshot {
        (
            ag.list_graphs().unwrap(),
            ag.list_schedule_updates(G).unwrap(),
            ag.list_claims(G).unwrap(),
            ag.list_provisions(G).unwrap(),
            ag.list_records(G).unwrap(),
            ag.list_supervisor_wakes(G).unwrap(),
            ag.list_supervisor_wake_attempts(G, "w1").unwrap(),
            (ag.current_revision(G).unwrap(), ag.is_closed(G).unwrap()),
        )
    };
    let before = snapshot(&ag);
    assert_eq!(before.7, (3, true));
    assert_eq!(before.2.len(), 2);
    drop(ag);
    db.reopen();
    let ag = db.ag();
    assert_eq!(snapshot(&ag), before);
    // The indexes survive too: every uniqueness rule still holds.
    assert!(!ag.commit_schedule_update(update(G, 1)).unwrap().created);
    let mut same_source = update("graph_b", 2);
    same_source.source = update("graph_b", 1).source;
    assert_eq!(
        code(ag.commit_schedule_update(same_source)).0,
        ControlErrorCode::ScheduleUpdateConflict
    );
    let mut same_work = update("graph_b", 3);
    same_work.add_work = vec![work("graph_b:work-1")];
    assert_eq!(
        code(ag.commit_schedule_update(same_work)).0,
        ControlErrorCode::ScheduleUpdateConflict
    );
    assert_eq!(
        code(ag.commit_schedule_update(update(G, 4))).0,
        ControlErrorCode::ScheduleClosed
    );
    let mut turn = claim("graph_b", 7);
    turn.target_session_id = "child-1".to_owned();
    turn.target_turn_id = "turn-1".to_owned();
    assert_eq!(
        code(ag.claim_intent(turn)).0,
        ControlErrorCode::IntentClaimConflict
    );
    assert!(!ag.provision_operator(provision(G, 1, 3)).unwrap().created);
    assert!(
        ag.read_provision_by_work(G, &format!("{G}:work-1"))
            .unwrap()
            .is_some()
    );
    assert_eq!(
        ag.exhaust_supervisor_wake(G, "w1", "gave up")
            .unwrap()
            .status,
        WakeStatus::Exhausted
    );
}

fn refused_calls_write_no_row(mut db: Db) {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    ag.claim_intent(claim(G, 1)).unwrap();
    ag.provision_operator(provision(G, 1, 1)).unwrap();
    ag.append_record(record(G, "r1", 1, "op", "run", 1))
        .unwrap();
    ag.claim_supervisor_wake(G, "w1", "v", ROOT).unwrap();
    ag.begin_supervisor_wake_attempt(G, "w1", "a1", "t1", None)
        .unwrap();
    ag.complete_supervisor_wake_attempt(G, "w1", "a1", AttemptStatus::Delivered, None)
        .unwrap();
    ag.commit_schedule_update(finish(G, 2)).unwrap();
    drop(ag);
    let before = db.raw_counts();
    // Every table has rows, under the same names on both backends.
    assert_eq!(before.keys().collect::<Vec<_>>(), TABLES, "{before:?}");
    let ag = db.ag();
    // Refusals and replays.
    assert!(ag.commit_schedule_update(update(G, 3)).is_err());
    assert!(!ag.commit_schedule_update(update(G, 1)).unwrap().created);
    assert!(ag.claim_intent(claim(G, 2)).is_err());
    assert!(!ag.claim_intent(claim(G, 1)).unwrap().created);
    assert!(ag.provision_operator(provision(G, 2, 2)).is_err());
    assert!(!ag.provision_operator(provision(G, 1, 2)).unwrap().created);
    assert!(
        !ag.append_record(record(G, "r1", 1, "op", "run", 1))
            .unwrap()
    );
    assert!(
        !ag.claim_supervisor_wake(G, "w1", "v", ROOT)
            .unwrap()
            .created
    );
    assert!(
        !ag.begin_supervisor_wake_attempt(G, "w1", "a2", "t2", None)
            .unwrap()
            .acquired
    );
    assert_eq!(
        ag.supersede_supervisor_wakes(&[ROOT], None, "x").unwrap(),
        0
    );
    drop(ag);
    assert_eq!(db.raw_counts(), before);
}

fn a_row_that_does_not_decode_is_malformed_state_naming_table_and_key(mut db: Db) {
    db.ag().claim_intent(claim(G, 1)).unwrap();
    db.overwrite_claim(G, "graph_intent_1", "{\"not\": \"a claim\"}");
    let ag = db.ag();
    for r in [
        ag.read_claim(G, "graph_intent_1").map(|_| ()),
        ag.list_claims(G).map(|_| ()),
        ag.begin_intent_execution(G, "graph_intent_1").map(|_| ()),
    ] {
        let (c, m) = code(r);
        assert_eq!(c, ControlErrorCode::MalformedState);
        assert!(m.contains("agent_graph_claims"), "{m}");
        assert!(m.contains("(\"graph_a\", \"graph_intent_1\")"), "{m}");
    }
}

/// redb only: a file written by an older build.
fn a_schema_1_file_written_before_these_tables_opens_with_them_empty() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../store/tests/fixtures/threads-schema1.db");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.redb");
    std::fs::copy(&fixture, &path).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), 1);
    let ag = store.agent_graphs();
    assert!(ag.list_graphs().unwrap().is_empty());
    assert!(ag.commit_schedule_update(update(G, 1)).unwrap().created);
    assert!(store.threads().load("fixture").unwrap().is_some());
}

#[test]
fn error_codes_have_their_stable_spelling() {
    use ControlErrorCode::*;
    let all = [
        (ScheduleRevisionConflict, "schedule-revision-conflict"),
        (ScheduleClosed, "schedule-closed"),
        (ScheduleUpdateConflict, "schedule-update-conflict"),
        (IntentClaimConflict, "intent-claim-conflict"),
        (IntentNotFound, "intent-not-found"),
        (ProvisionConflict, "provision-conflict"),
        (ProvisionNotFound, "provision-not-found"),
        (WakeNotFound, "wake-not-found"),
        (WakeAttemptNotFound, "wake-attempt-not-found"),
        (WakeAlreadyDelivered, "wake-already-delivered"),
        (WakeConflict, "wake-conflict"),
        (RecordConflict, "record-conflict"),
        (ClaimLeaseLost, "claim-lease-lost"),
        (MalformedState, "malformed-state"),
        (Storage, "storage"),
    ];
    for (code, text) in all {
        assert_eq!(code.as_str(), text);
        assert_eq!(code.to_string(), text);
    }
    let e = ControlError::new(ScheduleClosed, "agent graph g is finished");
    assert_eq!(e.to_string(), "agent graph g is finished");
}

fn rows_are_camel_case_json_as_the_seed_names_them(db: Db) {
    let ag = db.ag();
    let u = ag.commit_schedule_update(update(G, 1)).unwrap().update;
    let json = serde_json::to_value(&u).unwrap();
    for key in [
        "schemaVersion",
        "updateId",
        "updateFingerprint",
        "graphId",
        "addWork",
        "revision",
        "committedAt",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    assert_eq!(json["addWork"][0]["target"]["kind"], "agent");
    let c = ag.claim_intent(claim(G, 1)).unwrap().claim;
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["admissionStatus"], "claimed");
    assert_eq!(json["targetSessionId"], "child-1");
}

// ---------------------------------------------------------------------------
// Claim leases

const INTENT: &str = "graph_intent_1";
const HOST_B: &str = "host-b/1/x";

/// A graph with the claim of [`INTENT`], and its store.
fn claimed(db: &Db) -> AgentGraphStore {
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    ag.claim_intent(claim(G, 1)).unwrap();
    ag
}

/// The outcome of the work of [`INTENT`].
fn outcome(id: &str) -> GraphRecord {
    record(G, id, 10, "graph_operator_1", "run-1", 1)
}

fn acquired(out: LeaseOutcome) -> ClaimLease {
    match out {
        LeaseOutcome::Acquired(lease) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn ttl_ms(ag: &AgentGraphStore) -> u64 {
    u64::try_from(ag.lease_ttl().as_millis()).unwrap()
}

fn stored_lease(ag: &AgentGraphStore) -> Option<ClaimLease> {
    ag.read_claim(G, INTENT).unwrap().unwrap().lease
}

/// `a` leases [`INTENT`], then `b` (another holder) takes it over: on
/// PostgreSQL only once the clock reaches the expiry, on redb at once.
/// Returns both leases.
fn take_over(db: &Db, a: &AgentGraphStore, b: &AgentGraphStore) -> (ClaimLease, ClaimLease) {
    let first = acquired(a.lease_intent(G, INTENT, "r1").unwrap());
    if db.is_postgres() {
        db.set_time(first.expires_at - 1);
        assert_eq!(
            b.lease_intent(G, INTENT, "r1").unwrap(),
            LeaseOutcome::Held(first.clone())
        );
        db.set_time(first.expires_at);
    }
    let second = acquired(b.lease_intent(G, INTENT, "r1").unwrap());
    (first, second)
}

fn a_first_lease_has_token_1_and_is_stored_on_the_claim(db: Db) {
    let ag = claimed(&db);
    assert_eq!(stored_lease(&ag), None, "a new claim has no lease");
    assert!(!ag.holder().is_empty());
    let lease = acquired(ag.lease_intent(G, INTENT, "r1").unwrap());
    assert_eq!(
        lease,
        ClaimLease {
            holder: ag.holder().to_owned(),
            token: 1,
            expires_at: 1_000 + ttl_ms(&ag),
        }
    );
    assert_eq!(stored_lease(&ag), Some(lease));
    // The same holder again (a restarted run of the same host) gets the
    // next token: a run of it still holding token 1 is fenced off too.
    db.set_time(2_000);
    let again = acquired(ag.lease_intent(G, INTENT, "r1").unwrap());
    assert_eq!((again.token, again.expires_at), (2, 2_000 + ttl_ms(&ag)));
    assert_eq!(stored_lease(&ag), Some(again));
}

fn another_holder_takes_a_lease_over_when_it_expires_or_at_once_on_redb(db: Db) {
    let a = claimed(&db);
    let b = a.clone().with_holder(HOST_B);
    assert_eq!(b.holder(), HOST_B);
    let (first, second) = take_over(&db, &a, &b);
    assert_eq!(first.token, 1);
    let now = if db.is_postgres() {
        first.expires_at
    } else {
        1_000
    };
    assert_eq!(
        second,
        ClaimLease {
            holder: HOST_B.to_owned(),
            token: 2,
            expires_at: now + ttl_ms(&b),
        }
    );
    assert_eq!(stored_lease(&a), Some(second.clone()));
    if db.is_postgres() {
        // Now A waits for B's lease.
        assert_eq!(
            a.lease_intent(G, INTENT, "r1").unwrap(),
            LeaseOutcome::Held(second)
        );
    }
}

fn after_a_take_over_only_the_new_holder_records_the_outcome(db: Db) {
    let a = claimed(&db);
    let b = a.clone().with_holder(HOST_B);
    let (old, new) = take_over(&db, &a, &b);
    assert!(!a.renew_intent_lease(G, INTENT, old.token).unwrap());
    assert_eq!(
        stored_lease(&a),
        Some(new.clone()),
        "renewal changed nothing"
    );
    let (c, m) = code(a.append_record_leased(outcome("r1"), INTENT, old.token));
    assert_eq!(c, ControlErrorCode::ClaimLeaseLost);
    assert!(m.contains(&format!("leased to {HOST_B} (token 2)")), "{m}");
    assert!(m.contains("record r1 not written"), "{m}");
    assert!(a.list_records(G).unwrap().is_empty());
    // B records; then the work is done for everyone.
    assert!(b.renew_intent_lease(G, INTENT, new.token).unwrap());
    assert!(
        b.append_record_leased(outcome("r1"), INTENT, new.token)
            .unwrap()
    );
    assert_eq!(a.list_records(G).unwrap(), vec![outcome("r1")]);
    assert_eq!(
        a.lease_intent(G, INTENT, "r1").unwrap(),
        LeaseOutcome::Recorded
    );
    assert_eq!(
        b.lease_intent(G, INTENT, "r1").unwrap(),
        LeaseOutcome::Recorded
    );
    // A's retry of the very same record is a replay; anything else is lost.
    assert!(
        !a.append_record_leased(outcome("r1"), INTENT, old.token)
            .unwrap()
    );
    let mut other = outcome("r1");
    other.summary = "A's version".to_owned();
    let (c, _) = code(a.append_record_leased(other, INTENT, old.token));
    assert_eq!(c, ControlErrorCode::ClaimLeaseLost);
    assert_eq!(a.list_records(G).unwrap(), vec![outcome("r1")]);
}

fn an_expired_lease_nobody_took_still_records(db: Db) {
    let ag = claimed(&db);
    let lease = acquired(ag.lease_intent(G, INTENT, "r1").unwrap());
    db.set_time(lease.expires_at + 60_000);
    assert!(
        ag.append_record_leased(outcome("r1"), INTENT, lease.token)
            .unwrap()
    );
    assert_eq!(ag.list_records(G).unwrap(), vec![outcome("r1")]);
}

fn a_wrong_token_or_no_lease_records_nothing(db: Db) {
    let ag = claimed(&db);
    // No lease yet.
    let (c, m) = code(ag.append_record_leased(outcome("r1"), INTENT, 1));
    assert_eq!(c, ControlErrorCode::ClaimLeaseLost);
    assert!(m.contains("leased to nobody"), "{m}");
    assert!(!ag.renew_intent_lease(G, INTENT, 1).unwrap());
    let lease = acquired(ag.lease_intent(G, INTENT, "r1").unwrap());
    let (c, _) = code(ag.append_record_leased(outcome("r1"), INTENT, lease.token + 1));
    assert_eq!(c, ControlErrorCode::ClaimLeaseLost);
    assert!(ag.list_records(G).unwrap().is_empty());
}

fn a_cancelled_claim_is_not_leased_but_a_recorded_one_says_so_first(db: Db) {
    let ag = claimed(&db);
    ag.claim_intent(claim(G, 2)).unwrap();
    ag.cancel_intent_execution(G, INTENT, "stopped").unwrap();
    assert_eq!(
        ag.lease_intent(G, INTENT, "r1").unwrap(),
        LeaseOutcome::Cancelled
    );
    assert_eq!(stored_lease(&ag), None);
    // Intent 2 was recorded, then cancelled: its record wins.
    ag.append_record(outcome("r2")).unwrap();
    ag.cancel_intent_execution(G, "graph_intent_2", "late")
        .unwrap();
    assert_eq!(
        ag.lease_intent(G, "graph_intent_2", "r2").unwrap(),
        LeaseOutcome::Recorded
    );
    // Only the named record counts.
    assert_eq!(
        ag.lease_intent(G, "graph_intent_2", "r-other").unwrap(),
        LeaseOutcome::Cancelled
    );
}

fn lease_calls_on_an_unknown_intent_are_intent_not_found(mut db: Db) {
    let ag = claimed(&db);
    drop(ag);
    let before = db.raw_counts();
    let ag = db.ag();
    for r in [
        ag.lease_intent(G, "graph_intent_9", "r1").map(|_| ()),
        ag.lease_intent("graph_b", INTENT, "r1").map(|_| ()),
        ag.renew_intent_lease(G, "graph_intent_9", 1).map(|_| ()),
        ag.append_record_leased(outcome("r1"), "graph_intent_9", 1)
            .map(|_| ()),
    ] {
        let (c, m) = code(r);
        assert_eq!(c, ControlErrorCode::IntentNotFound);
        assert!(m.contains("has no durable claim"), "{m}");
    }
    drop(ag);
    assert_eq!(db.raw_counts(), before);
}

fn renewal_moves_the_expiry_forward_with_the_clock(db: Db) {
    let ag = claimed(&db);
    let lease = acquired(ag.lease_intent(G, INTENT, "r1").unwrap());
    db.set_time(5_000);
    assert!(ag.renew_intent_lease(G, INTENT, lease.token).unwrap());
    let renewed = stored_lease(&ag).unwrap();
    assert_eq!(
        renewed,
        ClaimLease {
            expires_at: 5_000 + ttl_ms(&ag),
            ..lease.clone()
        }
    );
    // Another holder, or another token, renews nothing.
    let b = ag.clone().with_holder(HOST_B);
    db.set_time(6_000);
    assert!(!b.renew_intent_lease(G, INTENT, lease.token).unwrap());
    assert!(!ag.renew_intent_lease(G, INTENT, lease.token + 1).unwrap());
    assert_eq!(stored_lease(&ag), Some(renewed.clone()));
    if db.is_postgres() {
        // Past the first expiry, the renewed lease still holds.
        db.set_time(lease.expires_at);
        assert_eq!(
            b.lease_intent(G, INTENT, "r1").unwrap(),
            LeaseOutcome::Held(renewed)
        );
    }
}

fn the_claim_lease_lasts_as_long_as_the_thread_lease(db: Db) {
    assert_eq!(db.ag().lease_ttl(), Duration::from_secs(30), "the default");
    let short = db
        .store()
        .clone()
        .with_thread_lease(Duration::from_millis(500));
    let ag = db.ag_of(&short);
    assert_eq!(ag.lease_ttl(), Duration::from_millis(500));
    ag.commit_schedule_update(update(G, 1)).unwrap();
    ag.claim_intent(claim(G, 1)).unwrap();
    let lease = acquired(ag.lease_intent(G, INTENT, "r1").unwrap());
    assert_eq!(lease.expires_at, 1_500);
    let tiny = db
        .store()
        .clone()
        .with_thread_lease(Duration::from_millis(10));
    assert_eq!(
        tiny.agent_graphs().lease_ttl(),
        Duration::from_millis(100),
        "at least 100 ms"
    );
}

/// PostgreSQL only: a value whose bytes are not in the rows' encoding.
fn a_row_whose_bytes_do_not_decode_is_malformed_state_naming_the_table(db: Db) {
    claimed(&db);
    db.overwrite_claim_bytes(G, INTENT, b"{\"unterminated\": true}");
    let ag = db.ag();
    for r in [
        ag.read_claim(G, INTENT).map(|_| ()),
        ag.list_claims(G).map(|_| ()),
        ag.lease_intent(G, INTENT, "r1").map(|_| ()),
    ] {
        let (c, m) = code(r);
        assert_eq!(c, ControlErrorCode::MalformedState);
        assert!(m.contains("agent_graph_claims"), "{m}");
    }
}

/// PostgreSQL only: two hosts (two `Store::connect`s to one database), 4
/// threads each, every thread a holder of its own, all leasing the same 20
/// intents at once: each intent goes to exactly one holder, with token 1,
/// and the 7 others see that holder's lease (`Held`).
fn two_hosts_racing_lease_each_intent_to_exactly_one_holder(db: Db) {
    const INTENTS: u32 = 20;
    const THREADS: usize = 8;
    let ag = db.ag();
    ag.commit_schedule_update(update(G, 1)).unwrap();
    for n in 0..INTENTS {
        ag.claim_intent(claim(G, n)).unwrap();
    }
    let hosts = [db.store().clone(), db.connect_again()];
    let start = std::sync::Barrier::new(THREADS);
    let results: Vec<(String, u32, LeaseOutcome)> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..THREADS)
            .map(|t| {
                let ag = db
                    .ag_of(&hosts[t % 2])
                    .with_holder(&format!("host-{}/thread-{t}", t % 2));
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    // All in the same order: the 8 contend for each intent.
                    (0..INTENTS)
                        .map(|n| {
                            let out = ag
                                .lease_intent(G, &format!("graph_intent_{n}"), "none")
                                .unwrap();
                            (ag.holder().to_owned(), n, out)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
    });
    assert_eq!(results.len(), THREADS * INTENTS as usize);
    for n in 0..INTENTS {
        let of_n: Vec<&(String, u32, LeaseOutcome)> = results.iter().filter(|r| r.1 == n).collect();
        let won: Vec<&ClaimLease> = of_n
            .iter()
            .filter_map(|(_, _, out)| match out {
                LeaseOutcome::Acquired(lease) => Some(lease),
                _ => None,
            })
            .collect();
        assert_eq!(won.len(), 1, "intent {n}: {of_n:?}");
        let lease = won[0].clone();
        assert_eq!(lease.token, 1, "intent {n}");
        for (holder, _, out) in &of_n {
            if *holder != lease.holder {
                assert_eq!(*out, LeaseOutcome::Held(lease.clone()), "intent {n}");
            }
        }
        let stored = ag
            .read_claim(G, &format!("graph_intent_{n}"))
            .unwrap()
            .unwrap();
        assert_eq!(stored.lease, Some(lease));
    }
}

// ---------------------------------------------------------------------------
// Both backends

/// `both` run as `on_redb::<name>` and `on_postgres::<name>`, each on a
/// fresh [`Db`]; `redb_only` and `postgres_only` run as the one of these.
/// redb only: the schema-1 file (an old redb file). PostgreSQL only: a row
/// whose bytes break the rows' encoding (redb stores typed strings), and
/// the race of two hosts (a redb file has one process).
macro_rules! conformance {
    (
        both: $($name:ident),* ;
        redb_only: $($redb:ident),* ;
        postgres_only: $($pg:ident),* $(;)?
    ) => {
        mod on_redb {
            $(
                #[test]
                fn $name() {
                    super::$name(super::Db::redb());
                }
            )*
            $(
                #[test]
                fn $redb() {
                    super::$redb();
                }
            )*
        }
        mod on_postgres {
            $(
                #[test]
                fn $name() {
                    super::$name(super::Db::postgres(stringify!($name)));
                }
            )*
            $(
                #[test]
                fn $pg() {
                    super::$pg(super::Db::postgres(stringify!($pg)));
                }
            )*
        }
    };
}

conformance!(
    both:
    revisions_are_monotonic_from_one_per_graph_without_gaps,
    a_replayed_update_with_the_same_payload_returns_the_stored_row,
    the_same_update_id_with_another_payload_conflicts,
    the_same_source_with_another_update_conflicts_whatever_the_turn,
    finish_with_add_work_is_rejected,
    an_update_after_finish_is_refused_and_writes_nothing,
    a_repeated_work_id_is_rejected_across_updates_and_within_one,
    an_intent_is_claimed_exactly_once,
    a_claim_of_the_same_intent_by_another_activation_conflicts,
    a_claim_reusing_an_activation_identity_conflicts,
    a_stale_revision_writes_nothing,
    a_claim_on_a_finished_graph_is_refused_but_an_existing_claim_answers,
    admission_goes_claimed_executing_cancelled,
    rearm_moves_executing_back_to_claimed_only,
    a_stop_or_a_replacement_cancels_the_claims_of_its_targets,
    claims_are_listed_by_intent_id_in_byte_order,
    a_provision_is_adopted_on_retry_and_conflicts_on_a_mismatch,
    provisions_are_blocked_after_closure,
    records_append_once_conflict_on_other_content_and_list_in_order,
    records_of_a_finished_graph_are_accepted,
    records_persist_across_reopening,
    a_wake_is_claimed_once_and_returned_unchanged_afterwards,
    an_attempt_runs_then_delivers_and_nothing_follows_a_terminal_wake,
    max_attempts_is_a_ceiling_on_begun_attempts,
    unknown_wakes_and_attempts_are_errors,
    completing_after_delivery_is_refused_unless_it_repeats_the_delivery,
    a_superseded_wake_stays_superseded_when_its_attempt_completes,
    a_finish_supersedes_the_graphs_wakes_still_due,
    only_the_current_attempt_moves_the_wake,
    supersede_counts_only_non_terminal_wakes_of_the_given_roots_and_graphs,
    exhaust_only_from_retryable_failed_and_idempotent_once_exhausted,
    wakes_and_attempts_are_listed_in_time_order,
    everything_survives_closing_and_reopening_the_file,
    refused_calls_write_no_row,
    a_row_that_does_not_decode_is_malformed_state_naming_table_and_key,
    rows_are_camel_case_json_as_the_seed_names_them,
    a_first_lease_has_token_1_and_is_stored_on_the_claim,
    another_holder_takes_a_lease_over_when_it_expires_or_at_once_on_redb,
    after_a_take_over_only_the_new_holder_records_the_outcome,
    an_expired_lease_nobody_took_still_records,
    a_wrong_token_or_no_lease_records_nothing,
    a_cancelled_claim_is_not_leased_but_a_recorded_one_says_so_first,
    lease_calls_on_an_unknown_intent_are_intent_not_found,
    renewal_moves_the_expiry_forward_with_the_clock,
    the_claim_lease_lasts_as_long_as_the_thread_lease;
    redb_only: a_schema_1_file_written_before_these_tables_opens_with_them_empty;
    postgres_only:
    a_row_whose_bytes_do_not_decode_is_malformed_state_naming_the_table,
    two_hosts_racing_lease_each_intent_to_exactly_one_holder
);
