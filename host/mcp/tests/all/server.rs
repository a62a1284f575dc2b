//! The MCP server driven by rmcp's client in process (a duplex pipe): tools,
//! errors, progress, cancellation, resources, list changes, concurrency.

use crate::common::*;
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use sandgraph_core::Start;
use sandgraph_mcp::ServerOptions;
use sandgraph_tests::{ECHO, FANOUT, GREET, HOSTILE_INFINITE_LOOP, HOSTILE_PANIC, LOOP_GRAPH};
use serde_json::json;

/// echo and greet declare `as_tool`; fanout does not; the config exposes
/// loop_graph, the panicking graph and the infinite loop (stopped by a
/// 300 ms timeout).
const CONFIG: &str = r#"
[graphs.loop_graph]
as_tool = true

[graphs.hostile_panic]
as_tool = true

[graphs.hostile_infinite_loop]
as_tool = true
timeout_ms = 300
"#;

/// The infinite loop with a long timeout and fuel to match: it only ends
/// when cancelled.
const LONG_LOOP: &str = r#"
[graphs.hostile_infinite_loop]
as_tool = true
timeout_ms = 600000
fuel = 100000000000000
"#;

fn folder() -> Folder {
    Folder::new(
        &[
            ("echo_graph.wasm", ECHO),
            ("greet_graph.wasm", GREET),
            ("fanout_graph.wasm", FANOUT),
            ("loop_graph.wasm", LOOP_GRAPH),
            ("hostile_panic.wasm", HOSTILE_PANIC),
            ("hostile_infinite_loop.wasm", HOSTILE_INFINITE_LOOP),
        ],
        CONFIG,
    )
}

#[tokio::test]
async fn tools_list_shows_the_as_tool_graphs_with_their_schemas() {
    let f = folder();
    let registry = f.registry().await;
    let (_server, client) = connect(registry.clone(), ServerOptions::default()).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    // fanout is mounted but not a model-visible tool.
    assert!(!registry.get("fanout_graph").unwrap().model_visible());
    assert_eq!(
        names,
        [
            "echo_graph",
            "greet_graph",
            "hostile_infinite_loop",
            "hostile_panic",
            "loop_graph"
        ]
    );
    for t in &tools {
        let g = registry.get(&t.name).unwrap();
        assert_eq!(t.description.as_deref(), Some(g.description()));
        assert_eq!(
            serde_json::Value::Object((*t.input_schema).clone()),
            *g.input_schema()
        );
        assert_eq!(
            serde_json::Value::Object((**t.output_schema.as_ref().unwrap()).clone()),
            g.output_schema()
        );
    }
    let greet = tools.iter().find(|t| t.name == "greet_graph").unwrap();
    assert_eq!(
        greet.input_schema["required"],
        json!(["name", "style"]),
        "the compiled parameter schema"
    );
}

#[tokio::test]
async fn a_call_returns_the_final_state_as_structured_content_and_pretty_text() {
    let f = folder();
    let (_server, client) = connect(f.registry().await, ServerOptions::default()).await;
    let r = call(&client, "echo_graph", json!({"input": {"topic": "hi"}})).await;
    assert_eq!(r.is_error, Some(false));
    let state = json!({"topic": "hi", "log": ["seen:hi"]});
    assert_eq!(r.structured_content, Some(state.clone()));
    assert_eq!(text(&r), serde_json::to_string_pretty(&state).unwrap());

    let r = call(
        &client,
        "greet_graph",
        json!({"name": "Ada", "style": "formal", "times": 2}),
    )
    .await;
    assert_eq!(r.is_error, Some(false));
    assert_eq!(
        r.structured_content.unwrap()["greeting"],
        json!("Good day, Ada. Good day, Ada.")
    );
}

#[tokio::test]
async fn invalid_arguments_are_a_tool_error_with_the_registrys_message() {
    let f = folder();
    let registry = f.registry().await;
    let (_server, client) = connect(registry.clone(), ServerOptions::default()).await;
    let args = json!({"style": "loud", "times": 1.5});
    let r = call(&client, "greet_graph", args.clone()).await;
    assert_tool_error(&r, "[INVALID_ARGS] invalid arguments: ");
    // Exactly what the registry says for the same arguments.
    let direct = registry
        .get("greet_graph")
        .unwrap()
        .run(Start::Input(args), Default::default(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(text(&r), format!("[INVALID_ARGS] {}", direct.message));
    // No arguments at all is an empty object, refused the same way.
    let r = client
        .call_tool(rmcp::model::CallToolRequestParams::new("greet_graph"))
        .await
        .unwrap();
    assert_tool_error(&r, "[INVALID_ARGS] invalid arguments: ");
}

#[tokio::test]
async fn the_graphs_own_validation_is_a_tool_error() {
    let f = folder();
    let (_server, client) = connect(f.registry().await, ServerOptions::default()).await;
    let r = call(
        &client,
        "greet_graph",
        json!({"name": "Ada", "style": "formal", "times": 11}),
    )
    .await;
    assert_tool_error(&r, "[validation] times must be at most 10");
    assert_eq!(text(&r), "[validation] times must be at most 10");
}

#[tokio::test]
async fn timeouts_traps_and_unknown_tools_are_tool_errors_and_the_server_goes_on() {
    let f = folder();
    let registry = f.registry().await;
    let (_server, client) = connect(registry.clone(), ServerOptions::default()).await;
    let r = call(&client, "hostile_infinite_loop", json!({"input": {}})).await;
    assert_tool_error(&r, "[timeout] ");
    let r = call(&client, "hostile_panic", json!({"input": {}})).await;
    assert_tool_error(&r, "[trap] ");
    let r = call(&client, "no_such_graph", json!({})).await;
    assert_tool_error(
        &r,
        "[unknown_tool] no tool named \"no_such_graph\"; available: ",
    );
    // Mounted but not a model-visible tool: not callable either.
    assert!(registry.get("fanout_graph").is_some());
    let r = call(&client, "fanout_graph", json!({"input": {}})).await;
    assert_tool_error(&r, "[unknown_tool] no tool named \"fanout_graph\"");
    let r = call(&client, "echo_graph", json!({"input": {"topic": "still"}})).await;
    assert_eq!(r.is_error, Some(false));
}

#[tokio::test]
async fn each_completed_superstep_is_one_progress_notification() {
    let f = folder();
    let (_server, client) = connect(f.registry().await, ServerOptions::default()).await;
    let handle = start(&client, "loop_graph", json!({"input": {"target": 3}})).await;
    let token = handle.progress_token.clone();
    let resp = handle.await_response().await.unwrap();
    let rmcp::model::ServerResult::CallToolResult(r) = resp else {
        panic!("a tool result: {resp:?}");
    };
    assert_eq!(r.structured_content, Some(json!({"n": 3, "target": 3})));
    // The client handles notifications on tasks of their own: wait for them.
    eventually("three progress notifications", || {
        client.service().progress_of(&token).len() >= 3
    })
    .await;
    let progress = client.service().progress_of(&token);
    let seen: Vec<(f64, Option<&str>)> = progress
        .iter()
        .map(|p| (p.progress, p.message.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (1.0, Some("step 0: count")),
            (2.0, Some("step 1: count")),
            (3.0, Some("step 2: count"))
        ]
    );
}

#[tokio::test]
async fn a_cancelled_call_stops_its_run_and_frees_its_slot() {
    let f = Folder::new(
        &[
            ("echo_graph.wasm", ECHO),
            ("hostile_infinite_loop.wasm", HOSTILE_INFINITE_LOOP),
        ],
        LONG_LOOP,
    );
    let (server, client) = connect(
        f.registry().await,
        ServerOptions {
            max_concurrent_runs: 1,
            ..ServerOptions::default()
        },
    )
    .await;
    let handle = start(&client, "hostile_infinite_loop", json!({"input": {}})).await;
    eventually("the run is in flight", || server.stats().in_flight == 1).await;
    // At the limit: a second call is refused, not queued.
    let r = call(&client, "echo_graph", json!({"input": {"topic": "x"}})).await;
    assert_tool_error(&r, "[busy] ");
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    // The run would spin for ten minutes; cancellation ends it (and its
    // instance with it) within the safety net.
    eventually("the cancelled run ended", || server.stats().in_flight == 0).await;
    let stats = server.stats();
    assert_eq!((stats.cancelled, stats.busy), (1, 1));
    let r = call(&client, "echo_graph", json!({"input": {"topic": "after"}})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
}

#[tokio::test]
async fn many_calls_run_at_once_including_several_of_one_graph() {
    let f = Folder::new(
        &[
            ("echo_graph.wasm", ECHO),
            ("hostile_infinite_loop.wasm", HOSTILE_INFINITE_LOOP),
        ],
        LONG_LOOP,
    );
    let (server, client) = connect(f.registry().await, ServerOptions::default()).await;
    // Two runs of the same graph in flight together: no per-graph lock.
    let a = start(&client, "hostile_infinite_loop", json!({"input": {}})).await;
    let b = start(&client, "hostile_infinite_loop", json!({"input": {}})).await;
    eventually("both runs in flight", || server.stats().in_flight == 2).await;
    // And sixteen echo calls at once while they spin.
    let calls = (0..16).map(|i| {
        let client = &client;
        async move {
            let topic = format!("t{i}");
            let r = call(client, "echo_graph", json!({"input": {"topic": topic}})).await;
            (topic, r)
        }
    });
    for (topic, r) in futures::future::join_all(calls).await {
        assert_eq!(r.is_error, Some(false));
        assert_eq!(
            r.structured_content,
            Some(json!({"topic": topic, "log": [format!("seen:{topic}")]}))
        );
    }
    assert_eq!(server.stats().in_flight, 2);
    a.cancel(None).await.unwrap();
    b.cancel(None).await.unwrap();
    eventually("both runs ended", || server.stats().in_flight == 0).await;
    assert_eq!(server.stats().calls, 18);
}

#[tokio::test]
async fn specs_and_mermaid_diagrams_are_resources() {
    let f = folder();
    let registry = f.registry().await;
    let (_server, client) = connect(registry.clone(), ServerOptions::default()).await;
    let resources = client.list_all_resources().await.unwrap();
    // Two per mounted graph, as_tool or not.
    assert_eq!(resources.len(), 2 * registry.list().len());
    let spec = resources
        .iter()
        .find(|r| r.uri == "graph://loop_graph/spec")
        .unwrap();
    assert_eq!(spec.mime_type.as_deref(), Some("application/json"));

    let read = |uri: &str| client.read_resource(ReadResourceRequestParams::new(uri));
    let r = read("graph://loop_graph/spec").await.unwrap();
    let ResourceContents::TextResourceContents {
        text, mime_type, ..
    } = &r.contents[0]
    else {
        panic!("text contents");
    };
    assert_eq!(mime_type.as_deref(), Some("application/json"));
    let spec: serde_json::Value = serde_json::from_str(text).unwrap();
    let tool = registry.get("loop_graph").unwrap();
    assert_eq!(spec, serde_json::to_value(tool.spec()).unwrap());

    let r = read("graph://loop_graph/mermaid").await.unwrap();
    let ResourceContents::TextResourceContents {
        text, mime_type, ..
    } = &r.contents[0]
    else {
        panic!("text contents");
    };
    assert_eq!(mime_type.as_deref(), Some("text/plain"));
    assert_eq!(*text, tool.spec().to_mermaid());

    assert!(read("graph://nope/spec").await.is_err());
    assert!(read("graph://loop_graph/other").await.is_err());
    // The server is still there.
    assert!(read("graph://echo_graph/mermaid").await.is_ok());
}

#[tokio::test]
async fn dropping_a_graph_into_a_watched_folder_announces_a_list_change() {
    let f = Folder::new(&[("echo_graph.wasm", ECHO)], "");
    let registry = f.registry().await;
    let _watching = registry.watch().unwrap();
    let (_server, client) = connect(registry, ServerOptions::default()).await;
    let before = client.list_all_tools().await.unwrap();
    assert_eq!(before.len(), 1);
    drop_in(&f.graphs(), "greet_graph.wasm", GREET);
    client.service().wait_list_changed(1).await;
    let after = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = after.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["echo_graph", "greet_graph"]);
    std::fs::remove_file(f.graphs().join("echo_graph.wasm")).unwrap();
    client.service().wait_list_changed(2).await;
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["greet_graph"]);
}

#[tokio::test]
async fn a_2026_client_hears_list_changes_through_subscriptions_listen() {
    use rmcp::model::{ProtocolVersion, SubscriptionFilter};
    use rmcp::service::{ClientLifecycleMode, serve_client_with_lifecycle};
    use rmcp::{ServiceExt, model::ServerNotification};

    let f = Folder::new(&[("echo_graph.wasm", ECHO)], "");
    let registry = f.registry().await;
    let _watching = registry.watch().unwrap();
    let server = sandgraph_mcp::McpServer::new(registry, ServerOptions::default());
    let (a, b) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(a).await {
            let _ = running.waiting().await;
        }
    });
    let client = serve_client_with_lifecycle(
        (),
        b,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .unwrap();
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut sub = client.listen(filter).await.unwrap();
    assert_eq!(sub.acknowledged().tools_list_changed, Some(true));
    drop_in(&f.graphs(), "greet_graph.wasm", GREET);
    let n = tokio::time::timeout(SOON, sub.next())
        .await
        .expect("a notification")
        .unwrap()
        .expect("the subscription is open");
    assert!(
        matches!(n, ServerNotification::ToolListChangedNotification(_)),
        "{n:?}"
    );
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["echo_graph", "greet_graph"]);
    // Still subscribed: the next change arrives too.
    std::fs::remove_file(f.graphs().join("echo_graph.wasm")).unwrap();
    let n = tokio::time::timeout(SOON, sub.next())
        .await
        .expect("a second notification")
        .unwrap()
        .expect("the subscription is open");
    assert!(
        matches!(n, ServerNotification::ToolListChangedNotification(_)),
        "{n:?}"
    );
}
