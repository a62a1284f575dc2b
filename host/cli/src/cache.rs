//! The compile cache every command shares: one redb file of compiled
//! components, keyed and authenticated by the registry (see
//! `sandgraph_registry::compile`).

use std::path::{Path, PathBuf};

use sandgraph_store::Store;

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

/// Opens the cache; one that cannot be opened (e.g. held by another
/// process) is a warning, and the graphs compile without it.
pub(crate) fn open(flag: Option<&Path>, no_cache: bool) -> Option<Store> {
    if no_cache {
        return None;
    }
    let path = flag.map(Path::to_path_buf).or_else(default_path)?;
    match Store::open(&path) {
        Ok(store) => Some(store),
        Err(e) => {
            eprintln!("warning: compile cache unavailable, compiling without it: {e}");
            None
        }
    }
}
