//! The front door of `sandgraph serve`: everything its front doors share.
//! MCP (`sandgraph-mcp`) and the studio (`sandgraph-studio`) are sibling
//! [`RouteSet`]s mounted on one [`HttpServer`]; neither knows the other.
//!
//! * [`HttpServer::bind`]: one listener with the connection limits of
//!   [`ConnLimits`] (cap, header-read and idle timeouts), serving every
//!   route set's router side by side, and a graceful shutdown that stops
//!   accepting, gives running requests [`HttpOptions::shutdown_grace`],
//!   cancels the runs still going and then ends the sessions
//!   ([`Door::closing`]).
//! * [`Door`]: what each route set is mounted with: [`Door::principal`]
//!   (who is calling: a bearer token's [`Principal`] from [`Tokens`], or
//!   without tokens the connection's peer, a loopback peer named by the
//!   user owning its socket), [`Door::enter`] (requests a shutdown waits
//!   for), the [`Allowed`] Host/Origin lists, the body and session limits
//!   of [`HttpOptions`], and the run [`Admission`].
//! * [`Admission`]: the server's run slots and each principal's cap;
//!   every run of every front door holds a [`RunPermit`] or is refused
//!   with [`Busy`] (error code [`BUSY`]), never queued.
//! * [`thread_key`]: the stored id of a caller's durable thread,
//!   `<principal key>/<name>/<graph>`, the same on every front door.
//! * [`Context`]: the graphs callers may see ([`Context::visible_tool`]),
//!   the threads, the admission, and the agent graphs each principal owns
//!   ([`AgentGraphOwners`]).
//!
//! Invariants: a principal comes only from what a client proves (a token)
//! or what the kernel says (the TCP peer), never from a header a client
//! could forge; a run is admitted before it starts and counted until its
//! permit drops; route sets' paths do not overlap.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod admission;
mod agent_graphs;
mod allow;
mod conn;
mod context;
mod http;
mod principal;
mod thread_name;

pub use admission::{
    Admission, AdmissionOptions, BUSY, Busy, DEFAULT_MAX_CONCURRENT_RUNS,
    DEFAULT_MAX_RUNS_PER_PRINCIPAL, RunPermit, Stats,
};
pub use agent_graphs::{AgentGraphOwners, OwnedAgentGraph, SupervisedRoots};
pub use allow::{Allowed, Refused};
pub use conn::{
    ConnLimits, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};
pub use context::Context;
pub use http::{
    AuthError, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    DEFAULT_SESSION_IDLE, DEFAULT_SHUTDOWN_GRACE, Door, HttpError, HttpOptions, HttpServer,
    RequestGuard, RouteSet, hold_until_sent,
};
pub use principal::{Principal, SHARED_TOKEN_PRINCIPAL, Tokens, TokensError};
pub use thread_name::{MAX_THREAD_NAME_BYTES, ThreadNameError, thread_key, thread_owner};

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
