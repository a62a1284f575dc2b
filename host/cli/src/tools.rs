//! `sandgraph tools list` and `sandgraph call`: folders of graph components
//! as tools.

use std::process::ExitCode;

use sandgraph_core::{Start, json};
use sandgraph_registry::{CallOptions, Registry, RegistryEvent};
use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_store::Store;
use serde_json::Value;

use crate::config::store::{db_path, open_data};
use crate::config::{LimitArgs, LoadedConfig};
use crate::exit::{self, Failure};
use crate::mount::{self, MountArgs};
use crate::show;

/// `sandgraph tools ...`
#[derive(clap::Subcommand)]
pub enum ToolsCommand {
    /// List every graph of the folders as a tool: name, as-tool and
    /// as-graph-tool flags, description
    List {
        #[command(flatten)]
        mount: MountArgs,
        /// Print the full definitions (with the JSON Schema of the arguments) as JSON
        #[arg(long)]
        json: bool,
        /// Keep running and print one line per change of the folders (mounted, remounted, unmounted, failed)
        #[arg(long)]
        watch: bool,
    },
}

/// `sandgraph call NAME ...`
#[derive(clap::Args)]
pub struct CallArgs {
    /// The tool (graph) name
    name: String,
    #[command(flatten)]
    mount: MountArgs,
    /// Tool arguments: JSON text, or @FILE to read them from a file
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    /// Run on the durable thread ID: continue its stored state and save a
    /// checkpoint per superstep (an interrupt stays resumable)
    #[arg(long = "thread", value_name = "ID")]
    thread: Option<String>,
    /// Answer the thread's pending interrupt(s) and run on: a JSON value, or
    /// an object mapping interrupt ids to values when several are pending
    /// (the arguments are not used: the thread keeps its state)
    #[arg(
        long,
        value_name = "JSON",
        requires = "thread",
        conflicts_with = "args"
    )]
    resume: Option<String>,
    #[command(flatten)]
    configurable: crate::ConfigurableArg,
    /// The thread database for --thread (default: $SANDGRAPH_DB, else
    /// $XDG_DATA_HOME/sandgraph/threads.redb, else
    /// ~/.local/share/sandgraph/threads.redb)
    #[arg(long, value_name = "PATH", requires = "thread")]
    db: Option<std::path::PathBuf>,
    /// Caps for this call, over the config's [limits]
    #[command(flatten)]
    limits: LimitArgs,
}

fn invalid(message: impl Into<String>) -> Failure {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

fn render(v: &Value) -> Result<String, Failure> {
    serde_json::to_string_pretty(v)
        .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))
}

/// `sandgraph tools <command>`.
pub async fn tools(cmd: ToolsCommand) -> Result<ExitCode, Failure> {
    match cmd {
        ToolsCommand::List { mount, json, watch } => list(&mount, json, watch).await,
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn print_table(registry: &Registry) {
    let tools = registry.list();
    let width = tools
        .iter()
        .map(|t| t.name().len())
        .chain([4])
        .max()
        .unwrap_or(4);
    outln!("{:<width$}  AS_TOOL  AS_GRAPH_TOOL  DESCRIPTION", "NAME");
    for t in tools {
        let description = show::folded(t.description().lines().next().unwrap_or(""), 200);
        outln!(
            "{:<width$}  {:<7}  {:<13}  {description}",
            show::line(t.name(), show::MAX_LINE_BYTES),
            yes_no(t.model_visible()),
            yes_no(t.routable()),
        );
    }
}

async fn list(args: &MountArgs, as_json: bool, watch: bool) -> Result<ExitCode, Failure> {
    let loaded = LoadedConfig::load(args.config.as_deref())?;
    let (registry, _) = mount::open(args, &loaded, None).await?;
    if as_json {
        let mut defs = Vec::new();
        for tool in registry.list() {
            let mut def = tool.definition();
            // The capabilities its component imports; a graph that cannot
            // be loaded shows none (its calls fail with the load error).
            let caps = match tool.graph().await {
                Ok(graph) => graph.capabilities().to_vec(),
                Err(_) => Vec::new(),
            };
            if let Some(o) = def.as_object_mut() {
                o.insert("capabilities".into(), serde_json::json!(caps));
            }
            defs.push(def);
        }
        outln!("{}", show::json(&render(&Value::Array(defs))?));
    } else {
        print_table(&registry);
    }
    if !watch {
        return Ok(ExitCode::SUCCESS);
    }
    let mut events = registry.subscribe();
    let _watching = registry.watch().map_err(mount::registry_failure)?;
    loop {
        match events.recv().await {
            Ok(event) => outln!("{}", event_line(&event, as_json)),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                eprintln!("warning: {n} change events were dropped");
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

/// One line per change: `mounted greet_graph from <path>`, or a JSON object
/// with `--json`.
fn event_line(event: &RegistryEvent, as_json: bool) -> String {
    let (kind, name, path, reason) = match event {
        RegistryEvent::Mounted { name, path, .. } => ("mounted", Some(name), path.clone(), None),
        RegistryEvent::Remounted { name, path } => {
            ("remounted", Some(name), Some(path.clone()), None)
        }
        RegistryEvent::Unmounted { name, path, .. } => {
            ("unmounted", Some(name), path.clone(), None)
        }
        RegistryEvent::Failed { path, reason } => {
            ("failed", None, Some(path.clone()), Some(reason))
        }
    };
    if as_json {
        let mut v = serde_json::Map::new();
        v.insert("event".into(), kind.into());
        if let Some(n) = name {
            v.insert("name".into(), n.as_str().into());
        }
        if let Some(p) = &path {
            v.insert("path".into(), p.display().to_string().into());
        }
        if let Some(r) = reason {
            v.insert("reason".into(), r.as_str().into());
        }
        return show::json(&Value::Object(v).to_string());
    }
    let path = show::line(
        &path.map(|p| p.display().to_string()).unwrap_or_default(),
        show::MAX_LINE_BYTES,
    );
    match (name, reason) {
        (Some(n), _) => format!("{kind} {} from {path}", show::line(n, show::MAX_LINE_BYTES)),
        (None, Some(r)) => format!("{kind} {path}: {}", show::line(r, show::MAX_LINE_BYTES)),
        (None, None) => format!("{kind} {path}"),
    }
}

fn read_args(arg: &str) -> Result<Value, Failure> {
    crate::read_json_arg(arg, "--args", "arguments").map(|(v, _)| v)
}

/// `sandgraph call NAME --graphs DIR --args JSON`.
pub async fn call(args: CallArgs) -> Result<ExitCode, Failure> {
    let input = read_args(&args.args)?;
    let resume = args
        .resume
        .as_deref()
        .map(|r| {
            json::parse_lossless(r, "--resume").map_err(|e| invalid(e.in_document("--resume")))
        })
        .transpose()?;
    let configurable = args.configurable.parse()?;
    // With --thread the data database is held for the thread, and the
    // capability journal is written to it; without, it is opened only if
    // a capability call is made.
    let store = match &args.thread {
        Some(_) => Some(open_data(&db_path(args.db.as_deref())?)?),
        None => None,
    };
    let loaded =
        LoadedConfig::load(args.mount.config.as_deref())?.with_limits(&args.limits.overrides());
    let log = mount::capability_log(store.as_ref(), args.db.as_deref());
    let (registry, _) = mount::open(&args.mount, &loaded, log).await?;
    let Some(tool) = registry.get(&args.name) else {
        let names = registry.names();
        let available = if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        };
        return Err(invalid(format!(
            "no graph tool named \"{}\"; available: {available}",
            args.name
        )));
    };
    // A thread id without its store ran without checkpoints: an interrupt
    // was printed with its thread id and then lost.
    let threads = store.as_ref().map(Store::threads);
    let opts = CallOptions {
        thread_id: args.thread,
        threads,
        configurable,
        ..CallOptions::default()
    };
    let start = match resume {
        Some(value) => Start::Resume(value),
        None => Start::Input(input),
    };
    let out = tool.run(start, opts, &mut |_| {}).await?;
    outln!("{}", show::json(&out.text));
    Ok(if out.interrupted {
        ExitCode::from(exit::INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}
