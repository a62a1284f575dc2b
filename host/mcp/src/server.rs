//! The MCP handler: tools, resources and change notifications over a
//! [`Registry`]. Every call runs through [`GraphTool::run`]; this module
//! only translates.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Extensions,
    GetPromptRequestMethod, GetPromptRequestParams, GetPromptResponse, Implementation, JsonObject,
    ListPromptsRequestMethod, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    PromptsCapability, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourceContents, ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{
    NotificationContext, RequestContext, SubscriptionContext, SubscriptionSendError,
    SubscriptionSink,
};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use sandgraph_controller::{
    ToolCode, ToolDef, ToolFailure, ToolResult, UPDATE_TOOL, VIEW_TOOL, YIELD_TOOL,
};
use sandgraph_core::text::{guest_name, guest_text};
use sandgraph_core::{ErrorCode, RunError, Start, StepEvent};
use sandgraph_registry::{CallOptions, GraphTool, Registry, RegistryEvent, ToolOutput};
use sandgraph_server::{
    Admission, AdmissionOptions, BUSY, Context, DEFAULT_MAX_CONCURRENT_RUNS,
    DEFAULT_MAX_RUNS_PER_PRINCIPAL, MAX_THREAD_NAME_BYTES, Principal, RunPermit, Stats, thread_key,
};
use serde_json::Value;
use tokio::sync::{Semaphore, broadcast, mpsc};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::agent_graph::{self, AgentGraph, ControllerOptions};
use crate::interrupts;
use crate::{prompts, resources};

/// Error code of a call to a name that is not a listed tool:
/// `[unknown_tool] ...`.
pub const UNKNOWN_TOOL: &str = "unknown_tool";

/// The longest error text a tool result carries, in bytes of input text. A
/// run's error quotes a graph's own message (capped by the runtime at 4 KiB)
/// behind the host's words; 16 KiB keeps both whole, while a failure that
/// still carries a flood cannot fill a model's context. The text is
/// escaped: control characters arrive as visible escapes.
pub const MAX_ERROR_TEXT_BYTES: usize = 16 * 1024;

/// How the server runs calls.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Runs in flight at once, over every client; a call past it returns
    /// `[busy] ...` at once instead of queueing. At least 1. Agent-graph
    /// tool calls count, and so does the work an update starts when the
    /// update hook takes its slots from [`McpServer::run_slots`].
    pub max_concurrent_runs: usize,
    /// Runs in flight at once for one HTTP principal (a token's name, or
    /// an unauthenticated peer); past it `[busy] ...`. At least 1. Calls
    /// over stdio have no principal and only meet the server's limit.
    pub max_runs_per_principal: usize,
    /// The agent-graph supervisor tools (`view_agent_graph`,
    /// `update_agent_graph`, `yield_agent_graph`), listed after the graph
    /// tools and shadowing any graph tool of the same name. `None` (the
    /// default): not offered.
    pub controller: Option<ControllerOptions>,
    /// Durable threads for graph tool calls. With it, a `tools/call` whose
    /// `_meta` names a thread ([`THREAD_META_KEY`]) runs on that thread of
    /// its caller, checkpointed after every superstep; `None` (the default):
    /// such a call is refused.
    pub threads: Option<sandgraph_store::ThreadStore>,
}

/// The `_meta` key of a `tools/call` that names the durable thread to run
/// on: a string of at most [`MAX_THREAD_NAME_BYTES`] bytes. The stored
/// thread is the caller's own (`<principal>/<thread>/<tool>`), so clients
/// never read or continue each other's threads.
pub const THREAD_META_KEY: &str = "sandgraph/thread";

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_concurrent_runs: DEFAULT_MAX_CONCURRENT_RUNS,
            max_runs_per_principal: DEFAULT_MAX_RUNS_PER_PRINCIPAL,
            controller: None,
            threads: None,
        }
    }
}

/// Where change notifications go: a session that initialized (legacy
/// lifecycle), or a `subscriptions/listen` request (2026-07-28 lifecycle).
#[derive(Clone)]
enum Target {
    Peer(Peer<RoleServer>),
    Listen(SubscriptionSink),
}

/// The connected clients that hear about tool list changes.
#[derive(Default)]
struct Notifier {
    targets: Mutex<Vec<(u64, Target)>>,
    next: AtomicU64,
}

impl Notifier {
    fn add(&self, target: Target) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        targets.retain(|(_, t)| !matches!(t, Target::Peer(p) if p.is_transport_closed()));
        targets.push((id, target));
    }

    /// Sends `tools/list_changed` and `resources/list_changed` to every
    /// target; targets that cannot be reached any more are dropped.
    async fn list_changed(&self) {
        let targets: Vec<(u64, Target)> = self
            .targets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let sends = targets.into_iter().map(|(id, t)| async move {
            let ok = match &t {
                Target::Peer(p) => {
                    p.notify_tool_list_changed().await.is_ok()
                        && p.notify_resource_list_changed().await.is_ok()
                }
                Target::Listen(s) => {
                    // A subscription hears only what it asked for.
                    let mut alive = true;
                    if s.accepted().tools_list_changed == Some(true) {
                        alive &= !closed(s.notify_tool_list_changed().await);
                    }
                    if alive && s.accepted().resources_list_changed == Some(true) {
                        alive &= !closed(s.notify_resource_list_changed().await);
                    }
                    alive
                }
            };
            (id, ok)
        });
        let dead: Vec<u64> = futures::future::join_all(sends)
            .await
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(id, _)| id)
            .collect();
        if !dead.is_empty() {
            self.targets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(id, _)| !dead.contains(id));
        }
    }
}

/// Whether a subscription send failed because the subscription is gone.
fn closed(r: Result<(), SubscriptionSendError>) -> bool {
    matches!(
        r,
        Err(SubscriptionSendError::SubscriptionClosed | SubscriptionSendError::Service(_))
    )
}

/// Whether a registry event changes what `tools/list` or
/// `resources/list` return.
fn changes_lists(event: &RegistryEvent) -> bool {
    match event {
        RegistryEvent::Mounted { scope, .. } | RegistryEvent::Unmounted { scope, .. } => {
            scope.is_none()
        }
        RegistryEvent::Remounted { .. } => true,
        RegistryEvent::Failed { .. } => false,
    }
}

/// Forwards registry changes to the notifier, one notification per burst
/// of events, until `stop`.
async fn forward_changes(
    registry: Registry,
    mut events: broadcast::Receiver<RegistryEvent>,
    notifier: Arc<Notifier>,
    controller: bool,
    stop: CancellationToken,
) {
    let seen = |e: &RegistryEvent| {
        if controller {
            warn_if_shadowed(&registry, e);
        }
        changes_lists(e)
    };
    loop {
        let first = tokio::select! {
            () = stop.cancelled() => return,
            e = events.recv() => e,
        };
        let mut changed = match first {
            Ok(e) => seen(&e),
            Err(broadcast::error::RecvError::Lagged(_)) => true,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        loop {
            match events.try_recv() {
                Ok(e) => changed |= seen(&e),
                Err(broadcast::error::TryRecvError::Lagged(_)) => changed = true,
                Err(_) => break,
            }
        }
        if changed {
            tracing::debug!("tool list changed; notifying clients");
            notifier.list_changed().await;
        }
    }
}

/// Logs a warning when a graph tool mounted by `event` is hidden behind an
/// agent-graph tool of the same name.
fn warn_if_shadowed(registry: &Registry, event: &RegistryEvent) {
    let name = match event {
        RegistryEvent::Mounted {
            name, scope: None, ..
        }
        | RegistryEvent::Remounted { name, .. } => name,
        _ => return,
    };
    if agent_graph::is_tool(name) && registry.get(name).is_some_and(|t| t.model_visible()) {
        warn_shadowed(name);
    }
}

fn warn_shadowed(name: &str) {
    tracing::warn!(
        tool = name,
        "the graph tool {name} is hidden: the agent-graph tool of that name takes its place"
    );
}

struct Shared {
    /// The graphs, threads and run admission, shared with the server's
    /// other front doors.
    context: Context,
    /// The agent-graph tools, when the server has a controller.
    agent_graph: Option<Arc<AgentGraph>>,
    /// Their MCP definitions.
    agent_graph_defs: Vec<Tool>,
    notifier: Arc<Notifier>,
    _forwarder: DropGuard,
}

/// The MCP server of a registry: every `as_tool` graph as a tool, every
/// mounted graph's spec and Mermaid diagram as resources.
///
/// Cheap to clone; clones share the [`Context`] (the run limit and
/// counters among it) and the connected clients (the HTTP transport makes
/// one clone per session).
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("admission", self.shared.context.admission())
            .finish_non_exhaustive()
    }
}

/// [`McpServer::checkpoints`]: tells a server, while it exists, that a
/// graph reached a durable checkpoint. Cheap to clone.
#[derive(Clone, Default)]
pub struct Checkpoints(Option<std::sync::Weak<AgentGraph>>);

impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoints")
            .field("controller", &self.0.is_some())
            .finish()
    }
}

impl Checkpoints {
    /// [`McpServer::checkpoint`]; 0 once the server is gone.
    pub async fn checkpoint(&self, graph_id: &str) -> usize {
        let Some(agent) = self.0.as_ref().and_then(std::sync::Weak::upgrade) else {
            return 0;
        };
        match agent.announce(graph_id).await {
            Ok(told) => told,
            Err(e) => {
                tracing::warn!(graph = graph_id, "cannot announce the due wakes: {e}");
                0
            }
        }
    }
}

impl McpServer {
    /// A server over `registry`. Registry changes (e.g. from
    /// [`Registry::watch`]) are announced to connected clients as
    /// `notifications/tools/list_changed` and
    /// `notifications/resources/list_changed`.
    ///
    /// Must be called within a tokio runtime.
    pub fn new(registry: Registry, options: ServerOptions) -> McpServer {
        let notifier = Arc::new(Notifier::default());
        let forwarder = CancellationToken::new();
        let agent_graph = options.controller.map(|c| Arc::new(AgentGraph::new(c)));
        let agent_graph_defs: Vec<Tool> = agent_graph
            .as_ref()
            .map(|a| a.defs().iter().map(agent_graph_definition).collect())
            .unwrap_or_default();
        if agent_graph.is_some() {
            for t in registry.tools() {
                if agent_graph::is_tool(t.name()) {
                    warn_shadowed(t.name());
                }
            }
        }
        tokio::spawn(forward_changes(
            registry.clone(),
            registry.subscribe(),
            notifier.clone(),
            agent_graph.is_some(),
            forwarder.clone(),
        ));
        let admission = Admission::new(AdmissionOptions {
            max_concurrent_runs: options.max_concurrent_runs,
            max_runs_per_principal: options.max_runs_per_principal,
        });
        let mut context = Context::new(registry, admission).with_threads(options.threads);
        if let Some(agent) = &agent_graph {
            context =
                context.with_controller(&[VIEW_TOOL, UPDATE_TOOL, YIELD_TOOL], agent.owners());
        }
        McpServer {
            shared: Arc::new(Shared {
                context,
                agent_graph,
                agent_graph_defs,
                notifier,
                _forwarder: forwarder.drop_guard(),
            }),
        }
    }

    /// What the server shares with the other front doors of its host (the
    /// studio): the graphs callers may see, the threads, the run
    /// admission, the agent graphs' owners.
    pub fn context(&self) -> &Context {
        &self.shared.context
    }

    /// The registry served.
    pub fn registry(&self) -> &Registry {
        self.shared.context.registry()
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.shared.context.stats()
    }

    /// Cancels every running call (cooperative first, then the hard stop
    /// after each run's grace period).
    pub fn cancel_all(&self) {
        self.admission().cancel_all();
    }

    fn admission(&self) -> &Admission {
        self.shared.context.admission()
    }

    /// The durable threads of graph tool calls ([`ServerOptions::threads`]).
    pub fn threads(&self) -> Option<&sandgraph_store::ThreadStore> {
        self.shared.context.threads()
    }

    /// Whether the agent-graph tools are offered
    /// ([`ServerOptions::controller`]).
    pub fn has_controller(&self) -> bool {
        self.shared.agent_graph.is_some()
    }

    /// The MCP session id of the connections that are not Streamable HTTP
    /// (stdio, in-process pipes): `stdio-<pid>-<start ms>`, fixed for this
    /// server. The root session of the agent graphs they create. `None`
    /// without a controller.
    pub fn local_session_id(&self) -> Option<&str> {
        self.shared
            .agent_graph
            .as_deref()
            .map(AgentGraph::local_session)
    }

    /// Tells the server that `graph_id` reached a durable checkpoint (a wave
    /// of its work settled): each of its due wakes whose root session is an
    /// MCP client of this server is announced, once, to that root's
    /// sessions as `notifications/resources/updated` for
    /// `agent-graph://<graphId>`, and waits for the root's next
    /// `view_agent_graph` or `yield_agent_graph`, which delivers it (see
    /// [`ControllerOptions`] and the crate docs). Returns how many sessions
    /// were told; 0 without a controller, when nothing is due, or when the
    /// lookup failed (logged).
    pub async fn checkpoint(&self, graph_id: &str) -> usize {
        self.checkpoints().checkpoint(graph_id).await
    }

    /// A handle that calls [`McpServer::checkpoint`] without keeping the
    /// server alive, for the host's waves (the update hook that starts
    /// them is made before the server, and lives inside it).
    pub fn checkpoints(&self) -> Checkpoints {
        Checkpoints(self.shared.agent_graph.as_ref().map(Arc::downgrade))
    }

    /// The model-visible tools: the graph tools ([`Context::visible_tool`]
    /// says which), then the agent-graph tools.
    fn definitions(&self) -> Vec<Tool> {
        let s = &self.shared;
        s.context
            .registry()
            .tools()
            .iter()
            .filter(|t| !s.context.is_reserved(t.name()))
            .map(|t| tool_definition(t))
            .chain(s.agent_graph_defs.iter().cloned())
            .collect()
    }

    /// The server's run slots: work started on behalf of a call (the
    /// waves an agent-graph update starts) takes one per run here, so it
    /// counts under [`ServerOptions::max_concurrent_runs`].
    pub fn run_slots(&self) -> Arc<Semaphore> {
        self.admission().run_slots()
    }

    /// One `tools/call`: always a tool result, never a protocol error.
    async fn call(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let name = params.name.as_ref();
        if let Some(agent) = &self.shared.agent_graph
            && agent_graph::is_tool(name)
        {
            let agent = agent.clone();
            return self.call_agent_graph(&agent, params, &ctx).await;
        }
        let Some(tool) = self.shared.context.visible_tool(name) else {
            return self.unknown_tool(name);
        };
        let principal = principal_of(&ctx);
        let thread_id = match self.thread_of_call(&params, &ctx, principal.as_ref(), name) {
            Ok(t) => t,
            Err(why) => return error_result(ErrorCode::InvalidInput.as_str(), &why),
        };
        let meta = match interrupts::call_meta(&params, &ctx, thread_id.is_some()) {
            Ok(m) => m,
            Err(why) => return error_result(ErrorCode::InvalidInput.as_str(), &why),
        };
        let admitted = match self.admission().admit(principal.as_ref()) {
            Ok(a) => a,
            Err(why) => return error_result(BUSY, &why.to_string()),
        };
        tracing::info!(
            tool = name,
            thread = thread_id.as_deref(),
            "tool call started"
        );
        let started = Instant::now();
        let start = match meta.resume {
            Some(answer) => Start::Resume(answer),
            None => Start::Input(Value::Object(params.arguments.unwrap_or_default())),
        };
        let opts = CallOptions {
            cancel: admitted.cancel_token().clone(),
            threads: thread_id.as_ref().and(self.threads().cloned()),
            thread_id,
            configurable: meta.configurable,
            ..CallOptions::default()
        };
        let (outcome, by_client) = run_answering(tool, start, opts, &ctx).await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if by_client {
            self.admission().count_cancelled();
        }
        let code = match &outcome {
            Ok(out) if out.interrupted => "interrupted",
            Ok(_) => "ok",
            Err(e) => e.code.as_str(),
        };
        tracing::info!(
            tool = name,
            outcome = code,
            cancelled = by_client,
            elapsed_ms,
            "tool call ended"
        );
        to_result(outcome)
    }

    /// The result of a call to a name that is no listed tool.
    fn unknown_tool(&self, name: &str) -> CallToolResult {
        let names: Vec<String> = self
            .definitions()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        let available = if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        };
        error_result(
            UNKNOWN_TOOL,
            &format!("no tool named {}; available: {available}", guest_name(name)),
        )
    }

    /// The durable thread a graph tool call runs on ([`call_thread`]), or
    /// why the call is refused (the message of an `[invalid_input]` error):
    /// an invalid thread name, or one given to a server that keeps no
    /// threads.
    fn thread_of_call(
        &self,
        params: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
        principal: Option<&Principal>,
        tool: &str,
    ) -> Result<Option<String>, String> {
        let thread_id = call_thread(params, ctx, principal, tool)?;
        if thread_id.is_some() && self.threads().is_none() {
            return Err(format!(
                "_meta {THREAD_META_KEY:?}: this server keeps no durable threads \
                 (start it with --store)"
            ));
        }
        Ok(thread_id)
    }

    /// One `tools/call` of an agent-graph tool: a store call on a blocking
    /// thread. It takes a run slot like any call (of the server and of the
    /// caller's principal) but is not cancelled: a committed update cannot
    /// be taken back.
    async fn call_agent_graph(
        &self,
        agent: &Arc<AgentGraph>,
        params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let name = params.name.to_string();
        let _admitted: RunPermit = match self.admission().admit(principal_of(ctx).as_ref()) {
            Ok(a) => a,
            Err(why) => return error_result(BUSY, &why.to_string()),
        };
        tracing::info!(tool = name, "tool call started");
        let started = Instant::now();
        let session = caller_of(&ctx.extensions, agent.local_session());
        let tool_call_id = ctx.id.to_string();
        let args = Value::Object(params.arguments.unwrap_or_default());
        let (worker, tool) = (agent.clone(), name.clone());
        let outcome =
            tokio::task::spawn_blocking(move || worker.call(&tool, args, &session, tool_call_id))
                .await
                .unwrap_or_else(|e| {
                    Err(ToolFailure::plain(format!(
                        "the agent graph tool failed: {e}"
                    )))
                });
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let code = match &outcome {
            Ok(_) => "ok",
            Err(f) => f.code.map_or("error", ToolCode::as_str),
        };
        tracing::info!(tool = name, outcome = code, elapsed_ms, "tool call ended");
        agent_graph_result(outcome)
    }
}

impl McpServer {
    /// `resources/read` of `agent-graph://<graphId>`: the graph's view for
    /// its root session; any other caller gets invalid params with the
    /// controller's refusal.
    async fn read_agent_graph(
        &self,
        agent: &Arc<AgentGraph>,
        graph_id: &str,
        uri: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let session = caller_of(&ctx.extensions, agent.local_session());
        let (worker, g, u) = (agent.clone(), graph_id.to_owned(), uri.to_owned());
        let read = tokio::task::spawn_blocking(move || worker.read(&g, &session, &u))
            .await
            .map_err(|e| {
                ErrorData::internal_error(format!("the read of {uri} failed: {e}"), None)
            })?;
        match read {
            Ok(contents) => Ok(ReadResourceResult::new(vec![contents]).into()),
            Err(f) => Err(ErrorData::invalid_params(
                format!("cannot read {uri}: {}", error_text(&f.to_string())),
                None,
            )),
        }
    }
}

/// [`run_tool`], then, while the run stops at an interrupt on a durable
/// thread and the client answers elicitations, the answers resume it (at
/// most [`interrupts::MAX_ELICITATION_ROUNDS`] times).
async fn run_answering(
    tool: Arc<GraphTool>,
    start: Start,
    opts: CallOptions,
    ctx: &RequestContext<RoleServer>,
) -> (Result<ToolOutput, RunError>, bool) {
    let (mut outcome, mut by_client) = run_tool(tool.clone(), start, opts.clone(), ctx).await;
    let answerable = opts.threads.is_some() && opts.thread_id.is_some();
    if !answerable || !interrupts::can_elicit(&ctx.peer) {
        return (outcome, by_client);
    }
    for _ in 0..interrupts::MAX_ELICITATION_ROUNDS {
        let report = match &outcome {
            Ok(out) if out.interrupted && !by_client => out.value.clone(),
            _ => break,
        };
        let answer = tokio::select! {
            a = interrupts::elicit_answers(&ctx.peer, tool.name(), &report) => a,
            () = ctx.ct.cancelled() => None,
        };
        let Some(answer) = answer else { break };
        (outcome, by_client) =
            run_tool(tool.clone(), Start::Resume(answer), opts.clone(), ctx).await;
    }
    (outcome, by_client)
}

/// Runs a graph tool call ([`GraphTool::run`]): its own supersteps become
/// progress notifications to the client, and the client's cancellation
/// cancels the run. Returns the outcome and whether the client cancelled.
async fn run_tool(
    tool: Arc<GraphTool>,
    start: Start,
    opts: CallOptions,
    ctx: &RequestContext<RoleServer>,
) -> (Result<ToolOutput, RunError>, bool) {
    let cancel = opts.cancel.clone();
    let progress = ctx.meta.get_progress_token();
    let (tx, rx) = mpsc::unbounded_channel::<ProgressNotificationParam>();
    let forward = forward_progress(rx, ctx.peer.clone());
    let run = async move {
        let mut on_step = |ev: &StepEvent| {
            // Progress counts the call's own supersteps (it must only
            // grow); the steps of graphs it called through `tools` are
            // not progress notifications.
            if let Some(token) = progress.as_ref().filter(|_| ev.sub_run.is_empty()) {
                // The receiver lives until the run ends.
                let _ = tx.send(progress_of(token, ev));
            }
        };
        // Boxed: the run's future nests the executor's, deep enough that
        // a session future holding it inline overflows rustc's layout
        // query depth (the MCP tests' `serve` task).
        Box::pin(tool.run(start, opts, &mut on_step)).await
    };
    let client_cancel = ctx.ct.clone();
    let run = async move {
        tokio::pin!(run);
        let mut by_client = false;
        loop {
            tokio::select! {
                r = &mut run => break (r, by_client),
                () = client_cancel.cancelled(), if !by_client => {
                    by_client = true;
                    cancel.cancel();
                }
            }
        }
    };
    let ((outcome, by_client), ()) = tokio::join!(run, forward);
    (outcome, by_client)
}

/// The stored thread a graph tool call runs on: `_meta`'s
/// [`THREAD_META_KEY`] under the caller (its principal key, or `stdio`)
/// and the tool, or `None` when the call names no thread.
fn call_thread(
    params: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    principal: Option<&Principal>,
    tool: &str,
) -> Result<Option<String>, String> {
    let given = params
        .meta
        .as_ref()
        .and_then(|m| m.0.0.get(THREAD_META_KEY))
        .or_else(|| ctx.meta.0.0.get(THREAD_META_KEY));
    let Some(value) = given else {
        return Ok(None);
    };
    let Some(name) = value.as_str() else {
        return Err(format!("_meta {THREAD_META_KEY:?} must be a string"));
    };
    match thread_key(principal, name, tool) {
        Ok(key) => Ok(Some(key)),
        Err(_) => Err(format!(
            "_meta {THREAD_META_KEY:?} must be 1 to {MAX_THREAD_NAME_BYTES} bytes \
             without control characters"
        )),
    }
}

/// The principal of a Streamable HTTP request (set by the HTTP guard);
/// `None` over stdio.
fn principal_of(ctx: &RequestContext<RoleServer>) -> Option<Principal> {
    ctx.extensions
        .get::<axum::http::request::Parts>()?
        .extensions
        .get::<Principal>()
        .cloned()
}

/// Who calls an agent-graph tool, i.e. who owns the graphs it creates:
/// over Streamable HTTP the principal, or with no authentication the
/// `Mcp-Session-Id` together with the connection's peer (the HTTP guard
/// only lets a session be used by the principal that opened it); empty
/// when neither is known. Over other transports, the server's local
/// session.
fn caller_of(extensions: &Extensions, local: &str) -> String {
    let Some(parts) = extensions.get::<axum::http::request::Parts>() else {
        return local.to_owned();
    };
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    match parts.extensions.get::<Principal>() {
        Some(p) => p.owner(session),
        None => session.to_owned(),
    }
}

/// Sends the progress notifications of one call, in order, until the run
/// ends (its sender is dropped).
async fn forward_progress(
    mut rx: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    peer: Peer<RoleServer>,
) {
    while let Some(p) = rx.recv().await {
        if let Err(e) = peer.notify_progress(p).await {
            tracing::debug!("cannot send a progress notification: {e}");
        }
    }
}

/// The progress notification of a completed superstep: `progress` counts
/// completed supersteps; the message names the step and the nodes that ran.
fn progress_of(token: &ProgressToken, ev: &StepEvent) -> ProgressNotificationParam {
    let mut nodes: Vec<&str> = Vec::new();
    for u in &ev.updates {
        if !nodes.contains(&u.node.as_str()) {
            nodes.push(&u.node);
        }
    }
    ProgressNotificationParam::new(token.clone(), f64::from(ev.step) + 1.0).with_message(format!(
        "step {}: {}",
        ev.step,
        nodes.join(", ")
    ))
}

/// `[<code>] <message>` as an error tool result.
/// `[<code>] <message>` as an error result, the message bounded by
/// [`MAX_ERROR_TEXT_BYTES`] and escaped: it may quote a graph's own text.
fn error_result(code: &str, message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error_text(&format!(
        "[{code}] {message}"
    )))])
}

fn error_text(text: &str) -> String {
    guest_text(text, MAX_ERROR_TEXT_BYTES)
}

/// A run's outcome as a tool result: the final state as structured content
/// plus its pretty JSON, or `[<code>] <message>` (bounded, escaped).
fn to_result(outcome: Result<ToolOutput, RunError>) -> CallToolResult {
    match outcome {
        Ok(out) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(out.text)]);
            result.structured_content = Some(out.value);
            result
        }
        Err(e) => error_result(e.code.as_str(), &e.message),
    }
}

/// An agent-graph call as a tool result: the text block plus the value as
/// structured content, or the failure's text (its `Display`, bounded and
/// escaped).
fn agent_graph_result(outcome: Result<ToolResult, ToolFailure>) -> CallToolResult {
    match outcome {
        Ok(r) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(r.text)]);
            result.structured_content = Some(r.value);
            result
        }
        Err(f) => CallToolResult::error(vec![ContentBlock::text(error_text(&f.to_string()))]),
    }
}

/// The MCP definition of an agent-graph tool.
fn agent_graph_definition(def: &ToolDef) -> Tool {
    Tool::new(
        Cow::Owned(def.name.clone()),
        Cow::Owned(def.description.clone()),
        schema_object(&def.parameters),
    )
}

fn schema_object(v: &Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m.clone()),
        // The registry's schemas are objects; anything else accepts all.
        _ => {
            let mut m = JsonObject::new();
            m.insert("type".into(), Value::from("object"));
            Arc::new(m)
        }
    }
}

/// The MCP definition of a graph tool.
pub(crate) fn tool_definition(tool: &GraphTool) -> Tool {
    Tool::new(
        Cow::Owned(tool.name().to_owned()),
        Cow::Owned(tool.description().to_owned()),
        schema_object(tool.input_schema()),
    )
    .with_raw_output_schema(schema_object(&tool.output_schema()))
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .build();
        if self.has_controller() {
            capabilities.prompts = Some(PromptsCapability::default());
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("sandgraph", env!("CARGO_PKG_VERSION")))
            .with_instructions(if self.has_controller() {
                "Each graph tool runs one sandboxed graph once and returns its final state. \
                 Resources graph://<name>/spec and graph://<name>/mermaid describe each graph. \
                 view_agent_graph, update_agent_graph and yield_agent_graph supervise durable \
                 agent graphs; the MCP session that creates a graph is its root session, the \
                 only one allowed to call them for it."
            } else {
                "Each tool runs one sandboxed graph once and returns its final state. \
                 Resources graph://<name>/spec and graph://<name>/mermaid describe each graph."
            })
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.definitions()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(self.call(request, context).await.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let list = self.registry().list();
        Ok(ListResourcesResult::with_all_items(resources::list(&list)))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut templates = resources::templates();
        if self.has_controller() {
            templates.push(agent_graph::resource_template());
        }
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        if !self.has_controller() {
            return Err(ErrorData::method_not_found::<ListPromptsRequestMethod>());
        }
        Ok(ListPromptsResult::with_all_items(prompts::list()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if !self.has_controller() {
            return Err(ErrorData::method_not_found::<GetPromptRequestMethod>());
        }
        prompts::get(&request.name).map(Into::into)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        if let Some(agent) = &self.shared.agent_graph
            && let Some(graph_id) = agent_graph::parse_resource(&uri)
        {
            return self.read_agent_graph(agent, graph_id, &uri, &context).await;
        }
        let (name, kind) = resources::parse(&uri).ok_or_else(|| {
            ErrorData::resource_not_found(
                format!(
                    "no resource {uri}: expected graph://<name>/spec or graph://<name>/mermaid"
                ),
                None,
            )
        })?;
        let tool = self.registry().get(name).ok_or_else(|| {
            ErrorData::resource_not_found(format!("no graph named \"{name}\""), None)
        })?;
        let contents: ResourceContents =
            resources::read(&tool, kind, &uri).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(agent) = &self.shared.agent_graph {
            let caller = caller_of(&context.extensions, agent.local_session());
            agent.attach(&caller, &context.peer);
        }
        self.shared.notifier.add(Target::Peer(context.peer));
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .resources_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.shared
            .notifier
            .add(Target::Listen(context.sink().clone()));
        context.cancelled().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_core::ErrorCode;

    #[test]
    fn errors_start_with_their_code() {
        let r = to_result(Err(RunError::new(ErrorCode::Timeout, "run timed out")));
        assert_eq!(r.is_error, Some(true));
        assert!(r.structured_content.is_none());
        let ContentBlock::Text(t) = &r.content[0] else {
            panic!("a text block");
        };
        assert_eq!(t.text, "[timeout] run timed out");
    }

    #[test]
    fn error_text_is_bounded_and_inert() {
        let flood = format!(
            "node \"fail\" failed: \u{1b}]0;pwned\u{7}\nerror[ok]: forged{}",
            "x".repeat(1 << 20)
        );
        let r = to_result(Err(RunError::new(ErrorCode::NodeError, flood)));
        assert_eq!(r.is_error, Some(true));
        let ContentBlock::Text(t) = &r.content[0] else {
            panic!("a text block");
        };
        assert!(t.text.len() < MAX_ERROR_TEXT_BYTES + 32, "{}", t.text.len());
        assert!(t.text.starts_with(
            "[node_error] node \"fail\" failed: \\u{1b}]0;pwned\\u{7}\\nerror[ok]: forged"
        ));
        assert!(t.text.ends_with("more bytes]"));
        assert!(!t.text.chars().any(char::is_control));
    }

    #[test]
    fn progress_names_the_step_and_each_node_once() {
        let ev = StepEvent {
            step: 2,
            updates: ["a", "b", "a"]
                .iter()
                .map(|n| sandgraph_core::TaskUpdate {
                    node: (*n).into(),
                    update: serde_json::json!({}),
                })
                .collect(),
            sub_run: Vec::new(),
            next: Vec::new(),
        };
        let token = ProgressToken(rmcp::model::NumberOrString::Number(7));
        let p = progress_of(&token, &ev);
        assert_eq!(p.progress, 3.0);
        assert_eq!(p.message.as_deref(), Some("step 2: a, b"));
    }

    #[test]
    fn only_global_mounts_change_the_lists() {
        assert!(changes_lists(&RegistryEvent::Mounted {
            name: "a".into(),
            path: None,
            scope: None
        }));
        assert!(!changes_lists(&RegistryEvent::Mounted {
            name: "a".into(),
            path: None,
            scope: Some("s".into())
        }));
        assert!(!changes_lists(&RegistryEvent::Failed {
            path: "x.wasm".into(),
            reason: "bad".into()
        }));
    }
}
