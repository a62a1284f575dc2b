//! `yield_agent_graph`: closed and empty graphs, the idempotent wake, the
//! pending count, live claims (and the claims a stop cancels), and the
//! wake a finish supersedes.

use crate::common::{Fixture, GRAPH, ROOT};
use serde_json::json;

use sandgraph_controller::ids::{graph_wake_id, scheduled_work_intent_id, stable_hash};
use sandgraph_controller::{AdmissionStatus, AttemptStatus, RecordOutcome, WakeStatus, WorkStatus};

fn yield_(f: &Fixture) -> serde_json::Value {
    f.yield_(json!({"graphId": GRAPH, "reason": "waiting on workers"}))
        .unwrap()
        .value
}

#[test]
fn nothing_to_yield_without_requested_work() {
    let f = Fixture::new();
    let e = f.yield_(json!({"graphId": GRAPH})).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "[nothing_to_yield] agent graph {GRAPH}: nothing to yield for \u{2014} no requested work, no live intent claims, and no readiness intents"
        )
    );
    assert!(f.graphs.list_supervisor_wakes(GRAPH).unwrap().is_empty());
}

#[test]
fn yields_a_pending_wake_for_requested_work() {
    let f = Fixture::new();
    f.add("w-1");
    let r = f.yield_(json!({"graphId": GRAPH})).unwrap();
    let snapshot_version = stable_hash(&json!({
        "schemaVersion": 1, "graphId": GRAPH, "revision": 1,
        "work": [["w-1", "requested"]], "claims": [], "intents": []
    }));
    let wake_id = graph_wake_id(GRAPH, &snapshot_version);
    assert_eq!(
        r.value,
        json!({"deliveredOnIdle": true, "wakeId": wake_id, "pendingWorkCount": 1})
    );
    assert_eq!(
        r.text,
        format!("Yielded agent graph {GRAPH} (wake {wake_id}); 1 pending items continue.")
    );
    let wakes = f.graphs.list_supervisor_wakes(GRAPH).unwrap();
    assert_eq!(wakes.len(), 1);
    assert_eq!(wakes[0].wake_id, wake_id);
    assert_eq!(wakes[0].status, WakeStatus::Pending);
    assert_eq!(wakes[0].root_session_id, ROOT);
    assert_eq!(wakes[0].snapshot_version, snapshot_version);
}

#[test]
fn the_wake_is_idempotent_for_an_unchanged_graph_even_once_delivered() {
    let f = Fixture::new();
    f.add("w-1");
    let first = yield_(&f);
    let second = yield_(&f);
    assert_eq!(first["wakeId"], second["wakeId"]);
    assert_eq!(f.graphs.list_supervisor_wakes(GRAPH).unwrap().len(), 1);
    let wake = first["wakeId"].as_str().unwrap();
    f.graphs
        .begin_supervisor_wake_attempt(GRAPH, wake, "a1", "a1", None)
        .unwrap();
    f.graphs
        .complete_supervisor_wake_attempt(GRAPH, wake, "a1", AttemptStatus::Delivered, None)
        .unwrap();
    let third = yield_(&f);
    assert_eq!(third["wakeId"], first["wakeId"]);
    let wakes = f.graphs.list_supervisor_wakes(GRAPH).unwrap();
    assert_eq!(wakes.len(), 1);
    assert_eq!(wakes[0].status, WakeStatus::Delivered);
}

#[test]
fn a_changed_graph_gets_a_new_wake() {
    let f = Fixture::new();
    f.add("w-1");
    let first = yield_(&f);
    f.claim("w-1");
    let claimed = yield_(&f);
    assert_ne!(first["wakeId"], claimed["wakeId"]);
    f.add("w-2");
    let added = yield_(&f);
    assert_ne!(claimed["wakeId"], added["wakeId"]);
    assert_eq!(added["pendingWorkCount"], json!(2));
    assert_eq!(f.graphs.list_supervisor_wakes(GRAPH).unwrap().len(), 3);
}

#[test]
fn a_finished_graph_refuses_yield() {
    let f = Fixture::new();
    f.record("rec-1", None, "r", None, 1);
    f.update(json!({"graphId": GRAPH, "finish": {"resultIds": ["rec-1"], "reason": "done"}}))
        .unwrap();
    let e = f.yield_(json!({"graphId": GRAPH})).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("[graph_closed] agent graph {GRAPH} is already finished; yield is no longer valid")
    );
    assert!(f.graphs.list_supervisor_wakes(GRAPH).unwrap().is_empty());
}

#[test]
fn pending_work_count_counts_only_requested_work() {
    let f = Fixture::new();
    for w in ["w-1", "w-2", "w-3", "w-4"] {
        f.add(w);
    }
    f.claim("w-1");
    f.record("r1", Some("w-1"), "ok", Some(RecordOutcome::Completed), 1);
    f.record("r2", Some("w-2"), "bad", Some(RecordOutcome::Failed), 2);
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-3", "reason": "no"}]}))
        .unwrap();
    let v = yield_(&f);
    assert_eq!(v["pendingWorkCount"], json!(1));
}

#[test]
fn fix_a_claim_of_ended_work_is_not_live() {
    let f = Fixture::new();
    f.add("w-1");
    f.claim("w-1");
    // The claim is still `claimed`, but the work completed.
    f.record("r1", Some("w-1"), "ok", Some(RecordOutcome::Completed), 1);
    let p = f.tools.snapshot(GRAPH).unwrap();
    assert_eq!(p.claims().len(), 1);
    assert_eq!(p.live_claims().count(), 0);
    let e = f.yield_(json!({"graphId": GRAPH})).unwrap_err();
    assert_eq!(
        e.code.map(sandgraph_controller::ToolCode::as_str),
        Some("nothing_to_yield")
    );
}

#[test]
fn a_claim_still_running_on_stopped_or_superseded_work_is_live() {
    let f = Fixture::new();
    // A stop commits while a wave that read the graph before it claims the
    // work: the stop found no claim to cancel, and the claim runs.
    f.add("w-1");
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": "enough"}]}))
        .unwrap();
    f.claim("w-1");
    f.graphs
        .begin_intent_execution(GRAPH, &scheduled_work_intent_id(GRAPH, "w-1"))
        .unwrap();
    // No requested work, but w-1 still executes: the supervisor may wait.
    let p = f.tools.snapshot(GRAPH).unwrap();
    assert_eq!(p.work_item("w-1").unwrap().status(), WorkStatus::Stopped);
    assert_eq!(p.live_claims().count(), 1);
    assert_eq!(yield_(&f)["pendingWorkCount"], json!(0));
    // Its late record ends it: nothing is live any more.
    f.record("r1", Some("w-1"), "late", Some(RecordOutcome::Completed), 1);
    let e = f.yield_(json!({"graphId": GRAPH})).unwrap_err();
    assert_eq!(
        e.code.map(sandgraph_controller::ToolCode::as_str),
        Some("nothing_to_yield")
    );

    // Likewise for replaced work (its replacement stopped): the claim is
    // live until it is cancelled.
    f.add("w-2");
    f.update(json!({"graphId": GRAPH, "addWork": [{"workId": "w-3", "subagentId": "p", "instruction": "redo", "replaces": "w-2"}]}))
        .unwrap();
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-3", "reason": "no"}]}))
        .unwrap();
    f.claim("w-2");
    let p = f.tools.snapshot(GRAPH).unwrap();
    assert_eq!(p.work_item("w-2").unwrap().status(), WorkStatus::Superseded);
    assert_eq!(p.requested().count(), 0);
    assert_eq!(yield_(&f)["pendingWorkCount"], json!(0));
    f.graphs
        .cancel_intent_execution(GRAPH, &scheduled_work_intent_id(GRAPH, "w-2"), "replaced")
        .unwrap();
    let e = f.yield_(json!({"graphId": GRAPH})).unwrap_err();
    assert_eq!(
        e.code.map(sandgraph_controller::ToolCode::as_str),
        Some("nothing_to_yield")
    );
}

#[test]
fn a_stop_cancels_the_claim_of_running_work_so_it_is_not_live() {
    let f = Fixture::new();
    f.add("w-1");
    f.claim("w-1");
    f.graphs
        .begin_intent_execution(GRAPH, &scheduled_work_intent_id(GRAPH, "w-1"))
        .unwrap();
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": "enough"}]}))
        .unwrap();
    let p = f.tools.snapshot(GRAPH).unwrap();
    let claim = p.claim_of("w-1").unwrap();
    assert_eq!(claim.admission_status, AdmissionStatus::Cancelled);
    assert_eq!(
        claim.cancellation_reason.as_deref(),
        Some("stopped: enough")
    );
    assert_eq!(p.live_claims().count(), 0);
    let e = f.yield_(json!({"graphId": GRAPH})).unwrap_err();
    assert_eq!(
        e.code.map(sandgraph_controller::ToolCode::as_str),
        Some("nothing_to_yield")
    );
}

#[test]
fn finishing_the_graph_supersedes_its_pending_wake() {
    let f = Fixture::new();
    f.add("w-1");
    let wake = yield_(&f)["wakeId"].as_str().unwrap().to_owned();
    f.claim("w-1");
    f.record("r1", Some("w-1"), "ok", Some(RecordOutcome::Completed), 1);
    assert_eq!(
        f.graphs
            .read_supervisor_wake(GRAPH, &wake)
            .unwrap()
            .unwrap()
            .status,
        WakeStatus::Pending
    );
    f.update(json!({"graphId": GRAPH, "finish": {"resultIds": ["r1"], "reason": "done"}}))
        .unwrap();
    let after = f
        .graphs
        .read_supervisor_wake(GRAPH, &wake)
        .unwrap()
        .unwrap();
    assert_eq!(after.status, WakeStatus::Superseded);
    assert_eq!(after.superseded_reason.as_deref(), Some("graph finished"));
    assert!(
        f.graphs
            .list_unsettled_supervisor_wakes(Some(GRAPH))
            .unwrap()
            .is_empty()
    );
}
