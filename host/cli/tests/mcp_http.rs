//! `sandgraph serve --http`, the real binary: rmcp's Streamable HTTP client,
//! the bearer token from the environment, and the graceful shutdown on
//! SIGTERM / SIGINT.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

struct Server {
    _dir: tempfile::TempDir,
    child: Child,
    url: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(extra: &[&str], token: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("graphs")).unwrap();
        for (name, c) in [
            ("echo.wasm", sandgraph_tests::ECHO),
            ("spin.wasm", sandgraph_tests::HOSTILE_INFINITE_LOOP),
        ] {
            std::fs::copy(c, dir.path().join("graphs").join(name)).unwrap();
        }
        std::fs::write(dir.path().join("sandgraph.toml"), CONFIG).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandgraph"))
            .args(["serve", "--graphs", "graphs", "--http", "127.0.0.1:0"])
            .args(["--token-env", "SANDGRAPH_TEST_TOKEN"])
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
        let deadline = tokio::time::Instant::now() + SOON;
        while !self
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| parts.iter().all(|p| l.contains(p)))
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no log line with {parts:?}: {:#?}",
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
