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
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

include!(concat!(env!("OUT_DIR"), "/graphs.rs"));

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use sandgraph_runtime::{Graph, Runtime};

/// One runtime per test binary: building the engine and its pool once keeps
/// tests fast, and sharing it is what production does.
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        sandgraph_factors::runtime(Default::default()).expect("the default runtime config is valid")
    })
}

/// The folder of [`compile_cache`]: beside the built guests (`build.rs`
/// builds them into `<workspace>/target/guests`), so every test binary,
/// every `sandgraph` process the tests start and every run share it, and
/// `cargo clean` removes it.
pub const COMPILE_CACHE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../target/test-cache/compile");

/// The bound of the shared compile cache's total size: each change of a
/// guest stores its artifacts under a new digest, and one build of the
/// guests fills about 35 MB; the least recently used entries go first.
pub const MAX_COMPILE_CACHE_BYTES: u64 = 512 << 20;

/// The compile cache for registries and loads of tests that do not count
/// compilations: one folder ([`COMPILE_CACHE`]) shared by every test binary,
/// every `sandgraph` process and every run at once, so each component
/// compiles once until it changes instead of once per binary (most of the
/// CPU time of a warm test run was Cranelift compiling the same guests
/// again). Artifacts are keyed by the component's digest and the engine's
/// fingerprint, as on an operator's host, so a changed guest or engine is
/// compiled afresh. When it cannot be opened this binary uses a temporary
/// one of its own and says so on stderr.
pub fn compile_cache() -> sandgraph_store::CompileCache {
    static CACHE: OnceLock<(Option<tempfile::TempDir>, sandgraph_store::CompileCache)> =
        OnceLock::new();
    CACHE
        .get_or_init(|| match open_shared_cache(Path::new(COMPILE_CACHE)) {
            Ok(cache) => (None, cache),
            Err(e) => {
                eprintln!(
                    "note: the shared compile cache {COMPILE_CACHE} is not usable ({e}); this \
                     test binary compiles into a temporary one"
                );
                let dir = tempfile::tempdir().expect("a temporary folder");
                let cache = sandgraph_store::CompileCache::open(dir.path())
                    .expect("a compile cache in a fresh folder");
                (Some(dir), cache)
            }
        })
        .1
        .clone()
}

/// Opens the compile cache in `dir`, bounded by [`MAX_COMPILE_CACHE_BYTES`]
/// (trimmed to it at once: a cache kept across runs), with a usable key.
pub fn open_shared_cache(dir: &Path) -> Result<sandgraph_store::CompileCache, String> {
    let cache = sandgraph_store::CompileCache::open(dir)
        .map_err(|e| e.to_string())?
        .with_max_bytes(MAX_COMPILE_CACHE_BYTES);
    cache.check_key().map_err(|e| e.to_string())?;
    cache.trim();
    Ok(cache)
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
    fn the_shared_cache_is_trimmed_to_its_bound_and_opened_by_many_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache/compile");
        // A first open makes the folder; another one meanwhile shares it.
        let first = super::open_shared_cache(&path).unwrap();
        let second = super::open_shared_cache(&path).unwrap();
        first.put_spec("w", "{}").unwrap();
        assert_eq!(second.spec("w").unwrap().as_deref(), Some("{}"));
        // Grown past the bound (under another process's larger bound; here
        // an entry extended sparsely): trimmed when opened.
        let engine = path.join("v1/artifacts/e");
        std::fs::create_dir_all(&engine).unwrap();
        std::fs::File::create(engine.join("big"))
            .unwrap()
            .set_len(super::MAX_COMPILE_CACHE_BYTES + 1)
            .unwrap();
        assert!(first.total_bytes() > super::MAX_COMPILE_CACHE_BYTES);
        let reopened = super::open_shared_cache(&path).unwrap();
        assert!(reopened.total_bytes() <= super::MAX_COMPILE_CACHE_BYTES);
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
