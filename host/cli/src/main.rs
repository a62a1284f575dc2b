//! `sandgraph`: build, run and inspect sandboxed graph components.

/// `println!` for the command's output: when stdout is closed early (the
/// output piped into `head`), the process ends quietly with the status a
/// process killed by `SIGPIPE` reports (141), instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::show::write_out(format_args!($($arg)*))
    };
}

mod build;
mod exit;
mod route;
mod serve;
mod show;
mod supervise;
mod threads;
mod tools;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sandgraph_core::json;
use sandgraph_runtime::{ErrorCode, Graph, Limits, RunError, RunOptions, RunOutcome, Runtime};
use serde_json::Value;

use crate::exit::Failure;

#[derive(Parser)]
#[command(
    name = "sandgraph",
    version,
    about = "Ship, host and run agent graphs as sandboxed WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a graph crate for wasm32-wasip2, check that it loads and describes itself, and write the component
    Build {
        /// Directory of the graph crate (holds its Cargo.toml)
        dir: PathBuf,
        /// Where to write the component
        #[arg(long)]
        out: PathBuf,
        /// Keep the debug info (DWARF) in the component; by default it is stripped (function names stay, for backtraces)
        #[arg(long)]
        debug: bool,
    },
    /// Run a graph component and print its final state as JSON
    ///
    /// The component runs with no capability granted: its llm and tools
    /// calls are denied. Mount it and use `sandgraph call` to run it under
    /// the grants of sandgraph.toml.
    Run {
        /// The graph component (.wasm)
        graph: PathBuf,
        /// Input state: JSON text, or @FILE to read it from a file (optional
        /// with --thread: without it the thread continues where it stopped)
        #[arg(long, required_unless_present = "thread")]
        input: Option<String>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        thread: threads::ThreadArgs,
        /// Also print one JSON line per superstep to stderr
        #[arg(long)]
        stream: bool,
    },
    /// Inspect and manage durable threads
    #[command(subcommand)]
    Threads(threads::ThreadsCommand),
    /// Print a graph's spec as JSON, or as a Mermaid flowchart
    Inspect {
        /// The graph component (.wasm)
        graph: PathBuf,
        /// Print a Mermaid flowchart instead of JSON
        #[arg(long)]
        mermaid: bool,
    },
    /// Folders of graph components as tools
    Tools {
        #[command(subcommand)]
        command: tools::ToolsCommand,
    },
    /// Call a graph tool: validate the arguments, run the graph once, print the result as JSON
    Call(tools::CallArgs),
    /// Serve the graph tools of folders over MCP: stdio, or Streamable HTTP with --http
    Serve(serve::ServeArgs),
    /// Ask a model to pick a graph tool for a request, check its choice (retrying with the reason), run it and print {tool, args, result, attempts}
    Route(route::RouteArgs),
    /// Print the routing audit journal: every attempt with its decision, reason and timings
    Journal(route::JournalArgs),
    /// Start a durable agent graph for a goal: a supervisor model schedules work on graph tools and agents, wave after wave, until it finishes (or continue one with --resume)
    Supervise(supervise::SuperviseArgs),
    /// Inspect agent graphs: their work, records and wakes
    #[command(subcommand)]
    AgentGraph(supervise::AgentGraphCommand),
}

/// Per-run limits; unset ones keep the defaults documented in
/// `host/runtime/src/limits.rs`.
#[derive(clap::Args)]
struct LimitArgs {
    /// Wall-clock budget of the run in milliseconds (default 30000)
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// Fuel budget of the run (default 200000000000)
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// Memory cap per instance in MiB (default 128)
    #[arg(long, value_name = "N")]
    memory_mb: Option<usize>,
    /// Superstep budget (default 25)
    #[arg(long, value_name = "N")]
    recursion_limit: Option<u32>,
    /// Bytes the host may keep for the run (state, outputs, events, checkpoints) in MiB (default 64)
    #[arg(long, value_name = "N")]
    host_memory_mb: Option<usize>,
    /// Instances the run may hold at once; its parallel tasks queue beyond this (default 8)
    #[arg(long, value_name = "N")]
    instances: Option<u32>,
}

impl LimitArgs {
    fn apply(&self, mut l: Limits) -> Limits {
        if let Some(ms) = self.timeout_ms {
            l.timeout = Duration::from_millis(ms);
        }
        if let Some(f) = self.fuel {
            l.fuel = f;
        }
        if let Some(mb) = self.memory_mb {
            l.memory = mb.saturating_mul(1 << 20);
        }
        if let Some(r) = self.recursion_limit {
            l.recursion_limit = r;
        }
        if let Some(mb) = self.host_memory_mb {
            l.host_bytes = mb.saturating_mul(1 << 20);
        }
        if let Some(n) = self.instances {
            l.instances = n;
        }
        l
    }
}

fn main() -> ExitCode {
    // wasmtime errors capture a host backtrace when RUST_BACKTRACE is set,
    // which is slow and useless for guest failures; keep it for panics only.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    init_logging();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return Failure::internal(format!("cannot start the async runtime: {e}")).report();
        }
    };
    match rt.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(f) => f.report(),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SANDGRAPH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .init();
}

async fn dispatch(cmd: Command) -> Result<ExitCode, Failure> {
    match cmd {
        Command::Build { dir, out, debug } => build::build(&dir, &out, debug)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Run {
            graph,
            input,
            limits,
            thread,
            stream,
        } => run(&graph, input.as_deref(), &limits, &thread, stream).await,
        Command::Threads(cmd) => threads::threads(cmd).await,
        Command::Inspect { graph, mermaid } => {
            inspect(&graph, mermaid).await.map(|()| ExitCode::SUCCESS)
        }
        Command::Tools { command } => tools::tools(command).await,
        Command::Call(args) => tools::call(args).await,
        Command::Serve(args) => serve::serve(args).await,
        Command::Route(args) => route::route(args).await,
        Command::Journal(args) => route::journal(args).await,
        Command::Supervise(args) => supervise::supervise(args).await,
        Command::AgentGraph(cmd) => supervise::agent_graph(cmd).await,
    }
}

async fn load(rt: &Runtime, path: &Path) -> Result<Arc<Graph>, Failure> {
    Ok(rt.load_file(path).await?)
}

pub(crate) fn read_input(arg: &str) -> Result<Value, Failure> {
    let (text, origin) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|e| {
                RunError::new(
                    ErrorCode::InvalidInput,
                    format!("cannot read input file {path}: {e}"),
                )
            })?,
            format!("input file {path}"),
        ),
        None => (arg.to_string(), "--input".to_string()),
    };
    json::parse_lossless(&text, &origin).map_err(|e| {
        RunError::new(
            ErrorCode::InvalidInput,
            format!("{origin} is not valid JSON: {e}"),
        )
        .into()
    })
}

async fn run(
    path: &Path,
    input: Option<&str>,
    args: &LimitArgs,
    thread: &threads::ThreadArgs,
    stream: bool,
) -> Result<ExitCode, Failure> {
    let input = input.map(read_input).transpose()?;
    let rt = Runtime::new()?;
    let limits = args.apply(rt.config().default_limits.clone());
    limits.check()?;
    let graph = load(&rt, path).await?;
    let opts = RunOptions {
        limits: Some(limits),
        context: tool_context(&graph),
        ..Default::default()
    };
    let mut on_step = |ev: &sandgraph_runtime::StepEvent| {
        if stream && let Ok(line) = serde_json::to_string(ev) {
            eprintln!("{}", show::json(&line));
        }
    };
    if let Some(id) = &thread.thread {
        return threads::run_on_thread(&rt, &graph, id, input, thread, opts, &mut on_step).await;
    }
    let input = input.unwrap_or_else(|| Value::Object(Default::default()));
    match rt.run_streaming(&graph, input, opts, &mut on_step).await? {
        RunOutcome::Completed(state) => {
            print_pretty(&Value::Object(state))?;
            Ok(ExitCode::SUCCESS)
        }
        RunOutcome::Interrupted { interrupts, .. } => {
            // Without a thread there is nothing to resume: say so.
            let list: Vec<Value> = interrupts
                .iter()
                .map(|i| serde_json::json!({"id": i.id, "value": i.value}))
                .collect();
            print_pretty(
                &serde_json::json!({"status": "interrupted", "thread_id": null, "interrupts": list}),
            )?;
            eprintln!("note: run with --thread ID to be able to resume this run");
            Ok(ExitCode::from(exit::INTERRUPTED))
        }
    }
}

fn tool_context(graph: &Graph) -> sandgraph_core::NodeContext {
    sandgraph_core::NodeContext {
        tool: graph.name().to_string(),
        ..Default::default()
    }
}

pub(crate) fn print_pretty(v: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))?;
    outln!("{}", show::json(&text));
    Ok(())
}

async fn inspect(path: &Path, mermaid: bool) -> Result<(), Failure> {
    let rt = Runtime::new()?;
    let graph = load(&rt, path).await?;
    if mermaid {
        print!("{}", show::lines(&graph.spec().to_mermaid()));
        Ok(())
    } else {
        let mut v =
            serde_json::to_value(graph.spec()).map_err(|e| Failure::internal(e.to_string()))?;
        // What the component imports of the brokered capabilities (llm,
        // tools, http): what an operator would have to grant it.
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "capabilities".into(),
                serde_json::json!(graph.capabilities()),
            );
        }
        print_pretty(&v)
    }
}
