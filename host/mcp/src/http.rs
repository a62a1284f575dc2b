//! MCP's Streamable HTTP transport at `/mcp`: rmcp's
//! [`StreamableHttpService`] in an axum router, behind a guard that names
//! the caller ([`Principal`]: a token's name, or the connection's peer),
//! binds every MCP session to the principal that opened it, and caps
//! sessions; with Host/Origin allow-lists (DNS rebinding), a body size
//! limit, the connection limits of [`ConnLimits`], and a graceful shutdown
//! that lets running calls finish.
//!
//! With [`HttpOptions::ui`] it also serves extra routes beside `/mcp` (the
//! studio, [`UiRoutes`]) behind the same checks and limits (`ui.rs`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::conn::{self, ConnInfo, ConnLimits};
use crate::principal::{Principal, Tokens};
use crate::server::McpServer;
use crate::ui::{self, Allowed, UiRoutes};

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

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

/// The `Retry-After` of a request refused at the session cap, in seconds:
/// sessions end when their clients close them or after their idle time.
const SESSION_RETRY_AFTER_SECS: u32 = 10;

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
    /// MCP sessions open at once over every client; a request that would
    /// open one more gets `503` with `Retry-After`.
    pub max_sessions: usize,
    /// MCP sessions one principal may hold open at once (same answer).
    pub max_sessions_per_principal: usize,
    /// A session with no request for this long is closed.
    pub session_idle: Duration,
    /// Largest request body; larger ones get `413`.
    pub max_body_bytes: usize,
    /// After a shutdown starts, how long running calls get to finish before
    /// they are cancelled.
    pub shutdown_grace: Duration,
    /// Extra routes beside `/mcp` (the studio), behind the same Host/Origin
    /// checks, connection limits and body limit, their API routes behind
    /// the same authentication. `None` (the default): only `/mcp` is
    /// served.
    pub ui: Option<UiRoutes>,
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
            ui: None,
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
pub(crate) struct Requests(watch::Sender<usize>);

impl Requests {
    pub(crate) fn enter(&self) -> RequestGuard {
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

pub(crate) struct RequestGuard(watch::Sender<usize>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[derive(Clone)]
pub(crate) struct Guard {
    /// The accepted tokens; `None`: no authentication.
    tokens: Option<Tokens>,
    pub(crate) requests: Requests,
    sessions: Arc<SessionOwners>,
}

/// Which principal opened each MCP session, and the session caps.
struct SessionOwners {
    manager: Arc<LocalSessionManager>,
    /// Session id (or a reservation for one being opened) to the key of
    /// the principal that opened it.
    owners: tokio::sync::Mutex<HashMap<Arc<str>, String>>,
    reservations: AtomicU64,
    max: usize,
    per_principal: usize,
}

/// A session being opened: counted against the caps until the response
/// says whether one was opened.
const RESERVED: &str = "\0reserved-";

impl SessionOwners {
    /// Reserves a session for `principal`, or says why not.
    async fn reserve(&self, principal: &str) -> Result<Arc<str>, String> {
        let mut owners = self.owners.lock().await;
        let full = |owners: &HashMap<Arc<str>, String>| {
            owners.len() >= self.max
                || owners.values().filter(|o| *o == principal).count() >= self.per_principal
        };
        if full(&owners) {
            // Sessions that ended (idle, or closed by rmcp) are forgotten
            // here only when the count matters.
            let live = self.manager.sessions.read().await;
            owners.retain(|id, _| id.starts_with(RESERVED) || live.contains_key(id));
        }
        if owners.len() >= self.max {
            return Err(format!(
                "too many MCP sessions open ({}); retry later",
                self.max
            ));
        }
        if owners.values().filter(|o| *o == principal).count() >= self.per_principal {
            return Err(format!(
                "too many MCP sessions open for {principal} ({}): close one (DELETE /mcp) or \
                 retry later",
                self.per_principal
            ));
        }
        let n = self.reservations.fetch_add(1, Ordering::Relaxed);
        let key: Arc<str> = Arc::from(format!("{RESERVED}{n}"));
        owners.insert(key.clone(), principal.to_owned());
        Ok(key)
    }

    /// Ends a reservation; `opened` is the session it became, if any.
    async fn settle(&self, reservation: &str, opened: Option<&str>, principal: &str) {
        let mut owners = self.owners.lock().await;
        owners.remove(reservation);
        if let Some(id) = opened {
            owners.insert(Arc::from(id), principal.to_owned());
        }
    }

    /// Whether `session` was opened by `principal`.
    async fn owned_by(&self, session: &str, principal: &str) -> bool {
        self.owners
            .lock()
            .await
            .get(session)
            .is_some_and(|o| o == principal)
    }

    async fn forget(&self, session: &str) {
        self.owners.lock().await.remove(session);
    }
}

fn bearer(req: &Request) -> Option<&[u8]> {
    let value = req.headers().get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

fn unauthorized(message: &'static str) -> Response {
    let mut resp = (StatusCode::UNAUTHORIZED, message).into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"sandgraph\""),
    );
    resp
}

fn unavailable(message: String, retry_after: u32) -> Response {
    let mut resp = (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    resp
}

/// The same answer rmcp gives for a session that does not exist, so a
/// session id of another principal is indistinguishable from a wrong one.
fn session_not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

fn session_id(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Who sent `req`: the principal of its token, or with no authentication
/// the connection's peer.
pub(crate) fn principal_of(g: &Guard, req: &Request) -> Result<Principal, &'static str> {
    match &g.tokens {
        Some(tokens) => match bearer(req) {
            None => Err("missing bearer token"),
            Some(t) => tokens.principal(t).ok_or("wrong bearer token"),
        },
        None => Ok(req.extensions().get::<ConnInfo>().map_or_else(
            || Principal::Peer(Arc::from("unknown")),
            ConnInfo::peer_principal,
        )),
    }
}

/// Authenticates, checks the session belongs to the caller (or reserves a
/// new one under the caps), then the request is counted until its
/// response body is sent (or dropped).
async fn guard(State(g): State<Guard>, mut req: Request, next: Next) -> Response {
    let principal = match principal_of(&g, &req) {
        Ok(p) => p,
        Err(why) => return unauthorized(why),
    };
    let key = principal.key();
    let session = session_id(req.headers());
    let mut reservation = None;
    match &session {
        Some(id) if !g.sessions.owned_by(id, &key).await => return session_not_found(),
        Some(_) => {}
        None if req.method() == Method::POST => match g.sessions.reserve(&key).await {
            Ok(r) => reservation = Some(r),
            Err(why) => return unavailable(why, SESSION_RETRY_AFTER_SECS),
        },
        None => {}
    }
    req.extensions_mut().insert(principal);
    if req.method() == Method::GET {
        // A GET is the client's standing notification stream: it ends when
        // the session does, not when a call does.
        return next.run(req).await;
    }
    let counted = g.requests.enter();
    let delete = req.method() == Method::DELETE;
    let mut resp = next.run(req).await;
    if let Some(r) = reservation {
        let opened = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok());
        g.sessions.settle(&r, opened, &key).await;
    }
    if delete
        && resp.status().is_success()
        && let Some(id) = &session
    {
        g.sessions.forget(id).await;
    }
    if delete && resp.status() == StatusCode::ACCEPTED {
        // rmcp answers a session termination with 202; the spec's clients
        // (the Python SDK among them) expect 200 or 204 and report 202 as a
        // failed termination.
        *resp.status_mut() = StatusCode::NO_CONTENT;
    }
    let (parts, body) = resp.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _ = &counted;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

fn loopback_hosts(port: u16) -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .map(|h| format!("{h}:{port}"))
        .collect()
}

fn loopback_origins(port: u16) -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .map(|h| format!("http://{h}:{port}"))
        .collect()
}

impl HttpServer {
    /// Binds `options.addr` and serves `server` at [`MCP_PATH`] until
    /// [`HttpServer::shutdown`].
    ///
    /// # Errors
    ///
    /// A non-loopback address without `allow_remote`, an empty token, or
    /// an address that cannot be bound.
    pub async fn bind(server: McpServer, options: HttpOptions) -> Result<HttpServer, HttpError> {
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
        let shutdown = Shutdown {
            server,
            requests: Requests(watch::channel(0).0),
            stop_accepting: CancellationToken::new(),
            sessions_stop: CancellationToken::new(),
            grace: options.shutdown_grace,
        };
        let router = router(
            &shutdown.server,
            &options,
            addr,
            tokens,
            &shutdown.requests,
            &shutdown.sessions_stop,
        );
        let serve = conn::serve(
            listener,
            router,
            options.conn,
            shutdown.stop_accepting.clone(),
        );
        let serving = tokio::spawn(serve);
        let trigger = CancellationToken::new();
        let task = tokio::spawn(shutdown.run(serving, trigger.clone()));
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

    /// The endpoint URL, e.g. `http://127.0.0.1:8808/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.addr)
    }

    /// Starts a graceful shutdown: no new connections, running calls get
    /// the grace period to finish, then they are cancelled.
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

/// The `Host` values accepted on the bound `addr`.
fn allowed_hosts(addr: SocketAddr, options: &HttpOptions) -> Vec<String> {
    let mut hosts = loopback_hosts(addr.port());
    if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
        hosts.push(SocketAddr::new(addr.ip(), addr.port()).to_string());
    }
    hosts.extend(options.allowed_hosts.iter().cloned());
    hosts
}

/// The MCP service at [`MCP_PATH`] behind the [`guard`] middleware, and
/// the UI routes of [`HttpOptions::ui`] beside it.
fn router(
    server: &McpServer,
    options: &HttpOptions,
    addr: SocketAddr,
    tokens: Option<Tokens>,
    requests: &Requests,
    sessions_stop: &CancellationToken,
) -> Router {
    let mut origins = loopback_origins(addr.port());
    origins.extend(options.allowed_origins.iter().cloned());
    let allowed = Allowed {
        hosts: allowed_hosts(addr, options),
        origins,
    };
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed.hosts.clone())
        .with_allowed_origins(allowed.origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(sessions_stop.clone());
    let factory = server.clone();
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = Some(options.session_idle);
    let mut manager = LocalSessionManager::default();
    manager.session_config = session_config;
    let manager = Arc::new(manager);
    let service = StreamableHttpService::new(move || Ok(factory.clone()), manager.clone(), config);
    let state = Guard {
        tokens,
        requests: requests.clone(),
        sessions: Arc::new(SessionOwners {
            manager,
            owners: tokio::sync::Mutex::default(),
            reservations: AtomicU64::new(0),
            max: options.max_sessions.max(1),
            per_principal: options.max_sessions_per_principal.max(1),
        }),
    };
    let mcp = Router::new()
        .route_service(MCP_PATH, service)
        .layer(middleware::from_fn_with_state(state.clone(), guard));
    match &options.ui {
        Some(routes) => mcp.merge(ui::mount(
            routes.clone(),
            allowed,
            state,
            options.max_body_bytes,
        )),
        None => mcp,
    }
}

/// What a running server's shutdown needs: the server, the requests it
/// waits for, and the tokens that stop accepting and end the sessions.
struct Shutdown {
    server: McpServer,
    requests: Requests,
    /// Stops accepting connections.
    stop_accepting: CancellationToken,
    /// Ends the MCP sessions and their notification streams.
    sessions_stop: CancellationToken,
    /// How long running calls get to finish.
    grace: Duration,
}

impl Shutdown {
    /// Waits until the listener stops by itself or `trigger` fires; then
    /// stops accepting, gives running calls the grace period, cancels the
    /// rest and ends the sessions.
    async fn run(
        self,
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
        let Shutdown {
            server,
            requests,
            stop_accepting,
            sessions_stop,
            grace,
        } = self;
        server.begin_shutdown();
        stop_accepting.cancel();
        let running = server.stats().in_flight;
        tracing::info!(
            running,
            grace_ms = grace.as_millis() as u64,
            "shutting down: no new connections; waiting for running calls"
        );
        if !requests.wait_idle(grace).await {
            tracing::warn!(
                running = server.stats().in_flight,
                "grace period over: cancelling the running calls"
            );
            server.cancel_all();
            requests.wait_idle(HARD_STOP_WAIT).await;
        }
        // Ends the sessions and their notification streams, which lets
        // the connections close.
        sessions_stop.cancel();
        match tokio::time::timeout(HARD_STOP_WAIT, &mut serving).await {
            Ok(r) => served(r),
            Err(_) => {
                tracing::warn!("connections still open after the shutdown; closing them");
                serving.abort();
                Ok(())
            }
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
