//! Noisy neighbours: the latency of one client's `echo_graph` calls over
//! MCP Streamable HTTP on an idle server, then beside hostile clients on
//! the same server, in one run.
//!
//! - "spinners": client A runs `hostile_fanout_spin`, whose one node sends
//!   300 tasks that spin forever; client B runs 8 `hostile_infinite_loop`
//!   calls at once.
//! - "refusals": one `hostile_refusal_loop` call looping on a `tools` call
//!   the host refuses (no grant), with the capability journal kept in a
//!   redb file.
//! - "http flood": one `hostile_http_flood` call firing 10,000 requests at
//!   a granted local server that accepts connections and never answers.
//!
//! Client C makes sequential echo calls; p50, p99 and max of each phase
//! are printed with their ratios to idle. The aims: p99 beside the
//! spinners no worse than 10x idle, max under 1 s; beside the refusal loop
//! and the http flood, p99 under 2x idle. The server runs on a runtime with
//! one worker per core, like `sandgraph serve`; the clients run on a thread
//! of their own, as they would in another process, so what is measured is
//! the server's share of the machine, not the clients' tasks queueing
//! behind guests.
//!
//! `cargo bench -p sandgraph-mcp --bench neighbours` (optionally
//! `-- CALLS`, the echo calls per phase, default 200).
//!
//! The neighbours run until their deadline ([`NEIGHBOUR_TIMEOUT`]); only
//! echo calls that start while all of a phase's neighbours are still in
//! flight are measured, and the row says how many that was if the
//! deadline came first.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use sandgraph_mcp::{MCP_PATH, McpServer, ServerOptions, bind_http};
use sandgraph_registry::{OperatorConfig, Registry, RegistryOptions};
use sandgraph_server::{HttpOptions, HttpServer};
use serde_json::json;

type Client = Arc<RunningService<RoleClient, ()>>;

/// Tasks A's fan-out sends.
const FANOUT_TASKS: u64 = 300;
/// B's concurrent spinning runs.
const SPINNERS: usize = 8;
/// Concurrent refusal loops of the "refusals" phase.
const REFUSERS: usize = 1;
/// Concurrent http floods of the "http flood" phase, and the requests each
/// fires.
const FLOODERS: usize = 1;
const FLOOD_REQUESTS: u64 = 10_000;
/// Deadline of every neighbour run: longer than the measured calls need on
/// a fair server, short enough that an unfair one ends the row.
const NEIGHBOUR_TIMEOUT: Duration = Duration::from_secs(10);
/// Echo calls before each phase's measurement (connection, caches).
const WARMUP_CALLS: usize = 20;
/// Wait after the neighbours are in flight, so their tasks are running.
const SETTLE: Duration = Duration::from_millis(300);

/// The operator's config: the hostile graphs as tools, ended by their
/// deadline only (the fuel is raised past what they can burn in it); the
/// flood is granted the never-answering server on `hold_port`.
fn config(hold_port: u16) -> String {
    let ms = NEIGHBOUR_TIMEOUT.as_millis();
    format!(
        "[graphs.hostile_infinite_loop]\nas_tool = true\ntimeout_ms = {ms}\nfuel = 10000000000000\n\n\
         [graphs.hostile_fanout_spin]\nas_tool = true\ntimeout_ms = {ms}\nfuel = 10000000000000\n\n\
         [graphs.hostile_refusal_loop]\nas_tool = true\ntimeout_ms = {ms}\nfuel = 10000000000000\n\n\
         [graphs.hostile_http_flood]\nas_tool = true\ntimeout_ms = {ms}\nfuel = 10000000000000\n\
         [graphs.hostile_http_flood.grants]\n\
         http = {{ allow = [\"http://127.0.0.1:{hold_port}\"], methods = [\"GET\"] }}\n"
    )
}

/// A granted server that accepts every connection and never answers,
/// holding them open: on its own thread, as it would be another host.
fn hold_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a hold server binds");
    let port = listener.local_addr().expect("its address").port();
    std::thread::Builder::new()
        .name("hold".into())
        .spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                match conn {
                    Ok(c) => held.push(c),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
        .expect("the hold thread starts");
    port
}

async fn registry(hold_port: u16) -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temp dir");
    // Under their built names: the flood's grant binds to a file named
    // after its graph, which hostile_http_flood.wasm is.
    for component in [
        sandgraph_tests::ECHO,
        sandgraph_tests::HOSTILE_INFINITE_LOOP,
        sandgraph_tests::HOSTILE_FANOUT_SPIN,
        sandgraph_tests::HOSTILE_REFUSAL_LOOP,
        sandgraph_tests::HOSTILE_HTTP_FLOOD,
    ] {
        let name = Path::new(component).file_name().expect("a file name");
        std::fs::copy(component, dir.path().join(name)).expect("copy a graph");
    }
    let config = OperatorConfig::parse(&config(hold_port), Path::new("neighbours.toml"))
        .expect("the bench config is valid");
    let store = sandgraph_store::Store::open(&dir.path().join("data.redb"))
        .expect("the journal's database opens");
    let options = RegistryOptions {
        dirs: vec![dir.path().to_path_buf()],
        strict: true,
        config,
        capability_log: Some(Arc::new(sandgraph_registry::StoreCapabilityLog::new(
            sandgraph_factors::journal::CapabilityJournal::open(&store),
        ))),
        ..RegistryOptions::default()
    };
    let (registry, _) = Registry::open(sandgraph_tests::runtime().clone(), options)
        .await
        .expect("the registry opens");
    (registry, dir)
}

async fn client(url: &str) -> Client {
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    Arc::new(().serve(transport).await.expect("a session"))
}

async fn call(client: &Client, name: &str, args: serde_json::Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = args.as_object().cloned();
    client.call_tool(params).await.expect("a tool result")
}

/// One echo call, checked; its latency.
async fn echo(client: &Client, i: usize) -> Duration {
    let topic = format!("c{i}");
    let t = Instant::now();
    let r = call(client, "echo_graph", json!({"input": {"topic": topic}})).await;
    let elapsed = t.elapsed();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(
        r.structured_content,
        Some(json!({"topic": topic, "log": [format!("seen:{topic}")]}))
    );
    elapsed
}

struct Row {
    p50: Duration,
    p99: Duration,
    max: Duration,
    calls: usize,
}

impl Row {
    fn new(mut latencies: Vec<Duration>) -> Row {
        assert!(!latencies.is_empty(), "no call was measured");
        latencies.sort();
        let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
        Row {
            p50: pct(0.50),
            p99: pct(0.99),
            max: latencies[latencies.len() - 1],
            calls: latencies.len(),
        }
    }

    fn print(&self, what: &str) {
        println!(
            "{what:<11} p50 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  ({} calls)",
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.calls
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The server under test, on the calling runtime: echo and both hostile
/// graphs behind MCP Streamable HTTP on 127.0.0.1.
async fn start_server(hold_port: u16) -> (HttpServer, McpServer, tempfile::TempDir) {
    let (registry, dir) = registry(hold_port).await;
    let server = McpServer::new(
        registry,
        ServerOptions {
            // A's fan-out is one run: 1 + 8 neighbours + 1 echo in flight.
            max_concurrent_runs: 16,
            ..ServerOptions::default()
        },
    );
    let http = bind_http(
        server.clone(),
        HttpOptions::new("127.0.0.1:0".parse().expect("an address")),
    )
    .await
    .expect("the server binds");
    (http, server, dir)
}

/// The three clients and the measurement, on their own runtime: only the
/// server shares its threads with the neighbours' guests.
async fn measure(url: String, server: McpServer, calls: usize, hold_port: u16) {
    let c = client(&url).await;
    println!(
        "echo_graph from one client, {calls} sequential calls per phase; \
         noisy: {FANOUT_TASKS}-task spinning fan-out + {SPINNERS} spinning runs"
    );

    for i in 0..WARMUP_CALLS {
        echo(&c, i).await;
    }
    let mut idle = Vec::with_capacity(calls);
    for i in 0..calls {
        idle.push(echo(&c, i).await);
    }
    let idle = Row::new(idle);
    idle.print("idle");

    let (a, b) = (client(&url).await, client(&url).await);
    let mut spinners = Vec::new();
    spinners.push(tokio::spawn(async move {
        call(&a, "hostile_fanout_spin", json!({"n": FANOUT_TASKS})).await
    }));
    for _ in 0..SPINNERS {
        let b = b.clone();
        spinners.push(tokio::spawn(async move {
            call(&b, "hostile_infinite_loop", json!({"input": {}})).await
        }));
    }
    let spin = beside(&c, &server, spinners, calls, "spinners").await;
    aims(&spin, &idle, 10.0, Some(Duration::from_secs(1)));

    let r = client(&url).await;
    let mut refusers = Vec::new();
    for _ in 0..REFUSERS {
        let r = r.clone();
        refusers.push(tokio::spawn(async move {
            call(
                &r,
                "hostile_refusal_loop",
                json!({"input": {"times": 1_000_000_000u64}}),
            )
            .await
        }));
    }
    let refusals = beside(&c, &server, refusers, calls, "refusals").await;
    aims(&refusals, &idle, 2.0, None);

    let f = client(&url).await;
    let mut flooders = Vec::new();
    for _ in 0..FLOODERS {
        let f = f.clone();
        let url = format!("http://127.0.0.1:{hold_port}/hold");
        flooders.push(tokio::spawn(async move {
            call(
                &f,
                "hostile_http_flood",
                json!({"input": {"url": url, "count": FLOOD_REQUESTS}}),
            )
            .await
        }));
    }
    let floods = beside(&c, &server, flooders, calls, "http flood").await;
    aims(&floods, &idle, 2.0, None);
}

/// Echo latencies while `neighbours` are in flight: waits until they all
/// are, measures, then cancels them.
async fn beside(
    c: &Client,
    server: &McpServer,
    neighbours: Vec<tokio::task::JoinHandle<CallToolResult>>,
    calls: usize,
    what: &str,
) -> Row {
    let started = Instant::now();
    let expected = neighbours.len();
    while server.stats().in_flight < expected {
        if let Some(i) = neighbours.iter().position(|n| n.is_finished()) {
            let done = neighbours.into_iter().nth(i).expect("the finished one");
            panic!("a neighbour ended before all started: {:?}", done.await);
        }
        assert!(
            started.elapsed() < NEIGHBOUR_TIMEOUT,
            "the neighbours never all started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(SETTLE).await;

    let mut noisy = Vec::with_capacity(calls);
    let mut cut_short = false;
    for i in 0..WARMUP_CALLS + calls {
        if neighbours.iter().any(|n| n.is_finished()) {
            cut_short = true;
            break;
        }
        let latency = echo(c, i).await;
        if i >= WARMUP_CALLS {
            noisy.push(latency);
        }
    }
    let noisy = Row::new(noisy);
    noisy.print(what);
    if cut_short {
        println!(
            "  (the neighbours ended first: {} s deadline or the call cap)",
            NEIGHBOUR_TIMEOUT.as_secs()
        );
    }
    // The neighbours end at their deadline (the server's cancel_all would
    // stop the next phase's runs too: it is its shutdown).
    for n in neighbours {
        n.await.expect("a neighbour task");
    }
    while server.stats().in_flight > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    noisy
}

/// Prints the phase's ratios to idle and whether its aims were met.
fn aims(noisy: &Row, idle: &Row, p99_aim: f64, max_aim: Option<Duration>) {
    let ratio = |n: Duration, i: Duration| n.as_secs_f64() / i.as_secs_f64();
    println!(
        "  /idle     p50 {:>7.1}x     p99 {:>7.1}x     max {:>7.1}x",
        ratio(noisy.p50, idle.p50),
        ratio(noisy.p99, idle.p99),
        ratio(noisy.max, idle.max)
    );
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    print!(
        "  aim: p99 <= {p99_aim}x idle: {}",
        met(noisy.p99.as_secs_f64() <= p99_aim * idle.p99.as_secs_f64())
    );
    match max_aim {
        Some(max) => println!("; max < {max:?}: {}", met(noisy.max < max)),
        None => println!(),
    }
}

fn main() {
    let calls: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    // The server's runtime has one worker per core, as `sandgraph serve`
    // does; the clients get a thread of their own, as they would in
    // another process.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("clients")
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let hold_port = hold_server();
    let (http, server, _dir) = server_rt.block_on(start_server(hold_port));
    println!(
        "{} cores; server on {} tokio workers, clients on their own thread",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        server_rt.metrics().num_workers()
    );
    client_rt.block_on(measure(http.url(MCP_PATH), server, calls.max(1), hold_port));
    server_rt.block_on(async {
        http.shutdown();
        let _ = http.wait().await;
    });
}
