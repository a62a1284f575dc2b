//! Helpers shared by the registry's integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandgraph_registry::{MountReport, OperatorConfig, Registry, RegistryEvent, RegistryOptions};
use sandgraph_runtime::{Runtime, RuntimeConfig};
use tokio::sync::broadcast;

/// The runtime shared by the tests of one binary.
pub fn runtime() -> Runtime {
    sandgraph_tests::runtime().clone()
}

/// A runtime of its own, for tests that count compilations. A small pool:
/// several of these live at once in one test binary.
pub fn fresh_runtime() -> Runtime {
    sandgraph_factors::runtime(RuntimeConfig {
        max_instances: 16,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// A temporary folder holding `files`: (file name, component path).
pub use sandgraph_tests::graph_folder as folder;

/// Options mounting `dirs` with no cache and no config.
pub fn options(dirs: &[&Path]) -> RegistryOptions {
    RegistryOptions {
        dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
        ..RegistryOptions::default()
    }
}

/// Opens a registry over `dir` on the shared runtime, compiling and
/// describing every graph.
pub async fn open(dir: &Path) -> (Registry, MountReport) {
    Registry::open(runtime(), options(&[dir])).await.unwrap()
}

/// Options mounting `dirs` through the binary's shared compile cache (no
/// config): each component compiles and describes once per binary. For
/// tests of what a registry does with good graphs (names, declarations,
/// overrides, scopes, locks, watching, calls); tests of loading itself (a
/// failing or hostile `describe`, load limits, remembered failures,
/// compile counts) use [`options`], so every start runs what they test.
pub fn cached_options(dirs: &[&Path]) -> RegistryOptions {
    RegistryOptions {
        cache: Some(sandgraph_tests::compile_cache()),
        ..options(dirs)
    }
}

/// [`open`] through the shared compile cache (see [`cached_options`]).
pub async fn open_cached(dir: &Path) -> (Registry, MountReport) {
    Registry::open(runtime(), cached_options(&[dir]))
        .await
        .unwrap()
}

/// Parses a `sandgraph.toml` text.
pub fn config(text: &str) -> OperatorConfig {
    OperatorConfig::parse(text, Path::new("sandgraph.toml")).unwrap()
}

/// The next event, failing the test after 20 s.
pub async fn next_event(rx: &mut broadcast::Receiver<RegistryEvent>) -> RegistryEvent {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("an event within 20 s")
        .expect("the event channel is open")
}

/// Events arriving within `window`.
pub async fn events_within(
    rx: &mut broadcast::Receiver<RegistryEvent>,
    window: Duration,
) -> Vec<RegistryEvent> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + window;
    while let Ok(Ok(ev)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        events.push(ev);
    }
    events
}

/// `path` in `dir`.
pub fn at(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
