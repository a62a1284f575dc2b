//! `sandgraph tools list` and `sandgraph call`: folders of graph components
//! as tools.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use sandgraph_agent::AgentConfig;
use sandgraph_core::audit::CapabilityLog;
use sandgraph_core::json;
use sandgraph_llm::OpenAiClient;
use sandgraph_llm::cassette::{CassetteWriter, Recording, Replay};
use sandgraph_registry::StoreCapabilityLog;
use sandgraph_registry::{
    CallOptions, DEFAULT_CONFIG_FILE, LimitOverrides, MountReport, OperatorConfig, Registry,
    RegistryError, RegistryEvent, RegistryOptions,
};
use sandgraph_runtime::caps::http::{HttpCassette, HttpReplay};
use sandgraph_runtime::caps::llm::LlmBackend;
use sandgraph_runtime::{ErrorCode, RunError, Runtime, RuntimeConfig};
use sandgraph_store::Store;
use serde_json::Value;

use crate::exit::{self, Failure};
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

/// Where the graphs come from and how they are mounted.
#[derive(clap::Args)]
pub struct MountArgs {
    /// Folder of graph components (*.wasm, not searched recursively); repeatable
    #[arg(long = "graphs", value_name = "DIR", required = true)]
    pub(crate) graphs: Vec<PathBuf>,
    /// Fail when any graph fails to mount instead of warning and skipping it
    #[arg(long)]
    strict: bool,
    /// Operator config [default: the first sandgraph.toml in the working directory or above it]
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Compile cache [default: $SANDGRAPH_CACHE, else $XDG_CACHE_HOME/sandgraph/cache.redb, else ~/.cache/sandgraph/cache.redb]
    #[arg(long, value_name = "FILE", conflicts_with = "no_cache")]
    cache: Option<PathBuf>,
    /// Compile every graph, without reading or writing a cache
    #[arg(long)]
    no_cache: bool,
    /// Write every exchange of the graphs' llm and http calls to FILE (JSON lines; keys and credential headers are never written)
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub(crate) record: Option<PathBuf>,
    /// Answer the graphs' llm and http calls from FILE (written by --record), offline; a request it has no answer for fails
    #[arg(long, value_name = "FILE")]
    pub(crate) replay: Option<PathBuf>,
    /// Mount only the graphs each folder's sandgraph.lock pins (`sandgraph lock`): fail when a graph is changed, missing or extra, or a folder has no lock
    #[arg(long)]
    locked: bool,
    /// Mount only graphs signed (GRAPH.wasm.sig, `sandgraph sign`) by a key of DIR (*.pub files); others are skipped with a warning (an error with --strict); repeatable
    #[arg(long = "trusted-keys", value_name = "DIR")]
    trusted_keys: Vec<PathBuf>,
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
    /// The thread database for --thread (default: $SANDGRAPH_DB, else
    /// $XDG_DATA_HOME/sandgraph/threads.redb, else
    /// ~/.local/share/sandgraph/threads.redb)
    #[arg(long, value_name = "PATH", requires = "thread")]
    db: Option<std::path::PathBuf>,
    /// Caps for this call, over the config's [limits]
    #[command(flatten)]
    limits: crate::LimitArgs,
}

fn invalid(message: impl Into<String>) -> Failure {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

pub(crate) fn registry_failure(e: RegistryError) -> Failure {
    match e {
        RegistryError::Config { .. } | RegistryError::Dir { .. } => invalid(e.to_string()),
        RegistryError::Strict(_) | RegistryError::Locked(_) => {
            RunError::new(ErrorCode::Load, e.to_string()).into()
        }
        RegistryError::Watch { .. } => Failure::internal(e.to_string()),
    }
}

/// How the operator config was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigOrigin {
    /// Named with `--config`: the operator chose it, so it is trusted.
    Flag,
    /// The first `sandgraph.toml` walking up from the working directory:
    /// it may be anyone's (a cloned repository's), so it may not decide
    /// where secrets go (see `route::check_key_destination`).
    Discovered,
    /// No file: the built-in defaults.
    None,
}

/// The operator config and how it was found; it derefs to the config.
#[derive(Debug)]
pub(crate) struct LoadedConfig {
    pub(crate) config: OperatorConfig,
    pub(crate) origin: ConfigOrigin,
}

impl std::ops::Deref for LoadedConfig {
    type Target = OperatorConfig;

    fn deref(&self) -> &OperatorConfig {
        &self.config
    }
}

/// The first `sandgraph.toml` in `cwd` or a folder above it: the bare file
/// name when it is in `cwd` itself (as messages always named it), else its
/// absolute path.
pub(crate) fn discover_config(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors().find_map(|dir| {
        let candidate = dir.join(DEFAULT_CONFIG_FILE);
        candidate.is_file().then(|| {
            if dir == cwd {
                PathBuf::from(DEFAULT_CONFIG_FILE)
            } else {
                candidate
            }
        })
    })
}

/// The config file: `--config`, else the first `sandgraph.toml` walking up
/// from the working directory (none when the working directory is gone).
pub(crate) fn load_operator_config(arg: Option<&Path>) -> Result<LoadedConfig, Failure> {
    let (path, origin) = match arg {
        Some(p) => (p.to_path_buf(), ConfigOrigin::Flag),
        None => match std::env::current_dir()
            .ok()
            .and_then(|d| discover_config(&d))
        {
            Some(p) => (p, ConfigOrigin::Discovered),
            None => {
                return Ok(LoadedConfig {
                    config: OperatorConfig::default(),
                    origin: ConfigOrigin::None,
                });
            }
        },
    };
    let config = OperatorConfig::load(&path).map_err(registry_failure)?;
    Ok(LoadedConfig { config, origin })
}

fn print_report(report: &MountReport) {
    for w in report.warnings.iter().chain(&report.notices) {
        eprintln!(
            "warning: {}",
            show::line(&w.to_string(), show::MAX_LINE_BYTES)
        );
    }
}

/// Where the capability calls of the graphs go: the capability journal of
/// `store` when the command holds the data database, else of the database
/// at `db` (default as `threads`), opened only when a call is made. `None`
/// when no database path can be found (no home folder).
pub(crate) fn capability_log(
    store: Option<&Store>,
    db: Option<&std::path::Path>,
) -> Option<StoreCapabilityLog> {
    match store {
        Some(store) => Some(StoreCapabilityLog::new(store.capability_journal())),
        None => crate::threads::db_path(db)
            .ok()
            .map(StoreCapabilityLog::at_path),
    }
}

/// The host's model for the graphs granted `llm`: the `[llm]` provider
/// with its key, and the `[llm.models]` aliases. None (their calls are then
/// `denied`: the host has no model) when no graph is granted `llm` (the key
/// is not even read), or with a warning when `[llm]` does not parse, a
/// discovered config would redirect the key, or the client cannot be built
/// (no key).
fn llm_backend(
    loaded: &LoadedConfig,
    args: &MountArgs,
    recording: Option<&Arc<CassetteWriter>>,
) -> Result<Option<LlmBackend>, Failure> {
    if loaded.graphs.values().all(|g| g.grants.llm.is_none()) {
        return Ok(None);
    }
    let cassette = |e: sandgraph_llm::cassette::CassetteError| invalid(e.to_string());
    if let Some(path) = &args.replay {
        // Offline: no key is read and nothing is sent.
        let default_model = AgentConfig::from_operator(loaded)
            .map(|c| c.llm.model)
            .unwrap_or_default();
        return Ok(Some(LlmBackend {
            provider: Arc::new(Replay::open(path).map_err(cassette)?),
            models: loaded.llm_models.clone(),
            default_model,
        }));
    }
    let Some(mut backend) = live_llm_backend(loaded) else {
        return Ok(None);
    };
    if let Some(writer) = recording {
        backend.provider = Arc::new(Recording::to(backend.provider, writer.clone()));
    }
    Ok(Some(backend))
}

/// The operator's model, with its key.
fn live_llm_backend(loaded: &LoadedConfig) -> Option<LlmBackend> {
    let unserved = |why: String| {
        eprintln!(
            "warning: {}",
            show::line(
                &format!("graphs granted llm get denied: {why}"),
                show::MAX_LINE_BYTES
            )
        );
        None
    };
    let config = match AgentConfig::from_operator(loaded) {
        Ok(config) => config,
        Err(e) => return unserved(e.to_string()),
    };
    if let Err(e) = crate::route::check_key_destination(loaded, None, &config.llm) {
        return unserved(e);
    }
    let default_model = config.llm.model.clone();
    match OpenAiClient::new(config.llm) {
        Ok(client) => Some(LlmBackend {
            provider: Arc::new(client),
            models: loaded.llm_models.clone(),
            default_model,
        }),
        Err(e) => unserved(e.to_string()),
    }
}

pub(crate) async fn open(
    args: &MountArgs,
    caps: LimitOverrides,
    capability_log: Option<StoreCapabilityLog>,
) -> Result<(Registry, MountReport), Failure> {
    let loaded = load_operator_config(args.config.as_deref())?;
    let cassette = |e: sandgraph_llm::cassette::CassetteError| invalid(e.to_string());
    // One cassette for both kinds of exchange.
    let recording = match &args.record {
        Some(path) => Some(CassetteWriter::create(path).map_err(cassette)?),
        None => None,
    };
    let llm = llm_backend(&loaded, args, recording.as_ref())?;
    let http_cassette = match (&recording, &args.replay) {
        (Some(writer), _) => Some(HttpCassette::Record(writer.clone())),
        (None, Some(path)) => Some(HttpCassette::Replay(
            HttpReplay::open(path).map_err(cassette)?,
        )),
        (None, None) => None,
    };
    let mut config = loaded.config;
    config.limits = config.limits.merged_with(&caps);
    config.check().map_err(registry_failure)?;
    let runtime = Runtime::with_config(RuntimeConfig {
        load_limits: config.load_limits(),
        ..RuntimeConfig::default()
    })?;
    let trusted_keys = match args.trusted_keys.as_slice() {
        [] => None,
        dirs => Some(crate::sign::trusted_keys(dirs, &[])?),
    };
    let options = RegistryOptions {
        dirs: args.graphs.clone(),
        strict: args.strict,
        config,
        cache: crate::cache::open(args.cache.as_deref(), args.no_cache),
        log_warnings: false,
        llm,
        capability_log: capability_log.map(|l| Arc::new(l) as Arc<dyn CapabilityLog>),
        http_cassette,
        locked: args.locked,
        trusted_keys,
    };
    let (registry, report) = Registry::open(runtime, options)
        .await
        .map_err(registry_failure)?;
    print_report(&report);
    Ok((registry, report))
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
            yes_no(t.as_tool()),
            yes_no(t.as_graph_tool()),
        );
    }
}

async fn list(args: &MountArgs, as_json: bool, watch: bool) -> Result<ExitCode, Failure> {
    let (registry, _) = open(args, LimitOverrides::default(), None).await?;
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
    let _watching = registry.watch().map_err(registry_failure)?;
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
    let (text, origin) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| invalid(format!("cannot read arguments file {path}: {e}")))?,
            format!("arguments file {path}"),
        ),
        None => (arg.to_owned(), "--args".to_owned()),
    };
    json::parse_lossless(&text, &origin).map_err(|e| invalid(e.in_document(&origin)))
}

/// `sandgraph call NAME --graphs DIR --args JSON`.
pub async fn call(args: CallArgs) -> Result<ExitCode, Failure> {
    let input = read_args(&args.args)?;
    // The registry's per-call overrides do not carry these two yet: refuse
    // them rather than run with the defaults the caller meant to replace.
    let caps = LimitOverrides {
        timeout_ms: args.limits.timeout_ms,
        fuel: args.limits.fuel,
        memory_mb: args.limits.memory_mb.map(|m| m as u64),
        recursion_limit: args.limits.recursion_limit,
        host_memory_mb: args.limits.host_memory_mb.map(|m| m as u64),
        instances: args.limits.instances,
    };
    // With --thread the data database is held for the thread, and the
    // capability journal is written to it; without, it is opened only if
    // a capability call is made.
    let store = match &args.thread {
        Some(_) => {
            let path = crate::threads::db_path(args.db.as_deref())?;
            Some(crate::threads::open_data(&path)?)
        }
        None => None,
    };
    let (registry, _) = open(
        &args.mount,
        caps,
        capability_log(store.as_ref(), args.db.as_deref()),
    )
    .await?;
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
        ..CallOptions::default()
    };
    let out = tool.call(input, opts).await?;
    outln!("{}", show::json(&out.text));
    Ok(if out.interrupted {
        ExitCode::from(exit::INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_is_the_nearest_sandgraph_toml_walking_up() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        // A folder of that name is not a config.
        std::fs::create_dir(deep.join(DEFAULT_CONFIG_FILE)).unwrap();
        let found = discover_config;
        std::fs::write(root.path().join("a/sandgraph.toml"), "").unwrap();
        assert_eq!(found(&deep), Some(root.path().join("a/sandgraph.toml")));
        std::fs::write(root.path().join("a/b/sandgraph.toml"), "").unwrap();
        assert_eq!(
            found(&deep),
            Some(root.path().join("a/b/sandgraph.toml")),
            "the nearest wins"
        );
        assert_eq!(
            found(&root.path().join("a/b")),
            Some(PathBuf::from(DEFAULT_CONFIG_FILE)),
            "in the working directory itself, named as before"
        );
    }
}
