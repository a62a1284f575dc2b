//! MCP's Streamable HTTP transport at `/mcp`: rmcp's
//! [`StreamableHttpService`] in an axum router, behind a bearer-token check,
//! with Host/Origin allow-lists (DNS rebinding), a body size limit, and a
//! graceful shutdown that lets running calls finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use futures::StreamExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::server::McpServer;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// Default of [`HttpOptions::max_body_bytes`]: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// Default of [`HttpOptions::shutdown_grace`]: 10 s.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

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
    /// The bearer token every request must carry, if any.
    pub token: Option<String>,
    /// Largest request body; larger ones get `413`.
    pub max_body_bytes: usize,
    /// After a shutdown starts, how long running calls get to finish before
    /// they are cancelled.
    pub shutdown_grace: Duration,
}

impl HttpOptions {
    /// Options for `addr` with the defaults: loopback only, no token, 1 MiB
    /// bodies, 10 s grace.
    pub fn new(addr: SocketAddr) -> HttpOptions {
        HttpOptions {
            addr,
            allow_remote: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            token: None,
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

struct RequestGuard(watch::Sender<usize>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[derive(Clone)]
struct Guard {
    /// sha256 of the expected token.
    token: Option<Arc<[u8; 32]>>,
    requests: Requests,
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Compares the digests of the presented and the expected token in
/// constant time (the digests have a fixed length, so neither the content
/// nor the length of the token leaks through timing).
fn token_matches(presented: &[u8], expected: &[u8; 32]) -> bool {
    let got = digest(presented);
    got.iter()
        .zip(expected.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
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

/// The token check, then the request is counted until its response body
/// is sent (or dropped).
async fn guard(State(g): State<Guard>, req: Request, next: Next) -> Response {
    if let Some(expected) = &g.token {
        match bearer(&req) {
            None => return unauthorized("missing bearer token"),
            Some(t) if !token_matches(t, expected) => {
                return unauthorized("wrong bearer token");
            }
            Some(_) => {}
        }
    }
    if req.method() == Method::GET {
        // A GET is the client's standing notification stream: it ends when
        // the session does, not when a call does.
        return next.run(req).await;
    }
    let counted = g.requests.enter();
    let delete = req.method() == Method::DELETE;
    let mut resp = next.run(req).await;
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
        let listener = tokio::net::TcpListener::bind(options.addr)
            .await
            .map_err(|source| HttpError::Bind {
                addr: options.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| HttpError::Bind {
            addr: options.addr,
            source,
        })?;
        if !addr.ip().is_loopback() && options.token.is_none() {
            tracing::warn!(
                "serving MCP on non-loopback {addr} without a bearer token: anyone who can reach \
                 it can run the graphs; set --token-env"
            );
        }
        let mut hosts = loopback_hosts(addr.port());
        if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
            hosts.push(SocketAddr::new(addr.ip(), addr.port()).to_string());
        }
        hosts.extend(options.allowed_hosts.iter().cloned());
        let mut origins = loopback_origins(addr.port());
        origins.extend(options.allowed_origins.iter().cloned());

        let sessions_stop = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_allowed_origins(origins)
            .enforce_origin_validation()
            .with_max_request_body_bytes(options.max_body_bytes)
            .with_cancellation_token(sessions_stop.clone());
        let factory = server.clone();
        let service = StreamableHttpService::new(
            move || Ok(factory.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let requests = Requests(watch::channel(0).0);
        let state = Guard {
            token: options
                .token
                .as_deref()
                .map(|t| Arc::new(digest(t.as_bytes()))),
            requests: requests.clone(),
        };
        let router = Router::new()
            .route_service(MCP_PATH, service)
            .layer(middleware::from_fn_with_state(state, guard));

        let trigger = CancellationToken::new();
        let stop_accepting = CancellationToken::new();
        // Responses are small SSE frames: without TCP_NODELAY a keep-alive
        // client waits out Nagle and delayed ACKs (~40 ms per call).
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!("cannot set TCP_NODELAY: {e}");
            }
        });
        let serve = axum::serve(listener, router)
            .with_graceful_shutdown(stop_accepting.clone().cancelled_owned());
        let mut serving = tokio::spawn(async move { serve.await });
        let grace = options.shutdown_grace;
        let wait_trigger = trigger.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                r = &mut serving => {
                    // The listener stopped by itself.
                    return match r {
                        Ok(r) => r.map_err(HttpError::Serve),
                        Err(e) => Err(HttpError::Serve(std::io::Error::other(e))),
                    };
                }
                () = wait_trigger.cancelled() => {}
            }
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
                Ok(Ok(r)) => r.map_err(HttpError::Serve),
                Ok(Err(e)) => Err(HttpError::Serve(std::io::Error::other(e))),
                Err(_) => {
                    tracing::warn!("connections still open after the shutdown; closing them");
                    serving.abort();
                    Ok(())
                }
            }
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_digest() {
        let expected = digest(b"s3cret");
        assert!(token_matches(b"s3cret", &expected));
        assert!(!token_matches(b"s3cre", &expected));
        assert!(!token_matches(b"s3cret!", &expected));
        assert!(!token_matches(b"", &expected));
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
