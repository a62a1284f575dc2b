//! The agent-graph supervisor tools (`view_agent_graph`,
//! `update_agent_graph`, `yield_agent_graph`) over MCP, when the server has
//! a controller ([`ServerOptions::controller`](crate::ServerOptions)).
//!
//! The caller is the supervisor's session:
//!
//! * Streamable HTTP: the request's principal (`principal:<name>` for a
//!   token), or without authentication the `Mcp-Session-Id` on the
//!   connection's peer (`<peer>/<session>`; a request with neither, e.g.
//!   the sessionless 2026-07-28 lifecycle without a token, has no caller
//!   and is refused with the controller's "agent-bound caller" failure);
//! * every other transport (stdio, in-process pipes): one fixed id per
//!   server, `stdio-<pid>-<start ms>` ([`McpServer::local_session_id`](crate::McpServer::local_session_id)).
//!
//! A graph's root session is the session that created it: the root session
//! of its supervised run when one is recorded, else the session of its first
//! committed update, else (a new graph) the caller. The call goes to the
//! [`AgentGraphTools`] of that root (one per session, cached), so any other
//! session gets `[not_root_session] …`. Update calls are serialized over the
//! server, so two sessions cannot both create the same new graph.
//!
//! Wakes: a graph's yield claims a supervisor wake, which is due once the
//! graph reached a durable checkpoint (a record was written since and the
//! graph left the state the wake was claimed for,
//! [`AgentGraphTools::due_wakes`]). The server has no supervisor loop to
//! deliver it to: the root session is the MCP client. So
//!
//! * when the host tells the server a wave settled
//!   ([`McpServer::checkpoint`](crate::McpServer::checkpoint)), each MCP
//!   session of the graph's root (each session that initialized as that
//!   caller, at most 16, the newest) gets
//!   one `notifications/resources/updated` for the graph's resource
//!   `agent-graph://<graphId>` (once per wake). A resource notification,
//!   not a log message: it names what changed, the client can read it
//!   (`resources/read` gives the root its view) or call a tool, and
//!   `notifications/message` is deprecated (SEP-2577). It is sent without a
//!   `resources/subscribe`: the graph's root is its only reader, and a
//!   client that ignores it loses nothing (the wake waits for its call);
//! * the root's next successful `view_agent_graph` or `yield_agent_graph`
//!   on that graph delivers every due wake: each goes through the store's
//!   wake attempts (begun, then `delivered`), and its text (the records
//!   since the yield, what is pending) comes before the tool's text, its
//!   `{wakeId, attemptId, text}` in `wakes` of the structured result. A
//!   failed call delivers nothing.
//!
//! `last_turn` is the number of agent-graph `tools/call` requests the
//! calling session has made on this server, this one included (1 for the
//! first); the tool call id is the JSON-RPC request id. An update without
//! `idempotencyKey` is therefore a new update at every request; with one, a
//! retry from the same session returns the stored row.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use rmcp::model::{ResourceContents, ResourceTemplate, ResourceUpdatedNotificationParam};
use rmcp::{Peer, RoleServer};
use sandgraph_controller::{
    AgentGraphStore, AgentGraphTools, CallIdentity, ToolDef, ToolFailure, ToolResult, UPDATE_TOOL,
    VIEW_TOOL, YIELD_TOOL, tool_defs,
};
use sandgraph_server::{AgentGraphOwners, SupervisedRoots};
use serde_json::Value;

/// Called with the graph id after every committed (not replayed) update.
type UpdateHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Sessions (callers and graph roots) whose tools and turn counters are
/// kept; past it the least recently used is dropped (its counter restarts
/// if it comes back).
const MAX_SESSIONS: usize = 4096;

/// MCP sessions kept per root session to notify of its wakes; past it the
/// oldest goes.
const MAX_PEERS_PER_SESSION: usize = 16;

/// Wake ids already announced, kept so a wake is announced once; past it
/// the set starts over (a wake may then be announced again).
const MAX_ANNOUNCED: usize = 4096;

/// The URI scheme of an agent graph's resource.
const RESOURCE_PREFIX: &str = "agent-graph://";

/// The resource of an agent graph: `agent-graph://<graphId>`.
pub(crate) fn resource_uri(graph_id: &str) -> String {
    format!("{RESOURCE_PREFIX}{graph_id}")
}

/// `agent-graph://<graphId>` → the graph id; `None` for other URIs.
pub(crate) fn parse_resource(uri: &str) -> Option<&str> {
    uri.strip_prefix(RESOURCE_PREFIX)
        .filter(|g| !g.is_empty() && !g.contains('/'))
}

/// The URI template of the agent graphs' resources.
pub(crate) fn resource_template() -> ResourceTemplate {
    ResourceTemplate::new(format!("{RESOURCE_PREFIX}{{graphId}}"), "agent graph")
        .with_description(
            "The view of an agent graph (as view_agent_graph returns it), for its root \
             session only; notifications/resources/updated when a wake of it is due.",
        )
        .with_mime_type("application/json")
}

/// The controller of a server: where the agent graphs are kept and who
/// hears about updates.
///
/// How calls are identified: the caller is the MCP session (Streamable
/// HTTP: its `Mcp-Session-Id`; other transports: the server's
/// [`McpServer::local_session_id`](crate::McpServer::local_session_id)). A
/// graph's root session is the root of its supervised run when
/// [`ControllerOptions::supervised_roots`] is set and one is recorded, else
/// the session of its first committed update, else the caller; any other
/// caller gets `[not_root_session] …`. `last_turn` counts the agent-graph
/// calls of the calling session on this server (1 for the first), and the
/// tool call id is the JSON-RPC request id; `_meta` is ignored (the update
/// tool has its own `idempotencyKey`).
#[derive(Clone)]
pub struct ControllerOptions {
    store: Option<AgentGraphStore>,
    supervised_roots: Option<SupervisedRoots>,
    on_update: Option<UpdateHook>,
}

impl std::fmt::Debug for ControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerOptions")
            .field("available", &self.store.is_some())
            .field("supervised_roots", &self.supervised_roots.is_some())
            .field("on_update", &self.on_update.is_some())
            .finish()
    }
}

impl ControllerOptions {
    /// The three tools over `store`, with no update hook.
    pub fn new(store: AgentGraphStore) -> Self {
        ControllerOptions {
            store: Some(store),
            supervised_roots: None,
            on_update: None,
        }
    }

    /// The three tools listed, every call failing with
    /// `[agent-graph-unavailable] …` ([`AgentGraphTools::unavailable`]).
    pub fn unavailable() -> Self {
        ControllerOptions {
            store: None,
            supervised_roots: None,
            on_update: None,
        }
    }

    /// Also takes the root session of a graph from its supervised run
    /// (`sandgraph supervise`), when `roots` finds one recorded.
    pub fn supervised_roots(mut self, roots: SupervisedRoots) -> Self {
        self.supervised_roots = Some(roots);
        self
    }

    /// Calls `f` with the graph id after every committed (not replayed)
    /// update, before the result is returned.
    pub fn on_update(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_update = Some(Arc::new(f));
        self
    }

    /// Whether calls reach a store (`false` for
    /// [`ControllerOptions::unavailable`]).
    pub fn is_available(&self) -> bool {
        self.store.is_some()
    }
}

/// Whether `name` is one of the three agent-graph tools.
pub(crate) fn is_tool(name: &str) -> bool {
    matches!(name, VIEW_TOOL | UPDATE_TOOL | YIELD_TOOL)
}

/// The id of the one session of the non-HTTP transports of a server.
fn new_local_session_id() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let id = format!("stdio-{}-{ms}", std::process::id());
    match SEQ.fetch_add(1, Ordering::Relaxed) {
        0 => id,
        n => format!("{id}-{n}"),
    }
}

struct Entry {
    tools: AgentGraphTools,
    turns: u64,
    used: u64,
    /// The MCP sessions of this caller, newest last: where its wakes are
    /// announced.
    peers: Vec<Peer<RoleServer>>,
}

#[derive(Default)]
struct Sessions {
    entries: HashMap<String, Entry>,
    clock: u64,
    /// Wakes announced by [`AgentGraph::announce`].
    announced: HashSet<String>,
}

/// The controller of a running server.
pub(crate) struct AgentGraph {
    options: ControllerOptions,
    /// The graphs' roots, when there is a store.
    owners: Option<AgentGraphOwners>,
    local_session: String,
    defs: Vec<ToolDef>,
    sessions: Mutex<Sessions>,
    /// Held by an update from the root lookup to the commit.
    updates: Mutex<()>,
}

impl AgentGraph {
    pub(crate) fn new(options: ControllerOptions) -> Self {
        let owners = options
            .store
            .clone()
            .map(|store| AgentGraphOwners::new(store, options.supervised_roots.clone()));
        AgentGraph {
            options,
            owners,
            local_session: new_local_session_id(),
            defs: tool_defs(),
            sessions: Mutex::default(),
            updates: Mutex::new(()),
        }
    }

    /// The three definitions, in the order view, update, yield.
    pub(crate) fn defs(&self) -> &[ToolDef] {
        &self.defs
    }

    pub(crate) fn local_session(&self) -> &str {
        &self.local_session
    }

    /// Who owns which graph, when there is a store.
    pub(crate) fn owners(&self) -> Option<AgentGraphOwners> {
        self.owners.clone()
    }

    fn sessions(&self) -> MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry of `session`, made when missing; marks it used.
    fn entry<'a>(
        &self,
        sessions: &'a mut Sessions,
        store: &AgentGraphStore,
        session: &str,
    ) -> &'a mut Entry {
        sessions.clock += 1;
        let now = sessions.clock;
        if !sessions.entries.contains_key(session) {
            if sessions.entries.len() >= MAX_SESSIONS
                && let Some(oldest) = sessions
                    .entries
                    .iter()
                    .min_by_key(|(_, e)| e.used)
                    .map(|(k, _)| k.clone())
            {
                sessions.entries.remove(&oldest);
            }
            let mut tools = AgentGraphTools::new(store.clone(), session);
            if let Some(hook) = self.options.on_update.clone() {
                tools = tools.on_update(move |g| hook(g));
            }
            sessions.entries.insert(
                session.to_owned(),
                Entry {
                    tools,
                    turns: 0,
                    used: now,
                    peers: Vec::new(),
                },
            );
        }
        let entry = sessions
            .entries
            .get_mut(session)
            .expect("the entry was just made");
        entry.used = now;
        entry
    }

    /// Remembers `peer`, an MCP session that initialized, as a session of
    /// `session` (its caller), where the wakes of its graphs are announced.
    /// Closed sessions are dropped.
    pub(crate) fn attach(&self, session: &str, peer: &Peer<RoleServer>) {
        let Some(store) = &self.options.store else {
            return;
        };
        if session.is_empty() {
            return;
        }
        let mut sessions = self.sessions();
        let entry = self.entry(&mut sessions, store, session);
        entry.peers.retain(|p| !p.is_transport_closed());
        if entry.peers.len() >= MAX_PEERS_PER_SESSION {
            entry.peers.remove(0);
        }
        entry.peers.push(peer.clone());
    }

    /// The due wakes of `graph_id` not announced yet, and the MCP sessions
    /// of their root session; marks them announced. Blocks on the store.
    fn due_to_announce(
        &self,
        graph_id: &str,
    ) -> Result<(Vec<String>, Vec<Peer<RoleServer>>), ToolFailure> {
        let Some(store) = &self.options.store else {
            return Ok((Vec::new(), Vec::new()));
        };
        // No caller: a graph with no update has no wake either.
        let root = self.root_of(graph_id, "")?;
        let tools = {
            let mut sessions = self.sessions();
            self.entry(&mut sessions, store, &root).tools.clone()
        };
        let due = tools.due_wakes(graph_id)?;
        let mut sessions = self.sessions();
        if sessions.announced.len() + due.len() > MAX_ANNOUNCED {
            sessions.announced.clear();
        }
        let fresh: Vec<String> = due
            .into_iter()
            .map(|w| w.wake_id)
            .filter(|w| sessions.announced.insert(w.clone()))
            .collect();
        let peers = match sessions.entries.get_mut(&root) {
            Some(entry) if !fresh.is_empty() => {
                entry.peers.retain(|p| !p.is_transport_closed());
                entry.peers.clone()
            }
            _ => Vec::new(),
        };
        Ok((fresh, peers))
    }

    /// Announces the due wakes of `graph_id` (each once) to the MCP
    /// sessions of its root: `notifications/resources/updated` for
    /// `agent-graph://<graphId>`. Returns how many sessions were told.
    pub(crate) async fn announce(self: &Arc<Self>, graph_id: &str) -> Result<usize, ToolFailure> {
        let (this, g) = (self.clone(), graph_id.to_owned());
        let (wakes, peers) = tokio::task::spawn_blocking(move || this.due_to_announce(&g))
            .await
            .map_err(|e| ToolFailure::plain(format!("the wake lookup failed: {e}")))??;
        if wakes.is_empty() {
            return Ok(0);
        }
        let uri = resource_uri(graph_id);
        let mut told = 0;
        for peer in peers {
            let param = ResourceUpdatedNotificationParam::new(uri.clone());
            match peer.notify_resource_updated(param).await {
                Ok(()) => told += 1,
                Err(e) => tracing::debug!(graph = graph_id, "cannot announce a wake: {e}"),
            }
        }
        tracing::info!(graph = graph_id, wakes = ?wakes, sessions = told, "wakes due");
        Ok(told)
    }

    /// `resources/read` of `agent-graph://<graphId>` by `session`: the
    /// first page of the graph's view as JSON, for its root session only
    /// (else `[not_root_session] …`). Delivers no wake and counts no turn.
    /// Blocks on the store.
    pub(crate) fn read(
        &self,
        graph_id: &str,
        session: &str,
        uri: &str,
    ) -> Result<ResourceContents, ToolFailure> {
        let call = CallIdentity {
            session_id: session.to_owned(),
            last_turn: 0,
            tool_call_id: String::new(),
        };
        let tools = match &self.options.store {
            None => AgentGraphTools::unavailable(),
            Some(store) => {
                let root = self.root_of(graph_id, session)?;
                let mut sessions = self.sessions();
                self.entry(&mut sessions, store, &root).tools.clone()
            }
        };
        let view = tools.call(VIEW_TOOL, serde_json::json!({"graphId": graph_id}), &call)?;
        let text = serde_json::to_string_pretty(&view.value)
            .map_err(|e| ToolFailure::plain(format!("cannot render the view: {e}")))?;
        Ok(ResourceContents::TextResourceContents {
            uri: uri.to_owned(),
            mime_type: Some("application/json".to_owned()),
            text,
            meta: None,
        })
    }

    /// The root session of `graph_id` ([`AgentGraphOwners::root_of`]);
    /// `caller` without a store.
    fn root_of(&self, graph_id: &str, caller: &str) -> Result<String, ToolFailure> {
        match &self.owners {
            Some(owners) => owners.root_of(graph_id, caller),
            None => Ok(caller.to_owned()),
        }
    }

    /// One call of `session` (empty: no caller). Blocks on the store.
    pub(crate) fn call(
        &self,
        tool: &str,
        args: Value,
        session: &str,
        tool_call_id: String,
    ) -> Result<ToolResult, ToolFailure> {
        let mut call = CallIdentity {
            session_id: session.to_owned(),
            last_turn: 0,
            tool_call_id,
        };
        let Some(store) = &self.options.store else {
            return AgentGraphTools::unavailable().call(tool, args, &call);
        };
        if session.is_empty() {
            // Refused by the tools after argument validation.
            return AgentGraphTools::new(store.clone(), "").call(tool, args, &call);
        }
        {
            let mut sessions = self.sessions();
            let entry = self.entry(&mut sessions, store, session);
            entry.turns += 1;
            call.last_turn = entry.turns;
        }
        let _serial = (tool == UPDATE_TOOL)
            .then(|| self.updates.lock().unwrap_or_else(PoisonError::into_inner));
        let root = match args.get("graphId").and_then(Value::as_str) {
            Some(g) => self.root_of(g, session)?,
            None => session.to_owned(),
        };
        let tools = {
            let mut sessions = self.sessions();
            self.entry(&mut sessions, store, &root).tools.clone()
        };
        let graph_id = args
            .get("graphId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let result = tools.call(tool, args, &call)?;
        match graph_id {
            Some(g) if tool != UPDATE_TOOL && root == session => {
                with_wakes(result, deliver_due(&tools, &g)?)
            }
            _ => Ok(result),
        }
    }
}

/// Delivers the due wakes of `graph_id` ([`AgentGraphTools::deliver_wake`]).
fn deliver_due(tools: &AgentGraphTools, graph_id: &str) -> Result<Vec<ToolResult>, ToolFailure> {
    let mut delivered = Vec::new();
    for wake in tools.due_wakes(graph_id)? {
        if let Some(d) = tools.deliver_wake(&wake)? {
            delivered.push(d);
        }
    }
    Ok(delivered)
}

/// `result` with the delivered wakes' texts before its own, and their
/// values under `wakes`.
fn with_wakes(mut result: ToolResult, wakes: Vec<ToolResult>) -> Result<ToolResult, ToolFailure> {
    if wakes.is_empty() {
        return Ok(result);
    }
    let mut text: Vec<String> = wakes.iter().map(|w| w.text.clone()).collect();
    text.push(std::mem::take(&mut result.text));
    result.text = text.join("\n\n");
    let values: Vec<Value> = wakes.into_iter().map(|w| w.value).collect();
    if let Value::Object(m) = &mut result.value {
        m.insert("wakes".to_owned(), Value::Array(values));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_controller::OpenAgentGraphs;
    use sandgraph_server::Principal;
    use sandgraph_store::Store;
    use serde_json::json;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.redb")).unwrap();
        (dir, store)
    }

    fn add(graph: &str) -> Value {
        json!({"graphId": graph, "addWork": [{"subagentId": "p", "instruction": "x"}]})
    }

    #[test]
    fn local_session_ids_name_the_process_and_differ_per_server() {
        let a = new_local_session_id();
        let b = new_local_session_id();
        assert!(
            a.starts_with(&format!("stdio-{}-", std::process::id())),
            "{a}"
        );
        assert_ne!(a, b);
    }

    #[test]
    fn the_graph_root_is_the_session_of_its_first_update() {
        let (_dir, store) = store();
        let ag = AgentGraph::new(ControllerOptions::new(store.agent_graphs()));
        let r = ag.call(UPDATE_TOOL, add("g"), "s1", "1".into()).unwrap();
        assert!(
            r.text
                .starts_with("Agent graph update committed at revision 1.")
        );
        let e = ag
            .call(UPDATE_TOOL, add("g"), "s2", "1".into())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "[not_root_session] agent graph g: only its root session may call this tool (caller s2)"
        );
        // s2 roots its own graph.
        ag.call(UPDATE_TOOL, add("h"), "s2", "2".into()).unwrap();
        let e = ag
            .call(VIEW_TOOL, json!({"graphId": "h"}), "s1", "2".into())
            .unwrap_err();
        assert!(e.to_string().starts_with("[not_root_session]"), "{e}");
    }

    #[test]
    fn turns_count_per_session_and_hooks_see_commits() {
        let (_dir, store) = store();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let ag = AgentGraph::new(
            ControllerOptions::new(store.agent_graphs())
                .on_update(move |g| sink.lock().unwrap().push(g.to_owned())),
        );
        // Same request id, different turns: two updates.
        ag.call(UPDATE_TOOL, add("g"), "s1", "7".into()).unwrap();
        let r = ag.call(UPDATE_TOOL, add("g"), "s1", "7".into()).unwrap();
        assert_eq!(r.value["update"]["revision"], 2);
        let rows = store.agent_graphs().list_schedule_updates("g").unwrap();
        assert_eq!(rows[0].request.source.run_id, "graph_run_1");
        assert_eq!(rows[1].request.source.run_id, "graph_run_2");
        assert_eq!(rows[1].request.source.tool_call_id, "7");
        assert_eq!(*seen.lock().unwrap(), ["g", "g"]);
    }

    #[test]
    fn no_caller_and_no_controller_are_refused() {
        let (_dir, store) = store();
        let ag = AgentGraph::new(ControllerOptions::new(store.agent_graphs()));
        let e = ag.call(UPDATE_TOOL, add("g"), "", "1".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "agent graph tools require an agent-bound caller"
        );
        let ag = AgentGraph::new(ControllerOptions::unavailable());
        let e = ag.call(VIEW_TOOL, json!({}), "s1", "1".into()).unwrap_err();
        assert!(
            e.to_string().starts_with("[agent-graph-unavailable] "),
            "{e}"
        );
    }

    #[test]
    fn owners_read_their_own_graphs_only() {
        let (_dir, store) = store();
        let ag = AgentGraph::new(ControllerOptions::new(store.agent_graphs()));
        let owners = ag.owners().unwrap();
        let alice = Principal::Named(Arc::from("alice"));
        let peer = Principal::Peer(Arc::from("uid 7"));
        ag.call(UPDATE_TOOL, add("a1"), &alice.owner("s"), "1".into())
            .unwrap();
        ag.call(UPDATE_TOOL, add("a2"), &alice.owner("t"), "1".into())
            .unwrap();
        ag.call(UPDATE_TOOL, add("p1"), &peer.owner("s9"), "1".into())
            .unwrap();
        ag.call(UPDATE_TOOL, add("x"), "uid 70/s1", "1".into())
            .unwrap();
        assert_eq!(owners.owned(&alice, 10).unwrap(), ["a1", "a2"]);
        assert_eq!(owners.owned(&alice, 1).unwrap(), ["a1"]);
        assert_eq!(owners.owned(&peer, 10).unwrap(), ["p1"]);
        let read = owners.read_owned(&alice, "a2").unwrap().unwrap();
        assert_eq!(read.projection.revision(), 1);
        assert_eq!(read.projection.work().len(), 1);
        assert!(read.wakes.is_empty());
        assert!(owners.read_owned(&alice, "p1").unwrap().is_none());
        assert!(owners.read_owned(&peer, "x").unwrap().is_none());
        assert!(owners.read_owned(&alice, "nothing").unwrap().is_none());
    }

    #[test]
    fn the_least_recently_used_session_goes_first() {
        let (_dir, store) = store();
        let ag = AgentGraph::new(ControllerOptions::new(store.agent_graphs()));
        let graphs = store.agent_graphs();
        let mut sessions = ag.sessions();
        for i in 0..MAX_SESSIONS {
            ag.entry(&mut sessions, &graphs, &format!("s{i}"));
        }
        ag.entry(&mut sessions, &graphs, "s0");
        ag.entry(&mut sessions, &graphs, "new");
        assert_eq!(sessions.entries.len(), MAX_SESSIONS);
        assert!(sessions.entries.contains_key("s0"));
        assert!(!sessions.entries.contains_key("s1"));
    }
}
