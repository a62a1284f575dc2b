//! The Streamable HTTP transport: rmcp's client against a real server on
//! 127.0.0.1, the hardening (Origin, Host, token, body size, busy), the
//! session and per-principal caps, and the graceful shutdown. The
//! listener's own limits (bind refusals, header-read timeout, connection
//! cap) are tested in `sandgraph-server`.

use std::time::Duration;

use crate::common::*;
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use sandgraph_mcp::{MCP_PATH, McpServer, ServerOptions, bind_http};
use sandgraph_server::{HttpOptions, HttpServer};
use sandgraph_tests::{ECHO, GREET, HOSTILE_COOPERATIVE, HOSTILE_INFINITE_LOOP, LOOP_GRAPH};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[graphs.loop_graph]
as_tool = true

# Spins until the soft deadline, then returns {"stopped_early": true}.
[graphs.hostile_cooperative]
as_tool = true
timeout_ms = 1500

# Only ends when cancelled.
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
            ("loop_graph.wasm", LOOP_GRAPH),
            ("hostile_cooperative.wasm", HOSTILE_COOPERATIVE),
            ("hostile_infinite_loop.wasm", HOSTILE_INFINITE_LOOP),
        ],
        CONFIG,
    )
}

fn localhost() -> HttpOptions {
    HttpOptions::new("127.0.0.1:0".parse().unwrap())
}

async fn serve(f: &Folder, options: HttpOptions, server: ServerOptions) -> (McpServer, HttpServer) {
    let mcp = McpServer::new(f.registry().await, server);
    let http = bind_http(mcp.clone(), options).await.unwrap();
    (mcp, http)
}

async fn client(http: &HttpServer, token: Option<&str>) -> Session {
    let mut config = StreamableHttpClientTransportConfig::with_uri(http.url(MCP_PATH));
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    Client::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// A raw MCP POST with the given extra headers and body.
async fn post(http: &HttpServer, headers: &[(&str, &str)], body: String) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(http.url(MCP_PATH))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// The server answers a plain initialize: it is still up.
async fn assert_up(http: &HttpServer, headers: &[(&str, &str)]) {
    let r = post(http, headers, INITIALIZE.to_owned()).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
}

#[tokio::test]
async fn rmcp_client_lists_calls_gets_errors_and_progress_over_http() {
    let f = folder();
    let (_mcp, http) = serve(&f, localhost(), ServerOptions::default()).await;
    assert!(http.local_addr().ip().is_loopback());
    let c = client(&http, None).await;
    let names: Vec<String> = c
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        names,
        [
            "echo_graph",
            "greet_graph",
            "hostile_cooperative",
            "hostile_infinite_loop",
            "loop_graph"
        ]
    );
    let r = call(&c, "echo_graph", json!({"input": {"topic": "web"}})).await;
    assert_eq!(
        r.structured_content,
        Some(json!({"topic": "web", "log": ["seen:web"]}))
    );
    let r = call(&c, "greet_graph", json!({"name": 3, "style": "formal"})).await;
    assert_tool_error(&r, "[INVALID_ARGS] invalid arguments: ");
    let r = call(
        &c,
        "greet_graph",
        json!({"name": "Ada", "style": "formal", "times": 11}),
    )
    .await;
    assert_tool_error(&r, "[validation] times must be at most 10");

    let handle = start(&c, "loop_graph", json!({"input": {"target": 2}})).await;
    let token = handle.progress_token.clone();
    handle.await_response().await.unwrap();
    eventually("two progress notifications", || {
        c.service().progress_of(&token).len() >= 2
    })
    .await;
    let messages: Vec<Option<String>> = c
        .service()
        .progress_of(&token)
        .into_iter()
        .map(|p| p.message)
        .collect();
    assert_eq!(
        messages,
        [Some("step 0: count".into()), Some("step 1: count".into())]
    );
    c.cancel().await.unwrap();
    http.shutdown();
    tokio::time::timeout(SOON, http.wait())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_foreign_origin_or_host_is_refused_and_the_server_stays_up() {
    let f = folder();
    let (_mcp, http) = serve(&f, localhost(), ServerOptions::default()).await;
    let port = http.local_addr().port();
    for origin in ["http://evil.example", "https://localhost", "null"] {
        let r = post(&http, &[("origin", origin)], INITIALIZE.to_owned()).await;
        assert_eq!(r.status(), 403, "{origin}");
        assert_up(&http, &[]).await;
    }
    // The loopback origins on our port are fine (a local web client).
    for origin in [
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
    ] {
        assert_up(&http, &[("origin", &origin)]).await;
    }
    // DNS rebinding: a name that resolves to us but is not ours.
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "localhost:1",
    ] {
        let r = post(&http, &[("host", host)], INITIALIZE.to_owned()).await;
        assert_eq!(r.status(), 403, "{host}");
        assert_up(&http, &[]).await;
    }
    assert_up(&http, &[("host", &format!("localhost:{port}"))]).await;
}

#[tokio::test]
async fn allow_lists_can_be_extended() {
    let f = folder();
    let options = HttpOptions {
        allowed_hosts: vec!["mcp.internal".into()],
        allowed_origins: vec!["https://app.example:443".into()],
        ..localhost()
    };
    let (_mcp, http) = serve(&f, options, ServerOptions::default()).await;
    assert_up(
        &http,
        &[("host", "mcp.internal"), ("origin", "https://app.example")],
    )
    .await;
    let r = post(
        &http,
        &[("origin", "https://other.example")],
        INITIALIZE.into(),
    )
    .await;
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_refused() {
    let f = folder();
    let options = HttpOptions {
        token: Some("s3cret-token".into()),
        ..localhost()
    };
    let (_mcp, http) = serve(&f, options, ServerOptions::default()).await;
    let r = post(&http, &[], INITIALIZE.to_owned()).await;
    assert_eq!(r.status(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    for wrong in [
        "Bearer wrong",
        "Bearer s3cret-toke",
        "Basic s3cret-token",
        "s3cret-token",
    ] {
        let r = post(&http, &[("authorization", wrong)], INITIALIZE.to_owned()).await;
        assert_eq!(r.status(), 401, "{wrong}");
    }
    // A GET (the notification stream) needs it too.
    let r = reqwest::Client::new()
        .get(http.url(MCP_PATH))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_up(&http, &[("authorization", "Bearer s3cret-token")]).await;
    // And an MCP client with the token works end to end.
    let c = client(&http, Some("s3cret-token")).await;
    let r = call(&c, "echo_graph", json!({"input": {"topic": "t"}})).await;
    assert_eq!(r.is_error, Some(false));
}

#[tokio::test]
async fn an_oversize_body_is_refused() {
    let f = folder();
    let options = HttpOptions {
        max_body_bytes: 4096,
        ..localhost()
    };
    let (_mcp, http) = serve(&f, options, ServerOptions::default()).await;
    let big = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "x".repeat(8000), "version": "1"}
        }
    })
    .to_string();
    let r = post(&http, &[], big).await;
    assert_eq!(r.status(), 413);
    assert_up(&http, &[]).await;
    // The default limit is 1 MiB.
    let (_mcp, http) = serve(&f, localhost(), ServerOptions::default()).await;
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat((1 << 20) + 1)
    );
    let r = post(&http, &[], huge).await;
    assert_eq!(r.status(), 413);
    assert_up(&http, &[]).await;
}

#[tokio::test]
async fn past_the_run_limit_a_call_is_busy_at_once() {
    let f = folder();
    let (mcp, http) = serve(
        &f,
        localhost(),
        ServerOptions {
            max_concurrent_runs: 2,
            ..ServerOptions::default()
        },
    )
    .await;
    let c = client(&http, None).await;
    let a = start(&c, "hostile_infinite_loop", json!({"input": {}})).await;
    let b = start(&c, "hostile_infinite_loop", json!({"input": {}})).await;
    eventually("two runs in flight", || mcp.stats().in_flight == 2).await;
    let r = call(&c, "echo_graph", json!({"input": {"topic": "t"}})).await;
    assert_tool_error(
        &r,
        "[busy] 2 runs are already in flight (the server's limit); retry later",
    );
    a.cancel(None).await.unwrap();
    b.cancel(None).await.unwrap();
    eventually("the runs ended", || mcp.stats().in_flight == 0).await;
    assert_eq!(mcp.stats().cancelled, 2);
    let r = call(&c, "echo_graph", json!({"input": {"topic": "t"}})).await;
    assert_eq!(r.is_error, Some(false));
}

#[tokio::test]
async fn a_graceful_shutdown_lets_running_calls_finish() {
    // A run that ends by itself at its 1.5 s deadline, unless cancelled.
    let f = Folder::new(
        &[("hostile_infinite_loop.wasm", HOSTILE_INFINITE_LOOP)],
        "[graphs.hostile_infinite_loop]\nas_tool = true\ntimeout_ms = 1500\n",
    );
    let (mcp, http) = serve(&f, localhost(), ServerOptions::default()).await;
    let url = http.url(MCP_PATH);
    let c = client(&http, None).await;
    let running = start(&c, "hostile_infinite_loop", json!({"input": {}})).await;
    eventually("the call is running", || mcp.stats().in_flight == 1).await;
    http.shutdown();
    // The run is not cancelled by the shutdown: it reaches its own
    // deadline, and the client receives that result.
    let resp = tokio::time::timeout(SOON, running.await_response())
        .await
        .unwrap()
        .unwrap();
    let rmcp::model::ServerResult::CallToolResult(r) = resp else {
        panic!("a tool result: {resp:?}");
    };
    assert_eq!(text(&r), "[timeout] run exceeded its timeout of 1500 ms");
    tokio::time::timeout(SOON, http.wait())
        .await
        .unwrap()
        .unwrap();
    // No longer listening.
    let refused = reqwest::Client::new().post(&url).body("{}").send().await;
    assert!(refused.is_err());
}

#[tokio::test]
async fn past_the_grace_period_running_calls_are_cancelled() {
    let f = folder();
    let options = HttpOptions {
        shutdown_grace: Duration::from_millis(200),
        ..localhost()
    };
    let (mcp, http) = serve(&f, options, ServerOptions::default()).await;
    let c = client(&http, None).await;
    let _spinning = start(&c, "hostile_infinite_loop", json!({"input": {}})).await;
    eventually("the call is running", || mcp.stats().in_flight == 1).await;
    http.shutdown();
    // The run would spin for ten minutes; the shutdown ends it.
    tokio::time::timeout(SOON, http.wait())
        .await
        .unwrap()
        .unwrap();
    eventually("the run ended", || mcp.stats().in_flight == 0).await;
    // A call during the shutdown would have been refused.
    assert!(mcp.stats().calls == 1);
}

#[tokio::test]
async fn a_session_is_terminated_with_204_as_the_spec_says() {
    let f = folder();
    let (_mcp, http) = serve(&f, localhost(), ServerOptions::default()).await;
    let r = post(&http, &[], INITIALIZE.to_owned()).await;
    assert_eq!(r.status(), 200);
    let session = r
        .headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_owned();
    let delete = || {
        reqwest::Client::new()
            .delete(http.url(MCP_PATH))
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-06-18")
    };
    // The Python SDK reports anything but 200/204 as a failed termination.
    let r = delete().send().await.unwrap();
    assert_eq!(r.status(), 204, "{:?}", r.text().await);
    // The session is gone: using it again is refused, the server is up.
    let r = post(
        &http,
        &[("mcp-session-id", &session)],
        INITIALIZE.to_owned(),
    )
    .await;
    assert_ne!(r.status(), 200);
    assert_up(&http, &[]).await;
}

#[tokio::test]
async fn a_session_flood_gets_503_and_other_principals_are_served() {
    let f = folder();
    let dir = tempfile::tempdir().unwrap();
    let options = HttpOptions {
        tokens: Some(tokens_file(dir.path(), &["alice", "mallory", "eve"])),
        max_sessions: 6,
        max_sessions_per_principal: 3,
        ..localhost()
    };
    let (_mcp, http) = serve(&f, options, ServerOptions::default()).await;
    let open = |who: &str| {
        let (url, token) = (http.url(MCP_PATH), format!("{who}-token"));
        async move { Raw::open(url, Some(&token)).await }
    };
    let mut mallory = Vec::new();
    for _ in 0..3 {
        mallory.push(open("mallory").await.unwrap());
    }
    let refused = open("mallory").await.unwrap_err();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "10");
    assert_eq!(
        refused.text().await.unwrap(),
        "too many MCP sessions open for principal:mallory (3): close one (DELETE /mcp) or retry \
         later"
    );
    // Alice is not held back by mallory's sessions.
    let alice = open("alice").await.unwrap();
    let (_, answer) = alice
        .call(1, "echo_graph", json!({"input": {"topic": "t"}}))
        .await;
    assert!(!Raw::tool_text(&answer).0, "{answer}");
    // The server-wide cap: 3 + 1 + 2 = 6.
    let _eve = (open("eve").await.unwrap(), open("eve").await.unwrap());
    let refused = open("alice").await.unwrap_err();
    assert_eq!(refused.status(), 503);
    assert_eq!(
        refused.text().await.unwrap(),
        "too many MCP sessions open (6); retry later"
    );
    // A closed session frees its place.
    let gone = mallory.pop().unwrap();
    let r = reqwest::Client::new()
        .delete(http.url(MCP_PATH))
        .header("authorization", "Bearer mallory-token")
        .header("mcp-session-id", gone.session.as_deref().unwrap())
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    open("alice").await.unwrap();
}

#[tokio::test]
async fn one_principal_cannot_take_every_run_slot() {
    let f = folder();
    let dir = tempfile::tempdir().unwrap();
    let options = HttpOptions {
        tokens: Some(tokens_file(dir.path(), &["alice", "mallory"])),
        ..localhost()
    };
    let (mcp, http) = serve(
        &f,
        options,
        ServerOptions {
            max_runs_per_principal: 1,
            ..ServerOptions::default()
        },
    )
    .await;
    let mallory = client(&http, Some("mallory-token")).await;
    let run = start(&mallory, "hostile_infinite_loop", json!({"input": {}})).await;
    eventually("mallory's run is in flight", || mcp.stats().in_flight == 1).await;
    let r = call(&mallory, "echo_graph", json!({"input": {"topic": "t"}})).await;
    assert_tool_error(
        &r,
        "[busy] 1 runs of principal:mallory are already in flight (the limit per client); retry \
         later",
    );
    let alice = client(&http, Some("alice-token")).await;
    let r = call(&alice, "echo_graph", json!({"input": {"topic": "t"}})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    run.cancel(None).await.unwrap();
    eventually("mallory's run ended", || mcp.stats().in_flight == 0).await;
    let r = call(&mallory, "echo_graph", json!({"input": {"topic": "t"}})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
}

/// A `tools/call` with `_meta` `sandgraph/thread` runs on the caller's own
/// durable thread: its state carries over to the next call of the same
/// principal, another principal naming the same thread gets a thread of
/// its own, and a bad or unservable thread is an `invalid_input` result.
#[tokio::test]
async fn durable_threads_are_per_principal_and_carry_state_across_calls() {
    let f = folder();
    let dir = tempfile::tempdir().unwrap();
    let store = sandgraph_store::Store::open(&dir.path().join("data.redb")).unwrap();
    let options = HttpOptions {
        tokens: Some(tokens_file(dir.path(), &["alice", "mallory"])),
        ..localhost()
    };
    let server = ServerOptions {
        threads: Some(store.threads()),
        ..ServerOptions::default()
    };
    let (_mcp, http) = serve(&f, options, server).await;
    let on_thread = |thread: Value, target: i64| {
        let mut p = params("loop_graph", json!({"input": {"target": target}}));
        let mut meta = rmcp::model::RequestMetaObject::default();
        meta.0.0.insert("sandgraph/thread".into(), thread);
        p.meta = Some(meta);
        p
    };
    let n = |r: &rmcp::model::CallToolResult| {
        assert_eq!(r.is_error, Some(false), "{r:?}");
        r.structured_content.as_ref().unwrap()["n"]
            .as_i64()
            .unwrap()
    };
    let alice = client(&http, Some("alice-token")).await;
    let mallory = client(&http, Some("mallory-token")).await;
    assert_eq!(
        n(&alice.call_tool(on_thread(json!("t"), 2)).await.unwrap()),
        2
    );
    // The stored n (2) is past the target: one more count, from the thread.
    assert_eq!(
        n(&alice.call_tool(on_thread(json!("t"), 1)).await.unwrap()),
        3
    );
    // Mallory's "t" is not alice's.
    assert_eq!(
        n(&mallory.call_tool(on_thread(json!("t"), 1)).await.unwrap()),
        1
    );
    // Without a thread nothing is kept.
    let plain = alice
        .call_tool(params("loop_graph", json!({"input": {"target": 1}})))
        .await
        .unwrap();
    assert_eq!(n(&plain), 1);
    let threads: Vec<String> = store
        .threads()
        .list()
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(
        threads,
        [
            "principal:alice/t/loop_graph",
            "principal:mallory/t/loop_graph"
        ]
    );
    let bad = alice.call_tool(on_thread(json!(7), 1)).await.unwrap();
    assert_tool_error(
        &bad,
        "[invalid_input] _meta \"sandgraph/thread\" must be a string",
    );
    let long = alice
        .call_tool(on_thread(json!("x".repeat(101)), 1))
        .await
        .unwrap();
    assert_tool_error(
        &long,
        "[invalid_input] _meta \"sandgraph/thread\" must be 1 to 100 bytes",
    );

    // A server without a store refuses a call that asks for a thread.
    let (_mcp2, http2) = serve(&f, localhost(), ServerOptions::default()).await;
    let c = client(&http2, None).await;
    let refused = c.call_tool(on_thread(json!("t"), 1)).await.unwrap();
    assert_tool_error(
        &refused,
        "[invalid_input] _meta \"sandgraph/thread\": this server keeps no durable threads",
    );
}
