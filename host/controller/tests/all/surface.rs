//! The public surface: tool definitions, the prompt section, availability,
//! argument validation, the caller checks and how failures display.

use crate::common::{Fixture, GRAPH, ROOT, err};
use serde_json::json;

use sandgraph_controller::{
    AgentGraphTools, CallIdentity, GRAPH_MODE_PROMPT, ToolFailure, UPDATE_TOOL, VIEW_TOOL,
    YIELD_TOOL, prompt_section, tool_defs,
};

#[test]
fn tool_defs_are_view_update_yield_with_compiled_schemas() {
    let defs = tool_defs();
    let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, [VIEW_TOOL, UPDATE_TOOL, YIELD_TOOL]);
    assert_eq!(
        names,
        [
            "view_agent_graph",
            "update_agent_graph",
            "yield_agent_graph"
        ]
    );
    assert_eq!(
        defs[0].parameters,
        json!({
            "type": "object",
            "properties": {
                "graphId": {"type": "string", "description": "The agent graph id to inspect."},
                "cursor": {"type": "string", "description": "Opaque page cursor from a previous view (omit for the latest view)."}
            },
            "required": ["graphId"]
        })
    );
    let update = &defs[1].parameters;
    assert_eq!(update["required"], json!(["graphId"]));
    assert!(
        update.get("additionalProperties").is_none(),
        "the root is open"
    );
    assert_eq!(
        update["properties"]["addWork"]["items"]["additionalProperties"],
        json!(true)
    );
    assert_eq!(
        update["properties"]["addWork"]["items"]["required"],
        json!(["instruction"])
    );
    assert_eq!(
        update["properties"]["finish"]["required"],
        json!(["reason"]),
        "resultIds is not marked required"
    );
    assert_eq!(
        update["properties"]["operation"]["enum"],
        json!(["add_work", "stop", "finish"])
    );
    assert_eq!(defs[2].parameters["required"], json!(["graphId"]));
    assert!(defs[2].parameters["properties"]["reason"].is_object());
    assert!(defs[1].description.contains("64 input ids per work item"));
    assert!(
        defs[2]
            .description
            .starts_with("End this supervisor turn successfully")
    );
}

#[test]
fn prompt_section_has_three_paragraphs_at_order_127() {
    let section = prompt_section(true);
    assert_eq!(section.name, "orchestration:graph");
    assert_eq!(section.order, 127);
    assert_eq!(section.text, GRAPH_MODE_PROMPT);
    let paragraphs: Vec<&str> = section.text.split('\n').collect();
    assert_eq!(paragraphs.len(), 3);
    assert_eq!(
        paragraphs[0],
        "Agent Graph mode (port of Maka): you are the root supervisor of one durable agent graph. Inspect with `view_agent_graph` (bounded: work statuses, recent records, omitted counts \u{2014} page with the returned nextCursor), schedule with `update_agent_graph` (addWork with exactly one of subagentId/agentId/operatorId, stop, or finish; pass idempotencyKey for retry-safe updates), and hand back control with `yield_agent_graph`."
    );
    assert_eq!(
        paragraphs[1],
        "Yield, don't poll: after each scheduling wave with no immediate decision, end the turn with `yield_agent_graph` \u{2014} the host wakes you at the next durable graph checkpoint. Do not sleep, loop on view, or emit waiting messages; `yield_agent_graph` returns `nothing_to_yield` when nothing is pending."
    );
    assert_eq!(
        paragraphs[2],
        "Report outcomes, not mechanics: one block per wave \u{2014} what work was added/stopped/finished, what remains pending, what is blocked, and what the graph needs. Keep work instructions concrete and bounded (60000 chars, 64 inputs); never invent work ids \u{2014} read them from a view, and `replaces` only existing ones."
    );
    let disabled = prompt_section(false);
    assert_eq!(
        (disabled.name.as_str(), disabled.order),
        ("orchestration:graph", 127)
    );
    assert_eq!(disabled.text, "");
}

#[test]
fn unavailable_fails_every_call_before_argument_validation() {
    let tools = AgentGraphTools::unavailable();
    assert!(!tools.is_available());
    let call = CallIdentity {
        session_id: ROOT.to_owned(),
        last_turn: 0,
        tool_call_id: "c".to_owned(),
    };
    for tool in [VIEW_TOOL, UPDATE_TOOL, YIELD_TOOL, "no_such_tool"] {
        // Arguments that would fail validation: the unavailable check wins.
        let e = tools.call(tool, json!({"graphId": 7}), &call).unwrap_err();
        assert_eq!(
            e.code.map(sandgraph_controller::ToolCode::as_str),
            Some("agent-graph-unavailable")
        );
        assert_eq!(
            e.to_string(),
            "[agent-graph-unavailable] the agent graph controller is not configured \u{2014} start sandgraph with a controller (sandgraph supervise, or serve --controller)"
        );
    }
    let e = tools.snapshot(GRAPH).unwrap_err();
    assert_eq!(
        e.code.map(sandgraph_controller::ToolCode::as_str),
        Some("agent-graph-unavailable")
    );
}

#[test]
fn unknown_tool_is_invalid_input() {
    let f = Fixture::new();
    let e = f.call("finish_agent_graph", json!({})).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[invalid_input] unknown agent graph tool finish_agent_graph"
    );
}

#[test]
fn argument_errors_pass_through_without_a_prefix() {
    let f = Fixture::new();
    let e = f.view(json!({})).unwrap_err();
    assert_eq!(e.code, None);
    assert_eq!(
        e.to_string(),
        "invalid arguments: missing required property \"arguments.graphId\""
    );
    let e = f
        .update(json!({"graphId": GRAPH, "operation": "merge", "stop": [{"targetId": "w"}]}))
        .unwrap_err();
    assert_eq!(e.code, None);
    assert_eq!(
        e.message,
        "invalid arguments: \"arguments.operation\" must be one of [\"add_work\",\"stop\",\"finish\"]; missing required property \"arguments.stop[0].reason\""
    );
    let e = f
        .update(json!({"graphId": GRAPH, "finish": {"reason": "r", "extra": 1}}))
        .unwrap_err();
    assert_eq!(
        e.message,
        "invalid arguments: \"arguments.finish.extra\" is not a declared property (additionalProperties: false)"
    );
    let e = f
        .yield_(json!({"graphId": GRAPH, "reason": 3}))
        .unwrap_err();
    assert_eq!(
        e.message,
        "invalid arguments: \"arguments.reason\" must be a string"
    );
}

#[test]
fn argument_validation_runs_before_the_root_guard() {
    let f = Fixture::new();
    let call = CallIdentity {
        session_id: "session-attacker".to_owned(),
        last_turn: 1,
        tool_call_id: "c".to_owned(),
    };
    let e = f.tools.call(VIEW_TOOL, json!({}), &call).unwrap_err();
    assert_eq!(e.code, None);
}

#[test]
fn a_caller_without_a_session_is_a_plain_configuration_error() {
    let f = Fixture::new();
    let call = CallIdentity {
        session_id: String::new(),
        last_turn: 1,
        tool_call_id: "c".to_owned(),
    };
    let e = f
        .tools
        .call(VIEW_TOOL, json!({"graphId": GRAPH}), &call)
        .unwrap_err();
    assert_eq!(
        e,
        ToolFailure::plain("agent graph tools require an agent-bound caller")
    );
    assert_eq!(
        e.to_string(),
        "agent graph tools require an agent-bound caller"
    );
}

#[test]
fn root_guard_runs_first_for_every_tool_and_writes_nothing() {
    let f = Fixture::new();
    let call = CallIdentity {
        session_id: "session-attacker".to_owned(),
        last_turn: 1,
        tool_call_id: "c".to_owned(),
    };
    let update = json!({"graphId": GRAPH, "addWork": [{"subagentId": "a", "instruction": "x"}]});
    for (tool, args, graph) in [
        (
            VIEW_TOOL,
            json!({"graphId": GRAPH, "cursor": "bogus"}),
            GRAPH,
        ),
        (UPDATE_TOOL, update, GRAPH),
        // Would be invalid_input (the graph id rule) if the guard were later.
        (
            UPDATE_TOOL,
            json!({"graphId": " padded", "stop": []}),
            " padded",
        ),
        (YIELD_TOOL, json!({"graphId": GRAPH}), GRAPH),
    ] {
        let e = f.tools.call(tool, args, &call).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "[not_root_session] agent graph {graph}: only its root session may call this tool (caller session-attacker)"
            )
        );
        assert!(!e.to_string().contains(ROOT), "the root's id leaked");
    }
    assert!(f.graphs.list_schedule_updates(GRAPH).unwrap().is_empty());
    assert!(f.graphs.list_supervisor_wakes(GRAPH).unwrap().is_empty());
}

#[test]
fn failures_display_with_and_without_a_code() {
    assert_eq!(
        ToolFailure::coded(
            sandgraph_controller::ToolCode::GraphClosed,
            "agent graph g is already finished"
        )
        .to_string(),
        "[graph_closed] agent graph g is already finished"
    );
    assert_eq!(ToolFailure::plain("boom").to_string(), "boom");
}

#[test]
fn tools_clone_and_share_the_store() {
    let f = Fixture::new();
    let other = f.tools.clone();
    f.add("w-1");
    let p = other.snapshot(GRAPH).unwrap();
    assert_eq!(p.work().len(), 1);
    assert_eq!(other.root_session_id(), Some(ROOT));
    let _ = err(f.view(json!({"graphId": GRAPH, "cursor": "x"})));
}
