//! The `http` capability against the real sandbox and a real loopback HTTP
//! server: what a graph reaches without a grant, with one, and what it
//! cannot get around (other ports, methods, schemes, names that resolve to
//! loopback, redirects, oversized bodies, a server slower than the run).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sandgraph_runtime::caps::Capabilities;
use sandgraph_runtime::caps::http::{HttpGrant, MAX_RESPONSE_BODY_BYTES};
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
    Capabilities {
        http: Some(HttpGrant::parse(&allow, &methods, private).unwrap()),
        ..Capabilities::default()
    }
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
    use sandgraph_runtime::caps::http::{HttpCassette, HttpReplay};
    let server = Server::start().await;
    let origin = format!("http://127.0.0.1:{}", server.port);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let with = |cassette: HttpCassette| {
        let allow = vec![origin.clone()];
        Capabilities {
            http: Some(
                HttpGrant::parse(&allow, &[], false)
                    .unwrap()
                    .with_cassette(cassette),
            ),
            ..Capabilities::default()
        }
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
