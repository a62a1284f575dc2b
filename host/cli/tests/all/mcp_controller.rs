//! `sandgraph serve --controller`: the agent-graph supervisor tools over
//! MCP, the real binary driven by rmcp's client, on stdio and over
//! Streamable HTTP, with the data checked in the database afterwards.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use sandgraph_controller::OpenAgentGraphs;
use sandgraph_store::{Store, StoreError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::common::Env;

/// Safety net for anything that should happen soon; never a speed claim.
const SOON: Duration = Duration::from_secs(60);

const AGENT_GRAPH_TOOLS: [&str; 3] = [
    "view_agent_graph",
    "update_agent_graph",
    "yield_agent_graph",
];

type Session = RunningService<RoleClient, ()>;

/// A working folder with `graphs` in `graphs/`, its server logging the
/// MCP calls; the data database, `data.redb`, is passed by flag.
fn folder(graphs: &[(&str, &str)]) -> Env {
    Env::new(graphs).with_log("sandgraph_mcp=info,warn")
}

/// `serve --controller --db data.redb EXTRA` in `env` on stdio, with its
/// client.
async fn stdio(env: &Env, extra: &[&str]) -> Session {
    let db = env.db();
    let mut args = vec!["--controller", "--db", db.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (transport, _) = TokioChildProcess::builder(env.serve(&args))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    ().serve(transport).await.unwrap()
}

/// Waits until the server let go of `env`'s database, then opens it.
async fn open_db(env: &Env) -> Store {
    open_when_free(&env.db()).await
}

async fn open_when_free(path: &Path) -> Store {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        match Store::open(path) {
            Ok(store) => return store,
            Err(StoreError::AlreadyOpen { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("cannot open {}: {e}", path.display()),
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

fn ok(r: &CallToolResult) -> &Value {
    assert_eq!(r.is_error, Some(false), "{r:?}");
    r.structured_content.as_ref().expect("structured content")
}

/// The one text of an error result.
fn failure(r: &CallToolResult) -> &str {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(r.structured_content.is_none(), "{r:?}");
    text(r)
}

fn add_work(graph: &str, key: &str) -> Value {
    json!({
        "graphId": graph,
        "operation": "add_work",
        "addWork": [{"workId": "w1", "subagentId": "preset-a", "instruction": "Port the tools"}],
        "idempotencyKey": key,
    })
}

fn names(tools: &[Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

/// The properties and required properties of a tool's input schema.
fn schema_shape(t: &Tool) -> (Vec<String>, Value) {
    let schema = Value::Object((*t.input_schema).clone());
    assert_eq!(schema["type"], "object", "{schema}");
    let mut props: Vec<String> = schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("properties in {schema}"))
        .keys()
        .cloned()
        .collect();
    props.sort();
    (props, schema["required"].clone())
}

#[tokio::test]
async fn over_stdio_the_three_tools_schedule_view_and_yield_durably() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let client = stdio(&env, &[]).await;

    let tools = client.list_all_tools().await.unwrap();
    // After the graph tools.
    assert_eq!(
        names(&tools),
        [
            "echo_graph",
            "view_agent_graph",
            "update_agent_graph",
            "yield_agent_graph"
        ]
    );
    let shape = |i: usize| schema_shape(&tools[i]);
    assert_eq!(
        shape(1),
        (vec!["cursor".into(), "graphId".into()], json!(["graphId"]))
    );
    assert_eq!(
        shape(2),
        (
            [
                "addWork",
                "finish",
                "graphId",
                "idempotencyKey",
                "operation",
                "stop"
            ]
            .map(String::from)
            .to_vec(),
            json!(["graphId"])
        )
    );
    assert_eq!(
        shape(3),
        (vec!["graphId".into(), "reason".into()], json!(["graphId"]))
    );
    assert!(
        tools[2]
            .description
            .as_deref()
            .unwrap()
            .starts_with("Adjust one agent graph durably"),
        "{:?}",
        tools[2].description
    );
    let update_schema = Value::Object((*tools[2].input_schema).clone());
    assert_eq!(
        update_schema["properties"]["operation"]["enum"],
        json!(["add_work", "stop", "finish"])
    );

    let r = call(&client, "update_agent_graph", add_work("g1", "k1")).await;
    let v = ok(&r);
    assert_eq!(v["update"]["revision"], 1);
    assert_eq!(v["update"]["created"], true);
    assert_eq!(v["graph"]["work"][0]["workId"], "w1");
    assert!(
        text(&r).starts_with("Agent graph update committed at revision 1.\n\nAgent graph g1 "),
        "{}",
        text(&r)
    );

    // A retry with the same key: the stored row.
    let r = call(&client, "update_agent_graph", add_work("g1", "k1")).await;
    let v = ok(&r);
    assert_eq!(v["update"]["revision"], 1);
    assert_eq!(v["update"]["created"], false);
    assert!(
        text(&r).starts_with("Agent graph update reused at revision 1.\n\n"),
        "{}",
        text(&r)
    );

    let r = call(&client, "view_agent_graph", json!({"graphId": "g1"})).await;
    let v = ok(&r);
    assert_eq!(v["revision"], 1);
    assert_eq!(v["work"][0]["workId"], "w1");
    assert_eq!(v["work"][0]["status"], "requested");
    assert_eq!(
        v["work"][0]["target"],
        json!({"kind": "preset", "id": "preset-a"})
    );
    assert!(
        text(&r).contains("[requested] w1 \u{2192} preset:preset-a: Port the tools"),
        "{}",
        text(&r)
    );

    let r = call(
        &client,
        "yield_agent_graph",
        json!({"graphId": "g1", "reason": "waiting"}),
    )
    .await;
    let v = ok(&r);
    let wake = v["wakeId"].as_str().unwrap().to_owned();
    assert_eq!(v["pendingWorkCount"], 1);
    assert_eq!(
        text(&r),
        format!("Yielded agent graph g1 (wake {wake}); 1 pending items continue.")
    );

    // Bad arguments: a tool error, never a protocol error.
    let r = call(
        &client,
        "update_agent_graph",
        json!({"graphId": "g1", "operation": "merge", "stop": [{"targetId": "w1"}]}),
    )
    .await;
    assert_eq!(
        failure(&r),
        "invalid arguments: \"arguments.operation\" must be one of [\"add_work\",\"stop\",\"finish\"]; missing required property \"arguments.stop[0].reason\""
    );
    let r = call(&client, "view_agent_graph", json!({})).await;
    assert_eq!(
        failure(&r),
        "invalid arguments: missing required property \"arguments.graphId\""
    );
    // A controller failure keeps its code.
    let r = call(&client, "yield_agent_graph", json!({"graphId": "empty"})).await;
    assert!(
        failure(&r).starts_with("[nothing_to_yield] agent graph empty: nothing to yield for"),
        "{}",
        text(&r)
    );
    // The graph tools still run.
    let r = call(&client, "echo_graph", json!({"input": {"topic": "t"}})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    client.cancel().await.unwrap();

    // On disk, rooted in the stdio session.
    let store = open_db(&env).await;
    let graphs = store.agent_graphs();
    let rows = graphs.list_schedule_updates("g1").unwrap();
    assert_eq!(rows.len(), 1);
    let source = &rows[0].request.source;
    assert!(source.session_id.starts_with("stdio-"), "{source:?}");
    assert_eq!(source.tool_call_id, "k1");
    assert_eq!(rows[0].request.add_work[0].work_id, "w1");
    assert_eq!(
        graphs
            .read_supervisor_wake("g1", &wake)
            .unwrap()
            .unwrap()
            .root_session_id,
        source.session_id
    );
}

#[tokio::test]
async fn without_controller_the_tools_are_absent() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let (transport, _) = TokioChildProcess::builder(env.serve(&[]))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = ().serve(transport).await.unwrap();
    assert_eq!(
        names(&client.list_all_tools().await.unwrap()),
        ["echo_graph"]
    );
    let r = call(&client, "update_agent_graph", add_work("g1", "k1")).await;
    assert_eq!(
        failure(&r),
        "[unknown_tool] no tool named \"update_agent_graph\"; available: echo_graph"
    );
    client.cancel().await.unwrap();
    assert!(!env.db().exists(), "no database without --controller");
}

/// `serve --controller --store postgres://...`: the agent graphs are kept
/// in a PostgreSQL store shared by hosts.
#[tokio::test]
async fn over_postgres_the_controller_offers_the_tools_and_keeps_graphs_there() {
    let pg = sandgraph_tests::postgres::TestPostgres::shared();
    let url = pg.fresh_db("controller_tools");
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let (transport, _) = TokioChildProcess::builder(env.serve(&["--controller", "--store", &url]))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = ().serve(transport).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(
        names(&tools),
        [
            "echo_graph",
            "view_agent_graph",
            "update_agent_graph",
            "yield_agent_graph"
        ]
    );
    let r = call(&client, "update_agent_graph", add_work("g1", "k1")).await;
    assert_eq!(ok(&r)["update"]["revision"], 1);
    client.cancel().await.unwrap();
    assert!(!env.db().exists(), "no redb file beside the URL");

    let graphs = Store::connect(&url).unwrap().agent_graphs();
    assert_eq!(graphs.list_graphs().unwrap(), ["g1"]);
    let rows = graphs.list_schedule_updates("g1").unwrap();
    assert_eq!(rows[0].request.add_work[0].work_id, "w1");
}

/// `serve --controller --http 127.0.0.1:0` with the database from
/// `SANDGRAPH_DB` (the default of `sandgraph threads`).
struct HttpServe {
    child: Child,
    url: String,
}

impl HttpServe {
    async fn start(env: &Env) -> HttpServe {
        let mut child = env
            .serve(&["--controller", "--http", "127.0.0.1:0"])
            .env("SANDGRAPH_DB", env.db())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("sandgraph: serving MCP at ")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(url.to_owned());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let url = tokio::time::timeout(SOON, rx)
            .await
            .expect("the server announces its url")
            .unwrap_or_else(|_| panic!("the server started: {:#?}", log.lock().unwrap()));
        HttpServe { child, url }
    }

    async fn client(&self) -> Session {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(self.url.clone()),
        );
        ().serve(transport).await.unwrap()
    }

    /// SIGTERM, and the clean exit.
    async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
        let status = tokio::time::timeout(SOON, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "{status}");
    }
}

/// The caller named by a `not_root_session` failure on `graph`.
fn caller_of(r: &CallToolResult, graph: &str) -> String {
    let t = failure(r);
    let prefix = format!(
        "[not_root_session] agent graph {graph}: only its root session may call this tool (caller "
    );
    t.strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{t:?} is not a not_root_session failure"))
        .to_owned()
}

/// `[not_root_session] agent graph <g>: only its root session may call
/// this tool (caller <caller>)`: the caller, after checking the rest and
/// that the root's id is not in the text.
fn not_root<'a>(r: &'a CallToolResult, graph: &str, root: &str) -> &'a str {
    let t = failure(r);
    assert!(!t.contains(root), "the root's id leaked: {t}");
    let prefix = format!(
        "[not_root_session] agent graph {graph}: only its root session may call this tool (caller "
    );
    let caller = t
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{t:?} is not a not_root_session failure for {root}"));
    assert!(!caller.is_empty() && caller != root, "{t}");
    caller
}

#[tokio::test]
async fn over_http_only_the_creating_session_may_call_the_tools_across_restarts() {
    let env = folder(&[]);
    let server = HttpServe::start(&env).await;
    let a = server.client().await;
    let b = server.client().await;
    let names = names(&a.list_all_tools().await.unwrap());
    assert_eq!(names, AGENT_GRAPH_TOOLS);

    let r = call(&a, "update_agent_graph", add_work("ga", "k1")).await;
    assert_eq!(ok(&r)["update"]["revision"], 1);
    // b is refused on a's graph; the refusal names b (the caller) only.
    let r = call(&b, "update_agent_graph", add_work("ga", "k1")).await;
    let caller_b = caller_of(&r, "ga");
    // b roots a graph of its own; a's refusal there names a: ga's root,
    // checked against the store below.
    let r = call(&b, "update_agent_graph", add_work("gb", "k1")).await;
    assert_eq!(ok(&r)["update"]["revision"], 1);
    let r = call(&a, "update_agent_graph", add_work("gb", "k2")).await;
    let root = not_root(&r, "gb", &caller_b).to_owned();
    assert_ne!(root, caller_b);
    let r = call(&b, "view_agent_graph", json!({"graphId": "ga"})).await;
    assert_eq!(not_root(&r, "ga", &root), caller_b);
    let r = call(&b, "yield_agent_graph", json!({"graphId": "ga"})).await;
    assert_eq!(not_root(&r, "ga", &root), caller_b);
    // The root session goes on.
    let r = call(&a, "view_agent_graph", json!({"graphId": "ga"})).await;
    assert_eq!(ok(&r)["work"][0]["workId"], "w1");

    // A second server cannot open the database while this one holds it.
    let out = env
        .serve(&["--controller", "--db", env.db().to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(16), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error[storage]: database ") && err.contains("is already open"),
        "{err}"
    );

    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
    server.stop().await;

    // Restarted on the same database: the graph is still there and still
    // belongs to the old root session, so a new session is refused.
    let server = HttpServe::start(&env).await;
    let c = server.client().await;
    let r = call(&c, "view_agent_graph", json!({"graphId": "ga"})).await;
    not_root(&r, "ga", &root);
    let r = call(&c, "update_agent_graph", add_work("ga", "k1")).await;
    not_root(&r, "ga", &root);
    c.cancel().await.unwrap();
    server.stop().await;

    let store = open_db(&env).await;
    let graphs = store.agent_graphs();
    let ga = graphs.list_schedule_updates("ga").unwrap();
    assert_eq!(ga.len(), 1);
    assert_eq!(ga[0].request.source.session_id, root);
    assert_eq!(ga[0].request.add_work[0].work_id, "w1");
    let gb = graphs.list_schedule_updates("gb").unwrap();
    assert_eq!(gb.len(), 1);
    assert_eq!(gb[0].request.source.session_id, caller_b);
    assert_eq!(graphs.list_graphs().unwrap(), ["ga", "gb"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn scheduled_work_runs_and_its_records_show_in_the_view() {
    use sandgraph_test_llm::{Reply, ScriptedLlm};
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    // The worker model: fill echo_graph's input from the instruction.
    let llm = ScriptedLlm::start([Reply::tool_call(
        "echo_graph",
        r#"{"input":{"topic":"alpha"}}"#,
    )])
    .await;
    std::fs::write(
        env.dir.path().join("sandgraph.toml"),
        format!(
            "[llm]\nbase_url = \"{}\"\nmodel = \"worker\"\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let client = stdio(&env, &[]).await;
    let update = call(
        &client,
        "update_agent_graph",
        json!({"graphId": "g1", "addWork": [
            {"subagentId": "echo_graph", "instruction": "echo alpha"}
        ]}),
    )
    .await;
    ok(&update);
    // The coordinator runs the work in the background: poll the view.
    let deadline = tokio::time::Instant::now() + SOON;
    let view = loop {
        let view = call(&client, "view_agent_graph", json!({"graphId": "g1"})).await;
        let value = ok(&view).clone();
        if value["work"][0]["status"] == "completed" {
            break value;
        }
        assert!(tokio::time::Instant::now() < deadline, "{value}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        view["records"][0]["summary"],
        r#"echo_graph returned {"topic":"alpha","log":["seen:alpha"]}"#
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["model"], "worker");
    assert_eq!(requests[0].tool_names(), vec!["echo_graph"]);
    // Finishing with the record closes the graph.
    let record = view["records"][0]["recordId"].as_str().unwrap().to_owned();
    let finish = call(
        &client,
        "update_agent_graph",
        json!({"graphId": "g1", "operation": "finish",
               "finish": {"resultIds": [record], "reason": "done"}}),
    )
    .await;
    assert_eq!(ok(&finish)["graph"]["closed"], true);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_bad_controller_section_fails_before_serving() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    std::fs::write(
        env.dir.path().join("sandgraph.toml"),
        "[controller]\nmax_new_activations = \"four\"\n",
    )
    .unwrap();
    let db = env.db();
    let out = env
        .serve(&["--controller", "--db", db.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "error[invalid_input]: sandgraph.toml: [controller]: invalid type: string \"four\""
        ),
        "{err}"
    );
}

/// The work poller: work an earlier server left pending (it had no usable
/// model, as a crashed one would have left it) is run by the next server
/// on the same database at start, without any update to trigger a wave.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_runs_the_work_an_earlier_one_left() {
    use sandgraph_test_llm::{Reply, ScriptedLlm};
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    // No sandgraph.toml: the default model has no key, so work is recorded
    // but not run.
    let client = stdio(&env, &[]).await;
    let update = call(
        &client,
        "update_agent_graph",
        json!({"graphId": "g1", "addWork": [
            {"subagentId": "echo_graph", "instruction": "echo alpha"},
            {"subagentId": "echo_graph", "instruction": "echo beta"}
        ]}),
    )
    .await;
    ok(&update);
    client.cancel().await.unwrap();
    {
        let store = open_db(&env).await;
        assert_eq!(store.agent_graphs().list_records("g1").unwrap(), []);
    }

    let llm = ScriptedLlm::start([
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"alpha"}}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"beta"}}"#),
    ])
    .await;
    std::fs::write(
        env.dir.path().join("sandgraph.toml"),
        format!(
            "[llm]\nbase_url = \"{}\"\nmodel = \"worker\"\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let db = env.db();
    let mut cmd = env.serve(&["--controller", "--db", db.to_str().unwrap()]);
    cmd.env("SANDGRAPH_LOG", "sandgraph::serve=info,warn")
        .env("SANDGRAPH_POLL_MS", "100");
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = ().serve(transport).await.unwrap();
    let mut lines = BufReader::new(stderr.unwrap()).lines();
    let mut seen = Vec::new();
    tokio::time::timeout(SOON, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let settled = line.contains("polled wave settled") && line.contains("records=2");
            seen.push(line);
            if settled {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no polled wave settled: {seen:#?}"));
    assert_eq!(llm.requests().len(), 2);
    client.cancel().await.unwrap();

    let store = open_db(&env).await;
    let mut summaries: Vec<String> = store
        .agent_graphs()
        .list_records("g1")
        .unwrap()
        .into_iter()
        .map(|r| r.summary)
        .collect();
    summaries.sort();
    assert_eq!(
        summaries,
        [
            r#"echo_graph returned {"topic":"alpha","log":["seen:alpha"]}"#,
            r#"echo_graph returned {"topic":"beta","log":["seen:beta"]}"#
        ]
    );
}

#[tokio::test]
async fn a_poll_interval_under_50_ms_is_refused_at_start() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let db = env.db();
    let out = env
        .serve(&["--controller", "--db", db.to_str().unwrap()])
        .env("SANDGRAPH_POLL_MS", "49")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "error[invalid_input]: SANDGRAPH_POLL_MS=49: expected a number of milliseconds, at least 50"
        ),
        "{err}"
    );
    assert!(!db.exists(), "refused before the database is opened");
}
