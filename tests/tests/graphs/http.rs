//! The `http` capability against the real sandbox and a real loopback HTTP
//! server: what a graph reaches without a grant, with one, and what it
//! cannot get around (other ports, methods, schemes, names that resolve to
//! loopback, redirects, oversized bodies, a server slower than the run).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sandgraph_factors::http::{HttpGrant, MAX_RESPONSE_BODY_BYTES};
use sandgraph_runtime::caps::Capabilities;
use sandgraph_runtime::{Limits, RunOptions, RunOutcome};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::completed;
use sandgraph_tests::{load, runtime};

/// A loopback HTTP/1.1 server that counts the connections it accepts and
/// records each request line.
struct Server {
    port: u16,
    connections: AtomicUsize,
    requests: std::sync::Mutex<Vec<String>>,
}

impl Server {
    async fn start() -> Arc<Server> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Arc::new(Server {
            port: listener.local_addr().unwrap().port(),
            connections: AtomicUsize::new(0),
            requests: Default::default(),
        });
        let s = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                s.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(s.clone().serve(stream));
            }
        });
        server
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn serve(self: Arc<Self>, mut stream: TcpStream) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
            match stream.read(&mut byte).await {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let line = head.lines().next().unwrap_or_default().to_owned();
        self.requests.lock().unwrap().push(line.clone());
        let path = line.split(' ').nth(1).unwrap_or_default();
        let big = vec![b'x'; MAX_RESPONSE_BODY_BYTES as usize + 1024];
        let response: Vec<u8> = match path {
            "/hello" => {
                let body = "hello from the test server";
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            }
            "/redirect" => b"HTTP/1.1 302 Found\r\nlocation: http://ungranted.example/hello\r\n\
                content-length: 0\r\nconnection: close\r\n\r\n"
                .to_vec(),
            "/big" => {
                let mut r = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    big.len()
                )
                .into_bytes();
                r.extend_from_slice(&big);
                r
            }
            "/big-stream" => {
                // No length: the body runs to the end of the connection.
                let mut r = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
                r.extend_from_slice(&big);
                r
            }
            "/slow" => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                return;
            }
            _ => b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec(),
        };
        let _ = stream.write_all(&response).await;
        let _ = stream.shutdown().await;
    }
}

fn grant(allow: &[&str], methods: &[&str], private: bool) -> Capabilities {
    let allow: Vec<String> = allow.iter().map(|s| (*s).to_owned()).collect();
    let methods: Vec<String> = methods.iter().map(|s| (*s).to_owned()).collect();
    Capabilities::default().with(HttpGrant::parse(&allow, &methods, private).unwrap())
}

async fn fetch_with(caps: Capabilities, input: Value, limits: Limits) -> Value {
    let graph = load(sandgraph_tests::GRAPH_HTTP).await;
    let opts = RunOptions {
        limits: Some(limits),
        capabilities: caps,
        ..RunOptions::default()
    };
    completed(runtime().run(&graph, input, opts).await)
}

async fn fetch(caps: Capabilities, input: Value) -> Value {
    fetch_with(caps, input, Limits::default()).await
}

fn error_kind(state: &Value) -> &str {
    state["error"]["kind"].as_str().unwrap_or("<none>")
}

#[tokio::test]
pub async fn graph_http() {
    let server = Server::start().await;
    let other = Server::start().await;
    let graph = load(sandgraph_tests::GRAPH_HTTP).await;
    assert_eq!(graph.capabilities(), ["http"]);
    let hello = server.url("/hello");
    let origin = format!("http://127.0.0.1:{}", server.port);

    // No grant: denied, and the server saw no connection.
    let state = fetch(Capabilities::default(), json!({"url": hello})).await;
    assert_eq!(error_kind(&state), "denied", "{state}");
    assert_eq!(server.connections(), 0);

    // Granted (an IP literal grants its loopback address): the body arrives.
    let caps = grant(&[&origin], &[], false);
    let state = fetch(caps.clone(), json!({"url": hello})).await;
    assert_eq!(state["status"], 200, "{state}");
    assert_eq!(state["body"], "hello from the test server");
    assert_eq!(server.connections(), 1);
    assert_eq!(
        server.requests.lock().unwrap().last().unwrap(),
        "GET /hello HTTP/1.1"
    );

    // Another port, method or scheme than granted: denied, nothing sent.
    let state = fetch(caps.clone(), json!({"url": other.url("/hello")})).await;
    assert_eq!(error_kind(&state), "denied", "{state}");
    assert_eq!(other.connections(), 0);
    let state = fetch(caps.clone(), json!({"url": hello, "method": "POST"})).await;
    assert_eq!(error_kind(&state), "denied", "{state}");
    let https = format!("https://127.0.0.1:{}/hello", server.port);
    let state = fetch(caps.clone(), json!({"url": https})).await;
    assert_eq!(error_kind(&state), "denied", "{state}");
    assert_eq!(server.connections(), 1);

    // A name that resolves to loopback, granted by name: refused after
    // resolution, before any connection; `private = true` lets it through.
    let by_name = format!("http://localhost:{}", server.port);
    let local = format!("{by_name}/hello");
    let state = fetch(grant(&[&by_name], &[], false), json!({"url": local})).await;
    assert_eq!(error_kind(&state), "prohibited", "{state}");
    assert_eq!(server.connections(), 1);
    let state = fetch(grant(&[&by_name], &[], true), json!({"url": local})).await;
    assert_eq!(state["status"], 200, "{state}");
    assert_eq!(server.connections(), 2);

    // A redirect is not followed by the host: the guest sees the 302, and
    // its own follow-up to an ungranted host is denied.
    let state = fetch(
        caps.clone(),
        json!({"url": server.url("/redirect"), "follow": true}),
    )
    .await;
    assert_eq!(
        state["redirected"],
        json!({"status": 302, "location": "http://ungranted.example/hello"}),
        "{state}"
    );
    assert_eq!(error_kind(&state), "denied", "{state}");
    assert_eq!(server.connections(), 3);

    // A 100 MB request body: refused before anything is sent.
    let post = grant(&[&origin], &["GET", "POST"], false);
    let limits = Limits {
        memory: 256 * 1024 * 1024,
        ..Limits::default()
    };
    let state = fetch_with(
        post,
        json!({"url": hello, "method": "POST", "body_size": 100_000_000}),
        limits,
    )
    .await;
    assert_eq!(error_kind(&state), "too_large", "{state}");
    assert_eq!(server.connections(), 3);

    // A response over the cap, declared or streamed: an error, not the body.
    let state = fetch(caps.clone(), json!({"url": server.url("/big")})).await;
    assert_eq!(error_kind(&state), "too_large", "{state}");
    let state = fetch(caps.clone(), json!({"url": server.url("/big-stream")})).await;
    assert_eq!(error_kind(&state), "too_large", "{state}");
    assert_eq!(state.get("body_len"), None, "{state}");
}

#[tokio::test]
async fn a_slow_server_ends_with_the_run() {
    // The server never answers; the host would wait a minute for the first
    // byte, the run has 500 ms.
    let server = Server::start().await;
    let caps = grant(&[&format!("http://127.0.0.1:{}", server.port)], &[], false);
    let graph = load(sandgraph_tests::GRAPH_HTTP).await;
    let opts = RunOptions {
        limits: Some(Limits {
            timeout: Duration::from_millis(500),
            grace: Duration::from_millis(200),
            ..Limits::default()
        }),
        capabilities: caps,
        ..RunOptions::default()
    };
    let started = Instant::now();
    let out = runtime()
        .run(&graph, json!({"url": server.url("/slow")}), opts)
        .await;
    let took = started.elapsed();
    // The host's own first-byte timeout is a minute: well under it.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    match out {
        // The node saw the timeout at the soft deadline and handled it.
        Ok(RunOutcome::Completed(state)) => {
            let state = Value::Object(state);
            assert_eq!(error_kind(&state), "timeout", "{state}");
        }
        other => panic!("expected the node to record a timeout, got {other:?}"),
    }
    assert_eq!(server.connections(), 1);
    eprintln!("slow server: the run ended after {took:?} (timeout 500 ms)");
}

#[tokio::test]
async fn http_requests_are_journaled_allowed_or_refused() {
    let server = Server::start().await;
    let origin = format!("http://127.0.0.1:{}", server.port);
    let log = std::sync::Arc::new(super::capabilities::Recorder::default());
    let mut caps = grant(&[&origin], &[], false);
    caps.log = Some(log.clone());
    fetch(caps.clone(), json!({"url": server.url("/hello")})).await;
    fetch(caps, json!({"url": server.url("/hello"), "method": "POST"})).await;
    let calls = log.0.lock().unwrap().clone();
    let rows: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c.capability.as_str(),
                c.target.as_str(),
                c.decision.as_str(),
            )
        })
        .collect();
    let target = |m: &str| format!("{m} http://127.0.0.1:{}", server.port);
    assert_eq!(
        rows,
        [
            ("http", target("GET").as_str(), "allowed"),
            ("http", target("POST").as_str(), "denied"),
        ]
    );
    assert_eq!(calls[0].graph, "graph_http");
    assert!(
        calls[1].reason.as_deref().unwrap().contains("POST"),
        "{:?}",
        calls[1].reason
    );
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn http_exchanges_record_once_and_replay_offline() {
    use sandgraph_factors::http::{HttpCassette, HttpReplay};
    let server = Server::start().await;
    let origin = format!("http://127.0.0.1:{}", server.port);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let with = |cassette: HttpCassette| {
        let allow = vec![origin.clone()];
        Capabilities::default().with(
            HttpGrant::parse(&allow, &[], false)
                .unwrap()
                .with_cassette(cassette),
        )
    };
    let writer = sandgraph_llm::cassette::CassetteWriter::create(&path).unwrap();
    let live = fetch(
        with(HttpCassette::Record(writer)),
        json!({"url": server.url("/hello")}),
    )
    .await;
    assert_eq!(live["body"], "hello from the test server", "{live}");
    assert_eq!(server.connections(), 1);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(r#""kind":"http""#), "{text}");

    // Offline: the same answer, no connection; then nothing more recorded.
    let replay = HttpReplay::open(&path).unwrap();
    let caps = with(HttpCassette::Replay(replay));
    let replayed = fetch(caps.clone(), json!({"url": server.url("/hello")})).await;
    assert_eq!(replayed["status"], live["status"]);
    assert_eq!(replayed["body"], live["body"]);
    let again = fetch(caps.clone(), json!({"url": server.url("/hello")})).await;
    assert_eq!(error_kind(&again), "denied", "{again}");
    // The grant still applies when replaying.
    let other = fetch(caps, json!({"url": "http://127.0.0.1:9/x"})).await;
    assert_eq!(error_kind(&other), "denied", "{other}");
    assert_eq!(server.connections(), 1);
}

/// A loopback server that accepts connections and never answers, holding
/// each open until the client closes it, and counts how many are open at
/// once.
struct HoldServer {
    port: u16,
    accepted: AtomicUsize,
    open: AtomicUsize,
    max_open: AtomicUsize,
}

impl HoldServer {
    async fn start() -> Arc<HoldServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Arc::new(HoldServer {
            port: listener.local_addr().unwrap().port(),
            accepted: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            max_open: AtomicUsize::new(0),
        });
        let s = server.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    // Out of descriptors, say: keep accepting.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                s.accepted.fetch_add(1, Ordering::SeqCst);
                let now = s.open.fetch_add(1, Ordering::SeqCst) + 1;
                s.max_open.fetch_max(now, Ordering::SeqCst);
                let s = s.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 512];
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                    s.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        server
    }
}

/// Set in the process [`hostile_http_flood`] starts for the flood.
const FLOOD_CHILD: &str = "SANDGRAPH_TEST_HTTP_FLOOD_CHILD";

/// Most the flood may grow the resident set of its process, in KiB. What
/// the host may keep for it: 16 requests in flight (a 16 KiB body and a
/// connection's buffers each), 256 waiting (their heads and the body chunk
/// wasi:http buffers), 10,000 refused requests' task and table entries
/// until the guest reads them, and the guest's instance: a few tens of
/// MiB. Unbounded, 10,000 connections with their bodies take hundreds.
const MAX_FLOOD_GROWTH_KIB: u64 = 96 * 1024;

/// A field of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
pub async fn hostile_http_flood() {
    // The flood runs in a process of its own (this test binary, running
    // only `http_flood_in_this_process`), so the peak resident set it
    // reports is the flood's, not that of the tests running beside it.
    let exe = std::env::current_exe().unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(exe)
            .args(["--exact", "http::http_flood_in_this_process"])
            .args(["--nocapture", "--test-threads=1"])
            .env(FLOOD_CHILD, "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let figure = |name: &str| -> u64 {
        let at = stderr
            .find(&format!("{name} "))
            .unwrap_or_else(|| panic!("no {name} in {stdout}\n{stderr}"));
        let rest = &stderr[at + name.len() + 1..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    let (before, peak) = (figure("rss_before_kib"), figure("rss_peak_kib"));
    let growth = peak.saturating_sub(before);
    eprintln!("http flood: resident set {before} KiB before, peak {peak} KiB");
    assert!(
        growth < MAX_FLOOD_GROWTH_KIB,
        "the flood grew the process by {growth} KiB (at most {MAX_FLOOD_GROWTH_KIB})"
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}

/// The flood itself, run by [`hostile_http_flood`] in a process of its
/// own; a no-op in a test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_flood_in_this_process() {
    use sandgraph_factors::http::{MAX_HTTP_REQUESTS_PER_RUN, MAX_HTTP_WAITING_PER_RUN};
    if std::env::var_os(FLOOD_CHILD).is_none() {
        return;
    }
    let hold = HoldServer::start().await;
    let ok = Server::start().await;
    let origin = |port: u16| format!("http://127.0.0.1:{port}");
    let flood_graph = load(sandgraph_tests::HOSTILE_HTTP_FLOOD).await;
    // Warm: the runtime, its pool and an http exchange, before measuring.
    let caps = grant(&[&origin(ok.port)], &[], false);
    let state = fetch(caps.clone(), json!({"url": ok.url("/hello")})).await;
    assert_eq!(state["status"], 200, "{state}");
    let rss_before = status_kib("VmRSS");

    // The deadline leaves the guest time to make all 10,000 requests
    // before it comes (on a loaded 2-core machine two seconds covered only
    // two thirds of them, and every later request then timed out at once,
    // which the bound on timeouts below cannot tell from a waiting queue
    // that grew past its cap). The grace is how long the guest has, after
    // the deadline, to tally the outcomes and return.
    let limits = Limits {
        timeout: Duration::from_secs(6),
        grace: Duration::from_secs(2),
        ..Limits::default()
    };
    let opts = RunOptions {
        limits: Some(limits.clone()),
        capabilities: grant(&[&origin(hold.port)], &["GET", "POST"], false),
        ..RunOptions::default()
    };
    let url = format!("{}/hold", origin(hold.port));
    let input = json!({"url": url, "count": 10_000, "body_size": 16 * 1024});
    let started = Instant::now();
    let out = runtime().run(&flood_graph, input, opts).await;
    let took = started.elapsed();
    let state = completed(out);
    let rss_peak = status_kib("VmHWM");
    eprintln!("rss_before_kib {rss_before} rss_peak_kib {rss_peak}");
    eprintln!(
        "http flood: ended after {took:?}; {} connections accepted, at most {} open at once; \
         outcomes {}",
        hold.accepted.load(Ordering::SeqCst),
        hold.max_open.load(Ordering::SeqCst),
        state["outcomes"]
    );

    // Within its deadline plus the grace period (and a little slack for a
    // loaded machine).
    assert!(
        took < limits.timeout + limits.grace + Duration::from_secs(1),
        "took {took:?}"
    );
    // Never more connections than the run's cap, and the cap was reached.
    let max_open = hold.max_open.load(Ordering::SeqCst);
    assert!(
        max_open <= MAX_HTTP_REQUESTS_PER_RUN,
        "{max_open} open at once"
    );
    assert!(hold.accepted.load(Ordering::SeqCst) >= MAX_HTTP_REQUESTS_PER_RUN);
    // Each request got its typed error: the ones in flight or waiting
    // timed out at the deadline, the rest were refused at once (but on a
    // loaded machine the guest may still be making requests when the
    // deadline comes, and those end as timeouts too: the bound allows
    // for a tenth of the flood).
    let outcomes = state["outcomes"].as_object().unwrap();
    let count = |k: &str| outcomes.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (denied, timeout) = (count("HttpRequestDenied"), count("HttpResponseTimeout"));
    assert_eq!(denied + timeout, 10_000, "{outcomes:?}");
    assert!(
        timeout >= MAX_HTTP_REQUESTS_PER_RUN as u64
            && timeout <= (MAX_HTTP_REQUESTS_PER_RUN + MAX_HTTP_WAITING_PER_RUN) as u64 + 1_000,
        "{outcomes:?}"
    );
    // The connections close with the run.
    let closing = Instant::now();
    while hold.open.load(Ordering::SeqCst) > 0 {
        assert!(
            closing.elapsed() < Duration::from_secs(5),
            "connections left open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The next call is served: an http exchange and a plain run.
    let state = fetch(caps, json!({"url": ok.url("/hello")})).await;
    assert_eq!(state["body"], "hello from the test server", "{state}");
    let state = completed(
        runtime()
            .run(
                &load(sandgraph_tests::ECHO).await,
                json!({"topic": "after"}),
                RunOptions::default(),
            )
            .await,
    );
    assert_eq!(state["log"], json!(["seen:after"]));
}

#[tokio::test]
async fn http_requests_are_charged_to_the_run_byte_budget() {
    use sandgraph_factors::http::MAX_HTTP_REQUESTS_PER_RUN;
    // 64 requests with 16 KiB bodies at a server that holds them open,
    // under the smallest host byte budget (1 MiB): each request in flight
    // costs its head, its body and its connection's buffers (about 150
    // KiB), so fewer than the run's 16 slots fit, and the rest are refused
    // naming the budget.
    let hold = HoldServer::start().await;
    let graph = load(sandgraph_tests::HOSTILE_HTTP_FLOOD).await;
    let log = Arc::new(super::capabilities::Recorder::default());
    let origin = format!("http://127.0.0.1:{}", hold.port);
    let mut caps = grant(&[&origin], &["POST"], false);
    caps.log = Some(log.clone());
    let opts = RunOptions {
        limits: Some(Limits {
            timeout: Duration::from_secs(1),
            host_bytes: 1 << 20,
            ..Limits::default()
        }),
        capabilities: caps,
        ..RunOptions::default()
    };
    let input = json!({"url": format!("{origin}/hold"), "count": 64, "body_size": 16 * 1024});
    let state = completed(runtime().run(&graph, input, opts).await);
    let max_open = hold.max_open.load(Ordering::SeqCst);
    eprintln!(
        "1 MiB budget: at most {max_open} open at once; outcomes {}",
        state["outcomes"]
    );
    assert!(max_open >= 1, "{state}");
    assert!(
        max_open < MAX_HTTP_REQUESTS_PER_RUN,
        "{max_open} open at once"
    );
    let calls = log.0.lock().unwrap().clone();
    // Refusals of one kind are one row with their count.
    assert_eq!(calls.iter().map(|c| c.count).sum::<u64>(), 64, "{calls:?}");
    let over = calls
        .iter()
        .filter(|c| c.decision == "denied")
        .filter_map(|c| c.reason.as_deref())
        .find(|r| r.contains("host byte budget of 1.0 MiB"));
    assert!(over.is_some(), "{calls:?}");
    eprintln!("refused: {}", over.unwrap());
}
