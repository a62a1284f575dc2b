//! Shared fixture: a real redb store in a tempdir and a call helper.

#![allow(dead_code)]

use std::cell::Cell;

use serde_json::{Value, json};

use sandgraph_controller::ids::{graph_claim_id, scheduled_work_intent_id};
use sandgraph_controller::{
    AGENT_GRAPH_SCHEMA_VERSION, AgentGraphStore, GraphRecord, IntentClaimRequest, RecordFacet,
    RecordOutcome, RecordSource,
};
use sandgraph_controller::{AgentGraphTools, CallIdentity, ToolFailure, ToolResult};
use sandgraph_store::Store;

pub const GRAPH: &str = "graph_g1";
pub const ROOT: &str = "session-root";

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub store: Store,
    pub graphs: AgentGraphStore,
    pub tools: AgentGraphTools,
    seq: Cell<u64>,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("sandgraph.redb")).unwrap();
        let graphs = AgentGraphStore::open(&store).with_clock(|| 1_700_000_000_000);
        let tools = AgentGraphTools::new(graphs.clone(), ROOT);
        Fixture {
            _dir: dir,
            store,
            graphs,
            tools,
            seq: Cell::new(0),
        }
    }

    /// A fresh call of the root session: a new turn and a new call id.
    pub fn next_call(&self) -> CallIdentity {
        let n = self.seq.get() + 1;
        self.seq.set(n);
        CallIdentity {
            session_id: ROOT.to_owned(),
            last_turn: n,
            tool_call_id: format!("call-{n}"),
        }
    }

    pub fn call(&self, tool: &str, args: Value) -> Result<ToolResult, ToolFailure> {
        self.tools.call(tool, args, &self.next_call())
    }

    pub fn view(&self, args: Value) -> Result<ToolResult, ToolFailure> {
        self.call("view_agent_graph", args)
    }

    pub fn update(&self, args: Value) -> Result<ToolResult, ToolFailure> {
        self.call("update_agent_graph", args)
    }

    pub fn yield_(&self, args: Value) -> Result<ToolResult, ToolFailure> {
        self.call("yield_agent_graph", args)
    }

    /// Adds one work item with an explicit id; returns it.
    pub fn add(&self, work_id: &str) -> String {
        self.update(json!({
            "graphId": GRAPH,
            "addWork": [{"workId": work_id, "subagentId": "preset-a", "instruction": format!("do {work_id}")}],
        }))
        .unwrap();
        work_id.to_owned()
    }

    /// Claims the intent of a work item.
    pub fn claim(&self, work_id: &str) {
        let intent_id = scheduled_work_intent_id(GRAPH, work_id);
        self.graphs
            .claim_intent(IntentClaimRequest {
                schema_version: AGENT_GRAPH_SCHEMA_VERSION,
                claim_id: graph_claim_id(GRAPH, &intent_id),
                graph_id: GRAPH.to_owned(),
                intent_id,
                intent_fingerprint: "sha256:intent".to_owned(),
                readiness_context_fingerprint: "sha256:ready".to_owned(),
                target_operator_id: format!("op-{work_id}"),
                target_session_id: format!("session-{work_id}"),
                target_turn_id: "turn-1".to_owned(),
                target_run_id: "run-1".to_owned(),
            })
            .unwrap();
    }

    /// Appends a record; `terminal` gives the terminal facet and outcome.
    pub fn record(
        &self,
        record_id: &str,
        work_id: Option<&str>,
        summary: &str,
        terminal: Option<RecordOutcome>,
        emitted_at: u64,
    ) {
        let mut facets = vec![RecordFacet::Message];
        if terminal.is_some() {
            facets.push(RecordFacet::Terminal);
        }
        self.graphs
            .append_record(GraphRecord {
                record_id: record_id.to_owned(),
                graph_id: GRAPH.to_owned(),
                operator_id: "op-1".to_owned(),
                work_id: work_id.map(str::to_owned),
                source: RecordSource {
                    session_id: "session-op".to_owned(),
                    run_id: "run-1".to_owned(),
                    turn_id: None,
                    runtime_event_id: Some(format!("evt-{record_id}")),
                    seq: emitted_at,
                },
                summary: summary.to_owned(),
                facets,
                outcome: terminal,
                evidence_refs: Vec::new(),
                emitted_at,
            })
            .unwrap();
    }
}

/// The failure's code, as the model reads it, and message.
pub fn err(r: Result<ToolResult, ToolFailure>) -> (Option<String>, String) {
    let e = r.expect_err("the call should fail");
    (e.code.map(|c| c.as_str().to_owned()), e.message.clone())
}

/// Asserts an `invalid_input` failure with exactly `message`.
pub fn assert_invalid(r: Result<ToolResult, ToolFailure>, message: &str) {
    assert_eq!(
        err(r),
        (Some("invalid_input".to_owned()), message.to_owned())
    );
}

/// `n` preset work items named `w-<prefix>-<i>`.
pub fn items(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"subagentId": format!("preset-{prefix}-{i}"), "instruction": format!("work {prefix}/{i}"), "inputIds": []}))
        .collect()
}

pub fn work_ids(value: &Value) -> Vec<String> {
    value["work"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workId"].as_str().unwrap().to_owned())
        .collect()
}
