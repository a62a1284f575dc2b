//! The HTTP front door: one listener ([`ConnLimits`]) serving sibling
//! [`RouteSet`]s (MCP's `/mcp`, the studio), each mounted with a [`Door`]
//! that authenticates callers ([`Principal`]: a token's name, or the
//! connection's peer), counts requests for the graceful shutdown, and
//! carries the Host/Origin allow-lists (DNS rebinding) and limits; and a
//! graceful shutdown that lets running requests finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use axum::response::Response;
use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::allow::Allowed;
use crate::conn::{self, ConnInfo, ConnLimits};
use crate::principal::{Principal, Tokens};

/// Default of [`HttpOptions::max_body_bytes`]: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// Default of [`HttpOptions::shutdown_grace`]: 10 s.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Default of [`HttpOptions::max_sessions`].
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// Default of [`HttpOptions::max_sessions_per_principal`].
pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: usize = 64;

/// Default of [`HttpOptions::session_idle`]: 5 minutes.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

/// After the grace period every run is cancelled; this is how long the
/// server then waits for them (each run's own grace is 500 ms by default)
/// and for the connections to close before it stops anyway.
const HARD_STOP_WAIT: Duration = Duration::from_secs(5);

/// How to serve over HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen. A port of 0 picks a free one
    /// ([`HttpServer::local_addr`] tells which).
    pub addr: SocketAddr,
    /// Allow a non-loopback `addr`. Without it, binding one is refused.
    pub allow_remote: bool,
    /// `Host` values accepted besides `localhost`, `127.0.0.1` and `[::1]`
    /// on the bound port (`name` for any port, `name:port` for one).
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted besides `http://localhost`,
    /// `http://127.0.0.1` and `http://[::1]` on the bound port
    /// (`scheme://host:port`, or `:*` for any port). Requests without an
    /// `Origin` header (non-browser clients) are accepted.
    pub allowed_origins: Vec<String>,
    /// The one shared bearer token every request must carry, if any; its
    /// holders are one principal, [`SHARED_TOKEN_PRINCIPAL`](crate::SHARED_TOKEN_PRINCIPAL).
    pub token: Option<String>,
    /// Named bearer tokens (`--tokens FILE`): every request must carry
    /// one, and is its principal's. Used instead of `token` when set.
    pub tokens: Option<Tokens>,
    /// Connection cap, header-read and idle timeouts.
    pub conn: ConnLimits,
    /// Sessions (MCP's) open at once over every client; a request that
    /// would open one more gets `503` with `Retry-After`.
    pub max_sessions: usize,
    /// Sessions one principal may hold open at once (same answer).
    pub max_sessions_per_principal: usize,
    /// A session with no request for this long is closed.
    pub session_idle: Duration,
    /// Largest request body; larger ones get `413`.
    pub max_body_bytes: usize,
    /// After a shutdown starts, how long running requests get to finish
    /// before their runs are cancelled.
    pub shutdown_grace: Duration,
}

impl HttpOptions {
    /// Options for `addr` with the defaults: loopback only, no token, 1 MiB
    /// bodies, 10 s grace, the connection and session caps of
    /// [`ConnLimits::default`], [`DEFAULT_MAX_SESSIONS`] and
    /// [`DEFAULT_MAX_SESSIONS_PER_PRINCIPAL`].
    pub fn new(addr: SocketAddr) -> HttpOptions {
        HttpOptions {
            addr,
            allow_remote: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            token: None,
            tokens: None,
            conn: ConnLimits::default(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            session_idle: DEFAULT_SESSION_IDLE,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// Why the HTTP server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A non-loopback address without [`HttpOptions::allow_remote`].
    #[error(
        "refusing to listen on non-loopback address {0} without --allow-remote (MCP over HTTP \
         runs graphs for whoever can reach it)"
    )]
    Remote(SocketAddr),
    /// An empty bearer token.
    #[error("the bearer token is empty")]
    EmptyToken,
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The listener failed while serving.
    #[error("http server failed: {0}")]
    Serve(std::io::Error),
}

/// Why a request was not authenticated ([`Door::principal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The server has tokens and the request carries none.
    #[error("missing bearer token")]
    MissingToken,
    /// The request's bearer token is none of the server's.
    #[error("wrong bearer token")]
    WrongToken,
}

/// A set of routes the server mounts beside the others (paths must not
/// overlap): MCP's `/mcp`, the studio's `/` and `/api`. Each set puts its
/// own checks in front of its routes, from the [`Door`] it is given.
pub trait RouteSet: Send {
    /// The set's routes, mounted with `door`.
    fn into_router(self: Box<Self>, door: &Door) -> Router;
}

impl<F: FnOnce(&Door) -> Router + Send> RouteSet for F {
    fn into_router(self: Box<Self>, door: &Door) -> Router {
        (*self)(door)
    }
}

/// What every route set of a server shares: who is calling, the requests
/// a graceful shutdown waits for, the allow-lists and limits, the run
/// admission, and the token that ends long-lived streams. Cheap to clone.
#[derive(Clone)]
pub struct Door {
    /// The accepted tokens; `None`: no authentication.
    tokens: Option<Tokens>,
    requests: Requests,
    allowed: Arc<Allowed>,
    options: Arc<HttpOptions>,
    admission: Admission,
    closing: CancellationToken,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("tokens", &self.tokens)
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
}

impl Door {
    /// Who sent `req`: the principal of its token, or with no
    /// authentication the connection's peer.
    ///
    /// # Errors
    ///
    /// The bearer token is missing or wrong.
    pub fn principal(&self, req: &Request) -> Result<Principal, AuthError> {
        match &self.tokens {
            Some(tokens) => match bearer(req) {
                None => Err(AuthError::MissingToken),
                Some(t) => tokens.principal(t).ok_or(AuthError::WrongToken),
            },
            None => Ok(req.extensions().get::<ConnInfo>().map_or_else(
                || Principal::Peer(Arc::from("unknown")),
                ConnInfo::peer_principal,
            )),
        }
    }

    /// Counts a request as running until the guard drops: a graceful
    /// shutdown waits for it (long-lived streams are not counted).
    pub fn enter(&self) -> RequestGuard {
        self.requests.enter()
    }

    /// The `Host` and `Origin` values accepted.
    pub fn allowed(&self) -> &Allowed {
        &self.allowed
    }

    /// The server's options (its body limit, session caps).
    pub fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// The run admission of the server.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Cancelled at the end of a shutdown (after the running requests):
    /// ends sessions and their long-lived streams, so connections close.
    pub fn closing(&self) -> &CancellationToken {
        &self.closing
    }
}

/// `resp`, with `held` kept until its body is sent (or dropped).
pub fn hold_until_sent<T: Send + Sync + 'static>(resp: Response, held: T) -> Response {
    let (parts, body) = resp.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _ = &held;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// A running HTTP server.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    trigger: CancellationToken,
    task: JoinHandle<Result<(), HttpError>>,
}

/// HTTP requests whose responses are still being sent, except the
/// long-lived `GET` streams: what a graceful shutdown waits for.
#[derive(Clone)]
struct Requests(watch::Sender<usize>);

impl Requests {
    fn enter(&self) -> RequestGuard {
        self.0.send_modify(|n| *n += 1);
        RequestGuard(self.0.clone())
    }

    async fn wait_idle(&self, timeout: Duration) -> bool {
        let mut rx = self.0.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// A request counted by [`Door::enter`], until it drops.
pub struct RequestGuard(watch::Sender<usize>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

fn bearer(req: &Request) -> Option<&[u8]> {
    let value = req.headers().get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

impl HttpServer {
    /// Binds `options.addr` and serves `routes` side by side until
    /// [`HttpServer::shutdown`]; runs are admitted by `admission`, which
    /// the shutdown closes.
    ///
    /// # Errors
    ///
    /// A non-loopback address without `allow_remote`, an empty token, or
    /// an address that cannot be bound.
    pub async fn bind(
        admission: Admission,
        routes: Vec<Box<dyn RouteSet>>,
        options: HttpOptions,
    ) -> Result<HttpServer, HttpError> {
        if !options.addr.ip().is_loopback() && !options.allow_remote {
            return Err(HttpError::Remote(options.addr));
        }
        if options.token.as_deref().is_some_and(str::is_empty) {
            return Err(HttpError::EmptyToken);
        }
        let tokens = match (&options.tokens, &options.token) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(t)) => Some(Tokens::shared(t)),
            (None, None) => None,
        };
        let (listener, addr) = listen(options.addr).await?;
        if !addr.ip().is_loopback() && tokens.is_none() {
            tracing::warn!(
                "serving MCP on non-loopback {addr} without a bearer token: anyone who can reach \
                 it can run the graphs; set --token-env"
            );
        }
        let door = Door {
            tokens,
            requests: Requests(watch::channel(0).0),
            allowed: Arc::new(Allowed::on(
                addr,
                &options.allowed_hosts,
                &options.allowed_origins,
            )),
            admission,
            closing: CancellationToken::new(),
            options: Arc::new(options),
        };
        let router = routes
            .into_iter()
            .fold(Router::new(), |all, set| all.merge(set.into_router(&door)));
        let stop_accepting = CancellationToken::new();
        let serve = conn::serve(listener, router, door.options.conn, stop_accepting.clone());
        let serving = tokio::spawn(serve);
        let trigger = CancellationToken::new();
        let task = tokio::spawn(shutdown(door, stop_accepting, serving, trigger.clone()));
        Ok(HttpServer {
            addr,
            trigger,
            task,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL of `path` on this server, e.g. `http://127.0.0.1:8808/mcp`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Starts a graceful shutdown: no new connections, running requests
    /// get the grace period to finish, then their runs are cancelled.
    pub fn shutdown(&self) {
        self.trigger.cancel();
    }

    /// Waits until the server has stopped (after [`HttpServer::shutdown`],
    /// or when the listener fails).
    ///
    /// # Errors
    ///
    /// The listener failed.
    pub async fn wait(self) -> Result<(), HttpError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(HttpError::Serve(std::io::Error::other(e))),
        }
    }
}

/// Binds `addr`; returns the listener and the address it is bound to.
async fn listen(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), HttpError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| HttpError::Bind { addr, source })?;
    Ok((listener, bound))
}

/// Waits until the listener stops by itself or `trigger` fires; then stops
/// accepting, gives running requests the grace period, cancels the runs
/// still going and ends the sessions ([`Door::closing`]).
async fn shutdown(
    door: Door,
    stop_accepting: CancellationToken,
    mut serving: JoinHandle<std::io::Result<()>>,
    trigger: CancellationToken,
) -> Result<(), HttpError> {
    tokio::select! {
        r = &mut serving => {
            // The listener stopped by itself.
            return served(r);
        }
        () = trigger.cancelled() => {}
    }
    let (admission, requests) = (&door.admission, &door.requests);
    let grace = door.options.shutdown_grace;
    admission.begin_shutdown();
    stop_accepting.cancel();
    let running = admission.stats().in_flight;
    tracing::info!(
        running,
        grace_ms = grace.as_millis() as u64,
        "shutting down: no new connections; waiting for running calls"
    );
    if !requests.wait_idle(grace).await {
        tracing::warn!(
            running = admission.stats().in_flight,
            "grace period over: cancelling the running calls"
        );
        admission.cancel_all();
        requests.wait_idle(HARD_STOP_WAIT).await;
    }
    // Ends the sessions and their notification streams, which lets
    // the connections close.
    door.closing.cancel();
    match tokio::time::timeout(HARD_STOP_WAIT, &mut serving).await {
        Ok(r) => served(r),
        Err(_) => {
            tracing::warn!("connections still open after the shutdown; closing them");
            serving.abort();
            Ok(())
        }
    }
}

/// The outcome of the listener's task.
fn served(r: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), HttpError> {
    r.map_err(|e| HttpError::Serve(std::io::Error::other(e)))?
        .map_err(HttpError::Serve)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_token_is_one_principal() {
        let t = Tokens::shared("s3cret");
        let named = Some(Principal::Named(Arc::from(crate::SHARED_TOKEN_PRINCIPAL)));
        assert_eq!(t.principal(b"s3cret"), named);
        assert_eq!(t.principal(b"s3cre"), None);
        assert_eq!(t.principal(b"s3cret!"), None);
        assert_eq!(t.principal(b""), None);
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let req = |v: &str| {
            Request::builder()
                .header(header::AUTHORIZATION, v)
                .body(Body::empty())
                .unwrap()
        };
        assert_eq!(bearer(&req("Bearer abc")), Some(&b"abc"[..]));
        assert_eq!(bearer(&req("bearer  abc ")), Some(&b"abc"[..]));
        assert_eq!(bearer(&req("Basic abc")), None);
        assert_eq!(bearer(&req("Bearer")), None);
    }
}
