//! `sandgraph serve`: the graph tools of folders as an MCP server, on stdio
//! or over Streamable HTTP. Everything but the protocol goes to stderr:
//! stdout is the MCP channel in stdio mode.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use sandgraph_mcp::{HttpOptions, HttpServer, McpServer, ServerOptions};
use sandgraph_registry::LimitOverrides;
use sandgraph_runtime::{ErrorCode, RunError};

use crate::exit::Failure;
use crate::tools::{self, MountArgs};

/// `sandgraph serve --graphs DIR [--http ADDR] ...`
#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    mount: MountArgs,
    /// Follow the folders: graphs added, replaced or removed are mounted, remounted or unmounted, and clients get notifications/tools/list_changed
    #[arg(long)]
    watch: bool,
    /// Serve MCP's Streamable HTTP transport at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8808)
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Allow --http on a non-loopback address (then set --token-env)
    #[arg(long, requires = "http")]
    allow_remote: bool,
    /// Also accept this Host header (NAME for any port, NAME:PORT); repeatable. localhost, 127.0.0.1 and [::1] on the bound port are always accepted
    #[arg(long = "allow-host", value_name = "HOST", requires = "http")]
    allow_host: Vec<String>,
    /// Also accept this Origin (scheme://host:port, or :* for any port); repeatable. Loopback origins on the bound port are always accepted
    #[arg(long = "allow-origin", value_name = "ORIGIN", requires = "http")]
    allow_origin: Vec<String>,
    /// Require `Authorization: Bearer <token>`, the token read from the environment variable VAR
    #[arg(long, value_name = "VAR", requires = "http")]
    token_env: Option<String>,
    /// Largest HTTP request body in bytes; larger ones get 413
    #[arg(long, value_name = "N", default_value_t = sandgraph_mcp::DEFAULT_MAX_BODY_BYTES, requires = "http")]
    max_body_bytes: usize,
    /// Runs in flight at once over all clients; a call past it gets `[busy]` at once
    #[arg(long, value_name = "N", default_value_t = sandgraph_mcp::DEFAULT_MAX_CONCURRENT_RUNS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_runs: u32,
    /// On SIGINT/SIGTERM, how long running calls get to finish before they are cancelled
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    shutdown_grace_ms: u64,
}

fn invalid(message: String) -> Failure {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

fn token(var: &str) -> Result<String, Failure> {
    match std::env::var(var) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_owned()),
        Ok(_) => Err(invalid(format!(
            "--token-env {var}: the environment variable is empty"
        ))),
        Err(_) => Err(invalid(format!(
            "--token-env {var}: the environment variable is not set"
        ))),
    }
}

/// `sandgraph serve`.
pub async fn serve(args: ServeArgs) -> Result<ExitCode, Failure> {
    let token = args.token_env.as_deref().map(token).transpose()?;
    if let Some(addr) = args.http
        && !addr.ip().is_loopback()
        && !args.allow_remote
    {
        return Err(invalid(format!(
            "--http {addr} is not a loopback address: add --allow-remote to serve other hosts \
             (and --token-env to require a token)"
        )));
    }
    let (registry, _) = tools::open(&args.mount, LimitOverrides::default()).await?;
    let _watching = if args.watch {
        Some(registry.watch().map_err(tools::registry_failure)?)
    } else {
        None
    };
    let server = McpServer::new(
        registry,
        ServerOptions {
            max_concurrent_runs: args.max_concurrent_runs as usize,
        },
    );
    let grace = Duration::from_millis(args.shutdown_grace_ms);
    let Some(addr) = args.http else {
        sandgraph_mcp::serve_stdio(server, sandgraph_mcp::shutdown_signal(), grace)
            .await
            .map_err(|e| Failure::internal(e.to_string()))?;
        return Ok(ExitCode::SUCCESS);
    };
    let options = HttpOptions {
        allow_remote: args.allow_remote,
        allowed_hosts: args.allow_host,
        allowed_origins: args.allow_origin,
        token,
        max_body_bytes: args.max_body_bytes,
        shutdown_grace: grace,
        ..HttpOptions::new(addr)
    };
    let http = HttpServer::bind(server, options)
        .await
        .map_err(|e| invalid(e.to_string()))?;
    // The one line a supervisor (or a test) waits for, on stderr.
    eprintln!("sandgraph: serving MCP at {}", http.url());
    sandgraph_mcp::shutdown_signal().await;
    eprintln!("sandgraph: shutting down");
    http.shutdown();
    http.wait()
        .await
        .map_err(|e| Failure::internal(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
