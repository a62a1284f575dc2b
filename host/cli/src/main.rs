//! `sandgraph`: build, run and inspect sandboxed graph components.

// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]
// The clap doc comments are --help text, where `[llm].model` names a
// sandgraph.toml key and `<repository>` a placeholder, not Markdown.
#![allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]

/// `println!` for the command's output: when stdout is closed early (the
/// output piped into `head`), the process ends quietly with the status a
/// process killed by `SIGPIPE` reports (141), instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::show::write_out(format_args!($($arg)*))
    };
}

mod build;
mod cache;
mod check;
mod config;
#[cfg(test)]
mod docgen;
mod exit;
mod golden;
mod mount;
mod new;
mod oci;
mod reference;
mod route;
mod run;
mod serve;
mod show;
mod sign;
mod supervise;
mod threads;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sandgraph_core::json;
use sandgraph_runtime::{ErrorCode, RunError};
use serde_json::Value;

use crate::exit::Failure;

#[derive(Parser)]
#[command(
    name = "sandgraph",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SANDGRAPH_COMMIT"), ")"),
    about = "Ship, host and run agent graphs as sandboxed WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a graph (Rust, Python or JavaScript) for wasm32-wasip2, check that it loads and describes itself, and write the component (GRAPH.wasm in the current folder unless --out says where)
    Build(build::BuildArgs),
    /// Create a graph project (Rust, Python or JavaScript) that builds and tests at once
    New(new::NewArgs),
    /// Manage the SDK vendored in a graph project
    Sdk(new::SdkArgs),
    /// Run a graph's golden cases (tests/*.json next to it) and report each, optionally as JUnit XML
    Test(golden::TestArgs),
    /// Check graph components without running a node: load, world, capabilities, size, spec lint, digest
    Check(check::CheckArgs),
    /// Pin the graphs of folders: write sandgraph.lock (file, graph name, sha256)
    Lock(sign::LockArgs),
    /// Sign a graph component with an ed25519 key
    Sign(sign::SignArgs),
    /// Verify a graph component's signature against trusted keys
    Verify(sign::VerifyArgs),
    /// Make an ed25519 key pair for signing graphs
    Keygen(sign::KeygenArgs),
    /// Push a graph component to an OCI registry (the wasm OCI artifact layout)
    Push(oci::PushArgs),
    /// Pull a graph component from an OCI registry, checking its digest
    Pull(oci::PullArgs),
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
        limits: config::LimitArgs,
        #[command(flatten)]
        thread: threads::ThreadArgs,
        /// Also print one JSON line per superstep to stderr
        #[arg(long)]
        stream: bool,
        #[command(flatten)]
        configurable: ConfigurableArg,
        #[command(flatten)]
        cache: cache::CacheArgs,
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
        #[command(flatten)]
        cache: cache::CacheArgs,
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
    /// Print the shell completion script for bash, zsh or fish (also elvish, powershell)
    Completions(reference::CompletionsArgs),
    /// Write the man pages: sandgraph.1 and one for each command
    Man(reference::ManArgs),
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
        Command::Build(args) => build::build(args).await,
        Command::New(args) => new::new(args).await,
        Command::Sdk(args) => new::sdk(args).await,
        Command::Test(args) => golden::test(args).await,
        Command::Check(args) => check::check(args).await,
        Command::Lock(args) => sign::lock(args).await,
        Command::Sign(args) => sign::sign(args).await,
        Command::Verify(args) => sign::verify(args).await,
        Command::Keygen(args) => sign::keygen(args).await,
        Command::Push(args) => oci::push(args).await,
        Command::Pull(args) => oci::pull(args).await,
        Command::Run {
            graph,
            input,
            limits,
            thread,
            stream,
            configurable,
            cache,
        } => {
            let run = run::RunArgs {
                limits: &limits,
                thread: &thread,
                stream,
                configurable: configurable.parse()?,
                cache: &cache,
            };
            run::run(&graph, input.as_deref(), run).await
        }
        Command::Threads(cmd) => threads::threads(cmd).await,
        Command::Inspect {
            graph,
            mermaid,
            cache,
        } => run::inspect(&graph, mermaid, &cache)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Tools { command } => tools::tools(command).await,
        Command::Call(args) => tools::call(args).await,
        Command::Serve(args) => serve::serve(args).await,
        Command::Route(args) => route::route(args).await,
        Command::Journal(args) => route::journal(args).await,
        Command::Supervise(args) => supervise::supervise(args).await,
        Command::AgentGraph(cmd) => supervise::agent_graph(cmd).await,
        Command::Completions(args) => reference::completions(args),
        Command::Man(args) => reference::man(args),
    }
}

pub(crate) fn read_input(arg: &str) -> Result<Value, Failure> {
    read_json_arg(arg, "--input", "input").map(|(v, _)| v)
}

/// A JSON flag's value: the text, or the file `@PATH` names; with where it
/// came from (`--flag` or `<what> file PATH`) for messages.
pub(crate) fn read_json_arg(arg: &str, flag: &str, what: &str) -> Result<(Value, String), Failure> {
    let (text, origin) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|e| {
                RunError::new(
                    ErrorCode::InvalidInput,
                    format!("cannot read {what} file {path}: {e}"),
                )
            })?,
            format!("{what} file {path}"),
        ),
        None => (arg.to_string(), flag.to_string()),
    };
    match json::parse_lossless(&text, &origin) {
        Ok(v) => Ok((v, origin)),
        Err(e) => Err(RunError::new(ErrorCode::InvalidInput, e.in_document(&origin)).into()),
    }
}

/// `--configurable JSON`: extra configurable keys for every node (the
/// seed's `configurable` pass-through), a JSON object or `@FILE`.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct ConfigurableArg {
    /// Extra configurable keys every node sees in its context: a JSON object, or @FILE
    #[arg(long, value_name = "JSON")]
    configurable: Option<String>,
}

impl ConfigurableArg {
    /// The keys given, or none.
    pub(crate) fn parse(&self) -> Result<serde_json::Map<String, Value>, Failure> {
        let Some(arg) = &self.configurable else {
            return Ok(serde_json::Map::new());
        };
        match read_json_arg(arg, "--configurable", "configurable")? {
            (Value::Object(map), _) => Ok(map),
            (other, origin) => Err(RunError::new(
                ErrorCode::InvalidInput,
                format!(
                    "{origin} must be a JSON object of configurable keys, not {}",
                    sandgraph_core::json::kind(&other)
                ),
            )
            .into()),
        }
    }
}

pub(crate) fn print_pretty(v: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))?;
    outln!("{}", show::json(&text));
    Ok(())
}
