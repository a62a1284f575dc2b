//! `update_agent_graph`: bounds, rules, preprocessors, live checks,
//! idempotency and the fixes over the original.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{self, Fixture, GRAPH, ROOT, assert_invalid, err, items, work_ids};
use serde_json::{Value, json};

use sandgraph_controller::ids::{deterministic_work_id, graph_update_id};
use sandgraph_controller::{AgentGraphTools, CallIdentity, WorkStatus};
use sandgraph_controller::{RecordOutcome, UpdateSource};

fn add(instruction: Value) -> Value {
    json!({"graphId": GRAPH, "addWork": [{"subagentId": "preset-a", "instruction": instruction}]})
}

fn with_item(item: Value) -> Value {
    json!({"graphId": GRAPH, "addWork": [item]})
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:03}")).collect()
}

fn selected(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"sourceGraphId": "graph-old", "resultId": format!("{prefix}-{i:03}")}))
        .collect()
}

fn rows(f: &Fixture) -> usize {
    f.graphs.list_schedule_updates(GRAPH).unwrap().len()
}

// ---------------------------------------------------------------- success

#[test]
fn adds_work_with_a_deterministic_id_and_returns_the_first_page() {
    let f = Fixture::new();
    let r = f
        .update(json!({"graphId": GRAPH, "addWork": [{"subagentId": "preset-port", "instruction": "Port the P4 tools", "inputIds": ["r2", "r1"]}]}))
        .unwrap();
    let source = UpdateSource {
        session_id: ROOT.to_owned(),
        run_id: "graph_run_1".to_owned(),
        turn_id: "graph_turn_1".to_owned(),
        tool_call_id: "call-1".to_owned(),
        orchestration_mode: Some("graph".to_owned()),
    };
    let update_id = graph_update_id(GRAPH, &source);
    let work_id = deterministic_work_id(&update_id, 0);
    assert!(work_id.starts_with("graph_work_") && work_id.len() == 11 + 32);
    assert_eq!(
        r.value,
        json!({
            "update": {"revision": 1, "committedAt": 1_700_000_000_000u64, "created": true},
            "graph": {
                "graphId": GRAPH, "closed": false, "revision": 1, "updateCount": 1,
                "work": [{
                    "workId": work_id, "target": {"kind": "preset", "id": "preset-port"},
                    "instruction": "Port the P4 tools", "instructionTruncated": false,
                    "inputIds": ["r1", "r2"], "status": "requested"
                }],
                "stoppedTargets": [], "records": [],
                "readiness": {"intents": [], "routesCount": 0},
                "omitted": {"work": 0, "stoppedTargets": 0, "records": 0, "partialRecords": 0, "readiness": 0}
            }
        })
    );
    assert_eq!(
        r.text,
        format!(
            "Agent graph update committed at revision 1.\n\nAgent graph {GRAPH} \u{2014} open, revision 1, 1 update(s).\nWork (1 visible):\n  [requested] {work_id} \u{2192} preset:preset-port: Port the P4 tools\nRecords (0 visible):\n  none\nOmitted: work=0, stoppedTargets=0, records=0, partialRecords=0, readiness=0"
        )
    );
    let stored = &f.graphs.list_schedule_updates(GRAPH).unwrap()[0];
    assert_eq!(stored.request.update_id, update_id);
    assert_eq!(stored.request.source, source);
}

#[test]
fn agent_and_operator_targets_map_to_their_kinds() {
    let f = Fixture::new();
    let r = f
        .update(json!({"graphId": GRAPH, "addWork": [
            {"agentId": "coder", "instruction": "a"},
            {"operatorId": "op-7", "instruction": "b"},
            {"targetKind": "new_agent", "agentId": "coder", "instruction": "c"},
        ]}))
        .unwrap();
    let kinds: Vec<&Value> = r.value["graph"]["work"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| &w["target"])
        .collect();
    assert_eq!(
        kinds,
        [
            &json!({"kind": "agent", "id": "coder"}),
            &json!({"kind": "operator", "id": "op-7"}),
            &json!({"kind": "agent", "id": "coder"})
        ]
    );
}

// ---------------------------------------------------------------- bounds

#[test]
fn add_work_is_bounded_at_32_items() {
    let f = Fixture::new();
    f.update(json!({"graphId": GRAPH, "addWork": items("a", 32)}))
        .unwrap();
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "addWork": items("b", 33)})),
        "one graph update may add at most 32 work items (got 33)",
    );
    assert_eq!(rows(&f), 1);
}

#[test]
fn input_ids_are_bounded_at_64_per_item() {
    let f = Fixture::new();
    f.update(with_item(
        json!({"subagentId": "p", "instruction": "x", "inputIds": ids("r", 64)}),
    ))
    .unwrap();
    assert_invalid(
        f.update(with_item(
            json!({"subagentId": "p", "instruction": "x", "inputIds": ids("r", 65)}),
        )),
        "agent graph input id exceeds 64 entries (got 65)",
    );
    // Per item, not per update: two items of 64 each are fine.
    f.update(json!({"graphId": GRAPH, "addWork": [
        {"subagentId": "p", "instruction": "x", "inputIds": ids("r", 64)},
        {"subagentId": "p", "instruction": "y", "inputIds": ids("s", 64)},
    ]}))
    .unwrap();
}

#[test]
fn combined_inputs_are_bounded_at_64_per_item() {
    let f = Fixture::new();
    f.update(with_item(json!({"subagentId": "p", "instruction": "x",
        "inputIds": ids("r", 40), "selectedResultInputs": selected("h", 24)})))
        .unwrap();
    assert_invalid(
        f.update(with_item(json!({"subagentId": "p", "instruction": "x",
            "inputIds": ids("r", 40), "selectedResultInputs": selected("h", 25)}))),
        "combined graph inputs must contain at most 64 entries",
    );
}

#[test]
fn selected_results_are_bounded_at_64_per_update() {
    let f = Fixture::new();
    let r = f
        .update(json!({"graphId": GRAPH, "addWork": [
            {"subagentId": "p", "instruction": "x", "selectedResultInputs": selected("h", 32)},
            {"subagentId": "p", "instruction": "y", "selectedResultInputs": selected("h", 32)},
        ]}))
        .unwrap();
    assert_eq!(
        r.value["graph"]["work"][0]["selectedResultInputs"][0],
        json!({"sourceGraphId": "graph-old", "resultId": "h-000"})
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "addWork": [
            {"subagentId": "p", "instruction": "x", "selectedResultInputs": selected("h", 32)},
            {"subagentId": "p", "instruction": "y", "selectedResultInputs": selected("h", 33)},
        ]})),
        "one graph update may select at most 64 historical results (got 65)",
    );
}

#[test]
fn instructions_are_bounded_at_60000_utf16_units() {
    let f = Fixture::new();
    // Surrounding whitespace is trimmed before the bound.
    f.update(add(json!(format!("  {}\n", "x".repeat(60_000)))))
        .unwrap();
    assert_invalid(
        f.update(add(json!("x".repeat(60_001)))),
        "invalid agent graph instruction",
    );
    // A character above U+FFFF counts as two units.
    f.update(add(json!(format!("{}ab", "\u{1F600}".repeat(29_999)))))
        .unwrap();
    assert_invalid(
        f.update(add(json!(format!("{}a", "\u{1F600}".repeat(30_000))))),
        "invalid agent graph instruction",
    );
}

#[test]
fn stops_are_bounded_at_20() {
    let f = Fixture::new();
    let work: Vec<Value> = (0..21)
        .map(|i| json!({"workId": format!("w-{i:02}"), "subagentId": "p", "instruction": "x"}))
        .collect();
    f.update(json!({"graphId": GRAPH, "addWork": work}))
        .unwrap();
    let stops = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"targetId": format!("w-{i:02}"), "reason": "boundary"}))
            .collect()
    };
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "stop": stops(21)})),
        "one graph update may stop at most 20 targets (got 21)",
    );
    f.update(json!({"graphId": GRAPH, "stop": stops(20)}))
        .unwrap();
}

#[test]
fn finish_result_ids_are_bounded_at_64() {
    let f = Fixture::new();
    for (i, id) in ids("rec", 65).iter().enumerate() {
        f.record(id, None, "s", None, i as u64);
    }
    assert_invalid(
        f.update(
            json!({"graphId": GRAPH, "finish": {"resultIds": ids("rec", 65), "reason": "done"}}),
        ),
        "finish may select at most 64 result ids (got 65)",
    );
    let r = f
        .update(
            json!({"graphId": GRAPH, "finish": {"resultIds": ids("rec", 64), "reason": "done"}}),
        )
        .unwrap();
    assert_eq!(r.value["graph"]["closed"], json!(true));
    assert_eq!(
        r.value["graph"]["finish"]["resultIds"]
            .as_array()
            .unwrap()
            .len(),
        64
    );
}

#[test]
fn reasons_are_bounded_at_4000_units() {
    let f = Fixture::new();
    f.add("w-1");
    f.add("w-2");
    assert_invalid(
        f.update(
            json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": "r".repeat(4001)}]}),
        ),
        "invalid agent graph stop reason",
    );
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": "r".repeat(4000)}]}))
        .unwrap();
    f.record("rec-1", None, "s", None, 1);
    f.claim("w-2");
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "finish": {"resultIds": ["rec-1"], "reason": "r".repeat(4001)}})),
        "invalid agent graph finish reason",
    );
    f.update(
        json!({"graphId": GRAPH, "finish": {"resultIds": ["rec-1"], "reason": "r".repeat(4000)}}),
    )
    .unwrap();
}

#[test]
fn identities_are_bounded_at_256_units() {
    let f = Fixture::new();
    let long = "g".repeat(256);
    let r = f
        .update(json!({"graphId": long, "addWork": [{"workId": "w".repeat(256), "subagentId": "p".repeat(256), "instruction": "x"}], "idempotencyKey": "k".repeat(256)}))
        .unwrap();
    assert_eq!(r.value["graph"]["graphId"], json!(long));
    assert_invalid(
        f.update(json!({"graphId": "g".repeat(257), "stop": [{"targetId": "w", "reason": "r"}]})),
        "invalid agent graph graph id",
    );
    assert_invalid(
        f.update(with_item(
            json!({"workId": "w".repeat(257), "subagentId": "p", "instruction": "x"}),
        )),
        "invalid agent graph work id",
    );
    assert_invalid(
        f.update(with_item(
            json!({"subagentId": "p".repeat(257), "instruction": "x"}),
        )),
        "invalid agent graph subagent preset id",
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w", "reason": "r"}], "idempotencyKey": "k".repeat(257)})),
        "invalid agent graph idempotency key",
    );
}

#[test]
fn identities_refuse_surrounding_whitespace_and_control_characters() {
    let f = Fixture::new();
    for bad in [
        " w",
        "w ",
        "w\u{feff}",
        "a\u{1}b",
        "a\tb",
        "a\nb",
        "a\u{7f}b",
        "",
    ] {
        assert_invalid(
            f.update(with_item(
                json!({"subagentId": "p", "instruction": "x", "inputIds": [bad]}),
            )),
            "invalid agent graph input id",
        );
    }
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w\u{0}", "reason": "r"}]})),
        "invalid agent graph stop target id",
    );
    assert_invalid(
        f.update(with_item(json!({"agentId": " a", "instruction": "x"}))),
        "invalid agent graph agent id",
    );
    assert_invalid(
        f.update(with_item(
            json!({"operatorId": "o\u{1f}", "instruction": "x"}),
        )),
        "invalid agent graph operator id",
    );
    assert_invalid(
        f.update(with_item(
            json!({"subagentId": "p", "instruction": "x", "replaces": "w "}),
        )),
        "invalid agent graph replacement target id",
    );
    assert_invalid(
        f.update(with_item(json!({"subagentId": "p", "instruction": "x", "selectedResultInputs": [{"sourceGraphId": "", "resultId": "r"}]}))),
        "invalid agent graph source graph id",
    );
    assert_invalid(
        f.update(with_item(json!({"subagentId": "p", "instruction": "x", "selectedResultInputs": [{"sourceGraphId": "g", "resultId": "r\u{7f}"}]}))),
        "invalid agent graph selected result id",
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "finish": {"resultIds": ["r\n"], "reason": "r"}})),
        "invalid agent graph finish result id",
    );
    // Inner spaces are fine.
    f.update(with_item(
        json!({"workId": "a b", "subagentId": "p", "instruction": "x"}),
    ))
    .unwrap();
}

#[test]
fn text_allows_tab_lf_cr_and_refuses_other_controls() {
    let f = Fixture::new();
    let r = f.update(add(json!(" line one\n\tline two\r\n "))).unwrap();
    assert_eq!(
        r.value["graph"]["work"][0]["instruction"],
        json!("line one\n\tline two")
    );
    for bad in [
        "a\u{0}b", "a\u{7}b", "a\u{b}b", "a\u{c}b", "a\u{1b}b", "a\u{7f}b", "   ", "\n",
    ] {
        assert_invalid(f.update(add(json!(bad))), "invalid agent graph instruction");
    }
    f.add("w-1");
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": "a\u{8}"}]})),
        "invalid agent graph stop reason",
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": " \t "}]})),
        "invalid agent graph stop reason",
    );
}

// ---------------------------------------------------------- compile errors

#[test]
fn compile_errors_have_the_seed_messages() {
    let f = Fixture::new();
    assert_invalid(
        f.update(json!({"graphId": GRAPH})),
        "at least one addWork, stop, or finish operation is required",
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "addWork": [], "stop": []})),
        "at least one addWork, stop, or finish operation is required",
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "addWork": items("a", 1), "finish": {"resultIds": ["r"], "reason": "r"}})),
        "finish cannot be combined with addWork",
    );
    assert_invalid(
        f.update(with_item(json!({"instruction": "x"}))),
        "exactly one of subagentId, agentId, or operatorId is required",
    );
    assert_invalid(
        f.update(with_item(
            json!({"agentId": "a", "subagentId": "p", "instruction": "x"}),
        )),
        "exactly one of subagentId, agentId, or operatorId is required",
    );
    assert_invalid(
        f.update(with_item(
            json!({"targetKind": "new_agent", "subagentId": "p", "instruction": "x"}),
        )),
        "invalid agent graph agent id",
    );
    assert_invalid(
        f.update(with_item(
            json!({"subagentId": "p", "instruction": "x", "inputIds": ["a", "b", "a"]}),
        )),
        "agent graph repeats input id",
    );
    assert_invalid(
        f.update(with_item(json!({"subagentId": "p", "instruction": "x",
            "selectedResultInputs": [{"sourceGraphId": "g1", "resultId": "r"}, {"sourceGraphId": "g2", "resultId": "r"}]}))),
        "agent graph repeats selected result id",
    );
    assert_invalid(
        f.update(with_item(
            json!({"subagentId": "p", "instruction": "x", "inputIds": ["r"],
            "selectedResultInputs": [{"sourceGraphId": "g1", "resultId": "r"}]}),
        )),
        "a result id cannot be both a current and historical graph input",
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w", "reason": "a"}, {"targetId": "w", "reason": "b"}]})),
        "agent graph repeats stop target id",
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "finish": {"resultIds": ["r", "r"], "reason": "done"}})),
        "agent graph repeats finish result id",
    );
    assert_invalid(
        f.update(json!({"graphId": " g", "stop": [{"targetId": "w", "reason": "r"}]})),
        "invalid agent graph graph id",
    );
    assert_eq!(rows(&f), 0);
}

#[test]
fn the_first_failing_item_decides_the_error() {
    let f = Fixture::new();
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "addWork": [
            {"subagentId": "p", "instruction": "ok"},
            {"subagentId": "p", "instruction": "x", "inputIds": ["a", "a"]},
            {"instruction": "no target"},
        ]})),
        "agent graph repeats input id",
    );
}

// ----------------------------------------------------------- the fixes

#[test]
fn fix_finish_without_result_ids_is_invalid_input() {
    let f = Fixture::new();
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "finish": {"reason": "done"}})),
        "finish requires at least one result id",
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "finish": {"resultIds": [], "reason": "done"}})),
        "finish requires at least one result id",
    );
    assert_eq!(rows(&f), 0);
}

#[test]
fn fix_replacement_mode_replace_requires_replaces() {
    let f = Fixture::new();
    f.add("w-1");
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "addWork": [
            {"subagentId": "p", "instruction": "fine"},
            {"subagentId": "p", "instruction": "x", "replacementMode": "replace"},
        ]})),
        "replacementMode replace requires replaces",
    );
    let r = f
        .update(with_item(json!({"subagentId": "p", "instruction": "x", "replacementMode": "replace", "replaces": "w-1"})))
        .unwrap();
    let work = r.value["graph"]["work"].as_array().unwrap();
    let old = work.iter().find(|w| w["workId"] == "w-1").unwrap();
    assert_eq!(old["status"], json!("superseded"));
}

#[test]
fn fix_updates_on_a_finished_graph_are_refused_before_commit() {
    let f = Fixture::new();
    f.record("rec-1", None, "result", None, 1);
    f.update(json!({"graphId": GRAPH, "finish": {"resultIds": ["rec-1"], "reason": "done"}, "idempotencyKey": "fin"}))
        .unwrap();
    let e = f.update(add(json!("too late"))).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "[graph_closed] agent graph {GRAPH} is already finished; updates are no longer accepted"
        )
    );
    let e = f
        .update(json!({"graphId": GRAPH, "finish": {"resultIds": ["rec-1"], "reason": "again"}}))
        .unwrap_err();
    assert_eq!(
        e.code.map(sandgraph_controller::ToolCode::as_str),
        Some("graph_closed")
    );
    assert_eq!(rows(&f), 1);
    // The graph is not bricked: it still views.
    let v = f.view(json!({"graphId": GRAPH})).unwrap();
    assert_eq!(v.value["closed"], json!(true));
    assert_eq!(
        v.value["finish"],
        json!({"resultIds": ["rec-1"], "reason": "done"})
    );
    // Replaying the finish itself is still idempotent.
    let r = f
        .update(json!({"graphId": GRAPH, "finish": {"resultIds": ["rec-1"], "reason": "done"}, "idempotencyKey": "fin"}))
        .unwrap();
    assert_eq!(r.value["update"]["created"], json!(false));
    assert!(
        r.text
            .starts_with("Agent graph update reused at revision 1.\n\n")
    );
}

#[test]
fn fix_explicit_work_ids_must_be_new() {
    let f = Fixture::new();
    f.add("w-1");
    assert_invalid(
        f.update(with_item(
            json!({"workId": "w-1", "subagentId": "p", "instruction": "again"}),
        )),
        &format!("agent graph {GRAPH}: work id w-1 already exists"),
    );
    // Any status: a stopped work id is still taken.
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": "no"}]}))
        .unwrap();
    assert_invalid(
        f.update(with_item(
            json!({"workId": "w-1", "subagentId": "p", "instruction": "again"}),
        )),
        &format!("agent graph {GRAPH}: work id w-1 already exists"),
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "addWork": [
            {"workId": "w-dup", "subagentId": "p", "instruction": "a"},
            {"workId": "w-dup", "subagentId": "p", "instruction": "b"},
        ]})),
        &format!("agent graph {GRAPH}: work id w-dup is repeated in this update"),
    );
    assert_eq!(rows(&f), 2);
    // The graph still views.
    assert_eq!(
        work_ids(&f.view(json!({"graphId": GRAPH})).unwrap().value),
        ["w-1"]
    );
}

#[test]
fn explicit_work_id_is_used() {
    let f = Fixture::new();
    let r = f
        .update(with_item(
            json!({"workId": "w-explicit", "subagentId": "p", "instruction": "named"}),
        ))
        .unwrap();
    assert_eq!(work_ids(&r.value["graph"]), ["w-explicit"]);
}

// ------------------------------------------------------- preprocessors

#[test]
fn operation_selects_the_payload_and_ignores_the_others() {
    let f = Fixture::new();
    f.add("w-1");
    // operation stop: the addWork and finish junk are dropped unread.
    let r = f
        .update(json!({"graphId": GRAPH, "operation": "stop",
            "addWork": [{"instruction": "junk without a target"}],
            "finish": {"resultIds": ["nope"], "reason": "junk"},
            "stop": [{"targetId": "w-1", "reason": "enough"}]}))
        .unwrap();
    let stored = f.graphs.list_schedule_updates(GRAPH).unwrap();
    assert!(stored[1].request.add_work.is_empty() && stored[1].request.finish.is_none());
    assert_eq!(
        r.value["graph"]["stoppedTargets"],
        json!([{"targetId": "w-1", "reason": "enough"}])
    );
    // operation finish with only an addWork payload: nothing is left.
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "operation": "finish", "addWork": items("a", 1)})),
        "at least one addWork, stop, or finish operation is required",
    );
    // operation add_work drops a finish that would otherwise conflict.
    f.update(
        json!({"graphId": GRAPH, "operation": "add_work", "addWork": items("a", 1),
        "finish": {"resultIds": ["r"], "reason": "junk"}, "unknownKey": {"anything": true}}),
    )
    .unwrap();
    // Without operation, addWork and stop combine.
    f.update(json!({"graphId": GRAPH, "addWork": items("b", 1), "stop": [{"targetId": "w-1", "reason": "again"}]}))
        .unwrap();
}

#[test]
fn target_kind_selects_the_identity_field_and_instruction_is_trimmed() {
    let f = Fixture::new();
    let r = f
        .update(
            json!({"graphId": GRAPH, "operation": "add_work", "addWork": [{
                "targetKind": "new_preset", "subagentId": "preset-port",
                "agentId": "legacy-ignored", "operatorId": "operator-ignored",
                "instruction": "  Clean the provider-fill payload \" ) }  ",
                "inputIds": ["r1"], "\" ) }": "filler"
            }]}),
        )
        .unwrap();
    let work = &r.value["graph"]["work"][0];
    assert_eq!(
        work["target"],
        json!({"kind": "preset", "id": "preset-port"})
    );
    assert_eq!(
        work["instruction"],
        json!("Clean the provider-fill payload \" ) }")
    );
    let seen = f.view(json!({"graphId": GRAPH})).unwrap();
    assert_eq!(&seen.value["work"][0], work);
    let r = f
        .update(with_item(json!({"targetKind": "existing_operator", "operatorId": "op-1", "subagentId": "junk", "instruction": "x"})))
        .unwrap();
    assert_eq!(
        r.value["graph"]["work"][1]["target"],
        json!({"kind": "operator", "id": "op-1"})
    );
}

#[test]
fn replacement_mode_none_drops_replaces() {
    let f = Fixture::new();
    f.add("w-1");
    // replaces names nothing that exists, but mode none drops it unread.
    let r = f
        .update(json!({"graphId": GRAPH, "addWork": [
            {"workId": "w-2", "subagentId": "p", "instruction": "x", "replaces": "w-1", "replacementMode": "none"},
            {"workId": "w-3", "subagentId": "p", "instruction": "y", "replaces": "no-such", "replacementMode": "none"},
        ]}))
        .unwrap();
    let work = r.value["graph"]["work"].as_array().unwrap();
    assert!(work.iter().all(|w| w.get("replaces").is_none()));
    assert!(work.iter().all(|w| w["status"] == "requested"));
    let stored = f.graphs.list_schedule_updates(GRAPH).unwrap();
    assert_eq!(stored[1].request.add_work[0].replaces, None);
}

#[test]
fn ids_are_sorted_before_storage() {
    let f = Fixture::new();
    f.add("w-b");
    f.add("w-a");
    f.update(with_item(json!({"subagentId": "p", "instruction": "x", "inputIds": ["z", "b", "\u{1F600}", "\u{E000}"]})))
        .unwrap();
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-b", "reason": "1"}, {"targetId": "w-a", "reason": "2"}]}))
        .unwrap();
    let stored = f.graphs.list_schedule_updates(GRAPH).unwrap();
    // UTF-16 order: the surrogate pair (D83D) sorts before U+E000.
    assert_eq!(
        stored[2].request.add_work[0].input_ids,
        ["b", "z", "\u{1F600}", "\u{E000}"]
    );
    let stops: Vec<&str> = stored[3]
        .request
        .stop
        .iter()
        .map(|s| s.target_id.as_str())
        .collect();
    assert_eq!(stops, ["w-a", "w-b"]);
}

// ---------------------------------------------------- live-projection checks

#[test]
fn replaces_must_name_existing_work_from_an_earlier_update() {
    let f = Fixture::new();
    assert_invalid(
        f.update(with_item(json!({"workId": "w-self", "subagentId": "p", "instruction": "x", "replaces": "w-self"}))),
        &format!("agent graph {GRAPH}: work w-self cannot replace itself"),
    );
    assert_invalid(
        f.update(with_item(
            json!({"subagentId": "p", "instruction": "x", "replaces": "no-such-work"}),
        )),
        &format!(
            "agent graph {GRAPH}: replaces target no-such-work is not an existing work in the live projection"
        ),
    );
    f.add("w-1");
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "addWork": [
            {"workId": "w-new", "subagentId": "p", "instruction": "x"},
            {"subagentId": "p", "instruction": "y", "replaces": "w-new"},
        ]})),
        &format!(
            "agent graph {GRAPH}: replaces target w-new is not an existing work in the live projection"
        ),
    );
    // Self-replacement is checked before anything else.
    assert_invalid(
        f.update(with_item(
            json!({"workId": "w-1", "subagentId": "p", "instruction": "x", "replaces": "w-1"}),
        )),
        &format!("agent graph {GRAPH}: work w-1 cannot replace itself"),
    );
    let r = f
        .update(with_item(
            json!({"workId": "w-2", "subagentId": "p", "instruction": "better", "replaces": "w-1"}),
        ))
        .unwrap();
    assert_eq!(
        r.text.lines().nth(4).unwrap(),
        "  [requested] w-2 \u{2192} preset:p (replaces w-1): better"
    );
}

#[test]
fn stop_targets_must_be_existing_work() {
    let f = Fixture::new();
    f.add("w-1");
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "nope", "reason": "r"}]})),
        &format!(
            "agent graph {GRAPH}: stop target nope is not an existing work in the live projection"
        ),
    );
    // Not the graph itself either.
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "stop": [{"targetId": GRAPH, "reason": "r"}]})),
        &format!(
            "agent graph {GRAPH}: stop target {GRAPH} is not an existing work in the live projection"
        ),
    );
    // A stopped target can be stopped again: the last reason wins.
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": "first"}]}))
        .unwrap();
    let r = f
        .update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-1", "reason": "second"}]}))
        .unwrap();
    assert_eq!(
        r.value["graph"]["stoppedTargets"],
        json!([{"targetId": "w-1", "reason": "second"}])
    );
}

#[test]
fn finish_requires_no_unclaimed_requested_work_and_committed_records() {
    let f = Fixture::new();
    f.add("w-1");
    f.add("w-2");
    f.add("w-3");
    f.record("rec-1", None, "r", None, 1);
    let finish = json!({"graphId": GRAPH, "finish": {"resultIds": ["rec-1"], "reason": "done"}});
    assert_invalid(
        f.update(finish.clone()),
        &format!(
            "agent graph {GRAPH}: finish requires no pending non-terminal work (pending: w-1, w-2, w-3)"
        ),
    );
    // Claimed work does not block; stopped work is not pending.
    f.claim("w-1");
    f.update(json!({"graphId": GRAPH, "stop": [{"targetId": "w-3", "reason": "no"}]}))
        .unwrap();
    assert_invalid(
        f.update(finish.clone()),
        &format!(
            "agent graph {GRAPH}: finish requires no pending non-terminal work (pending: w-2)"
        ),
    );
    // Completed work is not pending either.
    f.record(
        "rec-2",
        Some("w-2"),
        "done",
        Some(RecordOutcome::Completed),
        2,
    );
    assert_invalid(
        f.update(json!({"graphId": GRAPH, "finish": {"resultIds": ["rec-z", "rec-1", "rec-y"], "reason": "done"}})),
        &format!("agent graph {GRAPH}: finish result ids are not committed graph records: rec-y, rec-z"),
    );
    let r = f.update(finish).unwrap();
    assert_eq!(r.value["graph"]["closed"], json!(true));
    assert_eq!(
        r.text.lines().nth(2).unwrap(),
        format!("Agent graph {GRAPH} \u{2014} closed, revision 5, 5 update(s).")
    );
}

// --------------------------------------------------------- idempotency

#[test]
fn same_idempotency_key_in_a_later_turn_reuses_the_row() {
    let f = Fixture::new();
    let args = json!({"graphId": GRAPH, "addWork": [{"subagentId": "p", "instruction": "do once"}], "idempotencyKey": "retry-key-1"});
    let first = f.update(args.clone()).unwrap();
    let second = f.update(args).unwrap(); // next turn, next call id
    assert_eq!(first.value["update"]["created"], json!(true));
    assert_eq!(second.value["update"]["created"], json!(false));
    assert_eq!(
        second.value["update"]["revision"],
        first.value["update"]["revision"]
    );
    assert_eq!(second.value["graph"], first.value["graph"]);
    assert!(
        second
            .text
            .starts_with("Agent graph update reused at revision 1.")
    );
    assert_eq!(rows(&f), 1);
}

#[test]
fn replaying_the_same_call_reuses_the_row() {
    let f = Fixture::new();
    let call = CallIdentity {
        session_id: ROOT.to_owned(),
        last_turn: 4,
        tool_call_id: "call-x".to_owned(),
    };
    let args = json!({"graphId": GRAPH, "addWork": [{"workId": "w-1", "subagentId": "p", "instruction": "x"}]});
    let first = f
        .tools
        .call("update_agent_graph", args.clone(), &call)
        .unwrap();
    // The explicit work id exists now, yet the replay is not refused.
    let second = f
        .tools
        .call("update_agent_graph", args.clone(), &call)
        .unwrap();
    assert_eq!(first.value["update"]["created"], json!(true));
    assert_eq!(second.value["update"]["created"], json!(false));
    assert_eq!(rows(&f), 1);
    // Another call id is another update (and now the work id is taken).
    let later = CallIdentity {
        tool_call_id: "call-y".to_owned(),
        ..call
    };
    let e = f
        .tools
        .call("update_agent_graph", args, &later)
        .unwrap_err();
    assert_eq!(
        e.code.map(sandgraph_controller::ToolCode::as_str),
        Some("invalid_input")
    );
}

#[test]
fn different_keys_commit_separate_rows() {
    let f = Fixture::new();
    for key in ["key-1", "key-2"] {
        f.update(json!({"graphId": GRAPH, "addWork": [{"subagentId": "p", "instruction": "do twice"}], "idempotencyKey": key}))
            .unwrap();
    }
    assert_eq!(rows(&f), 2);
}

#[test]
fn same_key_with_other_content_is_a_plain_store_conflict() {
    let f = Fixture::new();
    f.update(json!({"graphId": GRAPH, "addWork": [{"subagentId": "p", "instruction": "one"}], "idempotencyKey": "k"}))
        .unwrap();
    let e = f
        .update(json!({"graphId": GRAPH, "addWork": [{"subagentId": "p", "instruction": "two"}], "idempotencyKey": "k"}))
        .unwrap_err();
    let update_id = graph_update_id(
        GRAPH,
        &UpdateSource {
            session_id: ROOT.to_owned(),
            run_id: "k".to_owned(),
            turn_id: "k".to_owned(),
            tool_call_id: "k".to_owned(),
            orchestration_mode: None,
        },
    );
    assert_eq!(e.code, None);
    assert_eq!(
        e.to_string(),
        format!("agent graph {GRAPH}: update {update_id} replayed with a different payload")
    );
    assert_eq!(rows(&f), 1);
}

#[test]
fn the_update_hook_runs_after_a_created_commit_only() {
    let f = Fixture::new();
    let seen = Arc::new(AtomicUsize::new(0));
    let graphs = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let tools = {
        let seen = seen.clone();
        let graphs = graphs.clone();
        AgentGraphTools::new(f.graphs.clone(), ROOT).on_update(move |g| {
            seen.fetch_add(1, Ordering::SeqCst);
            graphs.lock().unwrap().push(g.to_owned());
        })
    };
    let args = json!({"graphId": GRAPH, "addWork": [{"subagentId": "p", "instruction": "x"}], "idempotencyKey": "k"});
    for turn in 1..=2 {
        let call = CallIdentity {
            session_id: ROOT.to_owned(),
            last_turn: turn,
            tool_call_id: format!("c{turn}"),
        };
        tools
            .call("update_agent_graph", args.clone(), &call)
            .unwrap();
    }
    let call = CallIdentity {
        session_id: ROOT.to_owned(),
        last_turn: 3,
        tool_call_id: "c3".to_owned(),
    };
    let _ = err(tools.call("update_agent_graph", json!({"graphId": GRAPH}), &call));
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(*graphs.lock().unwrap(), [GRAPH]);
}

#[test]
fn snapshot_exposes_statuses_and_intent_ids() {
    let f = Fixture::new();
    f.add("w-1");
    f.add("w-2");
    f.claim("w-1");
    let p = f.tools.snapshot(GRAPH).unwrap();
    assert_eq!(p.revision(), 2);
    assert!(!p.closed());
    let w1 = p.work_item("w-1").unwrap();
    assert_eq!(w1.status(), WorkStatus::Requested);
    assert_eq!(
        w1.intent_id(),
        sandgraph_controller::ids::scheduled_work_intent_id(GRAPH, "w-1")
    );
    assert!(p.claim_of("w-1").is_some());
    assert!(p.claim_of("w-2").is_none());
    assert_eq!(p.live_claims().count(), 1);
}

/// Property tests of the untrusted inputs of the supervisor tools: the
/// arguments a model sends to `update_agent_graph` (and `view`, `yield`) go
/// through the tool call entry [`AgentGraphTools::call`], over a real store,
/// and the text rules of [`sandgraph_controller::rules`] see any string.
/// Nothing panics, errors never name the root session to another caller,
/// and a committed update never leaves a graph that cannot be viewed.
///
/// Cases: `SANDGRAPH_PROPTEST_CASES` (default 256). The RNG seed is fixed so
/// CI runs the same cases every time; `SANDGRAPH_PROPTEST_SEED` picks another.
mod proptests {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed, TestRunner};
    use serde_json::{Map, Value};

    use sandgraph_controller::CallIdentity;
    use sandgraph_controller::rules::{
        ELLIPSIS, RENDER_MAX_LINE_CHARS, is_identity, is_js_whitespace, is_text, js_trim, one_line,
        truncate_utf16, utf16_len, utf16_prefix,
    };

    use super::common::{Fixture, GRAPH, ROOT};

    fn cases() -> u32 {
        std::env::var("SANDGRAPH_PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(256)
    }

    fn seed() -> u64 {
        std::env::var("SANDGRAPH_PROPTEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5a4d_6772_6170_6803)
    }

    fn config() -> Config {
        Config {
            cases: cases(),
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed()),
            ..Config::default()
        }
    }

    fn any_text(max: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
    }

    /// Strings for ids and texts: known ids, edge cases of the identity and
    /// text rules (whitespace, controls, astral characters, lengths at the
    /// bounds), and any characters.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            12 => prop::sample::select(vec![
                "w-1", "w-2", "w-3", "w-4", "preset-a", "coder", "op-1", "r1", "graph_g1",
                "do the work", "tab\tand\nlines",
            ])
            .prop_map(str::to_owned),
            4 => prop::sample::select(vec![
                "", " ", "a ", "\u{feff}a", "a\u{1}b", "a\tb", "a\u{7f}", "\u{1F600}", "é\r\nx",
                "graph_work_0123456789abcdef0123456789abcdef",
            ])
            .prop_map(str::to_owned),
            1 => (prop::sample::select(vec!["a", "\u{1F600}", " "]), 250usize..260)
                .prop_map(|(c, n)| c.repeat(n)),
            1 => (3_995usize..4_005).prop_map(|n| "r".repeat(n)),
            1 => Just("i".repeat(60_001)),
            2 => any_text(12),
        ]
    }

    /// Any JSON, shallow: a wrong-typed field.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::json!(f)),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((any_text(4), inner), 0..4)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// A field value: mostly a string, sometimes anything.
    fn string_field() -> impl Strategy<Value = Value> {
        prop_oneof![20 => text().prop_map(Value::String), 1 => any_json()]
    }

    fn string_list() -> impl Strategy<Value = Value> {
        prop_oneof![
            6 => prop::collection::vec(string_field(), 0..5).prop_map(Value::Array),
            1 => (60usize..70).prop_map(|n| {
                Value::Array((0..n).map(|i| Value::String(format!("r{i}"))).collect())
            }),
            1 => any_json(),
        ]
    }

    /// An object of the given fields, each present with its probability
    /// (always at 1.0), plus maybe a key nobody reads.
    fn fields(
        entries: Vec<(&'static str, f64, BoxedStrategy<Value>)>,
    ) -> impl Strategy<Value = Value> {
        let entries: Vec<_> = entries
            .into_iter()
            .map(|(k, p, v)| {
                let v = if p < 1.0 {
                    prop::option::weighted(p, v).boxed()
                } else {
                    v.prop_map(Some).boxed()
                };
                v.prop_map(move |v| (k, v))
            })
            .collect();
        (
            entries,
            prop::option::weighted(0.03, (any_text(6), any_json())),
        )
            .prop_map(|(entries, extra)| {
                let mut m = Map::new();
                for (k, v) in entries {
                    if let Some(v) = v {
                        m.insert(k.to_owned(), v);
                    }
                }
                if let Some((k, v)) = extra {
                    m.insert(k, v);
                }
                Value::Object(m)
            })
    }

    fn one_of_or_any(values: &[&'static str]) -> BoxedStrategy<Value> {
        prop_oneof![
            6 => prop::sample::select(values.to_vec()).prop_map(|s| Value::String(s.to_owned())),
            1 => string_field(),
        ]
        .boxed()
    }

    fn add_work_item() -> impl Strategy<Value = Value> {
        let selected = prop_oneof![
            6 => prop::collection::vec(
                fields(vec![
                    ("sourceGraphId", 0.95, string_field().boxed()),
                    ("resultId", 0.95, string_field().boxed()),
                ]),
                0..4,
            )
            .prop_map(Value::Array),
            1 => any_json(),
        ];
        let target = prop_oneof![
            3 => fields(vec![("subagentId", 1.0, string_field().boxed())]),
            2 => fields(vec![("agentId", 1.0, string_field().boxed())]),
            1 => fields(vec![("operatorId", 1.0, string_field().boxed())]),
            1 => fields(vec![
                ("targetKind", 1.0, one_of_or_any(&["new_agent", "new_preset", "existing_operator"])),
                ("agentId", 0.5, string_field().boxed()),
                ("subagentId", 0.5, string_field().boxed()),
                ("operatorId", 0.5, string_field().boxed()),
            ]),
        ];
        let rest = fields(vec![
            (
                "targetKind",
                0.1,
                one_of_or_any(&["new_agent", "new_preset", "existing_operator"]),
            ),
            ("agentId", 0.05, string_field().boxed()),
            ("subagentId", 0.05, string_field().boxed()),
            ("operatorId", 0.05, string_field().boxed()),
            ("instruction", 0.95, string_field().boxed()),
            ("inputIds", 0.4, string_list().boxed()),
            ("selectedResultInputs", 0.2, selected.boxed()),
            ("replaces", 0.2, string_field().boxed()),
            ("replacementMode", 0.2, one_of_or_any(&["none", "replace"])),
            ("workId", 0.4, string_field().boxed()),
        ]);
        (target, rest).prop_map(|(mut target, rest)| {
            if let (Value::Object(t), Value::Object(r)) = (&mut target, rest) {
                t.extend(r);
            }
            target
        })
    }

    fn update_args() -> impl Strategy<Value = Value> {
        let add_work = prop_oneof![
            8 => prop::collection::vec(add_work_item(), 1..4).prop_map(Value::Array),
            1 => (30usize..35).prop_map(|n| {
                Value::Array(
                    (0..n)
                        .map(|i| serde_json::json!({"subagentId": format!("p-{i}"), "instruction": "x"}))
                        .collect(),
                )
            }),
            1 => any_json(),
        ];
        let stop = prop_oneof![
            6 => prop::collection::vec(
                fields(vec![("targetId", 0.95, string_field().boxed()), ("reason", 0.95, string_field().boxed())]),
                0..4,
            )
            .prop_map(Value::Array),
            1 => any_json(),
        ];
        let finish = prop_oneof![
            6 => fields(vec![("resultIds", 0.8, string_list().boxed()), ("reason", 0.95, string_field().boxed())]),
            1 => any_json(),
        ];
        fields(vec![
            ("graphId", 0.97, graph_id().boxed()),
            (
                "operation",
                0.15,
                one_of_or_any(&["add_work", "stop", "finish"]),
            ),
            ("addWork", 0.85, add_work.boxed()),
            ("stop", 0.25, stop.boxed()),
            ("finish", 0.1, finish.boxed()),
            ("idempotencyKey", 0.2, string_field().boxed()),
        ])
    }

    fn graph_id() -> impl Strategy<Value = Value> {
        prop_oneof![
            6 => prop::sample::select(vec![GRAPH, "graph_g2", "graph_g3"])
                .prop_map(|s| Value::String(s.to_owned())),
            1 => string_field(),
        ]
    }

    /// One tool call: mostly updates, from the root session mostly.
    fn tool_call() -> impl Strategy<Value = (String, Value, CallIdentity)> {
        let named = |name: &str| Just(name.to_owned());
        let view = fields(vec![
            ("graphId", 0.97, graph_id().boxed()),
            ("cursor", 0.3, string_field().boxed()),
        ]);
        let yield_ = fields(vec![("graphId", 0.97, graph_id().boxed())]);
        let call = prop_oneof![
            12 => (named("update_agent_graph"), update_args()),
            2 => (named("view_agent_graph"), view),
            1 => (named("yield_agent_graph"), yield_),
            1 => (
                prop_oneof![
                    named("update_agent_graph"),
                    named("view_agent_graph"),
                    named("yield_agent_graph"),
                    any_text(8),
                ],
                any_json(),
            ),
        ];
        let session = prop_oneof![
            16 => Just(ROOT.to_owned()),
            1 => Just(String::new()),
            1 => Just("session-other".to_owned()),
            1 => any_text(8),
        ];
        (call, session, 0u64..4, any_text(6)).prop_map(
            |((tool, args), session_id, last_turn, tool_call_id)| {
                let call = CallIdentity {
                    session_id,
                    last_turn,
                    tool_call_id,
                };
                (tool, args, call)
            },
        )
    }

    /// Tool calls with any arguments, over one store that grows across the
    /// cases: no panic, no error that names the root session to another
    /// caller, and after every committed update each graph still projects
    /// and views.
    #[test]
    fn tool_calls_with_any_arguments_never_panic_nor_break_the_graph() {
        let f = Fixture::new();
        let mut runner = TestRunner::new(config());
        runner
            .run(&tool_call(), |(tool, args, call)| {
                let r = f.tools.call(&tool, args, &call);
                match &r {
                    Ok(result) => {
                        prop_assert_eq!(&call.session_id, ROOT);
                        prop_assert!(!result.text.is_empty());
                    }
                    Err(e) => {
                        prop_assert!(!e.message.is_empty());
                        if call.session_id != ROOT {
                            prop_assert!(
                                !e.to_string().contains(ROOT),
                                "{} leaks the root session to {:?}",
                                e,
                                call.session_id
                            );
                        }
                    }
                }
                if r.is_ok() && tool == "update_agent_graph" {
                    for graph in [GRAPH, "graph_g2", "graph_g3"] {
                        let p = f.tools.snapshot(graph);
                        prop_assert!(p.is_ok(), "{}: {:?}", graph, p.err());
                        let view =
                            f.call("view_agent_graph", serde_json::json!({ "graphId": graph }));
                        prop_assert!(view.is_ok(), "{}: {:?}", graph, view.err());
                    }
                }
                Ok(())
            })
            .unwrap();
    }

    proptest! {
        #![proptest_config(config())]

        /// The UTF-16 helpers: a prefix is a prefix within its bound and
        /// never splits a character; a cut string ends with the ellipsis.
        #[test]
        fn utf16_cuts_stay_within_their_bound(s in any_text(24), max in 0usize..30) {
            prop_assert_eq!(utf16_len(&s), s.encode_utf16().count());
            let prefix = utf16_prefix(&s, max);
            prop_assert!(s.starts_with(prefix));
            prop_assert!(utf16_len(prefix) <= max);
            if utf16_len(&s) > max {
                // One more character would not fit.
                let next = s[prefix.len()..].chars().next().unwrap();
                prop_assert!(utf16_len(prefix) + next.len_utf16() > max);
            }
            let (cut, was_cut) = truncate_utf16(&s, max);
            prop_assert_eq!(was_cut, utf16_len(&s) > max);
            if was_cut {
                prop_assert_eq!(cut, format!("{prefix}{ELLIPSIS}"));
            } else {
                prop_assert_eq!(cut, s.clone());
            }
        }

        /// Trimming, the one-line form and the identity and text rules on
        /// any string.
        #[test]
        fn text_rules_hold_for_any_string(s in prop_oneof![any_text(24), text()], max in 0usize..300) {
            let trimmed = js_trim(&s);
            prop_assert!(s.contains(trimmed));
            prop_assert!(!trimmed.starts_with(is_js_whitespace));
            prop_assert!(!trimmed.ends_with(is_js_whitespace));
            let line = one_line(&s);
            prop_assert!(utf16_len(&line) <= RENDER_MAX_LINE_CHARS);
            prop_assert!(!line.starts_with(is_js_whitespace));
            prop_assert!(!line.contains("  "));
            prop_assert!(line.chars().all(|c| c == ' ' || !is_js_whitespace(c)));
            if is_identity(&s) {
                prop_assert!(is_text(&s, 256));
                prop_assert_eq!(js_trim(&s), s.as_str());
            }
            if is_text(&s, max) {
                prop_assert!((1..=max).contains(&utf16_len(&s)));
                let control = |c: char| c == '\u{7f}' || c < ' ' && !"\t\n\r".contains(c);
                prop_assert!(!s.chars().any(control), "{:?}", s);
            }
        }
    }
}
