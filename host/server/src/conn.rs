//! The HTTP/1.1 connections of the front door: an accept
//! loop with a connection cap, a header-read timeout and an idle timeout,
//! so slow or silent clients cannot hold the server's sockets.
//!
//! * **Header-read timeout**: a request head (the request line and
//!   headers) must arrive within [`ConnLimits::header_read_timeout`] of the
//!   connection being ready for it: a slow-loris client trickling headers,
//!   and a kept-alive connection with no next request, are closed.
//! * **Idle timeout**: a connection on which no byte moved either way for
//!   [`ConnLimits::idle_timeout`] is dropped, even mid-request (a client
//!   that stopped reading its response or sending its body). Event streams
//!   carry keep-alive comments every 15 s, so a live one never idles.
//! * **Connection cap**: at [`ConnLimits::max_connections`] a new
//!   connection first evicts the connection that has been idle longest
//!   (no request in progress); when every connection is serving a request
//!   it gets `503 Service Unavailable` with `Retry-After` and is closed.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::http::hold_until_sent;
use crate::principal::{Principal, peer_principal};

/// Default of [`ConnLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default of [`ConnLimits::header_read_timeout`].
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`ConnLimits::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest request head hyper buffers, in bytes: MCP requests carry a
/// handful of short headers; 64 KiB bounds what a client can make the
/// server hold per connection before its body limit applies.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How often a connection being closed checks whether it is between
/// requests (then it is dropped without waiting for the client).
const CLOSE_IDLE_CHECK: Duration = Duration::from_millis(100);

/// How long a refused connection gets to send its request head and take
/// its `503` before it is closed anyway.
const REFUSE_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the connection layer enforces.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Open connections at once; past it the longest-idle one is closed,
    /// or the new one gets `503` when all are busy.
    pub max_connections: usize,
    /// How long a request head may take to arrive.
    pub header_read_timeout: Duration,
    /// How long a connection may move no byte before it is dropped.
    pub idle_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// The connection a request arrived on, in its extensions.
#[derive(Clone)]
pub(crate) struct ConnInfo(Arc<ConnState>);

impl ConnInfo {
    /// The unauthenticated principal of the connection (looked up once).
    pub(crate) fn peer_principal(&self) -> Principal {
        let s = &self.0;
        s.principal
            .get_or_init(|| peer_principal(s.peer, s.local))
            .clone()
    }
}

struct ConnState {
    id: u64,
    peer: SocketAddr,
    local: SocketAddr,
    opened: Instant,
    /// Milliseconds since `opened` at the last byte moved.
    last_io_ms: AtomicU64,
    /// Requests in progress (their responses not yet sent).
    busy: AtomicUsize,
    /// Set when the connection was chosen for eviction.
    evicted: AtomicBool,
    close: CancellationToken,
    principal: OnceLock<Principal>,
}

impl ConnState {
    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_io_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let since = Duration::from_millis(self.last_io_ms.load(Ordering::Relaxed));
        self.opened.elapsed().saturating_sub(since)
    }
}

/// The open connections.
#[derive(Default)]
struct Table {
    conns: Mutex<Vec<Arc<ConnState>>>,
    next_id: AtomicU64,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<ConnState>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection, evicting the longest-idle one at the cap.
    /// `None`: full, and every connection is serving a request.
    fn admit(&self, peer: SocketAddr, local: SocketAddr, max: usize) -> Option<Arc<ConnState>> {
        let mut conns = self.lock();
        let live = conns
            .iter()
            .filter(|c| !c.evicted.load(Ordering::Relaxed))
            .count();
        if live >= max {
            let victim = conns
                .iter()
                .filter(|c| !c.evicted.load(Ordering::Relaxed))
                .filter(|c| c.busy.load(Ordering::Relaxed) == 0)
                .max_by_key(|c| c.idle_for())?;
            victim.evicted.store(true, Ordering::Relaxed);
            victim.close.cancel();
            tracing::debug!(peer = %victim.peer, "connection cap reached: closing the longest-idle connection");
        }
        let state = Arc::new(ConnState {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            peer,
            local,
            opened: Instant::now(),
            last_io_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            evicted: AtomicBool::new(false),
            close: CancellationToken::new(),
            principal: OnceLock::new(),
        });
        conns.push(state.clone());
        Some(state)
    }

    fn remove(&self, id: u64) {
        self.lock().retain(|c| c.id != id);
    }

    fn close_all(&self) {
        for c in self.lock().iter() {
            c.close.cancel();
        }
    }
}

/// A TCP stream that stamps its connection's last activity on every byte
/// moved.
struct Tracked {
    inner: TcpStream,
    state: Arc<ConnState>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.touch();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.state.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Marks a request in progress until its response body is sent or
/// dropped.
struct Busy(Arc<ConnState>);

impl Busy {
    fn enter(state: &Arc<ConnState>) -> Busy {
        state.busy.fetch_add(1, Ordering::Relaxed);
        Busy(state.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// Serves `router` on `listener` until `stop`, then lets every connection
/// finish its request in progress (idle ones close at once) and returns
/// when all are closed.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    stop: CancellationToken,
) -> io::Result<()> {
    let table = Arc::new(Table::default());
    let mut tasks = JoinSet::new();
    let max = limits.max_connections.max(1);
    loop {
        let accepted = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            r = listener.accept() => r,
        };
        let (tcp, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors or a connection reset before accept:
                // not the listener's end. Back off briefly so a full
                // descriptor table does not spin the loop.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Responses are small SSE frames: without TCP_NODELAY a keep-alive
        // client waits out Nagle and delayed ACKs (~40 ms per call).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        let local = tcp.local_addr().unwrap_or(peer);
        match table.admit(peer, local, max) {
            Some(state) => {
                let (table, router) = (table.clone(), router.clone());
                tasks.spawn(async move {
                    let id = state.id;
                    connection(tcp, state, router, limits).await;
                    table.remove(id);
                });
            }
            None => {
                tasks.spawn(refuse(tcp));
            }
        }
    }
    drop(listener);
    table.close_all();
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// The answer to a connection past the cap when none can be evicted: the
/// request head is read first (a client that gets its answer before it
/// has sent its request reports a broken connection, not the `503`), and
/// the rest is drained after the answer so the close does not reset it.
async fn refuse(mut tcp: TcpStream) {
    const BODY: &str = "too many open connections; retry later\n";
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(REFUSE_WRITE_TIMEOUT, async {
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while head.len() < MAX_HEAD_BYTES && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match tcp.read(&mut buf).await? {
                0 => break,
                n => head.extend_from_slice(&buf[..n]),
            }
        }
        tcp.write_all(response.as_bytes()).await?;
        tcp.shutdown().await?;
        while tcp.read(&mut buf).await? > 0 {}
        Ok::<_, io::Error>(())
    })
    .await;
}

async fn connection(tcp: TcpStream, state: Arc<ConnState>, router: Router, limits: ConnLimits) {
    state.touch();
    let io = TokioIo::new(Tracked {
        inner: tcp,
        state: state.clone(),
    });
    let info = ConnInfo(state.clone());
    let per_request = state.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let busy = Busy::enter(&per_request);
        req.extensions_mut().insert(info.clone());
        let router = router.clone();
        async move {
            let resp = router
                .oneshot(req.map(Body::new))
                .await
                .unwrap_or_else(|e: Infallible| match e {});
            Ok::<_, Infallible>(hold_until_sent(resp, busy))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        let mut wait = limits.idle_timeout.saturating_sub(state.idle_for());
        if closing {
            wait = wait.min(CLOSE_IDLE_CHECK);
        }
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(peer = %state.peer, "connection ended: {e}");
                }
                return;
            }
            () = state.close.cancelled(), if !closing => {
                // A request in progress finishes; an idle connection (or
                // one still sending a head) is dropped at the next check.
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            () = tokio::time::sleep(wait) => {
                if state.idle_for() >= limits.idle_timeout {
                    tracing::debug!(peer = %state.peer, "connection idle too long: closing it");
                    return;
                }
                if closing && state.busy.load(Ordering::Relaxed) == 0 {
                    return;
                }
            }
        }
    }
}
