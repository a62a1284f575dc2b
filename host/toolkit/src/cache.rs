//! The compile cache every command shares: a folder of compiled
//! components, specs and load failures that any number of sandgraph
//! processes use at once (a running `serve` and a `run` beside it), each
//! entry authenticated (see `sandgraph_store::CompileCache`). `run`,
//! `inspect`, `check` and `test` load their graph through it ([`load`]),
//! the folder commands mount through it, so a graph is compiled once per
//! engine and file contents. Also the bounded reads of component files and
//! folders every command shares. An older sandgraph kept it in a file,
//! `cache.redb`, which is no longer used and may be removed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandgraph_runtime::{ErrorCode, Graph, RunError, Runtime};
use sandgraph_store::CompileCache;

use crate::Error;

/// The largest component file a command reads, the runtime's and the
/// registry's bound on a component (64 MiB): a graph is a few hundred KiB
/// to a few MiB, and the cap keeps a stray huge file from being read whole.
pub const MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// Which compile cache an operation uses: a folder, the default one, or
/// none; opened when the operation first needs it ([`CacheChoice::open`]).
#[derive(Debug, Clone, Default)]
pub struct CacheChoice {
    /// The cache folder; `None`: [`default_path`].
    pub dir: Option<PathBuf>,
    /// Compile without reading or writing a cache.
    pub disabled: bool,
}

impl CacheChoice {
    /// The cache chosen, if it can be opened (see [`open`]).
    pub fn open(&self) -> Option<CompileCache> {
        open(self.dir.as_deref(), self.disabled)
    }
}

/// The default cache folder, from the environment.
pub fn default_path() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = env("SANDGRAPH_CACHE") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = env("XDG_CACHE_HOME") {
        return Some(PathBuf::from(p).join("sandgraph/compile"));
    }
    env("HOME").map(|h| PathBuf::from(h).join(".cache/sandgraph/compile"))
}

/// Opens the cache; one that cannot be opened, or whose key is refused, is
/// a warning, and the graphs compile without it. Other sandgraph processes
/// using it at the same time (a `serve`, a parallel `run`) are no obstacle.
pub fn open(flag: Option<&Path>, no_cache: bool) -> Option<CompileCache> {
    if no_cache {
        return None;
    }
    let path = flag.map(Path::to_path_buf).or_else(default_path)?;
    let unavailable = |e: &dyn std::fmt::Display| {
        eprintln!("warning: compile cache unavailable, compiling without it: {e}");
    };
    if path.is_file() {
        unavailable(&format!(
            "{} is a file, not a folder (a cache.redb of an older sandgraph is no longer used; \
             remove it or name a folder)",
            path.display()
        ));
        return None;
    }
    let cache = match CompileCache::open(&path) {
        Ok(cache) => cache,
        Err(e) => {
            unavailable(&e);
            return None;
        }
    };
    match cache.check_key() {
        Ok(()) => Some(cache),
        // A key it may not trust (a symbolic link, another owner, a loose
        // mode): said once, here, naming the file.
        Err(e) => {
            unavailable(&e);
            None
        }
    }
}

/// Reads the component file `path` (at most [`MAX_COMPONENT_BYTES`]).
pub fn read_component(path: &Path) -> Result<Vec<u8>, RunError> {
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
pub async fn load(
    rt: &Runtime,
    cache: Option<&CompileCache>,
    path: &Path,
) -> Result<Arc<Graph>, Error> {
    let bytes = read_component(path)?;
    sandgraph_registry::load_cached(rt, cache, bytes)
        .await
        .map_err(|e| RunError::new(e.code, format!("{}: {}", path.display(), e.message)).into())
}

/// The sorted files of `dir` (not recursive) whose name ends in `.{ext}`:
/// at most `max` (more is an error: a wrong folder should not start
/// thousands of loads), at least one (none is an error ending in `hint`).
pub fn files_in(dir: &Path, ext: &str, max: usize, hint: &str) -> Result<Vec<PathBuf>, Error> {
    let invalid = Error::invalid;
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
