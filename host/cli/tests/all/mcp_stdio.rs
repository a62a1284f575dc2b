//! `sandgraph serve` over stdio, the real binary driven by rmcp's client
//! (and, for what stdout carries, by hand).

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ClientRequest, ContentBlock, Request};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::watch;

use crate::common::Env;

/// Safety net for anything that should happen soon; never a speed claim.
const SOON: Duration = Duration::from_secs(60);

const CONFIG: &str = r#"
[graphs.loop_graph]
as_tool = true

[graphs.hostile_stdout_flood]
as_tool = true

[graphs.hostile_infinite_loop]
as_tool = true
timeout_ms = 600000
fuel = 100000000000000
"#;

/// A working folder with `graphs` in `graphs/` and [`CONFIG`] in
/// `sandgraph.toml` (given with `--config`: it raises limits, which a
/// discovered config may not), its server logging the MCP calls.
fn folder(graphs: &[(&str, &str)]) -> Env {
    let env = Env::new(graphs).with_log("sandgraph_mcp=info,warn");
    env.write("sandgraph.toml", CONFIG);
    env
}

#[derive(Clone)]
struct Client {
    list_changed: watch::Sender<u32>,
}

impl ClientHandler for Client {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.send_modify(|n| *n += 1);
    }
}

type Session = RunningService<RoleClient, Client>;

/// `sandgraph serve` in `env` with its `sandgraph.toml` named by the
/// operator, and `extra`.
fn serve(env: &Env, extra: &[&str]) -> tokio::process::Command {
    let mut args = vec!["--config", "sandgraph.toml"];
    args.extend_from_slice(extra);
    env.serve(&args)
}

/// The server as a child process, its client session, and its stderr.
async fn connect(env: &Env, extra: &[&str]) -> (Session, Stderr) {
    let (transport, stderr) = TokioChildProcess::builder(serve(env, extra))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Stderr::new(stderr.unwrap());
    let client = Client {
        list_changed: watch::channel(0).0,
    }
    .serve(transport)
    .await
    .unwrap();
    (client, stderr)
}

/// The child's stderr lines, collected in the background.
#[derive(Clone)]
struct Stderr(Arc<Mutex<Vec<String>>>);

impl Stderr {
    fn new(stderr: ChildStderr) -> Stderr {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        Stderr(lines)
    }

    /// Waits for a line containing every one of `parts`.
    async fn wait_for(&self, parts: &[&str]) -> String {
        let deadline = tokio::time::Instant::now() + SOON;
        loop {
            if let Some(l) = self
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|l| parts.iter().all(|p| l.contains(p)))
            {
                return l.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no stderr line with {parts:?}: {:#?}",
                self.0.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn params(name: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_owned());
    p.arguments = args.as_object().cloned();
    p
}

async fn call(client: &Session, name: &str, args: Value) -> CallToolResult {
    client.call_tool(params(name, args)).await.unwrap()
}

fn text(r: &CallToolResult) -> &str {
    match &r.content[..] {
        [ContentBlock::Text(t)] => &t.text,
        other => panic!("not one text block: {other:?}"),
    }
}

#[tokio::test]
async fn an_mcp_client_lists_and_calls_the_graphs_of_a_folder() {
    let env = folder(&[
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
        ("fanout_graph.wasm", sandgraph_tests::FANOUT),
    ]);
    let (client, _stderr) = connect(&env, &[]).await;
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "sandgraph");
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    // fanout_graph is mounted but not as_tool.
    assert_eq!(names, ["echo_graph", "greet_graph"]);
    let r = call(&client, "echo_graph", json!({"input": {"topic": "cli"}})).await;
    let state = json!({"topic": "cli", "log": ["seen:cli"]});
    assert_eq!(r.structured_content, Some(state.clone()));
    assert_eq!(text(&r), serde_json::to_string_pretty(&state).unwrap());
    let r = call(&client, "greet_graph", json!({"name": "Ada"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).starts_with("[INVALID_ARGS] invalid arguments: "),
        "{}",
        text(&r)
    );
    let r = call(
        &client,
        "greet_graph",
        json!({"name": "Ada", "style": "formal", "times": 11}),
    )
    .await;
    assert_eq!(text(&r), "[validation] times must be at most 10");
    assert_eq!(r.is_error, Some(true));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_call_ends_its_run_and_the_server_serves_the_next() {
    let env = folder(&[
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        (
            "hostile_infinite_loop.wasm",
            sandgraph_tests::HOSTILE_INFINITE_LOOP,
        ),
    ]);
    let (client, stderr) = connect(&env, &[]).await;
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params(
                "hostile_infinite_loop",
                json!({"input": {}}),
            ))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    stderr
        .wait_for(&["tool call started", "hostile_infinite_loop"])
        .await;
    handle.cancel(Some("test".into())).await.unwrap();
    // The run (ten minutes of spinning otherwise) ends, by the client's
    // cancellation.
    let line = stderr
        .wait_for(&["tool call ended", "hostile_infinite_loop"])
        .await;
    assert!(line.contains("cancelled=true"), "{line}");
    assert!(line.contains("outcome=\"timeout\""), "{line}");
    let r = call(&client, "echo_graph", json!({"input": {"topic": "next"}})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_interrupted_call_is_logged_as_interrupted() {
    let env = folder(&[("graph_interrupt.wasm", sandgraph_tests::GRAPH_INTERRUPT)]);
    env.write(
        "sandgraph.toml",
        "[graphs.graph_interrupt]\nas_tool = true\n",
    );
    let (client, stderr) = connect(&env, &[]).await;
    let r = call(&client, "graph_interrupt", json!({"input": {}})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(
        r.structured_content.as_ref().unwrap()["status"],
        "interrupted"
    );
    let line = stderr
        .wait_for(&["tool call ended", "graph_interrupt"])
        .await;
    assert!(line.contains("outcome=\"interrupted\""), "{line}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn with_watch_a_new_component_shows_up_in_the_tool_list() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let (client, _stderr) = connect(&env, &["--watch"]).await;
    assert_eq!(client.list_all_tools().await.unwrap().len(), 1);
    let tmp = env.graphs().join("greet.part");
    std::fs::copy(sandgraph_tests::GREET, &tmp).unwrap();
    std::fs::rename(&tmp, env.graphs().join("greet_graph.wasm")).unwrap();
    let mut rx = client.service().list_changed.subscribe();
    tokio::time::timeout(SOON, rx.wait_for(|n| *n >= 1))
        .await
        .expect("notifications/tools/list_changed")
        .unwrap();
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["echo_graph", "greet_graph"]);
    client.cancel().await.unwrap();
}

/// Reads stdout lines until the response with `id`; every line must be a
/// JSON-RPC message.
async fn read_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    id: u64,
    seen: &mut Vec<Value>,
) -> Value {
    loop {
        let line = tokio::time::timeout(SOON, lines.next_line())
            .await
            .expect("a line on stdout")
            .unwrap()
            .expect("stdout open");
        let msg: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC, got {line:?}: {e}"));
        assert_eq!(msg["jsonrpc"], json!("2.0"), "{line}");
        seen.push(msg.clone());
        if msg["id"] == json!(id) {
            return msg;
        }
    }
}

#[tokio::test]
async fn stdout_carries_only_protocol_messages_with_progress_before_results() {
    let env = folder(&[
        ("loop_graph.wasm", sandgraph_tests::LOOP_GRAPH),
        (
            "hostile_stdout_flood.wasm",
            sandgraph_tests::HOSTILE_STDOUT_FLOOD,
        ),
    ]);
    let mut child = serve(&env, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let send = |v: Value| format!("{v}\n");
    let mut seen = Vec::new();
    stdin
        .write_all(
            send(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    read_until(&mut lines, 1, &mut seen).await;
    stdin
        .write_all(
            send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).as_bytes(),
        )
        .await
        .unwrap();
    // A guest that writes 10 MiB to its stdout: none of it reaches ours.
    stdin
        .write_all(
            send(
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "hostile_stdout_flood", "arguments": {"input": {}}}}),
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let r = read_until(&mut lines, 2, &mut seen).await;
    assert_eq!(r["result"]["structuredContent"]["done"], json!(true), "{r}");
    seen.clear();
    stdin
        .write_all(
            send(
                json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "loop_graph", "arguments": {"input": {"target": 2}},
            "_meta": {"progressToken": "p"}}}),
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let r = read_until(&mut lines, 3, &mut seen).await;
    assert_eq!(
        r["result"]["structuredContent"],
        json!({"n": 2, "target": 2})
    );
    let progress: Vec<&Value> = seen
        .iter()
        .filter(|m| m["method"] == json!("notifications/progress"))
        .collect();
    assert_eq!(
        progress,
        [
            &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": "p", "progress": 1.0, "message": "step 0: count"}}),
            &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": "p", "progress": 2.0, "message": "step 1: count"}}),
        ]
    );
    // Closing stdin ends the server, cleanly.
    drop(stdin);
    let status = tokio::time::timeout(SOON, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn bad_http_options_are_refused_before_serving() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let out = serve(&env, &["--http", "0.0.0.0:0"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "error[invalid_input]: --http 0.0.0.0:0 is not a loopback address: add --allow-remote"
        ),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    let out = serve(
        &env,
        &[
            "--http",
            "127.0.0.1:0",
            "--token-env",
            "SANDGRAPH_TEST_NO_SUCH_VAR",
        ],
    )
    .env_remove("SANDGRAPH_TEST_NO_SUCH_VAR")
    .output()
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "error[invalid_input]: --token-env SANDGRAPH_TEST_NO_SUCH_VAR: the environment variable is not set"
        )
    );
}
