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
use std::sync::{Arc, Mutex, OnceLock};

use sandgraph_runtime::{Graph, Runtime};

/// One runtime per test binary: building the engine and its pool once keeps
/// tests fast, and sharing it is what production does.
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| Runtime::new().expect("the default runtime config is valid"))
}

/// One compile cache per test binary, for registries of tests that do not
/// count compilations: each component compiles once per binary instead of
/// once per test (a routing test opened five per test).
pub fn compile_cache() -> sandgraph_store::Store {
    static CACHE: OnceLock<(tempfile::TempDir, sandgraph_store::Store)> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("a temporary folder");
            let store = sandgraph_store::Store::open(&dir.path().join("compile-cache.redb"))
                .expect("a compile cache in a fresh folder");
            (dir, store)
        })
        .1
        .clone()
}

/// Loads (compiles and describes) the component at `path` once per test
/// binary and hands out the shared graph afterwards.
pub async fn load(path: &str) -> Arc<Graph> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Graph>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(g) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(path) {
        return g.clone();
    }
    let graph = runtime()
        .load_file(std::path::Path::new(path))
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
