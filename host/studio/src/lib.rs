//! The studio: the web app `sandgraph serve --http` serves at `/` next to
//! MCP's `/mcp`, to browse the mounted graphs, run them with their steps
//! streamed live, inspect and fork threads, and read the routing journal
//! and the caller's agent graphs.
//!
//! Its static shell (four files embedded in the binary, [`assets`]) carries
//! no data and needs no token; everything else is the JSON API under
//! `/api` (see `API.md` next to this crate), authenticated like `/mcp`
//! ([`sandgraph_server::Door::principal`]). It is a route set of the
//! host's HTTP server ([`StudioRoutes`]), a sibling of MCP's: both pass
//! the server's Host/Origin allow-lists, connection and body limits, and
//! share its [`Context`] (graphs, threads, run admission). State-changing
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

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use sandgraph_router::Journal;
use sandgraph_server::{Context, Door, RouteSet, hold_until_sent};

use api::ApiError;
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
    /// offers them ([`Context::visible_tool`]).
    pub operators: Vec<String>,
}

/// The studio's route set: the static shell as public routes (no data,
/// no token asked), the JSON API over a [`Context`] behind the server's
/// authentication and body limit; both behind its Host/Origin check.
#[derive(Debug)]
pub struct StudioRoutes {
    context: Context,
    options: StudioOptions,
}

/// The studio over `context`: runs started from it share the context's
/// run limits with every other front door.
pub fn routes(context: Context, options: StudioOptions) -> StudioRoutes {
    StudioRoutes { context, options }
}

impl RouteSet for StudioRoutes {
    fn into_router(self: Box<Self>, door: &Door) -> Router {
        let api = api::router(self.context, self.options)
            .layer(DefaultBodyLimit::max(door.options().max_body_bytes))
            .layer(middleware::from_fn_with_state(door.clone(), authenticate));
        asset_routes()
            .merge(api)
            .layer(middleware::from_fn_with_state(door.clone(), check_origin))
    }
}

/// Refuses a request whose `Host` is not allowed or whose `Origin`, when
/// present, is not (DNS rebinding, cross-site requests).
async fn check_origin(State(door): State<Door>, req: Request, next: Next) -> Response {
    if let Err(why) = door.allowed().check(req.headers(), req.uri()) {
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", why.to_string()).into_response();
    }
    next.run(req).await
}

/// Authenticates an API request as `/mcp` does, puts its principal in its
/// extensions, and counts it until its response body is sent.
async fn authenticate(State(door): State<Door>, mut req: Request, next: Next) -> Response {
    let principal = match door.principal(&req) {
        Ok(p) => p,
        Err(why) => {
            let mut resp = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why.to_string())
                .into_response();
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sandgraph\""),
            );
            return resp;
        }
    };
    req.extensions_mut().insert(principal);
    let counted = door.enter();
    hold_until_sent(next.run(req).await, counted)
}
