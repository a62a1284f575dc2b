//! The MCP server of sandgraph: every mounted graph tool over stdio and
//! MCP's Streamable HTTP transport, built on the official Rust SDK (`rmcp`).
//!
//! It is a thin adapter: [`McpServer`] lists the registry's model-visible
//! tools (`tools/list`: name, description, `inputSchema` = the compiled
//! parameter schema, `outputSchema`), and runs each `tools/call` through
//! [`sandgraph_registry::GraphTool::run`], which validates the
//! arguments, runs the graph's `validate` and then the graph. Success is the
//! final state as `structuredContent` plus its pretty JSON as one text block;
//! every failure is a tool result with `isError: true` and a text starting
//! with `[<code>]` (the run's error code, or [`sandgraph_server::BUSY`] /
//! [`UNKNOWN_TOOL`]).
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
//!   `[busy]` past it instead of queueing. The limits are the host's
//!   [`sandgraph_server::Admission`] ([`McpServer::context`]), which the
//!   studio's runs share.
//!
//! * Agent graphs: with a controller ([`ServerOptions::controller`],
//!   [`ControllerOptions`]), `view_agent_graph`, `update_agent_graph` and
//!   `yield_agent_graph` of [`sandgraph_controller`] are listed after the
//!   graph tools (hiding a graph tool of the same name, with a warning).
//!   The caller is the supervisor session: over Streamable HTTP its
//!   [`sandgraph_server::Principal`] (without tokens, its MCP session on
//!   its peer), else the
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
//! [`serve_stdio`] and Streamable HTTP are the two transports: over HTTP
//! the server is one route set ([`McpServer::routes`], `/mcp`) of the
//! host's [`sandgraph_server::HttpServer`], beside the studio's;
//! [`bind_http`] serves it alone. The listener, authentication, the
//! Host/Origin checks and the limits are the server crate's; this crate
//! keeps MCP's own session bookkeeping (each `Mcp-Session-Id` bound to the
//! principal that opened it, and the session caps).

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod agent_graph;
mod http;
mod interrupts;
mod prompts;
mod resources;
mod server;
mod stdio;

pub use agent_graph::ControllerOptions;
pub use http::{MCP_PATH, McpRoutes, bind_http};
pub use interrupts::{CONFIGURABLE_META_KEY, MAX_ELICITATION_ROUNDS, RESUME_META_KEY};
pub use server::{Checkpoints, McpServer, ServerOptions, THREAD_META_KEY, UNKNOWN_TOOL};
pub use stdio::{StdioError, serve_stdio};
