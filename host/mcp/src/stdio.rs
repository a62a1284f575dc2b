//! MCP over standard input and output: one client, the process that
//! spawned us. Nothing else may write to stdout; logs go to stderr.

use std::future::Future;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::stdio_pipes;

use crate::server::McpServer;

/// How long runs still going when the client hangs up get to end after
/// their cancellation before the server returns anyway.
const HANG_UP_WAIT: Duration = Duration::from_secs(5);

/// Why the stdio server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The client never completed the MCP handshake.
    #[error("mcp handshake on stdio failed: {0}")]
    Handshake(String),
    /// The service task failed.
    #[error("mcp service on stdio failed: {0}")]
    Service(String),
}

/// Serves `server` on stdin/stdout until the client closes stdin or
/// `shutdown` resolves. On `shutdown`, new calls are refused, running calls
/// get `grace` to finish and are then cancelled; when the client hangs up,
/// running calls are cancelled (nobody can read their results).
///
/// # Errors
///
/// The handshake failed (e.g. stdin closed first) or the service failed.
pub async fn serve_stdio(
    server: McpServer,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> Result<(), StdioError> {
    let admission = server.context().admission().clone();
    let running = server
        .serve(stdio_pipes())
        .await
        .map_err(|e| StdioError::Handshake(e.to_string()))?;
    let token = running.cancellation_token();
    let mut waiting = std::pin::pin!(running.waiting());
    tokio::select! {
        r = &mut waiting => {
            r.map_err(|e| StdioError::Service(e.to_string()))?;
            tracing::debug!("the client closed stdin");
            admission.begin_shutdown();
            admission.cancel_all();
            admission.wait_idle(HANG_UP_WAIT).await;
            return Ok(());
        }
        () = shutdown => {}
    }
    admission.begin_shutdown();
    if !admission.wait_idle(grace).await {
        tracing::warn!("grace period over: cancelling the running calls");
        admission.cancel_all();
        admission.wait_idle(HANG_UP_WAIT).await;
    }
    token.cancel();
    let _ = tokio::time::timeout(HANG_UP_WAIT, waiting).await;
    Ok(())
}
