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
//! `last_turn` is the number of agent-graph `tools/call` requests the
//! calling session has made on this server, this one included (1 for the
//! first); the tool call id is the JSON-RPC request id. An update without
//! `idempotencyKey` is therefore a new update at every request; with one, a
//! retry from the same session returns the stored row.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use sandgraph_controller::{
    AgentGraphStore, AgentGraphTools, CallIdentity, ToolDef, ToolFailure, ToolResult, UPDATE_TOOL,
    VIEW_TOOL, YIELD_TOOL, tool_defs,
};
use sandgraph_store::SupervisorRuns;
use serde_json::Value;

/// Called with the graph id after every committed (not replayed) update.
pub type UpdateHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Sessions (callers and graph roots) whose tools and turn counters are
/// kept; past it the least recently used is dropped (its counter restarts
/// if it comes back).
const MAX_SESSIONS: usize = 4096;

/// The controller of a server: where the agent graphs are kept and who
/// hears about updates.
///
/// How calls are identified: the caller is the MCP session (Streamable
/// HTTP: its `Mcp-Session-Id`; other transports: the server's
/// [`McpServer::local_session_id`](crate::McpServer::local_session_id)). A
/// graph's root session is the root of its supervised run when
/// [`ControllerOptions::supervisor_runs`] is set and one is recorded, else
/// the session of its first committed update, else the caller; any other
/// caller gets `[not_root_session] …`. `last_turn` counts the agent-graph
/// calls of the calling session on this server (1 for the first), and the
/// tool call id is the JSON-RPC request id; `_meta` is ignored (the update
/// tool has its own `idempotencyKey`).
#[derive(Clone)]
pub struct ControllerOptions {
    store: Option<AgentGraphStore>,
    supervisor_runs: Option<SupervisorRuns>,
    on_update: Option<UpdateHook>,
}

impl std::fmt::Debug for ControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerOptions")
            .field("available", &self.store.is_some())
            .field("supervisor_runs", &self.supervisor_runs.is_some())
            .field("on_update", &self.on_update.is_some())
            .finish()
    }
}

impl ControllerOptions {
    /// The three tools over `store`, with no update hook.
    pub fn new(store: AgentGraphStore) -> Self {
        ControllerOptions {
            store: Some(store),
            supervisor_runs: None,
            on_update: None,
        }
    }

    /// The three tools listed, every call failing with
    /// `[agent-graph-unavailable] …` ([`AgentGraphTools::unavailable`]).
    pub fn unavailable() -> Self {
        ControllerOptions {
            store: None,
            supervisor_runs: None,
            on_update: None,
        }
    }

    /// Also takes the root session of a graph from its supervised run
    /// (`sandgraph supervise`), when one is recorded.
    pub fn supervisor_runs(mut self, runs: SupervisorRuns) -> Self {
        self.supervisor_runs = Some(runs);
        self
    }

    /// Calls `f` with the graph id after every committed (not replayed)
    /// update, before the result is returned.
    pub fn on_update(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_update = Some(Arc::new(f));
        self
    }

    /// [`ControllerOptions::on_update`] with a shared hook, or none.
    pub fn with_update_hook(mut self, hook: Option<UpdateHook>) -> Self {
        self.on_update = hook;
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
}

#[derive(Default)]
struct Sessions {
    entries: HashMap<String, Entry>,
    clock: u64,
}

/// The controller of a running server.
pub(crate) struct AgentGraph {
    options: ControllerOptions,
    local_session: String,
    defs: Vec<ToolDef>,
    sessions: Mutex<Sessions>,
    /// Held by an update from the root lookup to the commit.
    updates: Mutex<()>,
}

impl AgentGraph {
    pub(crate) fn new(options: ControllerOptions) -> Self {
        AgentGraph {
            options,
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

    /// The root session of `graph_id`: its supervised run's, else that of
    /// its first update, else `caller`.
    fn root_of(
        &self,
        store: &AgentGraphStore,
        graph_id: &str,
        caller: &str,
    ) -> Result<String, ToolFailure> {
        if let Some(runs) = &self.options.supervisor_runs
            && let Some(run) = runs
                .get(graph_id)
                .map_err(|e| ToolFailure::plain(e.to_string()))?
        {
            return Ok(run.root_session_id);
        }
        let first = store.list_schedule_updates(graph_id)?.into_iter().next();
        Ok(first.map_or_else(|| caller.to_owned(), |u| u.request.source.session_id))
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
            Some(g) => self.root_of(store, g, session)?,
            None => session.to_owned(),
        };
        let tools = {
            let mut sessions = self.sessions();
            self.entry(&mut sessions, store, &root).tools.clone()
        };
        tools.call(tool, args, &call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_controller::OpenAgentGraphs;
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
