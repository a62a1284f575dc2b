//! The MCP server of sandgraph: every mounted graph tool over stdio and
//! MCP's Streamable HTTP transport, built on the official Rust SDK (`rmcp`).
//!
//! It is a thin adapter: [`McpServer`] lists the registry's model-visible
//! tools (`tools/list`: name, description, `inputSchema` = the compiled
//! parameter schema, `outputSchema`), and runs each `tools/call` through
//! [`sandgraph_registry::GraphTool::call_streaming`], which validates the
//! arguments, runs the graph's `validate` and then the graph. Success is the
//! final state as `structuredContent` plus its pretty JSON as one text block;
//! every failure is a tool result with `isError: true` and a text starting
//! with `[<code>]` (the run's error code, or [`BUSY`] / [`UNKNOWN_TOOL`]).
//!
//! * Progress: a call with a progress token gets one
//!   `notifications/progress` per completed superstep (`progress` = steps
//!   completed, `message` = `step <n>: <nodes>`).
//! * Cancellation: `notifications/cancelled` cancels the run (cooperative,
//!   then the hard stop after its grace period); its instances go with it.
//! * Changes: registry events (e.g. [`sandgraph_registry::Registry::watch`])
//!   become `notifications/tools/list_changed` and
//!   `notifications/resources/list_changed` to every connected client.
//! * Resources: `graph://<name>/spec` (JSON) and `graph://<name>/mermaid`
//!   for every mounted graph.
//! * Concurrency: calls run in parallel, several per graph; a
//!   server-wide limit ([`ServerOptions::max_concurrent_runs`]) answers
//!   `[busy]` past it instead of queueing.
//!
//! * Agent graphs: with a controller ([`ServerOptions::controller`],
//!   [`ControllerOptions`]), `view_agent_graph`, `update_agent_graph` and
//!   `yield_agent_graph` of [`sandgraph_controller`] are listed after the
//!   graph tools (hiding a graph tool of the same name, with a warning).
//!   The caller is the supervisor session: over Streamable HTTP its
//!   [`Principal`] (without tokens, its MCP session on its peer), else the
//!   server's local session. The caller that creates a graph is its root,
//!   and every other caller gets `[not_root_session] …`. Success is the tool's text plus its value as
//!   `structuredContent`; a failure is an `isError` result whose text is the
//!   failure as the controller renders it (`[code] message`, or
//!   `invalid arguments: …`). Without a controller they are not offered.
//!   With one, the server also has the prompt `orchestration:graph` (the
//!   supervisor's system-prompt section: yield, don't poll) and the
//!   resources `agent-graph://<graphId>` (a graph's view, for its root);
//!   a wake that becomes due ([`McpServer::checkpoint`]) is announced to
//!   the root's sessions as `notifications/resources/updated` for it and
//!   delivered on the root's next view or yield.
//!
//! [`serve_stdio`] and [`HttpServer`] are the two transports.
//! Over HTTP the server can also serve extra routes beside `/mcp`
//! ([`UiRoutes`], the studio web app), behind the same Host/Origin checks
//! and limits, their API behind the same authentication.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod agent_graph;
mod conn;
mod http;
mod interrupts;
mod principal;
mod prompts;
mod resources;
mod server;
mod stdio;
mod ui;

pub use agent_graph::{ControllerOptions, OwnedAgentGraph};
pub use conn::{
    ConnLimits, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};
pub use http::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    DEFAULT_SESSION_IDLE, DEFAULT_SHUTDOWN_GRACE, HttpError, HttpOptions, HttpServer, MCP_PATH,
};
pub use interrupts::{CONFIGURABLE_META_KEY, MAX_ELICITATION_ROUNDS, RESUME_META_KEY};
pub use principal::{Principal, SHARED_TOKEN_PRINCIPAL, Tokens, TokensError};
pub use server::{
    BUSY, Checkpoints, DEFAULT_MAX_CONCURRENT_RUNS, DEFAULT_MAX_RUNS_PER_PRINCIPAL,
    MAX_THREAD_NAME_BYTES, McpServer, RunPermit, ServerOptions, Stats, THREAD_META_KEY,
    UNKNOWN_TOOL, thread_key, thread_owner,
};
pub use stdio::{StdioError, serve_stdio};
pub use ui::UiRoutes;

/// Resolves at the first SIGINT or SIGTERM (Ctrl-C elsewhere).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
