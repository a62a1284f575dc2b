//! `--cache DIR` / `--no-cache`: the compile cache every command shares
//! (see `sandgraph_toolkit::cache`).

use std::path::PathBuf;

use sandgraph_store::CompileCache;

pub(crate) use sandgraph_toolkit::cache::{CacheChoice, load, open};

/// `--cache DIR` / `--no-cache` of the commands that load one graph.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CacheArgs {
    /// Compile cache folder, shared with other sandgraph processes [default: $SANDGRAPH_CACHE, else $XDG_CACHE_HOME/sandgraph/compile, else ~/.cache/sandgraph/compile]
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    pub(crate) cache: Option<PathBuf>,
    /// Compile the graph, without reading or writing a cache
    #[arg(long)]
    pub(crate) no_cache: bool,
}

impl CacheArgs {
    /// The cache these flags name, if it can be opened.
    pub(crate) fn open(&self) -> Option<CompileCache> {
        open(self.cache.as_deref(), self.no_cache)
    }

    /// The cache these flags name, for a toolkit operation to open.
    pub(crate) fn choice(&self) -> CacheChoice {
        CacheChoice {
            dir: self.cache.clone(),
            disabled: self.no_cache,
        }
    }
}
