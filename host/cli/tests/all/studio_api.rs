//! The studio served by `sandgraph serve --http`, the real binary, through
//! a real HTTP client: its static shell (CSP, ETag, no token needed), its
//! JSON API behind the bearer token and the CSRF rule, and `--no-ui`.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// Safety net for anything that should happen soon; never a speed claim.
const SOON: Duration = Duration::from_secs(60);

/// The token every test server requires.
const TOKEN: &str = "studio-token";

/// The graphs the test servers mount: (file name, component).
const GRAPHS: &[(&str, &str)] = &[
    ("greet_graph.wasm", sandgraph_tests::GREET),
    ("approval_graph.wasm", sandgraph_tests::APPROVAL),
    ("echo_graph.wasm", sandgraph_tests::ECHO),
    (
        "hostile_escape_error.wasm",
        sandgraph_tests::HOSTILE_ESCAPE_ERROR,
    ),
    (
        "hostile_infinite_loop.wasm",
        sandgraph_tests::HOSTILE_INFINITE_LOOP,
    ),
];

/// The config of a test server not given another: the shared token's
/// principal is a studio operator. Most graphs here are not offered to MCP
/// (their `as_tool` is false), and the tests drive them through the studio.
const OPERATOR_CONFIG: &str = "[studio]\noperators = [\"principal:token\"]\n";

/// `sandgraph serve --graphs graphs --http 127.0.0.1:0` in `dir`, with the
/// test environment, its output dropped.
fn serve_command(dir: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandgraph"));
    command
        .args(["serve", "--graphs", "graphs", "--http", "127.0.0.1:0"])
        .current_dir(dir)
        .env("SANDGRAPH_TEST_TOKEN", TOKEN)
        .env("SANDGRAPH_LOG", "warn")
        .env("SANDGRAPH_CACHE", crate::common::cache::shared())
        .env_remove("SANDGRAPH_STORE")
        .env_remove("DEEPSEEK_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

struct Server {
    dir: tempfile::TempDir,
    child: Child,
    /// `http://127.0.0.1:<port>`, no trailing slash.
    base: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// `sandgraph serve --http 127.0.0.1:0 --token-env ... --store ...
    /// --config sandgraph.toml` over [`GRAPHS`] with `extra` arguments; the
    /// config is [`OPERATOR_CONFIG`] unless `extra` names one.
    async fn start(extra: &[&str]) -> Server {
        Server::start_in(tempfile::tempdir().unwrap(), extra, &[]).await
    }

    /// As [`Server::start`], in `dir` (its `graphs` folder and data kept
    /// when they exist), with `more` graphs beside [`GRAPHS`].
    async fn start_in(dir: tempfile::TempDir, extra: &[&str], more: &[(&str, &str)]) -> Server {
        std::fs::create_dir_all(dir.path().join("graphs")).unwrap();
        for (name, c) in GRAPHS.iter().chain(more) {
            std::fs::copy(c, dir.path().join("graphs").join(name)).unwrap();
        }
        let mut extra = extra.to_vec();
        if !extra.contains(&"--config") {
            std::fs::write(dir.path().join("sandgraph.toml"), OPERATOR_CONFIG).unwrap();
            extra.extend(["--config", "sandgraph.toml"]);
        }
        // A tokens file replaces the shared token.
        let shared: &[&str] = if extra.contains(&"--tokens") {
            &[]
        } else {
            &["--token-env", "SANDGRAPH_TEST_TOKEN"]
        };
        let mut child = serve_command(dir.path())
            .args(shared)
            .args(["--store", "data.redb", "--controller"])
            .args(&extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stderr, url) =
            crate::common::announce::announced(&mut child, "sandgraph: serving MCP at ", SOON)
                .await;
        let base = url.trim_end_matches("/mcp").to_owned();
        Server {
            dir,
            child,
            base,
            stderr,
        }
    }

    /// Stops the server; its folder (graphs, data, config) stays.
    async fn stop(mut self) -> tempfile::TempDir {
        self.child.kill().await.unwrap();
        self.dir
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path` with the token.
    async fn get(&self, path: &str) -> reqwest::Response {
        self.get_as(TOKEN, path).await
    }

    /// `GET path` with `token`.
    async fn get_as(&self, token: &str, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// `GET path` with the token; the JSON of a 200 answer.
    async fn get_json(&self, path: &str) -> Value {
        self.get_json_as(TOKEN, path).await
    }

    /// `GET path` with `token`; the JSON of a 200 answer.
    async fn get_json_as(&self, token: &str, path: &str) -> Value {
        let r = self.get_as(token, path).await;
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// A studio `POST` of `body` (token, JSON, the studio header).
    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.post_as(TOKEN, path, body).await
    }

    /// A studio `POST` of `body` with `token`.
    async fn post_as(&self, token: &str, path: &str, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url(path))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("x-sandgraph-studio", "1")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    /// A studio `POST`; the JSON of a 200 answer.
    async fn post_json(&self, path: &str, body: &Value) -> Value {
        self.post_json_as(TOKEN, path, body).await
    }

    /// A studio `POST` with `token`; the JSON of a 200 answer.
    async fn post_json_as(&self, token: &str, path: &str, body: &Value) -> Value {
        let r = self.post_as(token, path, body).await;
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 200, "POST {path}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// Starts a run (or resume) streamed as ndjson.
    async fn stream(&self, path: &str, body: &Value) -> Lines {
        self.stream_as(TOKEN, path, body).await
    }

    /// Starts a run (or resume) with `token`, streamed as ndjson.
    async fn stream_as(&self, token: &str, path: &str, body: &Value) -> Lines {
        let r = self.post_as(token, path, body).await;
        assert_eq!(r.status(), 200, "POST {path}");
        assert_eq!(r.headers()["content-type"], "application/x-ndjson");
        Lines {
            resp: r,
            buf: Vec::new(),
        }
    }

    /// Every line of a run's stream, to its end.
    async fn run(&self, path: &str, body: &Value) -> Vec<Value> {
        self.stream(path, body).await.all().await
    }

    /// Every line of a run's stream with `token`, to its end.
    async fn run_as(&self, token: &str, path: &str, body: &Value) -> Vec<Value> {
        self.stream_as(token, path, body).await.all().await
    }
}

/// The lines of an ndjson answer, read as they arrive.
struct Lines {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Lines {
    /// The next line, or `None` at the end of the answer.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let chunk = tokio::time::timeout(SOON, self.resp.chunk())
                .await
                .expect("the next line comes soon")
                .unwrap();
            match chunk {
                Some(c) => self.buf.extend_from_slice(&c),
                None => {
                    assert!(self.buf.is_empty(), "a partial last line");
                    return None;
                }
            }
        }
    }

    async fn all(mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(line) = self.next().await {
            out.push(line);
        }
        out
    }
}

/// The error object of a JSON error answer.
async fn error_of(r: reqwest::Response) -> Value {
    let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    let error = body["error"].clone();
    assert!(error["code"].is_string(), "{body}");
    assert!(error["message"].is_string(), "{body}");
    assert_eq!(body.as_object().unwrap().len(), 1, "only the error: {body}");
    error
}

#[tokio::test]
async fn the_shell_is_served_with_csp_and_etags_without_a_token() {
    let server = Server::start(&[]).await;
    assert!(
        server
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l == &format!("sandgraph: studio at {}/", server.base)),
        "{:?}",
        server.stderr.lock().unwrap()
    );
    let http = reqwest::Client::new();
    for (path, kind) in [
        ("/", "text/html"),
        ("/assets/index.html", "text/html"),
        ("/assets/app.js", "text/javascript"),
        ("/assets/graph.js", "text/javascript"),
        ("/assets/app.css", "text/css"),
    ] {
        let r = http.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers().clone();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(
            csp.starts_with("default-src 'none'; script-src 'self'"),
            "{csp}"
        );
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "no-referrer");
        let etag = h["etag"].to_str().unwrap().to_owned();
        let body = r.bytes().await.unwrap();
        let digest = sha256_hex(&body);
        assert_eq!(etag, format!("\"{digest}\""), "{path}");
        let again = http
            .get(server.url(path))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path}");
        assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
        assert!(again.bytes().await.unwrap().is_empty());
    }
    let r = http
        .get(server.url("/assets/secret.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // The shell passes the same Host and Origin checks as /mcp.
    let r = http
        .get(server.url("/"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .get(server.url("/"))
        .header("host", "rebound.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[tokio::test]
async fn the_api_needs_the_token_and_answers_without_data() {
    let server = Server::start(&[]).await;
    let http = reqwest::Client::new();
    for token in [None, Some("studio-tokem"), Some("")] {
        let mut req = http.get(server.url("/api/session"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401, "{token:?}");
        assert!(r.headers().contains_key("www-authenticate"));
        let error = error_of(r).await;
        assert_eq!(error["code"], "unauthorized");
    }
    let r = http.get(server.url("/api/graphs")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let text = r.text().await.unwrap();
    assert!(!text.contains("greet"), "{text}");
    let session = server.get_json("/api/session").await;
    assert_eq!(session["principal"], "principal:token");
    assert_eq!(session["threads"], true);
    assert_eq!(session["controller"], true);
    assert_eq!(session["journal"], true);
    // No CORS grant, ever.
    let r = http
        .request(reqwest::Method::OPTIONS, server.url("/api/session"))
        .header("origin", &server.base)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(!r.headers().contains_key("access-control-allow-origin"));
}

#[tokio::test]
async fn cross_site_and_headerless_posts_are_refused() {
    let server = Server::start(&[]).await;
    let http = reqwest::Client::new();
    let post = |headers: &[(&str, &str)]| {
        let mut req = http
            .post(server.url("/api/session"))
            .bearer_auth(TOKEN)
            .body("{}");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send()
    };
    let cases: &[&[(&str, &str)]] = &[
        &[("content-type", "application/json")],
        &[("x-sandgraph-studio", "1"), ("content-type", "text/plain")],
        &[("x-sandgraph-studio", "1")],
        &[
            ("x-sandgraph-studio", "1"),
            ("content-type", "application/json"),
            ("sec-fetch-site", "cross-site"),
        ],
    ];
    for headers in cases {
        let r = post(headers).await.unwrap();
        assert_eq!(r.status(), 403, "{headers:?}");
        assert_eq!(error_of(r).await["code"], "forbidden", "{headers:?}");
    }
    let evil = [
        ("x-sandgraph-studio", "1"),
        ("content-type", "application/json"),
        ("origin", "https://evil.example"),
    ];
    let r = post(&evil).await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(error_of(r).await["code"], "forbidden");
}

#[tokio::test]
async fn no_ui_serves_no_studio_but_mcp() {
    let server = Server::start(&["--no-ui"]).await;
    assert!(
        !server
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("studio")),
        "{:?}",
        server.stderr.lock().unwrap()
    );
    let http = reqwest::Client::new();
    for path in ["/", "/assets/app.js", "/api/session"] {
        let r = http
            .get(server.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    let r = http
        .post(server.url("/mcp"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// A raw MCP initialize request.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

#[tokio::test]
async fn graphs_are_listed_and_drawn_with_their_conditional_edges() {
    let server = Server::start(&[]).await;
    let list = server.get_json("/api/graphs").await;
    let names: Vec<&str> = list["graphs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "approval_graph",
            "echo_graph",
            "greet_graph",
            "hostile_escape_error",
            "hostile_infinite_loop"
        ]
    );
    let greet = &list["graphs"][2];
    assert_eq!(greet["description"], "Greet someone, formally or casually.");
    assert_eq!(greet["as_tool"], true);
    assert_eq!(
        greet["parameters"]["properties"]["style"]["enum"],
        json!(["formal", "casual"])
    );
    assert_eq!(greet["digest"].as_str().unwrap().len(), 64);
    assert_eq!(greet["capabilities"]["granted"], json!([]));

    let approval = server.get_json("/api/graphs/approval_graph").await;
    assert_eq!(approval["capabilities"]["imported"], json!([]));
    assert_eq!(approval["spec"]["name"], "approval_graph");
    let nodes: Vec<(&str, &str)> = approval["drawing"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        nodes,
        [
            ("__start__", "start"),
            ("draft", "node"),
            ("review", "node"),
            ("__end__", "end")
        ]
    );
    let edges = approval["drawing"]["edges"].as_array().unwrap();
    let edge = |from: &str, to: &str| {
        edges
            .iter()
            .find(|e| e["from"] == from && e["to"] == to)
            .unwrap_or_else(|| panic!("{from} -> {to} in {edges:?}"))
    };
    assert_eq!(edge("__start__", "draft")["kind"], "static");
    assert_eq!(edge("draft", "review")["kind"], "static");
    let publish = edge("review", "__end__");
    assert_eq!(publish["kind"], "conditional");
    assert_eq!(publish["label"], "publish");
    assert_eq!(publish["router"], "after_review");
    assert_eq!(edge("review", "draft")["label"], "revise");
    let greet = server.get_json("/api/graphs/greet_graph").await;
    assert_eq!(
        greet["drawing"]["nodes"][1]["description"],
        "Builds the greeting."
    );
    let r = server.get("/api/graphs/nothing").await;
    assert_eq!(r.status(), 404);
    assert_eq!(error_of(r).await["code"], "not_found");
}

#[tokio::test]
async fn a_run_streams_its_steps_then_the_final_state() {
    let server = Server::start(&[]).await;
    let body = json!({"input": {"name": "Ada", "style": "formal", "times": 2}});
    let lines = server.run("/api/graphs/greet_graph/runs", &body).await;
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert_eq!(lines[0]["type"], "started");
    assert_eq!(lines[0]["entry"], json!(["greet"]));
    assert_eq!(lines[0]["thread"], Value::Null);
    assert_eq!(lines[0]["run_id"].as_str().unwrap().len(), 32);
    assert_eq!(lines[1]["type"], "step");
    assert_eq!(lines[1]["step"], 0);
    assert_eq!(lines[1]["updates"][0]["node"], "greet");
    assert_eq!(
        lines[1]["updates"][0]["update"]["greeting"],
        "Good day, Ada. Good day, Ada."
    );
    assert_eq!(lines[1]["next"], json!([]));
    assert_eq!(lines[2]["type"], "completed");
    assert_eq!(
        lines[2]["state"]["greeting"],
        "Good day, Ada. Good day, Ada."
    );
    // Arguments are checked against the parameters.
    let missing = json!({"input": {"name": "Ada"}});
    let lines = server.run("/api/graphs/greet_graph/runs", &missing).await;
    assert_eq!(lines.last().unwrap()["type"], "error");
    assert_eq!(lines.last().unwrap()["code"], "invalid_args");
    let r = server
        .post("/api/graphs/greet_graph/runs", &json!({"input": "Ada"}))
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(error_of(r).await["code"], "invalid_request");
}

/// The history's checkpoint ids, newest first.
async fn history_ids(server: &Server, thread: &str) -> Vec<String> {
    let h = server.get_json(&format!("{thread}/history")).await;
    h["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A fork of `thread` to `checkpoint` with extra headers, no studio header.
async fn raw_fork(
    server: &Server,
    thread: &str,
    checkpoint: &str,
    headers: &[(&str, &str)],
) -> u16 {
    let mut req = reqwest::Client::new()
        .post(server.url(&format!("{thread}/fork")))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(json!({"checkpoint_id": checkpoint}).to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn an_interrupted_thread_is_answered_travelled_back_forked_and_updated() {
    let server = Server::start(&[]).await;
    let body = json!({"input": {"input": {"topic": "wasm"}}, "thread": "t 1/a"});
    let lines = server.run("/api/graphs/approval_graph/runs", &body).await;
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "interrupted", "{lines:#?}");
    assert_eq!(last["thread"], "t 1/a");
    assert_eq!(last["interrupts"][0]["node"], "review");
    assert_eq!(
        last["interrupts"][0]["value"]["question"],
        "publish this draft?"
    );
    let steps: Vec<&Value> = lines.iter().filter(|l| l["type"] == "step").collect();
    assert_eq!(steps[0]["updates"][0]["node"], "draft");
    assert_eq!(steps[0]["next"], json!(["review"]));

    let threads = server.get_json("/api/threads").await;
    assert_eq!(threads["threads"].as_array().unwrap().len(), 1, "{threads}");
    let t = &threads["threads"][0];
    assert_eq!(t["graph"], "approval_graph");
    assert_eq!(t["thread"], "t 1/a");
    assert_eq!(t["interrupted"], true);

    let thread = "/api/threads/approval_graph/t%201%2Fa";
    let state = server.get_json(thread).await;
    assert_eq!(state["next"], json!(["review"]));
    assert_eq!(state["values"]["draft"], "A short note about wasm.");
    assert_eq!(
        state["interrupts"][0]["value"]["draft"],
        "A short note about wasm."
    );
    let waiting = state["checkpoint_id"].as_str().unwrap().to_owned();

    let resume = format!("{thread}/resume");
    let lines = server.run(&resume, &json!({"value": "yes"})).await;
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "completed", "{lines:#?}");
    assert_eq!(last["state"]["published"], true);
    assert_eq!(lines[0]["entry"], json!(["review"]));

    let history = server.get_json(&format!("{thread}/history")).await;
    let checkpoints = history["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints[0]["values"]["published"], true);
    assert_eq!(checkpoints[0]["writes"], json!({"published": true}));
    let ids: Vec<&str> = checkpoints
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&waiting.as_str()), "{ids:?}");
    let limited = server.get_json(&format!("{thread}/history?limit=1")).await;
    assert_eq!(limited["checkpoints"].as_array().unwrap().len(), 1);

    // Without the studio header, or from another site: refused, and
    // nothing changes.
    let before = history_ids(&server, thread).await;
    assert_eq!(raw_fork(&server, thread, &waiting, &[]).await, 403);
    let evil = [
        ("x-sandgraph-studio", "1"),
        ("origin", "https://evil.example"),
    ];
    assert_eq!(raw_fork(&server, thread, &waiting, &evil).await, 403);
    assert_eq!(history_ids(&server, thread).await, before);

    // Travel back to the interrupt and fork from it.
    let fork = format!("{thread}/fork");
    let head = server
        .post_json(&fork, &json!({"checkpoint_id": waiting}))
        .await;
    assert_eq!(head["source"], "fork");
    assert_eq!(head["parent_id"], waiting.as_str());
    assert_eq!(head["writes"], json!({}));
    let state = server.get_json(thread).await;
    assert_eq!(state["checkpoint_id"], head["id"]);
    assert_eq!(state["values"]["published"], false);
    assert_eq!(state["next"], json!(["review"]));

    // Update the state as the draft node.
    let update = json!({"values": {"topic": "rust"}, "as_node": "draft"});
    let head = server.post_json(&format!("{thread}/state"), &update).await;
    assert_eq!(head["source"], "update");
    assert_eq!(head["writes"], json!({"topic": "rust"}));
    assert_eq!(head["next"], json!(["review"]));
    let state = server.get_json(thread).await;
    assert_eq!(state["values"]["topic"], "rust");

    let nowhere = json!({"checkpoint_id": "0000000000000000"});
    assert_eq!(server.post(&fork, &nowhere).await.status(), 404);
    let r = server.get("/api/threads/approval_graph/other").await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn runs_past_the_limit_are_busy_and_runs_can_be_cancelled() {
    let server = Server::start(&["--max-runs-per-principal", "1"]).await;
    let spin = json!({"input": {"input": {}}});
    let greet = json!({"input": {"name": "A", "style": "casual"}});
    let mut first = server
        .stream("/api/graphs/hostile_infinite_loop/runs", &spin)
        .await;
    let started = first.next().await.unwrap();
    assert_eq!(started["type"], "started");
    let run_id = started["run_id"].as_str().unwrap().to_owned();

    let lines = server.run("/api/graphs/greet_graph/runs", &greet).await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["type"], "error");
    assert_eq!(lines[0]["code"], "busy");

    let r = server.post("/api/runs/0123/cancel", &json!({})).await;
    assert_eq!(r.status(), 404);
    let cancel = format!("/api/runs/{run_id}/cancel");
    assert_eq!(server.post(&cancel, &json!({})).await.status(), 204);
    let rest = first.all().await;
    let last = rest.last().unwrap();
    assert_eq!(last["type"], "error", "{rest:#?}");
    assert_eq!(last["code"], "cancelled");

    // Closing the connection cancels the run and frees its slot.
    let mut second = server
        .stream("/api/graphs/hostile_infinite_loop/runs", &spin)
        .await;
    assert_eq!(second.next().await.unwrap()["type"], "started");
    drop(second);
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let lines = server.run("/api/graphs/greet_graph/runs", &greet).await;
        if lines.last().unwrap()["type"] == "completed" {
            break;
        }
        assert_eq!(lines[0]["code"], "busy");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot is never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn hostile_text_comes_back_bounded_and_escaped() {
    let server = Server::start(&[]).await;
    let empty = json!({"input": {"input": {}}});
    let lines = server
        .run("/api/graphs/hostile_escape_error/runs", &empty)
        .await;
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "error");
    let message = last["message"].as_str().unwrap();
    assert!(message.len() < 16 * 1024 + 64, "{}", message.len());
    assert!(!message.chars().any(char::is_control), "{message:.200}");
    assert!(message.contains("\\u{1b}]0;pwned"), "{message:.200}");

    // A state string far past the bound, with an escape in it.
    let topic = format!("\u{1b}[2J{}", "x".repeat(300_000));
    let body = json!({"input": {"input": {"topic": topic}}});
    let lines = server.run("/api/graphs/echo_graph/runs", &body).await;
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "completed");
    let kept = last["state"]["topic"].as_str().unwrap();
    assert!(kept.starts_with("\u{1b}[2Jxxx"));
    assert!(kept.len() <= 64 * 1024 + 32, "{}", kept.len());
    assert!(
        kept.ends_with("more bytes]"),
        "{}",
        &kept[kept.len() - 40..]
    );
    let update = lines[1]["updates"][0]["update"]["log"][0].as_str().unwrap();
    assert!(update.len() <= 64 * 1024 + 32, "{}", update.len());
}

#[tokio::test]
async fn the_journal_and_agent_graphs_are_the_callers() {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let server = Server::start(&[]).await;
    let journal = server.get_json("/api/journal?limit=5").await;
    assert_eq!(journal["entries"], json!([]));
    let r = server.get("/api/journal?limit=x").await;
    assert_eq!(r.status(), 400);
    let graphs = server.get_json("/api/agent-graphs").await;
    assert_eq!(graphs["graphs"], json!([]));

    // An agent graph made over MCP by the same principal is listed.
    let config =
        StreamableHttpClientTransportConfig::with_uri(server.url("/mcp")).auth_header(TOKEN);
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let mut update = rmcp::model::CallToolRequestParams::new("update_agent_graph");
    let args = json!({"graphId": "g1", "addWork": [{"subagentId": "p", "instruction": "look"}]});
    update.arguments = args.as_object().cloned();
    let r = client.call_tool(update).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let graphs = server.get_json("/api/agent-graphs").await;
    assert_eq!(graphs["graphs"][0]["id"], "g1", "{graphs}");
    assert_eq!(graphs["graphs"][0]["revision"], 1);
    assert_eq!(graphs["graphs"][0]["work"], 1);
    let g = server.get_json("/api/agent-graphs/g1").await;
    assert_eq!(g["view"]["graphId"], "g1");
    assert_eq!(g["view"]["work"][0]["instruction"], "look");
    assert!(g["wakes"].is_array());
    let r = server.get("/api/agent-graphs/g2").await;
    assert_eq!(r.status(), 404);

    // A thread an MCP call of the same principal ran on is the studio's
    // thread of that name, and the studio continues it.
    let mut echo = rmcp::model::CallToolRequestParams::new("echo_graph");
    echo.arguments = json!({"input": {"topic": "mcp"}}).as_object().cloned();
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.0.0.insert("sandgraph/thread".into(), json!("shared"));
    echo.meta = Some(meta);
    let r = client.call_tool(echo).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let threads = server.get_json("/api/threads").await;
    assert_eq!(threads["threads"][0]["graph"], "echo_graph", "{threads}");
    assert_eq!(threads["threads"][0]["thread"], "shared");
    let body = json!({"input": {"input": {"topic": "studio"}}, "thread": "shared"});
    let lines = server.run("/api/graphs/echo_graph/runs", &body).await;
    let state = &lines.last().unwrap()["state"];
    assert_eq!(
        state["log"],
        json!(["seen:mcp", "seen:studio"]),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn a_server_with_a_tokens_file_shows_no_journal() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let digest = sha256_hex(TOKEN.as_bytes());
    std::fs::write(&tokens, format!("alice = \"{digest}\"\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = Server::start(&["--tokens", tokens.to_str().unwrap()]).await;
    // The token is alice's: she sees the graphs, not the journal, whose
    // rows name no principal.
    let graphs = server.get_json("/api/graphs").await;
    assert!(
        graphs["graphs"].as_array().is_some_and(|g| !g.is_empty()),
        "{graphs}"
    );
    let session = server.get_json("/api/session").await;
    assert_eq!(session["journal"], false, "{session}");
    let r = server.get("/api/journal").await;
    assert_eq!(r.status(), 409);
    let e = error_of(r).await;
    assert_eq!(e["code"], "no_journal", "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("--tokens")),
        "{e}"
    );
}

/// Writes a tokens file of `alice` and `bob` (their tokens are
/// `alice-token` and `bob-token`) into `dir`; its path.
fn two_tokens(dir: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let tokens = dir.join("tokens.toml");
    let alice = sha256_hex(b"alice-token");
    let bob = sha256_hex(b"bob-token");
    std::fs::write(&tokens, format!("alice = \"{alice}\"\nbob = \"{bob}\"\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    tokens.to_str().unwrap().to_owned()
}

/// The names of the graphs `/api/graphs` lists to `token`.
async fn listed(server: &Server, token: &str) -> Vec<String> {
    let list = server.get_json_as(token, "/api/graphs").await;
    list["graphs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The graph tools MCP lists to `token` (the agent-graph tools left out).
async fn mcp_tools(server: &Server, token: &str) -> Vec<String> {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let config =
        StreamableHttpClientTransportConfig::with_uri(server.url("/mcp")).auth_header(token);
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .filter(|n| !n.ends_with("_agent_graph"))
        .collect();
    names.sort();
    names
}

/// The `404` a caller gets for the graph `name`: its message names it.
async fn assert_no_graph(r: reqwest::Response, name: &str, what: &str) {
    assert_eq!(r.status(), 404, "{what}");
    let e = error_of(r).await;
    assert_eq!(e["code"], "not_found", "{what}: {e}");
    assert_eq!(
        e["message"],
        format!("no graph named \"{name}\" is available"),
        "{what}: {e}"
    );
}

#[tokio::test]
async fn a_graph_mcp_hides_is_served_to_studio_operators_only() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = two_tokens(dir.path());
    let config = dir.path().join("sandgraph.toml");
    let args = ["--tokens", &tokens, "--config", "sandgraph.toml"];
    // Alice leaves approval_graph waiting on her thread while MCP offers it.
    let studio = "[studio]\noperators = [\"principal:bob\"]\n";
    let offered = "[graphs.approval_graph]\nas_tool = true\n";
    std::fs::write(&config, format!("{offered}\n{studio}")).unwrap();
    let server = Server::start_in(dir, &args, &[]).await;
    let body = json!({"input": {"input": {"topic": "wasm"}}, "thread": "t"});
    let lines = server
        .run_as("alice-token", "/api/graphs/approval_graph/runs", &body)
        .await;
    assert_eq!(lines.last().unwrap()["type"], "interrupted", "{lines:#?}");

    // Then the operator hides it from MCP.
    let dir = server.stop().await;
    let hidden = "[graphs.approval_graph]\nas_tool = false\n";
    std::fs::write(&config, format!("{hidden}\n{studio}")).unwrap();
    let server = Server::start_in(dir, &args, &[]).await;
    let alice = "alice-token";
    // Alice's studio lists what MCP lists her, no more.
    let hers = listed(&server, alice).await;
    assert!(!hers.contains(&"approval_graph".to_owned()), "{hers:?}");
    assert_eq!(hers, mcp_tools(&server, alice).await);
    // She can neither see, run, resume nor update it: the answer for a
    // graph that is not mounted at all.
    let thread = "/api/threads/approval_graph/t";
    let refused = [
        (
            server.get_as(alice, "/api/graphs/approval_graph").await,
            "detail",
        ),
        (
            server
                .post_as(alice, "/api/graphs/approval_graph/runs", &body)
                .await,
            "run",
        ),
        (
            server
                .post_as(alice, &format!("{thread}/resume"), &json!({"value": "yes"}))
                .await,
            "resume",
        ),
        (
            server
                .post_as(
                    alice,
                    &format!("{thread}/state"),
                    &json!({"values": {"topic": "rust"}, "as_node": "draft"}),
                )
                .await,
            "update",
        ),
    ];
    for (r, what) in refused {
        assert_no_graph(r, "approval_graph", what).await;
    }
    assert_no_graph(
        server.get_as(alice, "/api/graphs/nothing").await,
        "nothing",
        "none",
    )
    .await;
    // Her thread did not move.
    let state = server.get_json_as(alice, thread).await;
    assert_eq!(state["next"], json!(["review"]), "{state}");
    assert_eq!(state["values"]["topic"], "wasm", "{state}");
    // She can still run what MCP offers her.
    let greet = json!({"input": {"name": "Ada", "style": "casual"}});
    let lines = server
        .run_as(alice, "/api/graphs/greet_graph/runs", &greet)
        .await;
    assert_eq!(lines.last().unwrap()["type"], "completed", "{lines:#?}");

    // Bob, a studio operator, sees, runs, resumes and updates it.
    let bob = "bob-token";
    assert!(
        listed(&server, bob)
            .await
            .contains(&"approval_graph".to_owned())
    );
    let detail = server.get_json_as(bob, "/api/graphs/approval_graph").await;
    assert_eq!(detail["as_tool"], false);
    let lines = server
        .run_as(bob, "/api/graphs/approval_graph/runs", &body)
        .await;
    assert_eq!(lines.last().unwrap()["type"], "interrupted", "{lines:#?}");
    let lines = server
        .run_as(bob, &format!("{thread}/resume"), &json!({"value": "yes"}))
        .await;
    assert_eq!(lines.last().unwrap()["type"], "completed", "{lines:#?}");
    let update = json!({"values": {"topic": "rust"}, "as_node": "draft"});
    let head = server
        .post_json_as(bob, &format!("{thread}/state"), &update)
        .await;
    assert_eq!(head["writes"], json!({"topic": "rust"}), "{head}");
    // MCP still hides it from both.
    assert!(
        !mcp_tools(&server, bob)
            .await
            .contains(&"approval_graph".to_owned())
    );
}

#[tokio::test]
async fn a_discovered_config_names_no_studio_operators() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("graphs")).unwrap();
    std::fs::write(
        dir.path().join("sandgraph.toml"),
        "[studio]\noperators = [\"peer:uid 0\"]\n",
    )
    .unwrap();
    let out = serve_command(dir.path()).stderr(Stdio::piped()).output();
    let out = tokio::time::timeout(SOON, out)
        .await
        .expect("the server refuses to start")
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sandgraph.toml: [studio]: operators") && stderr.contains("--config"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_client_that_never_reads_is_cut_off_and_the_run_finishes() {
    /// Steps of the flood: about 1 MiB of stream each.
    const STEPS: u64 = 48;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sandgraph.toml"),
        format!("{OPERATOR_CONFIG}\n[limits]\nrecursion_limit = 100\n"),
    )
    .unwrap();
    let flood = [(
        "hostile_stream_flood.wasm",
        sandgraph_tests::HOSTILE_STREAM_FLOOD,
    )];
    // The connection stays up however long the client waits.
    let args = ["--config", "sandgraph.toml", "--idle-timeout-ms", "600000"];
    let server = Server::start_in(dir, &args, &flood).await;
    let body = json!({"input": {"input": {"steps": STEPS}}, "thread": "flood"});
    // Opened, never read while the run goes on.
    let mut unread = server
        .stream("/api/graphs/hostile_stream_flood/runs", &body)
        .await;
    // The run is not held back: it finishes, its result on its thread.
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let r = server.get("/api/threads/hostile_stream_flood/flood").await;
        if r.status() == 200 {
            let state: Value = r.json().await.unwrap();
            if state["values"]["done"] == json!(STEPS) && state["next"] == json!([]) {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The client was cut off: it gets what the sockets held, then one
    // line saying so, and the stream ends; most of the run never reached
    // it, and the server kept none of it.
    let mut received = 0usize;
    let mut lines = Vec::new();
    while let Some(chunk) = tokio::time::timeout(SOON, unread.resp.chunk())
        .await
        .expect("the stream moves")
        .unwrap()
    {
        received += chunk.len();
        unread.buf.extend_from_slice(&chunk);
        while let Some(i) = unread.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = unread.buf.drain(..=i).collect();
            let line: Value = serde_json::from_slice(&line).unwrap();
            lines.push(json!({"type": line["type"], "code": line["code"], "step": line["step"]}));
        }
    }
    assert!(unread.buf.is_empty(), "a partial last line");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "error", "{lines:?}");
    assert_eq!(last["code"], "slow_reader", "{lines:?}");
    assert!(!lines.iter().any(|l| l["type"] == "completed"), "{lines:?}");
    let produced = STEPS as usize * 16 * 60 * 1024;
    assert!(
        received < produced / 2,
        "the client got {received} of the run's {produced} bytes"
    );
}
