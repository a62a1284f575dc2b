//! Shared helpers of the MCP server tests: a graphs folder, a registry over
//! it, and an rmcp client that records progress and list changes.

#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ContentBlock, ProgressNotificationParam,
    ProgressToken, Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestHandle, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use sandgraph_mcp::{McpServer, ServerOptions};
use sandgraph_registry::{OperatorConfig, Registry, RegistryOptions};
use serde_json::Value;
use tokio::sync::watch;

/// Safety net for anything that should happen "soon"; never a speed claim.
pub const SOON: Duration = Duration::from_secs(30);

/// A temp folder `graphs/` holding the given components, and an optional
/// operator config.
pub struct Folder {
    pub dir: tempfile::TempDir,
}

impl Folder {
    pub fn new(graphs: &[(&str, &str)], config: &str) -> Folder {
        let dir = tempfile::tempdir().unwrap();
        sandgraph_tests::copy_graphs(&dir.path().join("graphs"), graphs);
        std::fs::write(dir.path().join("sandgraph.toml"), config).unwrap();
        Folder { dir }
    }

    pub fn graphs(&self) -> std::path::PathBuf {
        self.dir.path().join("graphs")
    }

    pub async fn registry(&self) -> Registry {
        let path = self.dir.path().join("sandgraph.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let config = OperatorConfig::parse(&text, &path).unwrap();
        let options = RegistryOptions {
            dirs: vec![self.graphs()],
            config,
            cache: Some(sandgraph_tests::compile_cache()),
            ..RegistryOptions::default()
        };
        let (registry, report) = Registry::open(sandgraph_tests::runtime().clone(), options)
            .await
            .unwrap();
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        registry
    }
}

/// The test client: records progress notifications and counts
/// `tools/list_changed`. With `answers`, it declares the elicitation
/// capability and answers each elicitation with the next one (`None`:
/// declines), recording the messages it was asked.
#[derive(Clone)]
pub struct Client {
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    pub list_changed: watch::Sender<u32>,
    pub answers: Option<Arc<Mutex<std::collections::VecDeque<Option<String>>>>>,
    pub elicited: Arc<Mutex<Vec<String>>>,
    /// The URIs of the `notifications/resources/updated` received, in order.
    pub updated: Arc<Mutex<Vec<String>>>,
}

impl Default for Client {
    fn default() -> Self {
        Client {
            progress: Arc::default(),
            list_changed: watch::channel(0).0,
            answers: None,
            elicited: Arc::default(),
            updated: Arc::default(),
        }
    }
}

impl Client {
    /// The progress notifications received for `token`, in order.
    pub fn progress_of(&self, token: &ProgressToken) -> Vec<ProgressNotificationParam> {
        self.progress
            .lock()
            .unwrap()
            .iter()
            .filter(|p| &p.progress_token == token)
            .cloned()
            .collect()
    }

    /// Waits until at least `n` list changes arrived.
    pub async fn wait_list_changed(&self, n: u32) {
        let mut rx = self.list_changed.subscribe();
        tokio::time::timeout(SOON, rx.wait_for(|c| *c >= n))
            .await
            .expect("a tools/list_changed notification")
            .unwrap();
    }
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.send_modify(|n| *n += 1);
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut info = rmcp::model::ClientConfig::default();
        if self.answers.is_some() {
            info.capabilities.elicitation = Some(Default::default());
        }
        info
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.elicited.lock().unwrap().push(message);
        }
        let next = self
            .answers
            .as_ref()
            .and_then(|a| a.lock().unwrap().pop_front())
            .flatten();
        Ok(match next {
            Some(answer) => ElicitResult::new(ElicitationAction::Accept)
                .with_content(serde_json::json!({ "answer": answer })),
            None => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

pub type Session = RunningService<RoleClient, Client>;

/// A server over `registry` and a client connected to it in process.
pub async fn connect(registry: Registry, options: ServerOptions) -> (McpServer, Session) {
    connect_as(Client::default(), registry, options).await
}

/// [`connect`] with `client` as the client's handler.
async fn connect_as(
    client: Client,
    registry: Registry,
    options: ServerOptions,
) -> (McpServer, Session) {
    let server = McpServer::new(registry, options);
    let (a, b) = tokio::io::duplex(1 << 16);
    let s = server.clone();
    tokio::spawn(async move {
        if let Ok(running) = s.serve(a).await {
            let _ = running.waiting().await;
        }
    });
    (server, client.serve(b).await.unwrap())
}

/// [`connect`] with a client that answers elicitations with `answers` in
/// turn (`None`: declines).
pub async fn connect_answering(
    registry: Registry,
    options: ServerOptions,
    answers: &[Option<&str>],
) -> (McpServer, Session) {
    let client = Client {
        answers: Some(Arc::new(Mutex::new(
            answers.iter().map(|a| a.map(str::to_owned)).collect(),
        ))),
        ..Client::default()
    };
    connect_as(client, registry, options).await
}

/// `params` of a call with `_meta` entries.
pub fn params_with_meta(name: &str, args: Value, meta: &[(&str, Value)]) -> CallToolRequestParams {
    let mut p = params(name, args);
    let mut m = rmcp::model::RequestMetaObject::default();
    for (k, v) in meta {
        m.0.0.insert((*k).to_owned(), v.clone());
    }
    p.meta = Some(m);
    p
}

pub fn params(name: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_owned());
    p.arguments = args.as_object().cloned();
    p
}

pub async fn call(client: &Session, name: &str, args: Value) -> CallToolResult {
    client.call_tool(params(name, args)).await.unwrap()
}

/// Sends a call whose handle can cancel it.
pub async fn start(client: &Session, name: &str, args: Value) -> RequestHandle<RoleClient> {
    client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params(name, args))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap()
}

/// The one text block of a result.
pub fn text(r: &CallToolResult) -> &str {
    assert_eq!(r.content.len(), 1, "{r:?}");
    match &r.content[0] {
        ContentBlock::Text(t) => &t.text,
        other => panic!("not a text block: {other:?}"),
    }
}

/// Asserts an error result whose text starts with `prefix`.
pub fn assert_tool_error(r: &CallToolResult, prefix: &str) {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(
        text(r).starts_with(prefix),
        "{:?} does not start with {prefix:?}",
        text(r)
    );
    assert!(r.structured_content.is_none());
}

/// Waits until `f` holds, polling; panics after [`SOON`].
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + SOON;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Copies a component into `dir` under `name` atomically (write + rename).
pub fn drop_in(dir: &Path, name: &str, component: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::copy(component, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// A hand-driven Streamable HTTP client: every header is the test's to
/// choose (a borrowed session id, another principal's token).
#[derive(Clone, Debug)]
pub struct Raw {
    pub url: String,
    pub token: Option<String>,
    pub session: Option<String>,
}

impl Raw {
    pub fn new(url: String, token: Option<&str>) -> Raw {
        Raw {
            url,
            token: token.map(str::to_owned),
            session: None,
        }
    }

    /// POSTs one JSON-RPC message with this client's token and session.
    pub async fn post(&self, message: &Value) -> reqwest::Response {
        let mut req = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-06-18");
        }
        req.send().await.unwrap()
    }

    /// Initializes a session; the refusal when there is none.
    pub async fn open(url: String, token: Option<&str>) -> Result<Raw, reqwest::Response> {
        let mut raw = Raw::new(url, token);
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}});
        let r = raw.post(&init).await;
        if r.status() != 200 {
            return Err(r);
        }
        let session = r
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let _ = r.text().await;
        raw.session = Some(session.expect("a session id"));
        let done = raw
            .post(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert!(done.status().is_success(), "{:?}", done.status());
        Ok(raw)
    }

    /// One `tools/call`: the HTTP status and the body (its JSON-RPC answer
    /// when the status is 200).
    pub async fn call(&self, id: u64, tool: &str, args: Value) -> (u16, String) {
        let r = self
            .post(
                &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": tool, "arguments": args}}),
            )
            .await;
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        if status != 200 {
            return (status, body);
        }
        let answer = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v.get("id").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC answer in {body}"));
        (status, answer.to_string())
    }

    /// The text of a `tools/call` answer, and whether it is an error.
    pub fn tool_text(answer: &str) -> (bool, String) {
        let v: Value = serde_json::from_str(answer).unwrap();
        let result = &v["result"];
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (result["isError"] == true, text)
    }
}

/// A tokens file (mode 0600) naming each principal with the sha256 of its
/// token, the token being the name followed by `-token`.
pub fn tokens_file(dir: &Path, names: &[&str]) -> sandgraph_server::Tokens {
    use sha2::Digest;
    let text: String = names
        .iter()
        .map(|n| {
            let sum = sha2::Sha256::digest(format!("{n}-token").as_bytes());
            format!("{n} = \"{}\"\n", hex::encode(sum))
        })
        .collect();
    let path = dir.join("tokens.toml");
    std::fs::write(&path, text).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    sandgraph_server::Tokens::load(&path).unwrap()
}
