//! Folders for the tests that build graph crates with cargo, chosen so a
//! rerun finds the crates' dependencies already built.
//!
//! `sandgraph build` passes rustc `--remap-path-prefix` flags naming the
//! crate's workspace root and target folder; cargo rebuilds every
//! dependency whose flags changed since its last build in that target
//! folder. So a crate written to a new temporary folder on each run, or two
//! crates in different folders sharing a target folder, rebuild all their
//! dependencies on every build. Here each test's crates live at the same
//! path on every run ([`CrateHome`]), with a target folder of their own,
//! and the crates of this workspace share one ([`shared_target`]).

use std::fs::File;
use std::path::{Path, PathBuf};

/// The repository root (host/cli/../..).
pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The target folder of the builds of this workspace's graph crates
/// (`example-graphs/*`, the polyglot hostile twin): one workspace root, so
/// one build of their dependencies serves them all. `cargo test` of a
/// test's crate uses it too: a native build gets no remapping flags.
pub(crate) fn shared_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("toolkit-target")
}

/// A folder for one test's graph crates, outside the workspace (as an
/// author's crate is) and at the same path on every run, emptied when the
/// test starts, with target folders of its own under the build's temporary
/// folder. It is locked while the test holds it, so two test processes
/// running the same test take turns.
pub(crate) struct CrateHome {
    dir: PathBuf,
    targets: PathBuf,
    _lock: File,
}

impl CrateHome {
    /// The home of the test `test` (a name unique among the tests).
    pub(crate) fn new(test: &str) -> CrateHome {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let checkout = super::sha256_hex(tmp.to_string_lossy().as_bytes());
        let root = std::env::temp_dir().join(format!("sandgraph-tests-{}", &checkout[..12]));
        std::fs::create_dir_all(&root).unwrap();
        let lock = File::create(root.join(format!("{test}.lock"))).unwrap();
        lock.lock().unwrap();
        let dir = root.join(test);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        std::fs::create_dir(&dir).unwrap();
        CrateHome {
            dir,
            targets: tmp.join("crate-targets").join(test),
            _lock: lock,
        }
    }

    /// The folder, empty when the test starts.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// `name` in the folder.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The target folder `name` of the builds of a crate here (one per
    /// crate folder: see the module's note).
    pub(crate) fn target(&self, name: &str) -> PathBuf {
        self.targets.join(name)
    }
}
