//! The compile cache every command shares: one redb file of compiled
//! components, keyed and authenticated by the registry (see
//! `sandgraph_registry::compile`). `run`, `inspect`, `check` and `test`
//! load their graph through it ([`load`]), the folder commands mount
//! through it, so a graph is compiled once per engine and file contents.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandgraph_runtime::{ErrorCode, Graph, RunError, Runtime};
use sandgraph_store::{Store, StoreError};

use crate::exit::Failure;

/// The largest component file a command reads, the runtime's and the
/// registry's bound on a component (64 MiB): a graph is a few hundred KiB
/// to a few MiB, and the cap keeps a stray huge file from being read whole.
pub(crate) const MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// `--cache FILE` / `--no-cache` of the commands that load one graph.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CacheArgs {
    /// Compile cache [default: $SANDGRAPH_CACHE, else $XDG_CACHE_HOME/sandgraph/cache.redb, else ~/.cache/sandgraph/cache.redb]
    #[arg(long, value_name = "FILE", conflicts_with = "no_cache")]
    pub(crate) cache: Option<PathBuf>,
    /// Compile the graph, without reading or writing a cache
    #[arg(long)]
    pub(crate) no_cache: bool,
}

impl CacheArgs {
    /// The cache these flags name, if it can be opened.
    pub(crate) fn open(&self) -> Option<Store> {
        open(self.cache.as_deref(), self.no_cache)
    }
}

/// The default cache file, from the environment.
pub(crate) fn default_path() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = env("SANDGRAPH_CACHE") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = env("XDG_CACHE_HOME") {
        return Some(PathBuf::from(p).join("sandgraph/cache.redb"));
    }
    env("HOME").map(|h| PathBuf::from(h).join(".cache/sandgraph/cache.redb"))
}

/// Opens the cache; one that cannot be opened is a warning, and the graphs
/// compile without it. One held by another sandgraph process (a `serve`, a
/// parallel `run`) is no fault of anyone's: that is only logged (at debug),
/// so it never adds a line to a command's stderr (which `run --stream`
/// fills with JSON).
pub(crate) fn open(flag: Option<&Path>, no_cache: bool) -> Option<Store> {
    if no_cache {
        return None;
    }
    let path = flag.map(Path::to_path_buf).or_else(default_path)?;
    match Store::open(&path) {
        Ok(store) => match store.compile_cache().check_key() {
            Ok(()) => Some(store),
            // A key it may not trust (a symbolic link, another owner, a
            // loose mode): said once, here, naming the file.
            Err(e) => {
                eprintln!("warning: compile cache unavailable, compiling without it: {e}");
                None
            }
        },
        Err(e @ StoreError::AlreadyOpen { .. }) => {
            tracing::debug!("compile cache in use by another process, compiling without it: {e}");
            None
        }
        Err(e) => {
            eprintln!("warning: compile cache unavailable, compiling without it: {e}");
            None
        }
    }
}

/// Reads the component file `path` (at most [`MAX_COMPONENT_BYTES`]).
pub(crate) fn read_component(path: &Path) -> Result<Vec<u8>, RunError> {
    use std::io::Read;
    let cannot = |e: std::io::Error| {
        RunError::new(
            ErrorCode::Load,
            format!("cannot read {}: {e}", path.display()),
        )
    };
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(MAX_COMPONENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(RunError::new(
            ErrorCode::Load,
            format!(
                "{} is larger than {MAX_COMPONENT_BYTES} bytes, the most a graph component may be",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}

/// Loads the graph component at `path` through the compile cache `cache`;
/// errors name the file.
pub(crate) async fn load(
    rt: &Runtime,
    cache: Option<&Store>,
    path: &Path,
) -> Result<Arc<Graph>, Failure> {
    let bytes = read_component(path)?;
    sandgraph_registry::load_cached(rt, cache, bytes)
        .await
        .map_err(|e| RunError::new(e.code, format!("{}: {}", path.display(), e.message)).into())
}

/// The sorted files of `dir` (not recursive) whose name ends in `.{ext}`:
/// at most `max` (more is an error: a wrong folder should not start
/// thousands of loads), at least one (none is an error ending in `hint`).
pub(crate) fn files_in(
    dir: &Path,
    ext: &str,
    max: usize,
    hint: &str,
) -> Result<Vec<PathBuf>, Failure> {
    let invalid = |m: String| Failure::from(RunError::new(ErrorCode::InvalidInput, m));
    let cannot = |e: std::io::Error| {
        invalid(format!(
            "cannot read the folder {}: {e}{hint}",
            dir.display()
        ))
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(cannot)? {
        let path = entry.map_err(cannot)?.path();
        if path.extension().is_some_and(|x| x == ext) && path.is_file() {
            files.push(path);
            if files.len() > max {
                return Err(invalid(format!(
                    "{} holds more than {max} *.{ext} files",
                    dir.display()
                )));
            }
        }
    }
    if files.is_empty() {
        return Err(invalid(format!(
            "{} holds no *.{ext} file{hint}",
            dir.display()
        )));
    }
    files.sort();
    Ok(files)
}
