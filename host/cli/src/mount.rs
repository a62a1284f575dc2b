//! Folders of graph components mounted as a registry, as every folder
//! command (`tools`, `call`, `serve`, `route`, `supervise`) mounts them:
//! their flags ([`MountArgs`]), the host's model for graphs granted `llm`,
//! cassettes, lock files and trusted keys.

use std::path::PathBuf;
use std::sync::Arc;

use sandgraph_core::audit::CapabilityLog;
use sandgraph_factors::http::{HttpCassette, HttpReplay};
use sandgraph_factors::llm::LlmBackend;
use sandgraph_llm::OpenAiClient;
use sandgraph_llm::cassette::{CassetteWriter, Recording, Replay};
use sandgraph_registry::{
    MountReport, Registry, RegistryError, RegistryOptions, StoreCapabilityLog,
};
use sandgraph_runtime::{ErrorCode, RunError, RuntimeConfig};
use sandgraph_store::Store;

use crate::config::LoadedConfig;
use crate::exit::Failure;
use crate::show;

/// Where the graphs come from and how they are mounted.
#[derive(clap::Args)]
pub(crate) struct MountArgs {
    /// Folder of graph components (*.wasm, not searched recursively); repeatable
    #[arg(long = "graphs", value_name = "DIR", required = true)]
    graphs: Vec<PathBuf>,
    /// Fail when any graph fails to mount instead of warning and skipping it
    #[arg(long)]
    strict: bool,
    /// Operator config [default: the first sandgraph.toml in the working directory or above it]
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Compile cache folder, shared with other sandgraph processes [default: $SANDGRAPH_CACHE, else $XDG_CACHE_HOME/sandgraph/compile, else ~/.cache/sandgraph/compile]
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    cache: Option<PathBuf>,
    /// Compile every graph, without reading or writing a cache
    #[arg(long)]
    no_cache: bool,
    /// Write every exchange of the graphs' llm and http calls to FILE (JSON lines, mode 0600; keys and credential headers are never written; an existing FILE group or others may read or write is refused)
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    record: Option<PathBuf>,
    /// Answer the graphs' llm and http calls from FILE (written by --record), offline; a request it has no answer for fails
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// Mount only the graphs each folder's sandgraph.lock pins (`sandgraph lock`): fail when a graph is changed, missing or extra, or a folder has no lock
    #[arg(long)]
    locked: bool,
    /// Mount only graphs signed (GRAPH.wasm.sig, `sandgraph sign`) by a key of DIR (*.pub files); others are skipped with a warning (an error with --strict); repeatable
    #[arg(long = "trusted-keys", value_name = "DIR")]
    trusted_keys: Vec<PathBuf>,
}

fn invalid(message: impl Into<String>) -> Failure {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

/// The failure of a registry (see `sandgraph_toolkit::Error`'s mapping):
/// `invalid_input` for a bad config or folder, `load` for a graph refused
/// by `--strict` or `--locked`.
pub(crate) fn registry_failure(e: RegistryError) -> Failure {
    sandgraph_toolkit::Error::from(e).into()
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
        Some(store) => Some(StoreCapabilityLog::new(
            sandgraph_factors::journal::CapabilityJournal::open(store),
        )),
        None => crate::config::store::db_path(db)
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
        let default_model = crate::config::model::default_model(loaded);
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
    let client = match crate::config::model::for_graphs(loaded) {
        Ok(client) => client,
        Err(e) => return unserved(e),
    };
    let default_model = client.model.clone();
    match OpenAiClient::new(client) {
        Ok(client) => Some(LlmBackend {
            provider: Arc::new(client),
            models: loaded.llm_models.clone(),
            default_model,
        }),
        Err(e) => unserved(e.to_string()),
    }
}

/// Mounts the folders of `args` under the operator config `loaded` (its
/// `[limits]` with the command's limit flags over them), printing the
/// warnings of the mount on stderr.
pub(crate) async fn open(
    args: &MountArgs,
    loaded: &LoadedConfig,
    capability_log: Option<StoreCapabilityLog>,
) -> Result<(Registry, MountReport), Failure> {
    let cassette = |e: sandgraph_llm::cassette::CassetteError| invalid(e.to_string());
    // One cassette for both kinds of exchange.
    let recording = match &args.record {
        Some(path) => Some(CassetteWriter::create(path).map_err(cassette)?),
        None => None,
    };
    let llm = llm_backend(loaded, args, recording.as_ref())?;
    let http_cassette = match (&recording, &args.replay) {
        (Some(writer), _) => Some(HttpCassette::Record(writer.clone())),
        (None, Some(path)) => Some(HttpCassette::Replay(
            HttpReplay::open(path).map_err(cassette)?,
        )),
        (None, None) => None,
    };
    let config = loaded.config.clone();
    config.check().map_err(registry_failure)?;
    let runtime = sandgraph_factors::runtime(RuntimeConfig {
        load_limits: config.load_limits(),
        ..RuntimeConfig::default()
    })?;
    let trusted_keys = match args.trusted_keys.as_slice() {
        [] => None,
        dirs => Some(sandgraph_toolkit::sign::trusted_keys(dirs, &[])?),
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
