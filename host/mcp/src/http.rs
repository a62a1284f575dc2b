//! MCP's Streamable HTTP transport at `/mcp`, a route set of the host's
//! [`HttpServer`]: rmcp's [`StreamableHttpService`] behind a guard that
//! authenticates the caller ([`Door::principal`]), binds every MCP session
//! to the principal that opened it, and caps sessions (the session limits
//! of [`HttpOptions`]); the Host/Origin allow-lists and the body limit are
//! the server's, checked by rmcp.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sandgraph_server::{
    AuthError, Door, HttpError, HttpOptions, HttpServer, RouteSet, hold_until_sent,
};

use crate::server::McpServer;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// The `Retry-After` of a request refused at the session cap, in seconds:
/// sessions end when their clients close them or after their idle time.
const SESSION_RETRY_AFTER_SECS: u32 = 10;

/// The route set of `/mcp` over a server ([`McpServer::routes`]).
#[derive(Debug, Clone)]
pub struct McpRoutes(McpServer);

impl McpServer {
    /// Its Streamable HTTP endpoint at [`MCP_PATH`], to mount on an
    /// [`HttpServer`] (whose admission must be this server's,
    /// [`McpServer::context`]) beside the host's other route sets.
    pub fn routes(&self) -> McpRoutes {
        McpRoutes(self.clone())
    }
}

/// Binds `options.addr` and serves `server` alone at [`MCP_PATH`] until
/// [`HttpServer::shutdown`].
///
/// # Errors
///
/// As [`HttpServer::bind`].
pub async fn bind_http(server: McpServer, options: HttpOptions) -> Result<HttpServer, HttpError> {
    let admission = server.context().admission().clone();
    HttpServer::bind(admission, vec![Box::new(server.routes())], options).await
}

#[derive(Clone)]
struct Guard {
    door: Door,
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

fn unauthorized(why: AuthError) -> Response {
    let mut resp = (StatusCode::UNAUTHORIZED, why.to_string()).into_response();
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

/// Authenticates, checks the session belongs to the caller (or reserves a
/// new one under the caps), then the request is counted until its
/// response body is sent (or dropped).
async fn guard(State(g): State<Guard>, mut req: Request, next: Next) -> Response {
    let principal = match g.door.principal(&req) {
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
    let counted = g.door.enter();
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
    hold_until_sent(resp, counted)
}

impl RouteSet for McpRoutes {
    /// The MCP service at [`MCP_PATH`] behind the `guard` middleware.
    fn into_router(self: Box<Self>, door: &Door) -> Router {
        let options = door.options();
        let allowed = door.allowed();
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(allowed.hosts.clone())
            .with_allowed_origins(allowed.origins.clone())
            .enforce_origin_validation()
            .with_max_request_body_bytes(options.max_body_bytes)
            .with_cancellation_token(door.closing().clone());
        let factory = self.0;
        let mut session_config = SessionConfig::default();
        session_config.keep_alive = Some(options.session_idle);
        let mut manager = LocalSessionManager::default();
        manager.session_config = session_config;
        let manager = Arc::new(manager);
        let service =
            StreamableHttpService::new(move || Ok(factory.clone()), manager.clone(), config);
        let state = Guard {
            door: door.clone(),
            sessions: Arc::new(SessionOwners {
                manager,
                owners: tokio::sync::Mutex::default(),
                reservations: AtomicU64::new(0),
                max: options.max_sessions.max(1),
                per_principal: options.max_sessions_per_principal.max(1),
            }),
        };
        Router::new()
            .route_service(MCP_PATH, service)
            .layer(middleware::from_fn_with_state(state, guard))
    }
}
