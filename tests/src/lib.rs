//! Paths to every example graph and test guest, compiled once for
//! wasm32-wasip2 by `build.rs`, for the integration tests and benchmarks.
//!
//! For each guest package there is a constant named after it in
//! SCREAMING_SNAKE_CASE holding the absolute path of its component:
//! [`ECHO`], [`MAP_REDUCE`], [`HOSTILE_INFINITE_LOOP`], ... [`ALL`] lists
//! them all, and [`foreach_graph!`] expands a macro once per graph, which
//! lets a test file prove at compile time that it tests every graph:
//!
//! ```text
//! use sandgraph_tests::assert_test_exists;
//! sandgraph_tests::foreach_graph!(assert_test_exists);
//!
//! #[tokio::test]
//! async fn echo() { /* load sandgraph_tests::ECHO ... */ }
//! // ... one function per graph, or the build fails naming the missing one.
//! ```
//!
//! Besides the paths it holds the fixtures the host crates' tests share:
//! [`graph_folder`] (a temporary folder of copied components), a
//! PostgreSQL server ([`postgres`]), an OCI registry ([`oci_registry`])
//! and headless Chromium through WebDriver ([`browser`]).

#![deny(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/graphs.rs"));

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use sandgraph_runtime::{Graph, Runtime};

/// One runtime per test binary: building the engine and its pool once keeps
/// tests fast, and sharing it is what production does.
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| Runtime::new().expect("the default runtime config is valid"))
}

/// Where [`compile_cache`] keeps its database: beside the built guests
/// (`build.rs` builds them into `<workspace>/target/guests`), so every test
/// binary and every run share it and `cargo clean` removes it.
const COMPILE_CACHE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/test-cache/compile-cache.redb"
);

/// A shared compile cache larger than this when a test binary opens it is
/// emptied first: each change of a guest stores its artifacts under a new
/// digest and nothing removes the old ones (one build of the guests fills
/// about 35 MB).
const MAX_COMPILE_CACHE_BYTES: u64 = 512 << 20;

/// The compile cache for registries and loads of tests that do not count
/// compilations: one database shared by every test binary and every run,
/// so each component compiles once until it changes instead of once per
/// binary (most of the CPU time of a warm test run was Cranelift compiling
/// the same guests again). Artifacts are keyed by the component's digest
/// and the engine's fingerprint, as on an operator's host, so a changed
/// guest or engine is compiled afresh. When another process holds the
/// database (two test commands at once) or it cannot be opened, this binary
/// uses a temporary one of its own and says so on stderr.
pub fn compile_cache() -> sandgraph_store::Store {
    static CACHE: OnceLock<(Option<tempfile::TempDir>, sandgraph_store::Store)> = OnceLock::new();
    CACHE
        .get_or_init(|| match open_shared_cache(Path::new(COMPILE_CACHE)) {
            Ok(store) => (None, store),
            Err(e) => {
                eprintln!(
                    "note: the shared compile cache {COMPILE_CACHE} is not usable ({e}); this \
                     test binary compiles into a temporary one"
                );
                let dir = tempfile::tempdir().expect("a temporary folder");
                let store = sandgraph_store::Store::open(&dir.path().join("compile-cache.redb"))
                    .expect("a compile cache in a fresh folder");
                (Some(dir), store)
            }
        })
        .1
        .clone()
}

/// Opens the compile cache at `path`, emptied first when it has grown past
/// [`MAX_COMPILE_CACHE_BYTES`].
fn open_shared_cache(path: &Path) -> Result<sandgraph_store::Store, String> {
    let dir = path.parent().ok_or("the cache path has no folder")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    bound_cache_file(path)?;
    sandgraph_store::Store::open(path).map_err(|e| e.to_string())
}

/// Removes the compile cache file at `path` when it has grown past
/// [`MAX_COMPILE_CACHE_BYTES`], for a cache kept across runs that no
/// process has open yet: the tests' `sandgraph` processes open theirs by
/// path (`SANDGRAPH_CACHE`) and make it afresh when it is missing. Its key
/// file stays (a new database is written under the same key).
pub fn bound_cache_file(path: &Path) -> Result<(), String> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_COMPILE_CACHE_BYTES) {
        std::fs::remove_file(path)
            .map_err(|e| format!("emptying the compile cache {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Loads (compiles and describes) the component at `path` once per test
/// binary, through [`compile_cache`] as a host's mount does, and hands out
/// the shared graph afterwards.
pub async fn load(path: &str) -> Arc<Graph> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Graph>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(g) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(path) {
        return g.clone();
    }
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let graph = sandgraph_registry::load_cached(runtime(), Some(&compile_cache()), bytes)
        .await
        .unwrap_or_else(|e| panic!("loading {path}: [{}] {}", e.code, e.message));
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path.to_string(), graph.clone());
    graph
}

/// Fails to compile unless a function (or other item) named `$name` is in
/// scope. Meant for [`foreach_graph!`]: `foreach_graph!(assert_test_exists)`
/// in a test file requires one test per graph.
#[macro_export]
macro_rules! assert_test_exists {
    ($name:ident) => {
        #[allow(unused_imports)]
        use self::$name as _;
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_component_exists() {
        assert!(!super::ALL.is_empty());
        for (name, path) in super::ALL {
            let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{name}: {path}: {e}"));
            assert!(meta.len() > 0, "{name}: {path} is empty");
        }
    }

    #[test]
    fn a_shared_cache_past_its_bound_is_emptied_and_a_held_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache/compile-cache.redb");
        // A first open makes the folder and the database.
        let first = super::open_shared_cache(&path).unwrap();
        assert_eq!(first.compile_cache().artifact_count().unwrap(), 0);
        // While it is open, another open is refused (the caller falls back
        // to a temporary cache).
        let held = super::open_shared_cache(&path).map(|_| ()).unwrap_err();
        assert!(!held.is_empty());
        drop(first);
        // Grown past the bound (here the file is extended, sparsely): emptied
        // and opened afresh.
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(super::MAX_COMPILE_CACHE_BYTES + 1)
            .unwrap();
        let reopened = super::open_shared_cache(&path).unwrap();
        assert_eq!(reopened.compile_cache().artifact_count().unwrap(), 0);
        assert!(std::fs::metadata(&path).unwrap().len() <= super::MAX_COMPILE_CACHE_BYTES);
    }

    #[test]
    fn foreach_graph_names_every_graph() {
        let mut names = Vec::new();
        macro_rules! collect {
            ($name:ident) => {
                names.push(stringify!($name));
            };
        }
        foreach_graph!(collect);
        let all: Vec<&str> = super::ALL.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, all);
        assert!(names.contains(&"loop_graph") && names.contains(&"hostile_panic"));
    }
}
pub mod browser;
mod folder;
pub mod oci_registry;
pub mod postgres;

pub use folder::{copy_graphs, graph_folder};
