//! The agent-graph supervisor tools over MCP, driven by rmcp's client: in
//! process (one local session) and over Streamable HTTP (one root session
//! per MCP session).

use std::sync::{Arc, Mutex};

use crate::common::*;
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use sandgraph_controller::{OpenAgentGraphs, tool_defs};
use sandgraph_mcp::{ControllerOptions, MCP_PATH, McpServer, ServerOptions, bind_http};
use sandgraph_registry::{OperatorConfig, Registry};
use sandgraph_server::{HttpOptions, HttpServer};
use sandgraph_store::Store;
use serde_json::{Value, json};

fn registry() -> Registry {
    Registry::empty(
        sandgraph_tests::runtime().clone(),
        OperatorConfig::default(),
        None,
    )
}

struct Db {
    _dir: tempfile::TempDir,
    store: Store,
}

fn db() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    Db { _dir: dir, store }
}

fn with(controller: ControllerOptions) -> ServerOptions {
    ServerOptions {
        controller: Some(controller),
        ..ServerOptions::default()
    }
}

fn add(graph: &str, key: &str) -> Value {
    json!({
        "graphId": graph,
        "operation": "add_work",
        "addWork": [{"workId": "w1", "subagentId": "preset-a", "instruction": "do it"}],
        "idempotencyKey": key,
    })
}

#[tokio::test]
async fn without_a_controller_the_tools_are_not_offered() {
    let (server, client) = connect(registry(), ServerOptions::default()).await;
    assert!(!server.has_controller());
    assert_eq!(server.local_session_id(), None);
    assert!(client.list_all_tools().await.unwrap().is_empty());
    let r = call(&client, "view_agent_graph", json!({"graphId": "g"})).await;
    assert_tool_error(
        &r,
        "[unknown_tool] no tool named \"view_agent_graph\"; available: none",
    );
}

#[tokio::test]
async fn the_tools_are_listed_with_their_schemas_and_run_against_the_store() {
    let db = db();
    let updates = Arc::new(Mutex::new(Vec::new()));
    let sink = updates.clone();
    let controller = ControllerOptions::new(db.store.agent_graphs())
        .on_update(move |g| sink.lock().unwrap().push(g.to_owned()));
    let (server, client) = connect(registry(), with(controller)).await;
    let local = server.local_session_id().unwrap().to_owned();
    assert!(local.starts_with("stdio-"), "{local}");

    let tools = client.list_all_tools().await.unwrap();
    let defs = tool_defs();
    assert_eq!(tools.len(), defs.len());
    for (t, d) in tools.iter().zip(&defs) {
        assert_eq!(t.name, d.name);
        assert_eq!(t.description.as_deref(), Some(d.description.as_str()));
        assert_eq!(Value::Object((*t.input_schema).clone()), d.parameters);
    }

    let r = call(&client, "update_agent_graph", add("g", "k1")).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert!(
        text(&r).starts_with("Agent graph update committed at revision 1.\n\n"),
        "{}",
        text(&r)
    );
    let value = r.structured_content.clone().unwrap();
    assert_eq!(value["update"]["revision"], 1);
    assert_eq!(value["update"]["created"], true);
    assert_eq!(*updates.lock().unwrap(), ["g"]);

    // The same key again: the stored row, and no hook.
    let r = call(&client, "update_agent_graph", add("g", "k1")).await;
    assert!(
        text(&r).starts_with("Agent graph update reused at revision 1."),
        "{}",
        text(&r)
    );
    assert_eq!(r.structured_content.unwrap()["update"]["created"], false);
    assert_eq!(updates.lock().unwrap().len(), 1);

    let r = call(&client, "view_agent_graph", json!({"graphId": "g"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let v = r.structured_content.clone().unwrap();
    assert_eq!(v["work"][0]["workId"], "w1");
    assert_eq!(v["work"][0]["status"], "requested");
    assert!(text(&r).contains("[requested] w1"), "{}", text(&r));

    let r = call(&client, "yield_agent_graph", json!({"graphId": "g"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert!(
        text(&r).starts_with("Yielded agent graph g (wake "),
        "{}",
        text(&r)
    );
    assert_eq!(r.structured_content.unwrap()["pendingWorkCount"], 1);

    let r = call(&client, "update_agent_graph", json!({"graphId": 3})).await;
    assert_tool_error(&r, "invalid arguments: ");

    // The local session is the graph's root, durably.
    let rows = db.store.agent_graphs().list_schedule_updates("g").unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].request.source.session_id, local);
    assert_eq!(server.stats().calls, 5);
    assert_eq!(server.stats().in_flight, 0);
}

#[tokio::test]
async fn an_unavailable_controller_lists_the_tools_and_refuses_every_call() {
    let (_server, client) = connect(registry(), with(ControllerOptions::unavailable())).await;
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        names,
        [
            "view_agent_graph",
            "update_agent_graph",
            "yield_agent_graph"
        ]
    );
    let r = call(&client, "view_agent_graph", json!({"graphId": "g"})).await;
    assert_tool_error(&r, "[agent-graph-unavailable] ");
}

async fn http_client(http: &HttpServer) -> Session {
    Client::default()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(http.url(MCP_PATH)),
        ))
        .await
        .unwrap()
}

#[tokio::test]
async fn over_http_each_session_roots_its_own_graphs() {
    let db = db();
    let server = McpServer::new(
        registry(),
        with(ControllerOptions::new(db.store.agent_graphs())),
    );
    let http = bind_http(
        server.clone(),
        HttpOptions::new("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let a = http_client(&http).await;
    let b = http_client(&http).await;
    let r = call(&a, "update_agent_graph", add("ga", "k")).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let root = db.store.agent_graphs().list_schedule_updates("ga").unwrap()[0]
        .request
        .source
        .session_id
        .clone();
    assert!(!root.is_empty() && !root.starts_with("stdio-"), "{root}");

    for (tool, args) in [
        ("update_agent_graph", add("ga", "k")),
        ("view_agent_graph", json!({"graphId": "ga"})),
        ("yield_agent_graph", json!({"graphId": "ga"})),
    ] {
        let r = call(&b, tool, args).await;
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let t = text(&r);
        assert!(!t.contains(root.as_str()), "the root's id leaked: {t}");
        let prefix =
            "[not_root_session] agent graph ga: only its root session may call this tool (caller "
                .to_owned();
        let caller = t
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(!caller.is_empty() && caller != root, "{t}");
    }
    // b roots its own graph, which a cannot touch.
    let r = call(&b, "update_agent_graph", add("gb", "k")).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let r = call(&a, "view_agent_graph", json!({"graphId": "gb"})).await;
    assert_tool_error(
        &r,
        "[not_root_session] agent graph gb: only its root session may call this tool (caller ",
    );
    assert_eq!(
        db.store
            .agent_graphs()
            .list_schedule_updates("ga")
            .unwrap()
            .len(),
        1
    );
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
    http.shutdown();
    http.wait().await.unwrap();
}

#[tokio::test]
async fn two_principals_cannot_borrow_each_others_graphs_even_with_the_session_id() {
    let db = db();
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::new(
        registry(),
        with(ControllerOptions::new(db.store.agent_graphs())),
    );
    let http = bind_http(
        server.clone(),
        HttpOptions {
            tokens: Some(tokens_file(dir.path(), &["alice", "bob"])),
            ..HttpOptions::new("127.0.0.1:0".parse().unwrap())
        },
    )
    .await
    .unwrap();
    let a = Raw::open(http.url(MCP_PATH), Some("alice-token"))
        .await
        .unwrap();
    let (status, answer) = a.call(1, "update_agent_graph", add("ga", "k")).await;
    assert_eq!(status, 200);
    assert!(!Raw::tool_text(&answer).0, "{answer}");
    // The graph belongs to alice, not to the session she used.
    let row = &db.store.agent_graphs().list_schedule_updates("ga").unwrap()[0];
    assert_eq!(row.request.source.session_id, "principal:alice");
    let a_session = a.session.clone().unwrap();
    let leaks = |text: &str| text.contains("alice") || text.contains(a_session.as_str());

    let b = Raw::open(http.url(MCP_PATH), Some("bob-token"))
        .await
        .unwrap();
    for (id, (tool, args)) in [
        ("view_agent_graph", json!({"graphId": "ga"})),
        ("update_agent_graph", add("ga", "k2")),
        ("yield_agent_graph", json!({"graphId": "ga"})),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, answer) = b.call(id as u64 + 1, tool, args).await;
        assert_eq!(status, 200);
        let (is_error, t) = Raw::tool_text(&answer);
        assert!(is_error, "{answer}");
        assert_eq!(
            t,
            "[not_root_session] agent graph ga: only its root session may call this tool \
             (caller principal:bob)"
        );
        assert!(!leaks(&answer), "{answer}");
    }
    // Bob replays alice's session id: the session does not exist for him.
    let replay = Raw {
        session: Some(a_session.clone()),
        ..b.clone()
    };
    for (tool, args) in [
        ("view_agent_graph", json!({"graphId": "ga"})),
        ("update_agent_graph", add("ga", "k3")),
        ("yield_agent_graph", json!({"graphId": "ga"})),
    ] {
        let (status, body) = replay.call(9, tool, args).await;
        assert_eq!(status, 404, "{body}");
        assert!(!leaks(&body), "{body}");
    }
    // Without a token the session is not reachable either.
    let anonymous = Raw {
        token: None,
        ..replay.clone()
    };
    let (status, _) = anonymous
        .call(10, "view_agent_graph", json!({"graphId": "ga"}))
        .await;
    assert_eq!(status, 401);
    // Nothing bob did reached the store; alice, in a new session, still
    // owns her graph.
    assert_eq!(
        db.store
            .agent_graphs()
            .list_schedule_updates("ga")
            .unwrap()
            .len(),
        1
    );
    let a2 = Raw::open(http.url(MCP_PATH), Some("alice-token"))
        .await
        .unwrap();
    let (_, answer) = a2
        .call(1, "view_agent_graph", json!({"graphId": "ga"}))
        .await;
    assert!(!Raw::tool_text(&answer).0, "{answer}");
    // And alice's first session still works for her.
    let (_, answer) = a
        .call(2, "yield_agent_graph", json!({"graphId": "ga"}))
        .await;
    assert!(!Raw::tool_text(&answer).0, "{answer}");
    http.shutdown();
    http.wait().await.unwrap();
}

#[tokio::test]
async fn agent_graph_calls_count_under_the_run_limit() {
    let db = db();
    let server = McpServer::new(
        registry(),
        ServerOptions {
            max_concurrent_runs: 1,
            ..with(ControllerOptions::new(db.store.agent_graphs()))
        },
    );
    let slots = server.run_slots();
    let http = bind_http(server, HttpOptions::new("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let a = Raw::open(http.url(MCP_PATH), None).await.unwrap();
    // Work started elsewhere (a wave, say) holds the only slot.
    let held = slots.clone().try_acquire_owned().unwrap();
    let (_, answer) = a.call(1, "update_agent_graph", add("g", "k")).await;
    let (is_error, t) = Raw::tool_text(&answer);
    assert!(is_error);
    assert_eq!(
        t,
        "[busy] 1 runs are already in flight (the server's limit); retry later"
    );
    drop(held);
    let (_, answer) = a.call(2, "update_agent_graph", add("g", "k")).await;
    assert!(!Raw::tool_text(&answer).0, "{answer}");
    http.shutdown();
    http.wait().await.unwrap();
}

#[tokio::test]
async fn with_a_controller_the_orchestration_prompt_is_offered() {
    use rmcp::model::{ContentBlock, ErrorCode, GetPromptRequestParams, Role};
    use rmcp::service::ServiceError;
    let db = db();
    let (_server, client) = connect(
        registry(),
        with(ControllerOptions::new(db.store.agent_graphs())),
    )
    .await;
    let caps = &client.peer_info().unwrap().capabilities;
    assert!(caps.prompts.is_some(), "{caps:?}");
    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].name, "orchestration:graph");
    assert!(
        prompts[0]
            .description
            .as_deref()
            .is_some_and(|d| d.contains("yield, don't poll")),
        "{:?}",
        prompts[0]
    );
    let got = client
        .get_prompt(GetPromptRequestParams::new("orchestration:graph"))
        .await
        .unwrap();
    assert_eq!(got.messages.len(), 1);
    assert_eq!(got.messages[0].role, Role::User);
    let ContentBlock::Text(t) = &got.messages[0].content else {
        panic!("a text message: {got:?}");
    };
    assert_eq!(t.text, sandgraph_controller::GRAPH_MODE_PROMPT);
    assert!(t.text.contains("Yield, don't poll"));

    let e = client
        .get_prompt(GetPromptRequestParams::new("orchestration:swarm"))
        .await
        .unwrap_err();
    let ServiceError::McpError(e) = e else {
        panic!("an MCP error: {e:?}");
    };
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
    assert_eq!(
        e.message,
        "no prompt named \"orchestration:swarm\"; available: orchestration:graph"
    );
}

#[tokio::test]
async fn without_a_controller_there_are_no_prompts() {
    let (_server, client) = connect(registry(), ServerOptions::default()).await;
    assert!(client.peer_info().unwrap().capabilities.prompts.is_none());
    assert!(client.list_all_prompts().await.is_err());
}

/// A terminal record of `work` of graph `g`, written as a wave would.
fn finish_work(db: &Db, g: &str, work: &str, summary: &str) {
    use sandgraph_controller::{GraphRecord, RecordFacet, RecordOutcome, RecordSource};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let record = GraphRecord {
        record_id: format!("graph_record_{work}"),
        graph_id: g.to_owned(),
        operator_id: format!("op_{work}"),
        work_id: Some(work.to_owned()),
        source: RecordSource {
            session_id: format!("op_{work}"),
            run_id: "run-1".to_owned(),
            turn_id: None,
            runtime_event_id: None,
            seq: 0,
        },
        summary: summary.to_owned(),
        facets: vec![RecordFacet::Terminal],
        outcome: Some(RecordOutcome::Completed),
        evidence_refs: Vec::new(),
        emitted_at: now + 1,
    };
    assert!(db.store.agent_graphs().append_record(record).unwrap());
}

fn wake_status(db: &Db, g: &str, wake: &str) -> sandgraph_controller::WakeStatus {
    db.store
        .agent_graphs()
        .read_supervisor_wake(g, wake)
        .unwrap()
        .unwrap()
        .status
}

#[tokio::test]
async fn a_due_wake_is_announced_to_the_root_and_delivered_on_its_next_view_or_yield() {
    use rmcp::model::ReadResourceRequestParams;
    use sandgraph_controller::WakeStatus;
    let db = db();
    let (server, client) = connect(
        registry(),
        with(ControllerOptions::new(db.store.agent_graphs())),
    )
    .await;
    let updated = client.service().updated.clone();
    let work = json!({
        "graphId": "g",
        "operation": "add_work",
        "addWork": [
            {"workId": "w1", "subagentId": "p", "instruction": "one"},
            {"workId": "w2", "subagentId": "p", "instruction": "two"},
            {"workId": "w3", "subagentId": "p", "instruction": "three"},
        ],
    });
    let r = call(&client, "update_agent_graph", work).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let yielded = |r: &rmcp::model::CallToolResult| {
        assert_eq!(r.is_error, Some(false), "{r:?}");
        r.structured_content.as_ref().unwrap()["wakeId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let w1 = yielded(&call(&client, "yield_agent_graph", json!({"graphId": "g"})).await);
    // Nothing happened yet: nothing is due, nothing is announced.
    assert_eq!(server.checkpoint("g").await, 0);
    assert_eq!(wake_status(&db, "g", &w1), WakeStatus::Pending);

    finish_work(&db, "g", "w1", "the first result");
    assert_eq!(server.checkpoint("g").await, 1);
    eventually("the resource update", || {
        updated.lock().unwrap().as_slice() == ["agent-graph://g"]
    })
    .await;
    // Announced once; still pending until the root calls.
    assert_eq!(server.checkpoint("g").await, 0);
    assert_eq!(wake_status(&db, "g", &w1), WakeStatus::Pending);

    // The announced resource is the root's view.
    let read = client
        .read_resource(ReadResourceRequestParams::new("agent-graph://g"))
        .await
        .unwrap();
    let rmcp::model::ResourceContents::TextResourceContents { text: json, .. } = &read.contents[0]
    else {
        panic!("text contents: {read:?}");
    };
    let view: Value = serde_json::from_str(json).unwrap();
    assert_eq!(view["graphId"], "g");
    assert_eq!(wake_status(&db, "g", &w1), WakeStatus::Pending);

    let r = call(&client, "view_agent_graph", json!({"graphId": "g"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let t = text(&r);
    assert!(
        t.starts_with(&format!(
            "Wake {w1}: agent graph g reached a checkpoint. New records (1):\n  \
             graph_record_w1 (work w1, completed): the first result\n\
             2 work items are still pending."
        )),
        "{t}"
    );
    assert!(t.contains("\n\nAgent graph g \u{2014} open"), "{t}");
    let v = r.structured_content.unwrap();
    assert_eq!(v["wakes"][0]["wakeId"], w1.as_str());
    assert_eq!(v["graphId"], "g");
    assert_eq!(wake_status(&db, "g", &w1), WakeStatus::Delivered);
    let attempts = db
        .store
        .agent_graphs()
        .list_supervisor_wake_attempts("g", &w1)
        .unwrap();
    assert_eq!(attempts.len(), 1);
    assert!(
        db.store
            .agent_graphs()
            .list_unsettled_supervisor_wakes(Some("g"))
            .unwrap()
            .is_empty()
    );
    // Delivered once.
    let r = call(&client, "view_agent_graph", json!({"graphId": "g"})).await;
    assert!(text(&r).starts_with("Agent graph g"), "{}", text(&r));
    assert!(r.structured_content.unwrap().get("wakes").is_none());

    // The next wake is delivered on a yield, before its own text.
    let w2 = yielded(&call(&client, "yield_agent_graph", json!({"graphId": "g"})).await);
    assert_ne!(w2, w1);
    finish_work(&db, "g", "w2", "the second result");
    assert_eq!(server.checkpoint("g").await, 1);
    eventually("the second resource update", || {
        updated.lock().unwrap().len() == 2
    })
    .await;
    let r = call(&client, "yield_agent_graph", json!({"graphId": "g"})).await;
    let w3 = yielded(&r);
    assert_ne!(w3, w2);
    let t = text(&r);
    assert!(t.starts_with(&format!("Wake {w2}: ")), "{t}");
    assert!(t.contains("graph_record_w2 (work w2, completed)"), "{t}");
    assert!(
        t.ends_with(&format!(
            "\n\nYielded agent graph g (wake {w3}); 1 pending items continue."
        )),
        "{t}"
    );
    assert_eq!(wake_status(&db, "g", &w2), WakeStatus::Delivered);
    assert_eq!(wake_status(&db, "g", &w3), WakeStatus::Pending);
}

#[tokio::test]
async fn only_the_root_reads_an_agent_graph_resource() {
    use rmcp::model::{ErrorCode, ReadResourceRequestParams};
    use rmcp::service::ServiceError;
    let db = db();
    let server = McpServer::new(
        registry(),
        with(ControllerOptions::new(db.store.agent_graphs())),
    );
    let http = bind_http(
        server.clone(),
        HttpOptions::new("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let a = http_client(&http).await;
    let b = http_client(&http).await;
    let r = call(&a, "update_agent_graph", add("ga", "k")).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let templates = b.list_all_resource_templates().await.unwrap();
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template == "agent-graph://{graphId}"),
        "{templates:?}"
    );
    assert!(
        a.read_resource(ReadResourceRequestParams::new("agent-graph://ga"))
            .await
            .is_ok()
    );
    let e = b
        .read_resource(ReadResourceRequestParams::new("agent-graph://ga"))
        .await
        .unwrap_err();
    let ServiceError::McpError(e) = e else {
        panic!("an MCP error: {e:?}");
    };
    assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
    assert!(
        e.message.starts_with(
            "cannot read agent-graph://ga: [not_root_session] agent graph ga: only its root \
             session may call this tool (caller "
        ),
        "{}",
        e.message
    );
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
    http.shutdown();
    http.wait().await.unwrap();
}
