//! `view_agent_graph`: the empty snapshot, paging, the terminal tail,
//! truncation, terminal work states and the text rendering.

use crate::common::{Fixture, GRAPH, assert_invalid, items, work_ids};
use serde_json::{Value, json};

use sandgraph_controller::ids::graph_edge_id;
use sandgraph_controller::{
    GraphRecord, OperatorEdge, ProvisionRequest, RecordFacet, RecordOutcome, RecordSource,
    TargetKind, WorkTarget,
};

fn view(f: &Fixture, cursor: Option<&str>) -> Value {
    let mut args = json!({"graphId": GRAPH});
    if let Some(c) = cursor {
        args["cursor"] = json!(c);
    }
    f.view(args).unwrap().value
}

fn add_named(f: &Fixture, names: &[String]) {
    for chunk in names.chunks(32) {
        let work: Vec<Value> = chunk
            .iter()
            .map(|n| json!({"workId": n, "subagentId": "p", "instruction": format!("do {n}")}))
            .collect();
        f.update(json!({"graphId": GRAPH, "addWork": work}))
            .unwrap();
    }
}

fn stop(f: &Fixture, names: &[String]) {
    for chunk in names.chunks(20) {
        let stops: Vec<Value> = chunk
            .iter()
            .map(|n| json!({"targetId": n, "reason": format!("stop {n}")}))
            .collect();
        f.update(json!({"graphId": GRAPH, "stop": stops})).unwrap();
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:02}")).collect()
}

#[test]
fn an_unknown_graph_views_as_empty() {
    let f = Fixture::new();
    let r = f.view(json!({"graphId": "graph-never-seen"})).unwrap();
    assert_eq!(
        r.value,
        json!({
            "graphId": "graph-never-seen", "closed": false, "revision": 0, "updateCount": 0,
            "work": [], "stoppedTargets": [], "records": [],
            "readiness": {"intents": [], "routesCount": 0},
            "omitted": {"work": 0, "stoppedTargets": 0, "records": 0, "partialRecords": 0, "readiness": 0}
        })
    );
    assert_eq!(
        r.text,
        "Agent graph graph-never-seen \u{2014} open, revision 0, 0 update(s).\nWork (0 visible):\n  none\nRecords (0 visible):\n  none\nOmitted: work=0, stoppedTargets=0, records=0, partialRecords=0, readiness=0"
    );
    // Viewing writes nothing.
    assert!(f.graphs.list_graphs().unwrap().is_empty());
}

#[test]
fn pages_96_requested_items_64_then_32() {
    let f = Fixture::new();
    for batch in 0..3 {
        f.update(json!({"graphId": GRAPH, "addWork": items(&batch.to_string(), 32)}))
            .unwrap();
    }
    let first = f.view(json!({"graphId": GRAPH})).unwrap();
    assert_eq!(first.value["work"].as_array().unwrap().len(), 64);
    assert_eq!(first.value["omitted"]["work"], json!(32));
    let cursor = first.value["nextCursor"].as_str().unwrap().to_owned();
    assert!(cursor.starts_with("work:"));
    let all: Vec<String> = f
        .tools
        .snapshot(GRAPH)
        .unwrap()
        .work()
        .iter()
        .map(|w| w.work_id().to_owned())
        .collect();
    assert_eq!(cursor, format!("work:{}", all[63]));
    assert_eq!(work_ids(&first.value), all[..64]);
    assert!(first.text.ends_with(&format!("\nNext cursor: {cursor}")));

    let second = f.view(json!({"graphId": GRAPH, "cursor": cursor})).unwrap();
    assert_eq!(second.value["work"].as_array().unwrap().len(), 32);
    assert_eq!(second.value["omitted"]["work"], json!(64));
    assert!(second.value.get("nextCursor").is_none());
    assert_eq!(work_ids(&second.value), all[64..]);
    assert!(!second.text.contains("Next cursor"));
}

#[test]
fn exactly_64_entries_give_no_cursor() {
    let f = Fixture::new();
    f.update(json!({"graphId": GRAPH, "addWork": items("a", 32)}))
        .unwrap();
    f.update(json!({"graphId": GRAPH, "addWork": items("b", 32)}))
        .unwrap();
    let v = view(&f, None);
    assert_eq!(v["work"].as_array().unwrap().len(), 64);
    assert!(v.get("nextCursor").is_none());
    // A cursor at the last entry gives an empty page.
    let last = work_ids(&v).pop().unwrap();
    let v = view(&f, Some(&format!("work:{last}")));
    assert_eq!(v["work"], json!([]));
    assert_eq!(v["omitted"]["work"], json!(64));
}

#[test]
fn stale_or_invalid_cursors_are_invalid_input() {
    let f = Fixture::new();
    add_named(&f, &names("w", 2));
    stop(&f, &names("w", 1));
    for cursor in [
        "bogus",
        "record:nope",
        "work:nope",
        "intent:x",
        "work:w-00",
        "Work:w-01",
        "",
    ] {
        assert_invalid(
            f.view(json!({"graphId": GRAPH, "cursor": cursor})),
            "agent graph view cursor is stale or invalid",
        );
    }
    // The live work's cursor is fine.
    view(&f, Some("work:w-01"));
}

#[test]
fn terminal_work_is_on_every_page() {
    let f = Fixture::new();
    let all = names("w", 96);
    add_named(&f, &all);
    let stopped = vec![all[0].clone(), all[50].clone(), all[95].clone()];
    stop(&f, &stopped);
    let first = view(&f, None);
    let ids = work_ids(&first);
    assert_eq!(ids.len(), 64 + 3);
    assert_eq!(ids[64..], stopped);
    assert_eq!(first["omitted"]["work"], json!(93 - 64));
    let second = view(&f, Some(first["nextCursor"].as_str().unwrap()));
    let ids = work_ids(&second);
    assert_eq!(ids.len(), 29 + 3);
    assert_eq!(ids[29..], stopped);
    assert_eq!(second["omitted"]["work"], json!(64));
    assert!(second.get("nextCursor").is_none());
    let statuses: Vec<&Value> = second["work"].as_array().unwrap()[29..]
        .iter()
        .map(|w| &w["status"])
        .collect();
    assert!(statuses.iter().all(|s| **s == json!("stopped")));
}

#[test]
fn the_terminal_tail_and_stopped_targets_keep_the_last_64() {
    let f = Fixture::new();
    let all = names("w", 70);
    add_named(&f, &all);
    stop(&f, &all);
    let v = view(&f, None);
    assert_eq!(work_ids(&v), all[6..]);
    assert_eq!(v["omitted"]["work"], json!(6));
    let stopped = v["stoppedTargets"].as_array().unwrap();
    assert_eq!(stopped.len(), 64);
    assert_eq!(
        stopped[0],
        json!({"targetId": "w-06", "reason": "stop w-06"})
    );
    assert_eq!(v["omitted"]["stoppedTargets"], json!(6));
    assert!(v.get("nextCursor").is_none());
}

#[test]
fn records_share_the_page_with_requested_work() {
    let f = Fixture::new();
    add_named(&f, &names("w", 60));
    for i in 0..10u64 {
        f.record(&format!("rec-{i}"), None, &format!("summary {i}"), None, i);
    }
    let first = view(&f, None);
    assert_eq!(first["work"].as_array().unwrap().len(), 60);
    let recs: Vec<&str> = first["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["recordId"].as_str().unwrap())
        .collect();
    assert_eq!(recs, ["rec-0", "rec-1", "rec-2", "rec-3"]);
    assert_eq!(first["omitted"]["records"], json!(6));
    assert_eq!(first["nextCursor"], json!("record:rec-3"));
    let second = view(&f, Some("record:rec-3"));
    assert_eq!(second["work"], json!([]));
    assert_eq!(second["records"].as_array().unwrap().len(), 6);
    assert_eq!(
        second["omitted"],
        json!({"work": 60, "stoppedTargets": 0, "records": 4, "partialRecords": 0, "readiness": 0})
    );
    assert!(second.get("nextCursor").is_none());
    assert_eq!(
        second["records"][0],
        json!({"recordId": "rec-4", "operatorId": "op-1", "summary": "summary 4", "summaryTruncated": false, "facets": ["message"], "emittedAt": 4})
    );
}

#[test]
fn instructions_are_cut_at_2000_units() {
    let f = Fixture::new();
    add_named(&f, &[]);
    f.update(json!({"graphId": GRAPH, "addWork": [
        {"workId": "exact", "subagentId": "p", "instruction": "x".repeat(2000)},
        {"workId": "long", "subagentId": "p", "instruction": "y".repeat(2001)},
        {"workId": "astral", "subagentId": "p", "instruction": format!("{}\u{1F600}tail", "z".repeat(1999))},
    ]}))
    .unwrap();
    let v = view(&f, None);
    let w = v["work"].as_array().unwrap();
    assert_eq!(w[0]["instruction"], json!("x".repeat(2000)));
    assert_eq!(w[0]["instructionTruncated"], json!(false));
    assert_eq!(
        w[1]["instruction"],
        json!(format!("{}\u{2026}", "y".repeat(2000)))
    );
    assert_eq!(w[1]["instructionTruncated"], json!(true));
    // Unit 2000 is the first half of a surrogate pair: the pair is dropped.
    assert_eq!(
        w[2]["instruction"],
        json!(format!("{}\u{2026}", "z".repeat(1999)))
    );
    assert_eq!(w[2]["instructionTruncated"], json!(true));
}

#[test]
fn summaries_are_cut_at_512_units() {
    let f = Fixture::new();
    f.record("r-exact", None, &"s".repeat(512), None, 1);
    f.record("r-long", None, &"t".repeat(513), None, 2);
    f.record(
        "r-astral",
        None,
        &format!("{}\u{1F600}", "u".repeat(511)),
        None,
        3,
    );
    let v = view(&f, None);
    let r = v["records"].as_array().unwrap();
    assert_eq!(
        (&r[0]["summary"], &r[0]["summaryTruncated"]),
        (&json!("s".repeat(512)), &json!(false))
    );
    assert_eq!(
        r[1]["summary"],
        json!(format!("{}\u{2026}", "t".repeat(512)))
    );
    assert_eq!(r[1]["summaryTruncated"], json!(true));
    assert_eq!(
        r[2]["summary"],
        json!(format!("{}\u{2026}", "u".repeat(511)))
    );
    assert_eq!(r[2]["summaryTruncated"], json!(true));
}

#[test]
fn fix_work_ends_completed_or_failed_from_terminal_records() {
    let f = Fixture::new();
    add_named(&f, &names("w", 6));
    // w-00 completed, w-01 failed, w-02 stopped despite a completed record,
    // w-03 superseded by w-06 despite a failed record, w-04 has a
    // non-terminal record, w-05 has nothing.
    f.record("r0", Some("w-00"), "ok", Some(RecordOutcome::Completed), 1);
    f.record("r1", Some("w-01"), "bad", Some(RecordOutcome::Failed), 2);
    f.record("r2", Some("w-02"), "ok", Some(RecordOutcome::Completed), 3);
    f.record("r3", Some("w-03"), "bad", Some(RecordOutcome::Failed), 4);
    f.record("r4", Some("w-04"), "progress", None, 5);
    stop(&f, &["w-02".to_owned()]);
    f.update(json!({"graphId": GRAPH, "addWork": [{"workId": "w-06", "subagentId": "p", "instruction": "redo", "replaces": "w-03"}]}))
        .unwrap();
    let v = view(&f, None);
    let statuses: Vec<(String, String)> = v["work"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["workId"].as_str().unwrap().to_owned(),
                w["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("w-04", "requested"),
        ("w-05", "requested"),
        ("w-06", "requested"),
        ("w-00", "completed"),
        ("w-01", "failed"),
        ("w-02", "stopped"),
        ("w-03", "superseded"),
    ];
    assert_eq!(
        statuses,
        expected.map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    assert_eq!(v["omitted"]["work"], json!(0));
    // Completed work is not a live entry: cursors cannot name it.
    assert_invalid(
        f.view(json!({"graphId": GRAPH, "cursor": "work:w-00"})),
        "agent graph view cursor is stale or invalid",
    );
}

#[test]
fn renders_the_text_block() {
    let f = Fixture::new();
    f.update(json!({"graphId": GRAPH, "addWork": [
        {"workId": "w-1", "agentId": "coder", "instruction": "first\n\n  line\tand   more"},
        {"workId": "w-2", "operatorId": "op-9", "instruction": "x".repeat(130)},
    ]}))
    .unwrap();
    f.update(json!({"graphId": GRAPH, "addWork": [
        {"workId": "w-3", "subagentId": "p", "instruction": "better first", "replaces": "w-1"},
    ]}))
    .unwrap();
    f.record(
        "rec-1",
        Some("w-2"),
        "  done:\n all good ",
        Some(RecordOutcome::Completed),
        7,
    );
    let r = f.view(json!({"graphId": GRAPH})).unwrap();
    assert_eq!(
        r.text,
        format!(
            "Agent graph {GRAPH} \u{2014} open, revision 2, 2 update(s).\n\
             Work (3 visible):\n  \
             [requested] w-3 \u{2192} preset:p (replaces w-1): better first\n  \
             [superseded] w-1 \u{2192} agent:coder: first line and more\n  \
             [completed] w-2 \u{2192} operator:op-9: {}\n\
             Records (1 visible):\n  \
             rec-1 op-1: done: all good\n\
             Omitted: work=0, stoppedTargets=0, records=0, partialRecords=0, readiness=0",
            "x".repeat(120)
        )
    );
}

#[test]
fn render_shows_closed_and_the_cursor() {
    let f = Fixture::new();
    add_named(&f, &names("w", 65));
    let r = f.view(json!({"graphId": GRAPH})).unwrap();
    let lines: Vec<&str> = r.text.lines().collect();
    assert_eq!(
        lines[0],
        format!("Agent graph {GRAPH} \u{2014} open, revision 3, 3 update(s).")
    );
    assert_eq!(lines[1], "Work (64 visible):");
    assert_eq!(lines[2], "  [requested] w-00 \u{2192} preset:p: do w-00");
    assert_eq!(lines[65], "  [requested] w-63 \u{2192} preset:p: do w-63");
    assert_eq!(lines[66], "Records (0 visible):");
    assert_eq!(lines[67], "  none");
    assert_eq!(
        lines[68],
        "Omitted: work=1, stoppedTargets=0, records=0, partialRecords=0, readiness=0"
    );
    assert_eq!(lines[69], "Next cursor: work:w-63");
    assert_eq!(lines.len(), 70);
}

/// Provisions `operator` for `work_id` with the edges `(from, to)`.
fn provision(f: &Fixture, work_id: &str, operator: &str, edges: &[(&str, &str)]) {
    let edges = edges
        .iter()
        .map(|(from, to)| OperatorEdge {
            edge_id: graph_edge_id(GRAPH, from, to),
            from_operator_id: (*from).to_owned(),
            to_operator_id: (*to).to_owned(),
        })
        .collect();
    f.graphs
        .provision_operator(ProvisionRequest {
            provision_id: format!("provision-{work_id}"),
            graph_id: GRAPH.to_owned(),
            work_id: work_id.to_owned(),
            operator_id: operator.to_owned(),
            target: WorkTarget {
                kind: TargetKind::Preset,
                id: "p".to_owned(),
            },
            target_session_id: format!("session-{operator}"),
            initial_turn_id: "turn-1".to_owned(),
            initial_run_id: "run-1".to_owned(),
            provision_fingerprint: format!("fp-{work_id}"),
            edges,
            expected_schedule_revision: f.graphs.current_revision(GRAPH).unwrap(),
        })
        .unwrap();
}

/// Appends a message record of `operator`.
fn record_of(f: &Fixture, record_id: &str, operator: &str, at: u64) {
    f.graphs
        .append_record(GraphRecord {
            record_id: record_id.to_owned(),
            graph_id: GRAPH.to_owned(),
            operator_id: operator.to_owned(),
            work_id: None,
            source: RecordSource {
                session_id: format!("session-{operator}"),
                run_id: "run-1".to_owned(),
                turn_id: None,
                runtime_event_id: Some(format!("evt-{record_id}")),
                seq: at,
            },
            summary: format!("from {operator}"),
            facets: vec![RecordFacet::Message],
            outcome: None,
            evidence_refs: Vec::new(),
            emitted_at: at,
        })
        .unwrap();
}

#[test]
fn routes_count_counts_every_record_once_per_edge_leaving_its_operator() {
    let f = Fixture::new();
    add_named(&f, &names("w", 3));
    // op-a feeds op-b and op-c, op-b feeds op-c; op-c's provision repeats
    // the edge op-a → op-b, which counts once.
    provision(&f, "w-00", "op-a", &[]);
    provision(&f, "w-01", "op-b", &[("op-a", "op-b")]);
    provision(
        &f,
        "w-02",
        "op-c",
        &[("op-a", "op-c"), ("op-b", "op-c"), ("op-a", "op-b")],
    );
    // No record yet: no route.
    assert_eq!(view(&f, None)["readiness"]["routesCount"], json!(0));
    record_of(&f, "r-a1", "op-a", 1);
    record_of(&f, "r-a2", "op-a", 2);
    record_of(&f, "r-b1", "op-b", 3);
    record_of(&f, "r-c1", "op-c", 4);
    // Two records of op-a on two edges each, one of op-b on one edge, and
    // no edge leaves op-c.
    let v = view(&f, None);
    assert_eq!(v["readiness"], json!({"intents": [], "routesCount": 5}));
    // This host records only settled outcomes: nothing partial is skipped.
    assert_eq!(v["omitted"]["partialRecords"], json!(0));
}

#[test]
fn work_whose_run_was_cut_is_cancelled_whether_stopped_or_replaced() {
    let f = Fixture::new();
    add_named(&f, &names("w", 3));
    stop(&f, &["w-00".to_owned(), "w-02".to_owned()]);
    f.update(json!({"graphId": GRAPH, "addWork": [{"workId": "w-03", "subagentId": "p", "instruction": "redo", "replaces": "w-01"}]}))
        .unwrap();
    // w-00 and w-01 were running and cut; w-02 was stopped before it ran.
    let cut = Some(RecordOutcome::Cancelled);
    f.record("r0", Some("w-00"), "cancelled: stopped", cut, 1);
    f.record("r1", Some("w-01"), "cancelled: replaced by w-03", cut, 2);
    let v = view(&f, None);
    let statuses: Vec<(&str, &str)> = v["work"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["workId"].as_str().unwrap(), w["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("w-03", "requested"),
            ("w-00", "cancelled"),
            ("w-01", "cancelled"),
            ("w-02", "stopped")
        ]
    );
    let p = f.tools.snapshot(GRAPH).unwrap();
    assert!(p.work_item("w-00").unwrap().status().is_terminal());
    assert_eq!(p.requested().count(), 1);
}
