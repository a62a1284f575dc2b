//! Calls per second and p50/p99 latency of the echo tool: in process
//! (`GraphTool::run`) and over MCP Streamable HTTP (rmcp's client, one
//! session per concurrent client, a real server on 127.0.0.1), with 1, 8
//! and 64 concurrent clients, in one run.
//!
//! `cargo bench -p sandgraph-mcp --bench http` (optionally `-- SECONDS`,
//! the measuring time per row, default 3).
//!
//! `cargo bench -p sandgraph-mcp --bench http -- sockets [IDLE]`: the
//! server's CPU per call when loopback clients are told apart by their
//! socket's owner (no token) against the same load with a bearer token,
//! while IDLE (default 5,000) idle TCP sockets are open on the host. The
//! load is 32 sessions making 50 echo calls each, twice per mode,
//! interleaved; the server runs on a runtime of its own and its CPU is the
//! sum over that runtime's threads (`/proc/self/task/*/stat`), so the
//! clients' work is not counted. The aim: without tokens within 1.5x of
//! with a token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use sandgraph_core::Start;
use sandgraph_mcp::{MCP_PATH, McpServer, ServerOptions, bind_http};
use sandgraph_registry::{CallOptions, GraphTool, Registry, RegistryOptions};
use sandgraph_server::{HttpOptions, HttpServer};
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
    std::fs::copy(sandgraph_tests::ECHO, dir.path().join("echo_graph.wasm")).expect("copy echo");
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
                let out = tool
                    .run(Start::Input(args), CallOptions::default(), &mut |_| {})
                    .await;
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
    let http = bind_http(
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
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(http.url(MCP_PATH)),
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

/// Sessions and calls per session of one `sockets` round.
const SOCKET_SESSIONS: usize = 32;
const SOCKET_CALLS: usize = 50;

/// Thread ids of the server runtime of the `sockets` mode.
static SERVER_TIDS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// CPU time (user + system) the threads `tids` have used so far.
fn threads_cpu(tids: &[i32]) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut total = 0u64;
    for tid in tids {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
            continue;
        };
        // Fields after the command (which may hold spaces), from its ')':
        // state is field 3, utime 14 and stime 15.
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        total += field(14).unwrap_or(0) + field(15).unwrap_or(0);
    }
    Duration::from_secs_f64(total as f64 / ticks)
}

/// Opens `n` idle TCP sockets on loopback (pairs of a connection and its
/// accepted end), raising the descriptor limit as far as allowed.
fn idle_sockets(n: usize) -> Vec<std::net::TcpStream> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener binds");
    let addr = listener.local_addr().expect("its address");
    let mut held = Vec::with_capacity(n);
    while held.len() + 1 < n {
        held.push(std::net::TcpStream::connect(addr).expect("an idle connection"));
        held.push(listener.accept().expect("an accepted connection").0);
    }
    held
}

/// One round: `SOCKET_SESSIONS` sessions on `url`, each making
/// `SOCKET_CALLS` echo calls; the server's CPU per call, calls per second
/// and the latencies.
async fn socket_round(url: &str, token: Option<&str>) -> Round {
    let mut sessions = Vec::new();
    for _ in 0..SOCKET_SESSIONS {
        let mut config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url.to_owned(),
            );
        if let Some(t) = token {
            config = config.auth_header(t);
        }
        let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
        sessions.push(Arc::new(().serve(transport).await.expect("a session")));
    }
    let tids = SERVER_TIDS.lock().expect("the tid list").clone();
    let cpu_before = threads_cpu(&tids);
    let started = Instant::now();
    let tasks: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(c, s)| {
            let s = s.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(SOCKET_CALLS);
                for i in 0..SOCKET_CALLS {
                    let mut p = CallToolRequestParams::new("echo_graph");
                    p.arguments = json!({"input": {"topic": format!("c{c}-{i}")}})
                        .as_object()
                        .cloned();
                    let t = Instant::now();
                    let r = s.call_tool(p).await.expect("a result");
                    lat.push(t.elapsed());
                    assert_eq!(r.is_error, Some(false), "{r:?}");
                }
                lat
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.expect("a client task"));
    }
    let elapsed = started.elapsed();
    let tids = SERVER_TIDS.lock().expect("the tid list").clone();
    let cpu = threads_cpu(&tids).saturating_sub(cpu_before);
    let calls = latencies.len();
    (
        cpu / u32::try_from(calls).unwrap_or(u32::MAX),
        calls as f64 / elapsed.as_secs_f64(),
        latencies,
    )
}

/// One round's results: server CPU per call, calls per second, latencies.
type Round = (Duration, f64, Vec<Duration>);

/// Prints the mean of `rounds` of one mode; its server CPU per call.
fn report(what: &str, rounds: &[Round]) -> Duration {
    let cpu: Duration = rounds.iter().map(|r| r.0).sum::<Duration>() / rounds.len() as u32;
    let rate = rounds.iter().map(|r| r.1).sum::<f64>() / rounds.len() as f64;
    let mut lat: Vec<Duration> = rounds.iter().flat_map(|r| r.2.iter().copied()).collect();
    lat.sort();
    let p99 = lat[((lat.len() as f64 - 1.0) * 0.99).round() as usize];
    println!(
        "{what:<14} server CPU {:>7.1} us/call  {:>7.0} calls/s  p99 {:>7.2} ms",
        cpu.as_secs_f64() * 1e6,
        rate,
        p99.as_secs_f64() * 1e3
    );
    cpu
}

/// Sockets listed in a `/proc/net/tcp`-style table (0 when unreadable).
fn tcp_sockets(table: &str) -> usize {
    std::fs::read_to_string(table)
        .map(|t| t.lines().count().saturating_sub(1))
        .unwrap_or(0)
}

/// Echo served twice over MCP HTTP from one registry: without a token
/// (loopback peers told apart by their socket's owner) and with `token`.
async fn serve_echo_twice(token: &str) -> (HttpServer, HttpServer, tempfile::TempDir) {
    let (registry, dir) = registry().await;
    let serve = |token: Option<&str>| {
        let server = McpServer::new(
            registry.clone(),
            ServerOptions {
                max_concurrent_runs: 1024,
                // All 32 sessions are one principal in either mode.
                max_runs_per_principal: 1024,
                ..ServerOptions::default()
            },
        );
        let mut options = HttpOptions::new("127.0.0.1:0".parse().expect("an address"));
        options.token = token.map(str::to_owned);
        bind_http(server, options)
    };
    let open = serve(None).await.expect("the server binds");
    let tokened = serve(Some(token)).await.expect("the server binds");
    (open, tokened, dir)
}

/// The `sockets` mode (see the module docs).
fn sockets(idle: usize) {
    let _held = idle_sockets(idle);
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("server")
        // Blocking threads stay, so none takes its CPU time away with it.
        .thread_keep_alive(Duration::from_secs(3600))
        .on_thread_start(|| {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            SERVER_TIDS.lock().expect("the tid list").push(tid);
        })
        .build()
        .expect("a tokio runtime");
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("clients")
        .enable_all()
        .build()
        .expect("a tokio runtime");
    const TOKEN: &str = "bench-token";
    let (open, tokened, _dir) = server_rt.block_on(serve_echo_twice(TOKEN));
    let sockets_now = tcp_sockets("/proc/net/tcp") + tcp_sockets("/proc/net/tcp6");
    println!(
        "echo_graph over MCP HTTP, {SOCKET_SESSIONS} sessions x {SOCKET_CALLS} calls per round, \
         {sockets_now} TCP sockets on the host"
    );
    let (mut without, mut with) = (Vec::new(), Vec::new());
    client_rt.block_on(async {
        // Warm both servers (pools, compiled component, caches).
        socket_round(&open.url(MCP_PATH), None).await;
        socket_round(&tokened.url(MCP_PATH), Some(TOKEN)).await;
        for _ in 0..2 {
            without.push(socket_round(&open.url(MCP_PATH), None).await);
            with.push(socket_round(&tokened.url(MCP_PATH), Some(TOKEN)).await);
        }
    });
    let a = report("without tokens", &without);
    let b = report("with a token", &with);
    let ratio = a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!(
        "  without/with  {ratio:.2}x  aim <= 1.5x: {}",
        if ratio <= 1.5 { "met" } else { "MISSED" }
    );
    server_rt.block_on(async {
        for h in [open, tokened] {
            h.shutdown();
            let _ = h.wait().await;
        }
    });
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let first = args.next();
    if first.as_deref() == Some("sockets") {
        let idle = args.find_map(|a| a.parse().ok()).unwrap_or(5_000);
        sockets(idle);
        return;
    }
    let secs: f64 = first
        .into_iter()
        .chain(args)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(bench(Duration::from_secs_f64(secs)));
}
