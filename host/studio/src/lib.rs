//! The studio: the web app `sandgraph serve --http` serves at `/` next to
//! MCP's `/mcp`, to browse the mounted graphs, run them with their steps
//! streamed live, inspect and fork threads, and read the routing journal
//! and the caller's agent graphs.
//!
//! Its static shell (four files embedded in the binary, [`assets`]) carries
//! no data and needs no token; everything else is the JSON API under
//! `/api` (see `API.md` next to this crate), which the HTTP server
//! authenticates like `/mcp` ([`sandgraph_mcp::UiRoutes`]). State-changing
//! requests are `POST`s that must carry `Content-Type: application/json`
//! and `X-Sandgraph-Studio: 1`, which a cross-site form or a simple
//! cross-origin request cannot send.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod agent_graphs;
mod api;
pub mod assets;
mod bound;
mod graphs;
mod journal;
mod outbox;
mod runs;
mod threads;

use sandgraph_mcp::{McpServer, UiRoutes};
use sandgraph_store::Journal;

use assets::asset_routes;

/// What the studio shows besides the server's graphs, threads and agent
/// graphs.
#[derive(Debug, Clone, Default)]
pub struct StudioOptions {
    /// The routing journal shown on the Journal page; `None`: the page
    /// says the server shows none. Its rows name no principal, so every
    /// caller of the studio reads all of them: give it only to a server
    /// whose callers may (`serve` withholds it with a tokens file).
    pub journal: Option<Journal>,
    /// The studio operators: principals, as `/api/session` names them
    /// (`principal:<token name>`, or `peer:<peer>` without tokens), who
    /// see, run, resume and update every mounted graph, those MCP hides
    /// (`as_tool = false`) included. Everyone else is served what MCP
    /// offers them ([`sandgraph_mcp::McpServer::visible_tool`]).
    pub operators: Vec<String>,
}

/// The studio's routes for [`sandgraph_mcp::HttpOptions::ui`]: the static
/// shell as public routes, the JSON API over `server` as authenticated
/// ones. Runs started from the studio share `server`'s run limits.
pub fn ui_routes(server: McpServer, options: StudioOptions) -> UiRoutes {
    UiRoutes {
        public: asset_routes(),
        api: api::router(server, options),
    }
}
