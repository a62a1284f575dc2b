//! A compile cache that starts warm. Most tests serve or run the same few
//! guests, each in a fresh working folder: with an empty cache every
//! `sandgraph` process they start compiles those guests with Cranelift
//! again (seconds each on a busy machine). Instead the guests are compiled
//! once per `sandgraph` binary into a template cache, and a working
//! folder's cache starts as a copy of it. Tests of the cache itself start
//! from an empty one ([`super::Env::cold`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The file name of a working folder's compile cache.
pub(crate) const CACHE: &str = "cache.redb";

/// The cache's key file, beside it (the store makes it on first use; an
/// artifact only loads under the key it was stored with).
const KEY: &str = "cache.redb.key";

/// The guests the template holds compiled: those many tests serve.
const GUESTS: [(&str, &str); 11] = [
    ("echo_graph.wasm", sandgraph_tests::ECHO),
    ("greet_graph.wasm", sandgraph_tests::GREET),
    ("approval_graph.wasm", sandgraph_tests::APPROVAL),
    ("loop_graph.wasm", sandgraph_tests::LOOP_GRAPH),
    (
        "hostile_infinite_loop.wasm",
        sandgraph_tests::HOSTILE_INFINITE_LOOP,
    ),
    ("graph_llm.wasm", sandgraph_tests::GRAPH_LLM),
    ("graph_interrupt.wasm", sandgraph_tests::GRAPH_INTERRUPT),
    ("graph_tools.wasm", sandgraph_tests::GRAPH_TOOLS),
    ("graph_fallback.wasm", sandgraph_tests::GRAPH_FALLBACK),
    ("graph_durable.wasm", sandgraph_tests::GRAPH_DURABLE),
    (
        "hostile_escape_error.wasm",
        sandgraph_tests::HOSTILE_ESCAPE_ERROR,
    ),
];

/// Templates of other `sandgraph` binaries older than this are removed.
const STALE: Duration = Duration::from_secs(24 * 3600);

/// Starts the compile cache in `dir` as a copy of the template.
pub(crate) fn warm(dir: &Path) {
    let template = template();
    for name in [CACHE, KEY] {
        std::fs::copy(template.join(name), dir.join(name))
            .unwrap_or_else(|e| panic!("copying the template's {name}: {e}"));
    }
}

/// Removes the compile cache of `dir`, if any.
pub(crate) fn remove(dir: &Path) {
    for name in [CACHE, KEY] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

/// The `sandgraph` binary the tests run, as a short stamp: its size and
/// modification time (hashing a debug build's 200 MB per test would cost
/// more than it saves). A rebuilt binary has a new stamp.
pub(crate) fn binary_stamp() -> String {
    let meta = std::fs::metadata(env!("CARGO_BIN_EXE_sandgraph")).unwrap();
    format!("{} {:?}", meta.len(), meta.modified().unwrap())
}

/// The folder of this binary's template, made on first use in this test
/// process (or found, made by an earlier run).
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(make_template)
}

/// `<tmp>/compile-cache/<stamp digest>/`: the cache `sandgraph check` left
/// after loading [`GUESTS`]. Made in a temporary folder and renamed into
/// place, so a concurrent test process sees all of it or none; when two
/// make it at once, the first rename wins and the other copy is dropped.
fn make_template() -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compile-cache");
    let stamp = super::sha256_hex(binary_stamp().as_bytes());
    let dir = root.join(&stamp[..16]);
    if dir.join(CACHE).is_file() {
        return dir;
    }
    std::fs::create_dir_all(&root).unwrap();
    prune(&root);
    let work = tempfile::tempdir_in(&root).unwrap();
    let graphs = work.path().join("graphs");
    sandgraph_tests::copy_graphs(&graphs, &GUESTS);
    let o = Command::new(env!("CARGO_BIN_EXE_sandgraph"))
        .args(["check", "--json", "graphs"])
        .current_dir(work.path())
        .env("SANDGRAPH_LOG", "off")
        .env("SANDGRAPH_CACHE", work.path().join(CACHE))
        .output()
        .expect("the sandgraph binary runs");
    assert!(
        o.status.success(),
        "compiling the template cache: {}",
        super::stderr(&o)
    );
    std::fs::remove_dir_all(&graphs).unwrap();
    let work = work.keep();
    if std::fs::rename(&work, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&work);
    }
    dir
}

/// Removes the templates (and leftover work folders) not touched for
/// [`STALE`]: those of binaries since rebuilt.
fn prune(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE);
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
