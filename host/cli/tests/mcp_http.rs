//! `sandgraph serve --http`, the real binary: rmcp's Streamable HTTP client,
//! the bearer token from the environment, the graceful shutdown on
//! SIGTERM / SIGINT, and a client's calls beside noisy neighbours.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientRequest, Request, ServerResult};
use rmcp::service::PeerRequestOptions;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Safety net for anything that should happen soon; never a speed claim.
const SOON: Duration = Duration::from_secs(60);

const CONFIG: &str = r#"
# Spins until its 2 s deadline (or a cancellation).
[graphs.hostile_infinite_loop]
as_tool = true
timeout_ms = 2000
"#;

/// The graphs most tests serve: (file name, component).
const GRAPHS: &[(&str, &str)] = &[
    ("echo.wasm", sandgraph_tests::ECHO),
    ("spin.wasm", sandgraph_tests::HOSTILE_INFINITE_LOOP),
];

struct Server {
    _dir: tempfile::TempDir,
    child: Child,
    url: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(extra: &[&str], token: &str) -> Server {
        Server::start_with(GRAPHS, CONFIG, extra, token).await
    }

    /// A server over `graphs` ((file name, component) pairs) with
    /// `config` as its `sandgraph.toml`.
    async fn start_with(
        graphs: &[(&str, &str)],
        config: &str,
        extra: &[&str],
        token: &str,
    ) -> Server {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("graphs")).unwrap();
        for (name, c) in graphs {
            std::fs::copy(c, dir.path().join("graphs").join(name)).unwrap();
        }
        std::fs::write(dir.path().join("sandgraph.toml"), config).unwrap();
        // A tokens file replaces the shared token.
        let shared: &[&str] = if extra.contains(&"--tokens") {
            &[]
        } else {
            &["--token-env", "SANDGRAPH_TEST_TOKEN"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandgraph"))
            .args(["serve", "--graphs", "graphs", "--http", "127.0.0.1:0"])
            .args(shared)
            .args(extra)
            .current_dir(dir.path())
            .env("SANDGRAPH_TEST_TOKEN", token)
            .env("SANDGRAPH_LOG", "sandgraph_mcp=info,warn")
            .env("SANDGRAPH_CACHE", dir.path().join("cache.redb"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = stderr.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
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
            .expect("the server started");
        Server {
            _dir: dir,
            child,
            url,
            stderr,
        }
    }

    async fn wait_log(&self, parts: &[&str]) {
        self.wait_logs(parts, 1).await;
    }

    /// Waits for `count` log lines that each contain every one of `parts`.
    async fn wait_logs(&self, parts: &[&str], count: usize) {
        let deadline = tokio::time::Instant::now() + SOON;
        while self
            .stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .count()
            < count
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "fewer than {count} log lines with {parts:?}: {:#?}",
                self.stderr.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

#[tokio::test]
async fn http_serve_needs_the_token_and_lets_a_running_call_finish_on_sigterm() {
    let mut server = Server::start(&[], "tok-123").await;
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    assert!(server.url.ends_with("/mcp"));
    let http = reqwest::Client::new();
    let r = http
        .post(&server.url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .post(&server.url)
        .bearer_auth("tok-124")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone()).auth_header("tok-123"),
    );
    let client = ().serve(transport).await.unwrap();
    let mut echo = CallToolRequestParams::new("echo_graph");
    echo.arguments = json!({"input": {"topic": "h"}}).as_object().cloned();
    let r = client.call_tool(echo).await.unwrap();
    assert_eq!(
        r.structured_content,
        Some(json!({"topic": "h", "log": ["seen:h"]}))
    );

    let mut spin = CallToolRequestParams::new("hostile_infinite_loop");
    spin.arguments = json!({"input": {}}).as_object().cloned();
    let running = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(spin)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    server
        .wait_log(&["tool call started", "hostile_infinite_loop"])
        .await;
    server.signal("-TERM");
    server.wait_log(&["sandgraph: shutting down"]).await;
    // The call was not cancelled: it ran to its own deadline and the
    // client got that result.
    let resp = tokio::time::timeout(SOON, running.await_response())
        .await
        .unwrap()
        .unwrap();
    let ServerResult::CallToolResult(r) = resp else {
        panic!("a tool result: {resp:?}");
    };
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let rmcp::model::ContentBlock::Text(t) = &r.content[0] else {
        panic!("a text block: {r:?}");
    };
    assert_eq!(t.text, "[timeout] run exceeded its timeout of 2000 ms");
    let status = tokio::time::timeout(SOON, server.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    server
        .wait_log(&[
            "tool call ended",
            "hostile_infinite_loop",
            "cancelled=false",
        ])
        .await;
    // Nothing on stdout, even in HTTP mode.
    let mut out = String::new();
    tokio::io::AsyncReadExt::read_to_string(server.child.stdout.as_mut().unwrap(), &mut out)
        .await
        .unwrap();
    assert_eq!(out, "");
}

#[tokio::test]
async fn sigint_with_a_short_grace_cancels_the_running_call() {
    let mut server = Server::start(&["--shutdown-grace-ms", "100"], "t").await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone()).auth_header("t"),
    );
    let client = ().serve(transport).await.unwrap();
    let mut spin = CallToolRequestParams::new("hostile_infinite_loop");
    spin.arguments = json!({"input": {}}).as_object().cloned();
    let _running = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(spin)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    server
        .wait_log(&["tool call started", "hostile_infinite_loop"])
        .await;
    server.signal("-INT");
    let status = tokio::time::timeout(SOON, server.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    server
        .wait_log(&["grace period over: cancelling the running calls"])
        .await;
    // Cancelled by the shutdown, well before its own deadline would have
    // ended it with "exceeded its timeout".
    server
        .wait_log(&[
            "tool call ended",
            "hostile_infinite_loop",
            "outcome=\"timeout\"",
        ])
        .await;
}

/// The noisy-neighbour server: `echo_graph` beside two hostile graphs that
/// spin until their deadline. 10 s outlasts the measured calls by far; the
/// fuel is raised so the deadline, not the fuel (which a run with the
/// machine to itself would burn in about 10 s), is what ends them, whatever
/// share of the CPU each run gets.
const NOISY_CONFIG: &str = r#"
[graphs.hostile_infinite_loop]
as_tool = true
timeout_ms = 10000
fuel = 10000000000000

[graphs.hostile_fanout_spin]
as_tool = true
timeout_ms = 10000
fuel = 10000000000000
"#;

const NOISY_TIMEOUT: &str = "[timeout] run exceeded its timeout of 10000 ms";

/// Echo calls client C makes while the neighbours spin.
const ECHO_CALLS: usize = 50;

/// Safety net of one echo call under load. A behaviour bound, not a
/// benchmark (see `host/mcp/benches/neighbours.rs` for the figures): before
/// fair instance slots, each call waited for the whole 10 s neighbour
/// deadline.
const ECHO_SAFETY_NET: Duration = Duration::from_secs(5);

async fn client(server: &Server) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone()).auth_header("t"),
    );
    ().serve(transport).await.unwrap()
}

/// Starts `name(args)` on `client` and returns a task that awaits its
/// result and when it arrived.
async fn start_call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    name: &'static str,
    args: serde_json::Value,
) -> tokio::task::JoinHandle<(Instant, rmcp::model::CallToolResult)> {
    let mut params = CallToolRequestParams::new(name);
    params.arguments = args.as_object().cloned();
    let running = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::spawn(async move {
        let resp = running.await_response().await.unwrap();
        let ServerResult::CallToolResult(r) = resp else {
            panic!("a tool result from {name}: {resp:?}");
        };
        (Instant::now(), r)
    })
}

fn first_text(r: &rmcp::model::CallToolResult) -> &str {
    let rmcp::model::ContentBlock::Text(t) = &r.content[0] else {
        panic!("a text block: {r:?}");
    };
    &t.text
}

async fn echo(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, topic: &str) {
    let mut params = CallToolRequestParams::new("echo_graph");
    params.arguments = json!({"input": {"topic": topic}}).as_object().cloned();
    let r = client.call_tool(params).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(
        r.structured_content,
        Some(json!({"topic": topic, "log": [format!("seen:{topic}")]}))
    );
}

/// Issue 11's noisy neighbours: client A runs a graph whose one node sends
/// 300 tasks that spin, client B runs 8 spinning graphs, and meanwhile
/// client C's `echo_graph` calls are all served, each well within a safety
/// net, instead of queueing behind the neighbours' instances. The
/// neighbours then end at their own deadline and the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn echo_calls_are_served_while_neighbours_spin() {
    // The server's run limit counts tool calls, not tasks: A's fan-out is
    // one run, so A, B's 8 and C's one echo at a time are 10 runs in
    // flight. 16 lets all of them through with room to spare, so a
    // `[busy]` refusal can never stand in for the behaviour under test
    // (the default, 64, would too; the flag says what the test needs).
    let server = Server::start_with(
        &[
            ("echo.wasm", sandgraph_tests::ECHO),
            ("spin.wasm", sandgraph_tests::HOSTILE_INFINITE_LOOP),
            ("fanout.wasm", sandgraph_tests::HOSTILE_FANOUT_SPIN),
        ],
        NOISY_CONFIG,
        &["--max-concurrent-runs", "16"],
        "t",
    )
    .await;
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    // On an idle server first, so a failure below is about the neighbours.
    echo(&c, "idle").await;

    let mut neighbours = vec![start_call(&a, "hostile_fanout_spin", json!({"n": 300})).await];
    for _ in 0..8 {
        neighbours.push(start_call(&b, "hostile_infinite_loop", json!({"input": {}})).await);
    }
    server
        .wait_log(&["tool call started", "hostile_fanout_spin"])
        .await;
    server
        .wait_logs(&["tool call started", "hostile_infinite_loop"], 8)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut latencies = Vec::with_capacity(ECHO_CALLS);
    for i in 0..ECHO_CALLS {
        let t = Instant::now();
        tokio::time::timeout(ECHO_SAFETY_NET, echo(&c, &format!("c{i}")))
            .await
            .unwrap_or_else(|_| {
                panic!("echo call {i} took over {ECHO_SAFETY_NET:?} beside the neighbours")
            });
        latencies.push(t.elapsed());
    }
    let echoes_done = Instant::now();
    latencies.sort();
    eprintln!(
        "{ECHO_CALLS} echo calls beside the neighbours: p50 {:?}, max {:?}",
        latencies[ECHO_CALLS / 2],
        latencies[ECHO_CALLS - 1]
    );

    for (i, call) in neighbours.into_iter().enumerate() {
        let (ended, r) = tokio::time::timeout(SOON, call).await.unwrap().unwrap();
        // The neighbours really were running throughout C's calls.
        assert!(
            ended > echoes_done,
            "neighbour {i} ended before the echo calls did"
        );
        assert_eq!(r.is_error, Some(true), "neighbour {i}: {r:?}");
        assert_eq!(first_text(&r), NOISY_TIMEOUT, "neighbour {i}");
    }
    server
        .wait_logs(&["tool call ended", "outcome=\"timeout\""], 9)
        .await;
    // And the server keeps serving, to every client.
    echo(&c, "after").await;
    echo(&a, "after-a").await;
}

#[tokio::test]
async fn serve_with_a_tokens_file_names_each_client_and_refuses_a_readable_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    // sha256("alice-token")
    let digest = {
        let out = std::process::Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(b"alice-token")?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_owned()
    };
    std::fs::write(&tokens, format!("alice = \"{digest}\"\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = tokens.to_str().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandgraph"))
        .args([
            "serve",
            "--graphs",
            ".",
            "--http",
            "127.0.0.1:0",
            "--tokens",
            path,
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "tokens file {path} is accessible to group or other users (mode 0644): run chmod 600 \
             on it"
        )),
        "{stderr}"
    );
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = Server::start(&["--tokens", path], "unused").await;
    let r = reqwest::Client::new()
        .post(&server.url)
        .header("authorization", "Bearer t")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone())
            .auth_header("alice-token"),
    );
    let alice = ().serve(transport).await.unwrap();
    echo(&alice, "hello").await;
}
