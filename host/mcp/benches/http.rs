//! Calls per second and p50/p99 latency of the echo tool: in process
//! (`GraphTool::call`) and over MCP Streamable HTTP (rmcp's client, one
//! session per concurrent client, a real server on 127.0.0.1), with 1, 8
//! and 64 concurrent clients, in one run.
//!
//! `cargo bench -p sandgraph-mcp --bench http` (optionally `-- SECONDS`,
//! the measuring time per row, default 3).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use sandgraph_mcp::{HttpOptions, HttpServer, McpServer, ServerOptions};
use sandgraph_registry::{CallOptions, GraphTool, Registry, RegistryOptions};
use serde_json::json;

const CONCURRENCY: [usize; 3] = [1, 8, 64];
const WARMUP: Duration = Duration::from_millis(500);

struct Row {
    calls: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Row {
    fn print(&mut self, what: &str, clients: usize) {
        self.latencies.sort();
        let pct = |p: f64| {
            let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
            self.latencies[i].as_secs_f64() * 1e3
        };
        println!(
            "{what:<10} {clients:>3} clients  {:>8.0} calls/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} calls)",
            self.calls as f64 / self.elapsed.as_secs_f64(),
            pct(0.50),
            pct(0.99),
            self.calls
        );
    }
}

/// Runs `clients` loops of `one` for `measure` after a warmup; collects
/// every call's latency.
async fn drive<F, Fut>(clients: usize, measure: Duration, one: F) -> Row
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let start = Instant::now();
    let measure_from = start + WARMUP;
    let end = measure_from + measure;
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let one = one.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = 0u64;
                loop {
                    let t = Instant::now();
                    if t >= end {
                        break;
                    }
                    one(c, i).await;
                    if t >= measure_from {
                        lat.push(t.elapsed());
                    }
                    i += 1;
                }
                lat
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.expect("a client task"));
    }
    Row {
        calls: latencies.len(),
        elapsed: measure,
        latencies,
    }
}

async fn registry() -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::copy(sandgraph_tests::ECHO, dir.path().join("echo.wasm")).expect("copy echo");
    let options = RegistryOptions {
        dirs: vec![dir.path().to_path_buf()],
        ..RegistryOptions::default()
    };
    let (registry, _) = Registry::open(sandgraph_tests::runtime().clone(), options)
        .await
        .expect("the registry opens");
    (registry, dir)
}

async fn bench(measure: Duration) {
    let (registry, _dir) = registry().await;
    let echo: Arc<GraphTool> = registry.get("echo_graph").expect("echo is mounted");
    println!(
        "echo_graph, {} s per row after {} ms warmup",
        measure.as_secs_f64(),
        WARMUP.as_millis()
    );
    for clients in CONCURRENCY {
        let tool = echo.clone();
        let mut row = drive(clients, measure, move |c, i| {
            let tool = tool.clone();
            async move {
                let args = json!({"input": {"topic": format!("c{c}-{i}")}});
                let out = tool.call(args, CallOptions::default()).await;
                assert!(out.is_ok(), "{out:?}");
            }
        })
        .await;
        row.print("in-process", clients);
    }

    let server = McpServer::new(
        registry,
        ServerOptions {
            max_concurrent_runs: 1024,
            ..ServerOptions::default()
        },
    );
    let http = HttpServer::bind(
        server,
        HttpOptions::new("127.0.0.1:0".parse().expect("an address")),
    )
    .await
    .expect("the server binds");
    for clients in CONCURRENCY {
        let mut sessions = Vec::new();
        for _ in 0..clients {
            let transport = StreamableHttpClientTransport::with_client(
                reqwest::Client::new(),
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(http.url()),
            );
            sessions.push(Arc::new(().serve(transport).await.expect("a session")));
        }
        let sessions = Arc::new(sessions);
        let s = sessions.clone();
        let mut row = drive(clients, measure, move |c, i| {
            let s = s.clone();
            async move {
                let mut p = CallToolRequestParams::new("echo_graph");
                p.arguments = json!({"input": {"topic": format!("c{c}-{i}")}})
                    .as_object()
                    .cloned();
                let r = s[c].call_tool(p).await.expect("a result");
                assert_eq!(r.is_error, Some(false));
            }
        })
        .await;
        row.print("http", clients);
        drop(sessions);
    }
    http.shutdown();
    let _ = http.wait().await;
}

fn main() {
    let secs: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(bench(Duration::from_secs_f64(secs)));
}
