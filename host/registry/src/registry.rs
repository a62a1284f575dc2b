//! The registry: mounted graph tools by name, globally and per scope, the
//! files they came from, and change events.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use sandgraph_core::audit::CapabilityLog;
use sandgraph_factors::http::HttpCassette;
use sandgraph_factors::llm::LlmBackend;

use crate::subrun::Backends;
use sandgraph_artifact::TrustedKeys;
use sandgraph_runtime::{Graph, Runtime};
use sandgraph_store::{CompileCache, sha256_hex};
use tokio::sync::broadcast;

use crate::admission::{Admission, SidecarStamp};
use crate::compile::Cache;
use crate::config::OperatorConfig;
use crate::error::{MountErrorKind, MountWarning, RegistryError};
use crate::tool::{Built, GraphTool, ToolSource};

/// The name no graph tool may take: it belongs to the code-running tool.
pub const RESERVED_NAME: &str = sandgraph_core::RESERVED_GRAPH_NAME;

/// Files of a folder read, compiled and described at once by
/// [`Registry::open`]. More lanes let more slow `describe`s wait out their
/// load deadline side by side, but each lane holds a file (up to
/// `MAX_FILE_BYTES`), a compilation (which already uses every core) and
/// one load instance (up to the load memory cap): four keeps a folder of
/// hostile graphs within a few hundred MiB while five graphs stuck at the
/// load deadline cost about two deadlines, not five.
pub const MAX_CONCURRENT_MOUNTS: usize = 4;

/// A file read and its tool built: the file's digest, its signature
/// sidecar as seen before it was checked, and the build; or why the file
/// could not be read.
type ReadAndBuilt = Result<(String, SidecarStamp, Result<Built, MountWarning>), MountWarning>;

/// Capacity of the event channel; a subscriber that falls further behind
/// gets `RecvError::Lagged` and should re-list.
const EVENT_CAPACITY: usize = 256;

/// How to open a [`Registry`].
#[derive(Clone)]
pub struct RegistryOptions {
    /// Folders whose `*.wasm` files are mounted (not recursively).
    pub dirs: Vec<PathBuf>,
    /// Fail [`Registry::open`] when any graph fails to mount, instead of
    /// warning and skipping it.
    pub strict: bool,
    /// The operator's overrides and limits.
    pub config: OperatorConfig,
    /// The compile cache; `None` compiles every graph at every start.
    pub cache: Option<CompileCache>,
    /// Log mount warnings and notices with `tracing::warn!` (default true).
    /// The CLI turns this off and prints the [`MountReport`] itself.
    pub log_warnings: bool,
    /// Where the `llm` calls of granted graphs go (the operator's `[llm]`
    /// provider and `[llm.models]`); `None`: the host has no model, and a
    /// granted graph's calls are `denied` saying so.
    pub llm: Option<LlmBackend>,
    /// Where every brokered capability call of the graphs' runs is
    /// reported (e.g. [`StoreCapabilityLog`](crate::StoreCapabilityLog));
    /// `None`: not journaled.
    pub capability_log: Option<Arc<dyn CapabilityLog>>,
    /// Record the graphs' `http` exchanges into, or replay them from, a
    /// cassette (`--record` / `--replay`); `None`: live.
    pub http_cassette: Option<HttpCassette>,
    /// Mount only the graphs each folder's `sandgraph.lock` pins (file name
    /// and sha256; `--locked`). [`Registry::open`] fails with
    /// [`RegistryError::Locked`] when a folder has no lock or its `*.wasm`
    /// files differ from it; the watcher refuses a file that changes
    /// against the lock (and unmounts the graph it replaced).
    pub locked: bool,
    /// Mount only graphs whose `<file>.sig` sidecar signs their sha256 with
    /// one of these keys (`--trusted-keys`); `None`: signatures are not
    /// checked. A graph refused is a mount warning (an error in strict
    /// mode), like any other mount failure.
    pub trusted_keys: Option<TrustedKeys>,
}

impl std::fmt::Debug for RegistryOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryOptions")
            .field("dirs", &self.dirs)
            .field("strict", &self.strict)
            .field("config", &self.config)
            .field("cache", &self.cache.is_some())
            .field("log_warnings", &self.log_warnings)
            .field("llm", &self.llm.is_some())
            .field("capability_log", &self.capability_log.is_some())
            .field("locked", &self.locked)
            .field(
                "trusted_keys",
                &self.trusted_keys.as_ref().map(TrustedKeys::len),
            )
            .finish()
    }
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            dirs: Vec::new(),
            strict: false,
            config: OperatorConfig::default(),
            cache: None,
            log_warnings: true,
            llm: None,
            capability_log: None,
            http_cassette: None,
            locked: false,
            trusted_keys: None,
        }
    }
}

/// A graph mounted from a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedGraph {
    /// The tool name.
    pub name: String,
    /// The file.
    pub path: PathBuf,
}

/// What [`Registry::open`] mounted and skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountReport {
    /// Mounted graphs, in mount (sorted path) order.
    pub mounted: Vec<MountedGraph>,
    /// Graphs skipped, with the reason, in path order.
    pub warnings: Vec<MountWarning>,
    /// Advice that did not stop a mount: a model-visible tool without
    /// declared parameters, a `[graphs.<name>]` table that matches no
    /// mounted graph.
    pub notices: Vec<MountWarning>,
}

/// A change of the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryEvent {
    /// A graph tool was added.
    Mounted {
        /// The tool name.
        name: String,
        /// The file, when mounted from one.
        path: Option<PathBuf>,
        /// The scope id, `None` for the global layer.
        scope: Option<String>,
    },
    /// A watched file changed and its graph was replaced.
    Remounted {
        /// The tool name.
        name: String,
        /// The file.
        path: PathBuf,
    },
    /// A graph tool was removed.
    Unmounted {
        /// The tool name.
        name: String,
        /// The file, when mounted from one.
        path: Option<PathBuf>,
        /// The scope id, `None` for the global layer.
        scope: Option<String>,
    },
    /// A watched file could not be mounted.
    Failed {
        /// The file.
        path: PathBuf,
        /// Why, as in [`MountWarning::reason`].
        reason: String,
    },
}

/// A file of the watched folders as last seen.
#[derive(Debug, Clone)]
pub(crate) struct Tracked {
    pub(crate) digest: String,
    pub(crate) size: u64,
    pub(crate) mtime: Option<SystemTime>,
    /// Its signature sidecar, when signatures are checked.
    pub(crate) sidecar: SidecarStamp,
    pub(crate) status: FileStatus,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileStatus {
    Mounted(String),
    /// Its graph claims a name another file of the folders claims too:
    /// neither is mounted until one of them leaves or changes its name.
    Contested(String),
    Failed(MountErrorKind),
}

/// Entries of one layer, by name.
type Layer = BTreeMap<String, Arc<GraphTool>>;

#[derive(Default)]
pub(crate) struct State {
    global: Layer,
    scopes: HashMap<u64, (String, Layer)>,
    pub(crate) files: BTreeMap<PathBuf, Tracked>,
    /// Files of the folders seen changing, for the watcher.
    pub(crate) observations: HashMap<PathBuf, crate::watch::Observation>,
}

pub(crate) struct Inner {
    pub(crate) runtime: Runtime,
    pub(crate) dirs: Vec<PathBuf>,
    config: OperatorConfig,
    /// Where the graphs' capability calls go.
    pub(crate) backends: Backends,
    cache: Cache,
    pub(crate) log_warnings: bool,
    /// The locks and trusted keys files are admitted by.
    pub(crate) admission: Admission,
    state: Mutex<State>,
    events: broadcast::Sender<RegistryEvent>,
    next_scope: AtomicU64,
    /// Serializes folder scans (the watcher's passes).
    pub(crate) scan: tokio::sync::Mutex<()>,
}

/// The graph tools of a host. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Registry {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("dirs", &self.inner.dirs)
            .field("tools", &self.names())
            .finish_non_exhaustive()
    }
}

/// The `*.wasm` files of `dirs`, sorted, with their metadata.
pub(crate) fn list_wasm(
    dirs: &[PathBuf],
) -> (Vec<(PathBuf, std::fs::Metadata)>, Vec<RegistryError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                errors.push(RegistryError::Dir {
                    path: dir.clone(),
                    message: e.to_string(),
                });
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|ext| ext != "wasm") {
                continue;
            }
            // Follows symlinks; folders named *.wasm are skipped.
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_file() => files.push((path, meta)),
                _ => {}
            }
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files.dedup_by(|a, b| a.0 == b.0);
    (files, errors)
}

impl Registry {
    /// Mounts every `*.wasm` of `options.dirs`. Up to
    /// [`MAX_CONCURRENT_MOUNTS`] files are read, compiled and described at
    /// once, so a slow graph (one whose `describe` runs into the load
    /// limits) does not hold up the others; they are then registered in
    /// sorted path order, so names, duplicates and reports do not depend on
    /// which finished first. A component that failed to load before (same
    /// bytes, same engine, load limits no more generous) is skipped at once:
    /// the compile cache remembers it until the file changes.
    ///
    /// A graph that fails to mount is logged (unless
    /// [`RegistryOptions::log_warnings`] is off), listed in
    /// [`MountReport::warnings`] and skipped.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Dir`] when a folder cannot be read, in strict
    /// mode [`RegistryError::Strict`] listing every graph that failed, and
    /// with [`RegistryOptions::locked`] [`RegistryError::Locked`] listing
    /// every missing lock and every changed, missing or extra graph.
    pub async fn open(
        runtime: Runtime,
        options: RegistryOptions,
    ) -> Result<(Registry, MountReport), RegistryError> {
        let (files, mut errors) = list_wasm(&options.dirs);
        if !errors.is_empty() {
            return Err(errors.remove(0));
        }
        let admission =
            Admission::new(&options.dirs, options.locked, options.trusted_keys.clone())?;
        // Pinned files that are gone fail the start before anything is
        // compiled.
        let found: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
        let missing = admission.missing(&found);
        if !missing.is_empty() {
            return Err(RegistryError::Locked(
                missing.iter().map(ToString::to_string).collect(),
            ));
        }
        let registry = Registry::new(runtime, &options, admission);
        let mut report = MountReport::default();
        let built = registry.build_files(files).await;
        let contested = contested_names(&built);
        for (path, meta, read) in built {
            match registry.settle_tracked(&path, &meta, read, &contested) {
                Ok((tool, notices)) => {
                    report.mounted.push(MountedGraph {
                        name: tool.name().to_owned(),
                        path: path.clone(),
                    });
                    report.notices.extend(notices);
                }
                Err(w) => report.warnings.push(w),
            }
        }
        let config = &registry.inner.config;
        for name in config.graphs.keys() {
            if registry.get(name).is_none() {
                let path = config
                    .source
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("<operator config>"));
                let notice = MountWarning::new(
                    path,
                    MountErrorKind::Advice,
                    format!("[graphs.{name}] matches no mounted graph"),
                );
                registry.log(&notice);
                report.notices.push(notice);
            }
        }
        // With a lock the set of graphs is fixed: one that differs fails
        // the start, strict or not.
        let unpinned: Vec<String> = report
            .warnings
            .iter()
            .filter(|w| w.kind == MountErrorKind::Unpinned)
            .map(ToString::to_string)
            .collect();
        if !unpinned.is_empty() {
            return Err(RegistryError::Locked(unpinned));
        }
        if options.strict && !report.warnings.is_empty() {
            return Err(RegistryError::Strict(report.warnings));
        }
        Ok((registry, report))
    }

    /// An empty registry (no folders): for imperative mounts.
    pub fn empty(
        runtime: Runtime,
        config: OperatorConfig,
        cache: Option<CompileCache>,
    ) -> Registry {
        Registry::new(
            runtime,
            &RegistryOptions {
                config,
                cache,
                ..RegistryOptions::default()
            },
            Admission::default(),
        )
    }

    fn new(runtime: Runtime, options: &RegistryOptions, admission: Admission) -> Registry {
        let fingerprint: Arc<str> = Arc::from(runtime.engine_fingerprint());
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        Registry {
            inner: Arc::new_cyclic(|me| Inner {
                cache: Cache {
                    store: options.cache.clone(),
                    fingerprint,
                },
                runtime,
                dirs: options.dirs.clone(),
                config: options.config.clone(),
                backends: Backends {
                    llm: options.llm.clone(),
                    tools: crate::subrun::backend(me.clone()),
                    log: options.capability_log.clone(),
                    http_cassette: options.http_cassette.clone(),
                },
                log_warnings: options.log_warnings,
                admission,
                state: Mutex::new(State::default()),
                events,
                next_scope: AtomicU64::new(1),
                scan: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated
        // in a way that matters more than losing the registry.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn emit(&self, event: RegistryEvent) {
        // No subscriber is not an error.
        let _ = self.inner.events.send(event);
    }

    pub(crate) fn log(&self, warning: &MountWarning) {
        if self.inner.log_warnings {
            // File names and load errors may carry guest or attacker text:
            // one escaped, bounded record.
            let line = sandgraph_core::text::guest_message(&warning.to_string());
            tracing::warn!("{line}");
        }
    }

    /// The runtime graphs run on.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// The operator configuration in force.
    pub fn config(&self) -> &OperatorConfig {
        &self.inner.config
    }

    /// The watched folders.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.inner.dirs
    }

    /// Change events from now on: mounts, remounts, unmounts and failures
    /// (global and scoped).
    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.inner.events.subscribe()
    }

    /// Reads and builds the `files` of the folders, up to
    /// [`MAX_CONCURRENT_MOUNTS`] at once; the results come back in the
    /// order of `files`.
    async fn build_files(
        &self,
        files: Vec<(PathBuf, std::fs::Metadata)>,
    ) -> Vec<(PathBuf, std::fs::Metadata, ReadAndBuilt)> {
        let lanes = Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_MOUNTS));
        let mut tasks = tokio::task::JoinSet::new();
        for (i, (path, _)) in files.iter().enumerate() {
            let registry = self.clone();
            let path = path.clone();
            let lanes = lanes.clone();
            tasks.spawn(async move {
                // The semaphore is never closed.
                let _lane = lanes.acquire_owned().await;
                (i, registry.read_and_build(&path).await)
            });
        }
        let mut results: Vec<Option<ReadAndBuilt>> = files.iter().map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, outcome)) => results[i] = Some(outcome),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Only a shutting-down runtime cancels the tasks.
                Err(_) => {}
            }
        }
        files
            .into_iter()
            .zip(results)
            .map(|((path, meta), outcome)| {
                let outcome = outcome.unwrap_or_else(|| {
                    Err(MountWarning::new(
                        &path,
                        MountErrorKind::Load,
                        "mounting was cancelled: the host is shutting down".to_owned(),
                    ))
                });
                (path, meta, outcome)
            })
            .collect()
    }

    /// The part of mounting a file of a folder that may run alongside
    /// others: reading it and building its tool.
    async fn read_and_build(&self, path: &Path) -> ReadAndBuilt {
        let bytes = read(path)?;
        let digest = sha256_hex(&bytes);
        // Seen before it is checked: a sidecar replaced meanwhile differs
        // from the stamp, and the watcher checks the file again.
        let sidecar = self.inner.admission.sidecar_stamp(path);
        let admitted = match self.inner.admission.admit(path, &digest) {
            Ok(admitted) => admitted,
            Err(refused) => return Ok((digest, sidecar, Err(refused))),
        };
        let built = self
            .build_digested(bytes, digest.clone(), ToolSource::File(path.to_path_buf()))
            .await
            .and_then(|built| admitted.check(path, built));
        Ok((digest, sidecar, built))
    }

    /// Registers what [`Registry::read_and_build`] built for a file of a
    /// folder, logs the outcome and records the file for the watcher. A
    /// graph whose name is in `contested` (claimed by more than one file)
    /// is refused.
    fn settle_tracked(
        &self,
        path: &Path,
        meta: &std::fs::Metadata,
        read: ReadAndBuilt,
        contested: &BTreeMap<String, Vec<PathBuf>>,
    ) -> Result<(Arc<GraphTool>, Vec<MountWarning>), MountWarning> {
        let (digest, sidecar, built) = match read {
            Ok(read) => read,
            Err(w) => {
                self.log(&w);
                return Err(w);
            }
        };
        let mut claimed = None;
        let outcome = built.and_then(|built| match contested.get(built.tool.name()) {
            Some(paths) => {
                claimed = Some(built.tool.name().to_owned());
                Err(contested_warning(path, built.tool.name(), paths))
            }
            None => self.insert(built, None),
        });
        match &outcome {
            Ok((_, notices)) => notices.iter().for_each(|n| self.log(n)),
            Err(w) => self.log(w),
        }
        let status = match (&outcome, claimed) {
            (_, Some(name)) => FileStatus::Contested(name),
            (Ok((tool, _)), None) => FileStatus::Mounted(tool.name().to_owned()),
            (Err(w), None) => FileStatus::Failed(w.kind),
        };
        self.state().files.insert(
            path.to_path_buf(),
            Tracked {
                digest,
                size: meta.len(),
                mtime: meta.modified().ok(),
                sidecar,
                status,
            },
        );
        outcome
    }

    /// Mounts the component file `path` in `scope` (global when `None`).
    /// With [`RegistryOptions::locked`] or trusted keys its digest, its
    /// signature and the graph name its folder's lock pins are admitted as
    /// a folder's files are; its grants are bound as a folder's are (see
    /// [`GraphTool::identity_bound`]).
    ///
    /// # Errors
    ///
    /// The reason the graph was not mounted, as in [`MountReport`].
    pub async fn mount_file(
        &self,
        path: &Path,
        scope: Option<&Scope>,
    ) -> Result<Arc<GraphTool>, MountWarning> {
        let bytes = read(path)?;
        let admitted = self
            .inner
            .admission
            .admit(path, &sha256_hex(&bytes))
            .inspect_err(|w| self.log(w))?;
        let outcome = match self
            .build(bytes, ToolSource::File(path.to_path_buf()))
            .await
        {
            Ok(built) => admitted
                .check(path, built)
                .and_then(|built| self.insert(built, scope)),
            Err(w) => Err(w),
        };
        match &outcome {
            Ok((_, notices)) => notices.iter().for_each(|n| self.log(n)),
            Err(w) => self.log(w),
        }
        outcome.map(|(tool, _)| tool)
    }

    /// A one-off tool of a loaded graph, with the operator's overrides; it
    /// is not registered.
    ///
    /// # Errors
    ///
    /// Reserved name, unsupported parameters.
    pub fn create(&self, graph: Arc<Graph>) -> Result<GraphTool, MountWarning> {
        self.create_built(graph).map(|b| b.tool)
    }

    fn create_built(&self, graph: Arc<Graph>) -> Result<Built, MountWarning> {
        if !self.inner.runtime.loaded(&graph) {
            return Err(MountWarning::new(
                ToolSource::Graph.label(graph.name()),
                MountErrorKind::Load,
                "the graph was loaded by another runtime than the registry's".to_owned(),
            ));
        }
        GraphTool::build(
            &self.inner.runtime,
            &self.inner.config,
            &self.inner.backends,
            graph.spec().clone(),
            ToolSource::Graph,
            Some(graph),
            None,
        )
    }

    /// Builds the tool of component bytes: from the cached spec without
    /// compiling or running anything, else by compiling and describing.
    pub(crate) async fn build(
        &self,
        bytes: Vec<u8>,
        source: ToolSource,
    ) -> Result<Built, MountWarning> {
        let digest = sha256_hex(&bytes);
        self.build_digested(bytes, digest, source).await
    }

    /// [`Registry::build`] of bytes whose sha256 is `digest`.
    ///
    /// A component the compile cache remembers as failed to load (same
    /// digest and engine, load limits no more generous) is refused at once;
    /// a new failure caused by the component is remembered.
    async fn build_digested(
        &self,
        bytes: Vec<u8>,
        digest: String,
        source: ToolSource,
    ) -> Result<Built, MountWarning> {
        let inner = &self.inner;
        let label = match &source {
            ToolSource::File(p) => p.clone(),
            other => PathBuf::from(other.label("?")),
        };
        let bytes: Arc<[u8]> = Arc::from(bytes);
        if let Some(spec) = inner.cache.spec(&digest) {
            return GraphTool::build(
                &inner.runtime,
                &inner.config,
                &inner.backends,
                spec,
                source,
                None,
                Some((digest, bytes, inner.cache.clone())),
            );
        }
        let limits = &inner.runtime.config().load_limits;
        let remembered = inner.cache.load_failure(&digest, limits);
        if let Some((failure, true)) = &remembered {
            return Err(MountWarning::new(
                label,
                MountErrorKind::Load,
                format!(
                    "skipped: failed to load earlier (cached): {}; it is retried when the file \
                     changes",
                    failure.message
                ),
            ));
        }
        let loaded = match inner.cache.component(&inner.runtime, &digest, &bytes).await {
            Ok(component) => inner.runtime.load_component(component).await,
            Err(e) => Err(e),
        };
        let graph = match loaded {
            Ok(graph) => graph,
            Err(e) => {
                inner.cache.put_load_failure(&digest, &e, limits);
                return Err(MountWarning::new(label, MountErrorKind::Load, e.message));
            }
        };
        if remembered.is_some() {
            inner.cache.remove_load_failure(&digest);
        }
        inner.cache.put_spec(&digest, graph.spec());
        GraphTool::build(
            &inner.runtime,
            &inner.config,
            &inner.backends,
            graph.spec().clone(),
            source,
            Some(graph),
            Some((digest, bytes, inner.cache.clone())),
        )
    }

    fn check_scope(&self, scope: Option<&Scope>, tool: &GraphTool) -> Result<(), MountWarning> {
        match scope {
            Some(s) if !Arc::ptr_eq(&s.registry.inner, &self.inner) => Err(MountWarning::new(
                tool.source().label(tool.name()),
                MountErrorKind::ForeignScope,
                format!("scope \"{}\" belongs to another registry", s.id),
            )),
            _ => Ok(()),
        }
    }

    /// Adds a built tool to its layer, refusing a duplicate name.
    pub(crate) fn insert(
        &self,
        built: Built,
        scope: Option<&Scope>,
    ) -> Result<(Arc<GraphTool>, Vec<MountWarning>), MountWarning> {
        let Built { tool, notices } = built;
        refuse_unbound(&tool)?;
        self.check_scope(scope, &tool)?;
        let label = tool.source().label(tool.name());
        let notices = advice(&label, notices);
        let tool = Arc::new(tool);
        {
            let mut state = self.state();
            let layer = match scope {
                None => &mut state.global,
                Some(s) => match state.scopes.get_mut(&s.key) {
                    Some((_, layer)) => layer,
                    None => {
                        return Err(MountWarning::new(
                            label,
                            MountErrorKind::ForeignScope,
                            format!("scope \"{}\" is closed", s.id),
                        ));
                    }
                },
            };
            if let Some(existing) = layer.get(tool.name()) {
                return Err(MountWarning::new(
                    label,
                    MountErrorKind::Duplicate,
                    format!(
                        "duplicate graph name \"{}\" (already mounted from {})",
                        tool.name(),
                        existing.source().label(existing.name())
                    ),
                ));
            }
            layer.insert(tool.name().to_owned(), tool.clone());
        }
        self.emit(RegistryEvent::Mounted {
            name: tool.name().to_owned(),
            path: file_of(&tool),
            scope: scope.map(|s| s.id.clone()),
        });
        Ok((tool, notices))
    }

    /// Swaps the global tool mounted from `path` for `built` (the watcher's
    /// remount): the old one stays callable until the new one is in.
    pub(crate) fn replace(
        &self,
        old_name: &str,
        path: &Path,
        built: Built,
    ) -> Result<(Arc<GraphTool>, Vec<MountWarning>), MountWarning> {
        let Built { tool, notices } = built;
        refuse_unbound(&tool)?;
        let label = tool.source().label(tool.name());
        let notices = advice(&label, notices);
        let tool = Arc::new(tool);
        let removed_old = {
            let mut state = self.state();
            let removed = remove_if_from(&mut state.global, old_name, path);
            if let Some(existing) = state.global.get(tool.name()) {
                let reason = format!(
                    "duplicate graph name \"{}\" (already mounted from {})",
                    tool.name(),
                    existing.source().label(existing.name())
                );
                drop(state);
                if removed {
                    self.emit(RegistryEvent::Unmounted {
                        name: old_name.to_owned(),
                        path: Some(path.to_path_buf()),
                        scope: None,
                    });
                }
                return Err(MountWarning::new(label, MountErrorKind::Duplicate, reason));
            }
            state.global.insert(tool.name().to_owned(), tool.clone());
            removed
        };
        if removed_old && old_name == tool.name() {
            self.emit(RegistryEvent::Remounted {
                name: old_name.to_owned(),
                path: path.to_path_buf(),
            });
        } else {
            if removed_old {
                self.emit(RegistryEvent::Unmounted {
                    name: old_name.to_owned(),
                    path: Some(path.to_path_buf()),
                    scope: None,
                });
            }
            self.emit(RegistryEvent::Mounted {
                name: tool.name().to_owned(),
                path: Some(path.to_path_buf()),
                scope: None,
            });
        }
        Ok((tool, notices))
    }

    /// Removes the global tool `name` if it was mounted from `path`.
    pub(crate) fn unmount_file(&self, name: &str, path: &Path) -> bool {
        let removed = remove_if_from(&mut self.state().global, name, path);
        if removed {
            self.emit(RegistryEvent::Unmounted {
                name: name.to_owned(),
                path: Some(path.to_path_buf()),
                scope: None,
            });
        }
        removed
    }

    /// The global tool `name`.
    pub fn get(&self, name: &str) -> Option<Arc<GraphTool>> {
        self.state().global.get(name).cloned()
    }

    /// Every global tool, sorted by name.
    pub fn list(&self) -> Vec<Arc<GraphTool>> {
        self.state().global.values().cloned().collect()
    }

    /// The names of every global tool, sorted.
    pub fn names(&self) -> Vec<String> {
        self.state().global.keys().cloned().collect()
    }

    /// The global model-visible tools ([`GraphTool::model_visible`]), sorted
    /// by name.
    pub fn tools(&self) -> Vec<Arc<GraphTool>> {
        self.list()
            .into_iter()
            .filter(|t| t.model_visible())
            .collect()
    }

    /// The global tools listed for discovery and routing
    /// ([`GraphTool::routable`]), sorted by name.
    pub fn graph_tools(&self) -> Vec<Arc<GraphTool>> {
        self.list().into_iter().filter(|t| t.routable()).collect()
    }

    /// Opens a scope: a layer of tools that shadow global tools of the same
    /// name in [`Scope::get`] and [`Scope::list`], and that leave the
    /// registry when the returned [`Scope`] is dropped.
    pub fn scope(&self, id: impl Into<String>) -> Scope {
        let id = id.into();
        let key = self.inner.next_scope.fetch_add(1, Ordering::Relaxed);
        self.state().scopes.insert(key, (id.clone(), Layer::new()));
        Scope {
            registry: self.clone(),
            key,
            id,
        }
    }
}

fn remove_if_from(layer: &mut Layer, name: &str, path: &Path) -> bool {
    let from_path = layer
        .get(name)
        .is_some_and(|t| matches!(t.source(), ToolSource::File(p) if p == path));
    if from_path {
        layer.remove(name);
    }
    from_path
}

/// Refuses a tool whose name the operator did not choose for it
/// ([`crate::admission::bind`]).
fn refuse_unbound(tool: &GraphTool) -> Result<(), MountWarning> {
    if tool.identity_bound() {
        return Ok(());
    }
    let path = file_of(tool).unwrap_or_else(|| PathBuf::from(tool.source().label(tool.name())));
    Err(crate::admission::unbound(&path, tool.name()))
}

/// The notices of a mount, as warnings of kind advice.
fn advice(label: &str, notices: Vec<String>) -> Vec<MountWarning> {
    notices
        .into_iter()
        .map(|n| MountWarning::new(label, MountErrorKind::Advice, n))
        .collect()
}

/// The names the files of `built` claim more than once, with the files
/// claiming each (in path order).
fn contested_names(
    built: &[(PathBuf, std::fs::Metadata, ReadAndBuilt)],
) -> BTreeMap<String, Vec<PathBuf>> {
    let mut claims: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for (path, _, read) in built {
        if let Ok((_, _, Ok(b))) = read {
            claims
                .entry(b.tool.name().to_owned())
                .or_default()
                .push(path.clone());
        }
    }
    claims.retain(|_, paths| paths.len() > 1);
    claims
}

/// Why the file `path` is not mounted: its graph claims `name`, which the
/// files `claimants` (`path` among them) all claim.
pub(crate) fn contested_warning(path: &Path, name: &str, claimants: &[PathBuf]) -> MountWarning {
    let files: Vec<String> = claimants.iter().map(|p| p.display().to_string()).collect();
    MountWarning::new(
        path,
        MountErrorKind::Duplicate,
        format!(
            "graph name \"{name}\" is claimed by {} files ({}): none of them is mounted, so that \
             no component takes another's name and grants; remove or rename all but one",
            files.len(),
            files.join(", ")
        ),
    )
}

fn file_of(tool: &GraphTool) -> Option<PathBuf> {
    match tool.source() {
        ToolSource::File(p) => Some(p.clone()),
        ToolSource::Graph => None,
    }
}

/// Largest file read as a component: the runtime refuses larger
/// components anyway (its `MAX_COMPONENT_BYTES`), and a huge file named
/// `*.wasm` must not be read into memory first.
pub(crate) const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads at most [`MAX_FILE_BYTES`] of `path`.
pub(crate) fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "the file is larger than the {} MiB limit for a graph component",
            MAX_FILE_BYTES >> 20
        )));
    }
    Ok(bytes)
}

fn read(path: &Path) -> Result<Vec<u8>, MountWarning> {
    read_bounded(path).map_err(|e| {
        MountWarning::new(
            path,
            MountErrorKind::Io,
            format!("cannot read the file: {e}"),
        )
    })
}

/// A layer of tools owned by one consumer (an agent, a session). Its
/// entries shadow global tools of the same name in its own view and leave
/// the registry when it is dropped.
pub struct Scope {
    registry: Registry,
    key: u64,
    id: String,
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("id", &self.id).finish()
    }
}

impl Scope {
    /// The id given to [`Registry::scope`].
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The scope's own tool `name`, else the global one.
    pub fn get(&self, name: &str) -> Option<Arc<GraphTool>> {
        let state = self.registry.state();
        state
            .scopes
            .get(&self.key)
            .and_then(|(_, layer)| layer.get(name))
            .or_else(|| state.global.get(name))
            .cloned()
    }

    /// The scope's own tools plus the global ones they do not shadow,
    /// sorted by name.
    pub fn list(&self) -> Vec<Arc<GraphTool>> {
        let state = self.registry.state();
        let mut merged = state.global.clone();
        if let Some((_, layer)) = state.scopes.get(&self.key) {
            merged.extend(layer.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        merged.into_values().collect()
    }

    /// [`Scope::list`] restricted to model-visible tools.
    pub fn tools(&self) -> Vec<Arc<GraphTool>> {
        self.list()
            .into_iter()
            .filter(|t| t.model_visible())
            .collect()
    }

    /// [`Scope::list`] restricted to tools listed for routing.
    pub fn graph_tools(&self) -> Vec<Arc<GraphTool>> {
        self.list().into_iter().filter(|t| t.routable()).collect()
    }

    /// Mounts a component file in this scope.
    ///
    /// # Errors
    ///
    /// As [`Registry::mount_file`].
    pub async fn mount_file(&self, path: &Path) -> Result<Arc<GraphTool>, MountWarning> {
        self.registry.mount_file(path, Some(self)).await
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let removed = self.registry.state().scopes.remove(&self.key);
        if let Some((id, layer)) = removed {
            for (name, tool) in layer {
                self.registry.emit(RegistryEvent::Unmounted {
                    name,
                    path: file_of(&tool),
                    scope: Some(id.clone()),
                });
            }
        }
    }
}
