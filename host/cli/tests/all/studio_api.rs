//! The studio served by `sandgraph serve --http`, the real binary, through
//! a real HTTP client: its static shell (CSP, ETag, no token needed), its
//! JSON API behind the bearer token and the CSRF rule, and `--no-ui`.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Safety net for anything that should happen soon; never a speed claim.
const SOON: Duration = Duration::from_secs(60);

/// The token every test server requires.
const TOKEN: &str = "studio-token";

/// The graphs the test servers mount: (file name, component).
const GRAPHS: &[(&str, &str)] = &[
    ("greet.wasm", sandgraph_tests::GREET),
    ("approval.wasm", sandgraph_tests::APPROVAL),
    ("echo.wasm", sandgraph_tests::ECHO),
    ("escape.wasm", sandgraph_tests::HOSTILE_ESCAPE_ERROR),
];

struct Server {
    _dir: tempfile::TempDir,
    _child: Child,
    /// `http://127.0.0.1:<port>`, no trailing slash.
    base: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// `sandgraph serve --http 127.0.0.1:0 --token-env ... --store ...`
    /// over [`GRAPHS`] with `extra` arguments.
    async fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("graphs")).unwrap();
        for (name, c) in GRAPHS {
            std::fs::copy(c, dir.path().join("graphs").join(name)).unwrap();
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandgraph"))
            .args(["serve", "--graphs", "graphs", "--http", "127.0.0.1:0"])
            .args([
                "--token-env",
                "SANDGRAPH_TEST_TOKEN",
                "--store",
                "data.redb",
                "--controller",
            ])
            .args(extra)
            .current_dir(dir.path())
            .env("SANDGRAPH_TEST_TOKEN", TOKEN)
            .env("SANDGRAPH_LOG", "warn")
            .env("SANDGRAPH_CACHE", dir.path().join("cache.redb"))
            .env_remove("SANDGRAPH_STORE")
            .env_remove("DEEPSEEK_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
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
                    let _ = tx.send(url.trim_end_matches("/mcp").to_owned());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let base = tokio::time::timeout(SOON, rx)
            .await
            .expect("the server announces its url")
            .expect("the server started");
        Server {
            _dir: dir,
            _child: child,
            base,
            stderr,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path` with the token.
    async fn get(&self, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(self.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// `GET path` with the token; the JSON of a 200 answer.
    async fn get_json(&self, path: &str) -> Value {
        let r = self.get(path).await;
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_str(&text).unwrap()
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
