//! `sandgraph serve`: the graph tools of folders as an MCP server, on stdio
//! or over Streamable HTTP. Everything but the protocol goes to stderr:
//! stdout is the MCP channel in stdio mode.
//!
//! With `--controller`, the server also offers the agent-graph supervisor
//! tools (`view_agent_graph`, `update_agent_graph`, `yield_agent_graph`)
//! over the data database (`--db`, same default as `sandgraph threads`);
//! the caller that creates a graph owns it (over HTTP its principal, see
//! `sandgraph_server::Principal`). Without it they are not offered: `serve`
//! is a pure graph-tool server.
//!
//! With a controller and a usable model, requested work runs in waves
//! ([`Coordinator::run_wave`]): one starts when an update commits, and a
//! work poller runs one for every open graph at start and then every
//! second (`$SANDGRAPH_POLL_MS`). The poller is how several hosts on one
//! PostgreSQL store share the work of a graph, however it was scheduled,
//! and how the work of a dead host (its claims' leases expired) or of a
//! crashed earlier run on redb is finished.
//!
//! A wave that wrote records is a durable checkpoint of its graph: the
//! server is told ([`McpServer::checkpoint`]), so the wakes the graph's
//! root (an MCP client) claimed with `yield_agent_graph` are announced to
//! it (`notifications/resources/updated` for `agent-graph://<graphId>`)
//! and delivered on its next view or yield.
//!
//! With `--http`, the studio web app (`sandgraph-studio`) is served at `/`
//! beside `/mcp`, behind the same token, unless `--no-ui`. It serves each
//! caller the graphs MCP offers it; the principals `[studio] operators`
//! of a `--config` file names see every mounted graph.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sandgraph_controller::OpenAgentGraphs;
use sandgraph_mcp::{Checkpoints, ControllerOptions, MCP_PATH, McpServer, ServerOptions};
use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_server::{ConnLimits, HttpOptions, HttpServer, RouteSet, Tokens};
use sandgraph_store::Store;
use sandgraph_studio::StudioOptions;

use sandgraph_supervisor::{Coordinator, CoordinatorOptions, WorkPoller};

use crate::config::store::{db_path, open_data};
use crate::config::{LoadedConfig, Resolved, Role};
use crate::exit::Failure;
use crate::mount::{self, MountArgs};

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
    /// Do not serve the studio web app at http://ADDR/ (with --http it is served by default, behind the same token)
    #[arg(long, requires = "http")]
    no_ui: bool,
    /// Allow --http on a non-loopback address (then set --token-env)
    #[arg(long, requires = "http")]
    allow_remote: bool,
    /// Also accept this Host header (NAME for any port, NAME:PORT); repeatable. localhost, 127.0.0.1 and [::1] on the bound port are always accepted
    #[arg(long = "allow-host", value_name = "HOST", requires = "http")]
    allow_host: Vec<String>,
    /// Also accept this Origin (scheme://host:port, or :* for any port); repeatable. Loopback origins on the bound port are always accepted
    #[arg(long = "allow-origin", value_name = "ORIGIN", requires = "http")]
    allow_origin: Vec<String>,
    /// Require `Authorization: Bearer <token>`, the token read from the environment variable VAR; its holders are one principal, "token"
    #[arg(long, value_name = "VAR", requires = "http", conflicts_with = "tokens")]
    token_env: Option<String>,
    /// Require a bearer token from FILE (TOML, one `name = "<sha256 of the token, hex>"` per line, mode 0600): each client is the principal its token names
    #[arg(long, value_name = "FILE", requires = "http")]
    tokens: Option<PathBuf>,
    /// Open HTTP connections at once; past it the longest-idle one is closed, or the new one gets 503 when all are busy
    #[arg(long, value_name = "N", default_value_t = sandgraph_server::DEFAULT_MAX_CONNECTIONS as u32,
          value_parser = clap::value_parser!(u32).range(1..), requires = "http")]
    max_connections: u32,
    /// How long a request's headers may take to arrive (also how long a kept-alive connection waits for its next request)
    #[arg(long, value_name = "MS", default_value_t = sandgraph_server::DEFAULT_HEADER_READ_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000), requires = "http")]
    header_timeout_ms: u64,
    /// A connection on which no byte moved for this long is closed
    #[arg(long, value_name = "MS", default_value_t = sandgraph_server::DEFAULT_IDLE_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000), requires = "http")]
    idle_timeout_ms: u64,
    /// MCP sessions open at once; a request that would open one more gets 503 with Retry-After
    #[arg(long, value_name = "N", default_value_t = sandgraph_server::DEFAULT_MAX_SESSIONS as u32,
          value_parser = clap::value_parser!(u32).range(1..), requires = "http")]
    max_sessions: u32,
    /// MCP sessions one principal may hold open at once
    #[arg(long, value_name = "N", default_value_t = sandgraph_server::DEFAULT_MAX_SESSIONS_PER_PRINCIPAL as u32,
          value_parser = clap::value_parser!(u32).range(1..), requires = "http")]
    max_sessions_per_principal: u32,
    /// A session with no request for this long is closed
    #[arg(long, value_name = "MS", default_value_t = sandgraph_server::DEFAULT_SESSION_IDLE.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000), requires = "http")]
    session_idle_ms: u64,
    /// Largest HTTP request body in bytes; larger ones get 413
    #[arg(long, value_name = "N", default_value_t = sandgraph_server::DEFAULT_MAX_BODY_BYTES, requires = "http")]
    max_body_bytes: usize,
    /// Runs in flight at once over all clients, agent-graph calls and the work their updates start included; a call past it gets `[busy]` at once
    #[arg(long, value_name = "N", default_value_t = sandgraph_server::DEFAULT_MAX_CONCURRENT_RUNS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_runs: u32,
    /// Runs in flight at once for one HTTP principal (a token's name, or an unauthenticated peer)
    #[arg(long, value_name = "N", default_value_t = sandgraph_server::DEFAULT_MAX_RUNS_PER_PRINCIPAL as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_runs_per_principal: u32,
    /// On SIGINT/SIGTERM, how long running calls get to finish before they are cancelled
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    shutdown_grace_ms: u64,
    /// Also offer the agent-graph tools (view_agent_graph, update_agent_graph, yield_agent_graph) over the data database; the caller that creates a graph owns it (over HTTP: its token's principal, or without tokens its session on its peer). Requested work runs when an update commits, and a poller looks for pending work of every open graph at start and every $SANDGRAPH_POLL_MS (default 1000, at least 50), so hosts sharing a store share the work and finish what a dead host claimed
    #[arg(long)]
    controller: bool,
    /// Data store: a redb file or a postgres:// URL shared by several hosts; graph tool calls whose `_meta` names a `sandgraph/thread` run on durable threads in it, and --controller keeps its agent graphs there [default with --controller: $SANDGRAPH_STORE, else $SANDGRAPH_DB, else $XDG_DATA_HOME/sandgraph/threads.redb, else ~/.local/share/sandgraph/threads.redb; without: $SANDGRAPH_STORE if set]
    #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
    db: Option<PathBuf>,
}

/// The server to tell of checkpoints, set once it exists (the controller's
/// update hook is made before the server).
type ServerCheckpoints = Arc<OnceLock<Checkpoints>>;

/// Tells the server of `checkpoints` that `graph_id` reached a checkpoint,
/// when it exists.
async fn checkpoint(checkpoints: &ServerCheckpoints, graph_id: &str) {
    if let Some(c) = checkpoints.get() {
        c.checkpoint(graph_id).await;
    }
}

/// The root sessions of the supervised runs in `store`, for the front
/// door's owner rule.
fn supervised_roots(store: &Store) -> sandgraph_server::SupervisedRoots {
    let runs = sandgraph_supervisor::SupervisorRuns::open(store);
    std::sync::Arc::new(move |graph_id: &str| {
        runs.root_session(graph_id).map_err(|e| e.to_string())
    })
}

/// The controller of `serve --controller` over `store`. With a
/// coordinator, every committed update starts a wave that runs the graph's
/// requested work (in the background; clients see its records in their
/// views); a wave that wrote records is a checkpoint for the server of
/// `checkpoints`.
fn controller_options(
    store: &Store,
    coordinator: Option<Coordinator>,
    checkpoints: ServerCheckpoints,
) -> ControllerOptions {
    let options =
        ControllerOptions::new(store.agent_graphs()).supervised_roots(supervised_roots(store));
    let Some(coordinator) = coordinator else {
        return options;
    };
    let runtime = tokio::runtime::Handle::current();
    options.on_update(move |graph_id: &str| {
        let (coordinator, graph_id) = (coordinator.clone(), graph_id.to_owned());
        let checkpoints = checkpoints.clone();
        runtime.spawn(async move {
            match coordinator.run_wave(&graph_id).await {
                Ok(report) => {
                    tracing::info!(
                        graph = graph_id,
                        records = report.records.len(),
                        "wave settled"
                    );
                    if !report.records.is_empty() {
                        checkpoint(&checkpoints, &graph_id).await;
                    }
                }
                Err(e) => tracing::error!(graph = graph_id, "wave failed: {e}"),
            }
        });
    })
}

/// The coordinator of `serve --controller`: the model of `[llm]` (and
/// `[controller].model`), the agents of `[agents]`. Without a usable model
/// (no key, say) work is recorded but not run, and a warning says why.
fn coordinator(
    operator: LoadedConfig,
    store: &Store,
    registry: &sandgraph_registry::Registry,
) -> Result<Option<Coordinator>, Failure> {
    let resolved = Resolved::resolve(operator, None, false, Role::Coordinator)?;
    let provider = match sandgraph_llm::OpenAiClient::new(resolved.client) {
        Ok(p) => std::sync::Arc::new(p) as std::sync::Arc<dyn sandgraph_llm::Provider>,
        Err(e) => {
            eprintln!("warning: scheduled agent-graph work will not run: {e}");
            return Ok(None);
        }
    };
    Ok(Some(Coordinator::new(
        store.agent_graphs(),
        registry.clone(),
        provider,
        resolved.agents,
        CoordinatorOptions {
            max_new_activations: resolved.controller.max_new_activations,
            model: resolved.model,
            journal: Some(sandgraph_router::Journal::open(store)),
            threads: Some(store.threads()),
        },
    )))
}

/// How often the work poller looks when `$SANDGRAPH_POLL_MS` is unset.
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// The shortest poll interval `$SANDGRAPH_POLL_MS` may ask for.
const MIN_POLL_MS: u64 = 50;

/// `$SANDGRAPH_POLL_MS`: how often the work poller of `serve --controller`
/// looks for pending work; [`DEFAULT_POLL`] when unset.
fn poll_interval() -> Result<Duration, Failure> {
    let Some(value) = std::env::var_os("SANDGRAPH_POLL_MS").filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_POLL);
    };
    match value.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(ms) if ms >= MIN_POLL_MS => Ok(Duration::from_millis(ms)),
        _ => Err(invalid(format!(
            "SANDGRAPH_POLL_MS={}: expected a number of milliseconds, at least {MIN_POLL_MS}",
            value.to_string_lossy()
        ))),
    }
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

/// The data store of `serve`, when it has one: `--store`/`--db`,
/// `$SANDGRAPH_STORE`, or `--controller`'s default database.
fn open_store(args: &ServeArgs) -> Result<Option<Store>, Failure> {
    let wants_store = args.controller
        || args.db.is_some()
        || std::env::var_os("SANDGRAPH_STORE").is_some_and(|v| !v.is_empty());
    if !wants_store {
        return Ok(None);
    }
    let path = db_path(args.db.as_deref())?;
    Ok(Some(open_data(&path)?))
}

/// The Streamable HTTP options of `serve --http ADDR`, with its tokens
/// loaded; `None` for stdio. A non-loopback address needs
/// `--allow-remote`.
fn http_options(args: &ServeArgs, grace: Duration) -> Result<Option<HttpOptions>, Failure> {
    let Some(addr) = args.http else {
        return Ok(None);
    };
    if !addr.ip().is_loopback() && !args.allow_remote {
        return Err(invalid(format!(
            "--http {addr} is not a loopback address: add --allow-remote to serve other hosts \
             (and --token-env to require a token)"
        )));
    }
    let token = args.token_env.as_deref().map(token).transpose()?;
    let tokens = args
        .tokens
        .as_deref()
        .map(Tokens::load)
        .transpose()
        .map_err(|e| invalid(e.to_string()))?;
    Ok(Some(HttpOptions {
        allow_remote: args.allow_remote,
        allowed_hosts: args.allow_host.clone(),
        allowed_origins: args.allow_origin.clone(),
        token,
        tokens,
        conn: ConnLimits {
            max_connections: args.max_connections as usize,
            header_read_timeout: Duration::from_millis(args.header_timeout_ms),
            idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        },
        max_sessions: args.max_sessions as usize,
        max_sessions_per_principal: args.max_sessions_per_principal as usize,
        session_idle: Duration::from_millis(args.session_idle_ms),
        max_body_bytes: args.max_body_bytes,
        shutdown_grace: grace,
        ..HttpOptions::new(addr)
    }))
}

/// A poller of pending agent-graph work, running until dropped.
type Poller = Option<WorkPoller>;

/// What [`start_server`] starts: the server, its work poller, and the
/// studio operators of the config (`[studio]`).
struct Started {
    server: McpServer,
    poller: Poller,
    operators: Vec<String>,
}

/// Mounts the graphs and makes the MCP server over them, with the
/// controller, its coordinator and work poller when there is a store.
async fn start_server(
    args: &ServeArgs,
    store: Option<&Store>,
    poll: Option<Duration>,
) -> Result<Started, Failure> {
    let log = mount::capability_log(store, args.db.as_deref());
    let operator = LoadedConfig::load(args.mount.config.as_deref())?;
    let operators = crate::config::studio::operators(&operator)?;
    let (registry, _) = mount::open(&args.mount, &operator, log).await?;
    let coordinator = match store {
        Some(store) => coordinator(operator, store, &registry)?,
        None => None,
    };
    let checkpoints = ServerCheckpoints::default();
    let controller =
        store.map(|store| controller_options(store, coordinator.clone(), checkpoints.clone()));
    let server = McpServer::new(
        registry,
        ServerOptions {
            max_concurrent_runs: args.max_concurrent_runs as usize,
            max_runs_per_principal: args.max_runs_per_principal as usize,
            controller,
            threads: store.map(Store::threads),
        },
    );
    // Set once; `serve` makes one server.
    let _ = checkpoints.set(server.checkpoints());
    if let Some(c) = &coordinator {
        // The work an update starts counts under the server's run limit.
        c.count_runs_under(server.run_slots());
    }
    // Stopped (dropped) when the server stops, before its shutdown grace.
    let poller = match (store, coordinator, poll) {
        (Some(store), Some(c), Some(every)) => Some(WorkPoller::start(
            store.agent_graphs(),
            c,
            every,
            move |graph: String| {
                let checkpoints = checkpoints.clone();
                async move { checkpoint(&checkpoints, &graph).await }
            },
        )),
        _ => None,
    };
    Ok(Started {
        server,
        poller,
        operators,
    })
}

/// `sandgraph serve`.
pub async fn serve(args: ServeArgs) -> Result<ExitCode, Failure> {
    let grace = Duration::from_millis(args.shutdown_grace_ms);
    let http = http_options(&args, grace)?;
    let poll = if args.controller {
        Some(poll_interval()?)
    } else {
        None
    };
    // Opened before the graphs are mounted, so a bad or busy database fails
    // at once. The store lives as long as the server (it shares the file).
    // With a store (--store/--db, $SANDGRAPH_STORE, or --controller's
    // default database) graph tool calls can run on durable threads.
    let store = open_store(&args)?;
    let Started {
        server,
        poller,
        operators,
    } = start_server(&args, store.as_ref(), poll).await?;
    let _watching = if args.watch {
        Some(server.registry().watch().map_err(mount::registry_failure)?)
    } else {
        None
    };
    let Some(options) = http else {
        let served =
            sandgraph_mcp::serve_stdio(server, sandgraph_server::shutdown_signal(), grace).await;
        drop(poller);
        served.map_err(|e| Failure::internal(e.to_string()))?;
        return Ok(ExitCode::SUCCESS);
    };
    let mut routes: Vec<Box<dyn RouteSet>> = vec![Box::new(server.routes())];
    if !args.no_ui {
        // The journal's rows have no owner: a server that names several
        // principals (a tokens file) shows it to none of them.
        let journal = match &args.tokens {
            Some(_) => None,
            None => store.as_ref().map(sandgraph_router::Journal::open),
        };
        let studio = StudioOptions { journal, operators };
        let context = server.context().clone();
        routes.push(Box::new(sandgraph_studio::routes(context, studio)));
    }
    serve_http(server, routes, options, poller).await
}

/// Serves `server`'s `routes` (`/mcp`, and the studio's unless `--no-ui`)
/// over HTTP until SIGINT/SIGTERM, then stops the work poller and shuts
/// down gracefully.
async fn serve_http(
    server: McpServer,
    routes: Vec<Box<dyn RouteSet>>,
    options: HttpOptions,
    poller: Poller,
) -> Result<ExitCode, Failure> {
    let studio = routes.len() > 1;
    let admission = server.context().admission().clone();
    let http = HttpServer::bind(admission, routes, options)
        .await
        .map_err(|e| invalid(e.to_string()))?;
    if studio {
        eprintln!("sandgraph: studio at http://{}/", http.local_addr());
    }
    // The one line a supervisor (or a test) waits for, on stderr: last, so
    // whoever sees it has seen the others.
    eprintln!("sandgraph: serving MCP at {}", http.url(MCP_PATH));
    sandgraph_server::shutdown_signal().await;
    eprintln!("sandgraph: shutting down");
    drop(poller);
    http.shutdown();
    http.wait()
        .await
        .map_err(|e| Failure::internal(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
